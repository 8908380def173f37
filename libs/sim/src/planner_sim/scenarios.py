"""Named bench scenarios, and the generated trace sources they use.

A scenario is a trace (a file, or a generated source) with its own SLA and its own rate: a run names it
(``planner bench --scenario sinusoid``) instead of spelling out each setting.

Generated sources are strings ``KIND:key=value,key=value`` (the bench's ``--trace`` takes them too):

- ``servegen:dir=DIR,days=1,start_day=0,mean_rps=4,lengths=PATH``: sampled from ServeGen window
  statistics (:mod:`planner_sim.servegen`);
- ``sinusoid:min_rps=1,max_rps=24,period_s=900,isl=8000,osl=1000,duration_s=3600``: Poisson arrivals
  whose rate follows a sinusoid between the two rates;
- ``synthetic:shape=step,rps=3,peak_rps=12,step_at_s=1800,isl=2000,osl=300,duration_s=3600``: Poisson
  arrivals of another shape (``constant``; ``step`` from ``rps`` to ``peak_rps`` at ``step_at_s``;
  ``burst``, ``peak_rps`` for ``burst_len_s`` every ``burst_every_s``), lengths log-normal around
  ``isl`` / ``osl`` with ``length_jitter`` (sigma, default 0.5).

Relative paths (``DIR``, ``PATH``) are resolved against the data directory (``../shared/data``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from planner_sim.traces import TraceRequest, synthetic

DATA = "../shared/data"
AZURE_CONV = f"{DATA}/traces/AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = f"{DATA}/traces/AzureLLMInferenceTrace_code.csv"
SERVEGEN_SMALL = f"{DATA}/traces/servegen/language/m-small"

STARTUP_SWEEP_S = (0.0, 30.0, 60.0, 120.0, 180.0, 300.0)
"""The startup delays of ``--startup-sweep`` (the reference collapses at 100-120 s)."""


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A trace or generated source with the SLA and fleet it is benched at (the default SLA: TTFT
    500 ms, ITL 50 ms, rate-scaled to an 8-GPU peak)."""

    name: str
    source: str
    ttft_ms: float = 500.0
    itl_ms: float = 50.0
    peak_gpus: float | None = 8.0
    """Rate-scale the trace to this oracle peak; None: the source's own rate."""
    duration_s: float | None = None
    description: str = ""
    ttft_ms_per_1k_isl: float = 0.0
    """Added to a request's TTFT target per 1000 prompt tokens (long prompts)."""


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="azure-conv",
            source=AZURE_CONV,
            description="Azure LLM inference 2023, conversation, 1 h",
        ),
        Scenario(
            name="azure-code",
            source=AZURE_CODE,
            description="Azure LLM inference 2023, code (very bursty), 1 h",
        ),
        Scenario(
            name="servegen-day",
            source=f"servegen:dir={SERVEGEN_SMALL},days=1,start_day=0,mean_rps=4,lengths={AZURE_CONV}",
            description="ServeGen m-small, 24 h diurnal day, Azure conv lengths",
        ),
        Scenario(
            name="servegen-week",
            source=f"servegen:dir={SERVEGEN_SMALL},days=7,start_day=0,mean_rps=4,lengths={AZURE_CONV}",
            description="ServeGen m-small, 7 days, Azure conv lengths",
        ),
        Scenario(
            name="sinusoid",
            source="sinusoid:min_rps=1,max_rps=24,period_s=900,isl=8000,osl=1000,duration_s=3600",
            ttft_ms=3000.0,
            itl_ms=35.0,
            peak_gpus=None,
            description="the reference planner's known failure: 1 <-> 24 req/s, period 900 s, ISL 8000 / OSL 1000",
        ),
        # scenarios no policy constant was set on (the generalisation check)
        Scenario(
            name="flat",
            source="synthetic:shape=constant,rps=6,isl=2000,osl=300,duration_s=3600",
            peak_gpus=6.0,
            description="flat traffic, ISL 2000 / OSL 300 (log-normal), 1 h, rate-scaled to a 6-GPU peak",
        ),
        Scenario(
            name="step-up",
            source="synthetic:shape=step,rps=2,peak_rps=8,step_at_s=1800,isl=2000,osl=300,duration_s=3600",
            description="a 4x step up half-way, 1 h, rate-scaled to an 8-GPU peak",
        ),
        Scenario(
            name="step-down",
            source="synthetic:shape=step,rps=8,peak_rps=2,step_at_s=1800,isl=2000,osl=300,duration_s=3600",
            description="a 4x step down half-way, 1 h, rate-scaled to an 8-GPU peak",
        ),
        Scenario(
            name="spikes",
            source=(
                "synthetic:shape=burst,rps=2,peak_rps=10,burst_every_s=600,burst_len_s=60,isl=2000,osl=300,"
                "duration_s=3600"
            ),
            description="one-minute 5x spikes every 10 minutes, 1 h, rate-scaled to an 8-GPU peak",
        ),
        Scenario(
            name="slow-sinusoid",
            source="sinusoid:min_rps=2,max_rps=30,period_s=1500,isl=3000,osl=400,duration_s=5400",
            ttft_ms=1500.0,
            itl_ms=40.0,
            description="a slower, shallower wave: 2 <-> 30 req/s, period 1500 s, ISL 3000 / OSL 400, 1.5 h",
        ),
        Scenario(
            name="small-fleet",
            source="sinusoid:min_rps=0.3,max_rps=2,period_s=1200,isl=2000,osl=300,duration_s=3600",
            peak_gpus=3.0,
            description="a small fleet: a wave of period 1200 s rate-scaled to a 3-GPU peak (one engine a third of it)",
        ),
        Scenario(
            name="long-prompts",
            source="synthetic:shape=sinusoid,rps=0.5,peak_rps=3,period_s=1800,isl=12000,osl=400,duration_s=3600",
            ttft_ms_per_1k_isl=100.0,
            description="long prompts (ISL 12000 log-normal, TTFT 500 ms + 100 ms per 1k prompt tokens), 0.5 <-> 3 req/s",
        ),
        # added after the policy's last change (the load policy's holds under the floor, burst steps
        # on the present fleet's queues), measured once, nothing set on them
        Scenario(
            name="fast-sinusoid",
            source="synthetic:shape=sinusoid,rps=1,peak_rps=12,period_s=600,isl=2000,osl=300,duration_s=3600",
            description="a fast wave: 1 <-> 12 req/s, period 600 s (five startups), 1 h, rate-scaled to an 8-GPU peak",
        ),
        Scenario(
            name="small-step",
            source="synthetic:shape=step,rps=2,peak_rps=5,step_at_s=1200,isl=2000,osl=300,duration_s=3600",
            peak_gpus=4.0,
            description="a 2.5x step up after 20 minutes in a small fleet, 1 h, rate-scaled to a 4-GPU peak",
        ),
        Scenario(
            name="long-prompt-spikes",
            source=(
                "synthetic:shape=burst,rps=0.5,peak_rps=3,burst_every_s=900,burst_len_s=120,isl=8000,osl=400,"
                "duration_s=3600"
            ),
            peak_gpus=6.0,
            ttft_ms_per_1k_isl=100.0,
            description="two-minute 6x spikes of long prompts (ISL 8000) every 15 minutes, ISL-scaled TTFT, 6-GPU peak",
        ),
        # added after the queueing calibration on the requests' TTFT (PolicyConfig.calibrate_queue),
        # measured once, nothing set on them
        Scenario(
            name="flicker",
            source=(
                "synthetic:shape=burst,rps=2,peak_rps=8,burst_every_s=40,burst_len_s=10,isl=2000,osl=300,"
                "duration_s=3600"
            ),
            description="bursts within a traffic sample: 10 s at 4x every 40 s, a flat mean, 1 h, 8-GPU peak",
        ),
        Scenario(
            name="surges",
            source=(
                "synthetic:shape=burst,rps=3,peak_rps=9,burst_every_s=1200,burst_len_s=240,isl=1000,osl=500,"
                "duration_s=3600"
            ),
            ttft_ms=300.0,
            itl_ms=30.0,
            description="four-minute 3x surges every 20 minutes (the first at the start), ISL 1000 / OSL 500, TTFT 300 ms / ITL 30 ms",
        ),
        Scenario(
            name="long-flat",
            source="synthetic:shape=constant,rps=1,isl=6000,osl=200,duration_s=3600",
            peak_gpus=4.0,
            ttft_ms_per_1k_isl=100.0,
            description="flat long prompts (ISL 6000 / OSL 200), ISL-scaled TTFT, a 4-GPU fleet, 1 h",
        ),
        Scenario(
            name="wide-wave",
            source="synthetic:shape=sinusoid,rps=4,peak_rps=16,period_s=2400,isl=1000,osl=500,duration_s=5400",
            ttft_ms=300.0,
            itl_ms=30.0,
            peak_gpus=10.0,
            description="a 40-minute wave, 4 <-> 16 req/s, ISL 1000 / OSL 500, TTFT 300 ms / ITL 30 ms, 10-GPU peak, 1.5 h",
        ),
        # added after decode's sizing from the measured part of the profile (each context's ITL
        # extended along its own slope), measured once, nothing set on them
        Scenario(
            name="chat-wave",
            source="synthetic:shape=sinusoid,rps=3,peak_rps=15,period_s=1800,isl=600,osl=250,duration_s=5400",
            ttft_ms=300.0,
            itl_ms=25.0,
            description="short chats on a 30-minute wave, 3 <-> 15 req/s, ISL 600 / OSL 250, TTFT 300 ms / ITL 25 ms, 1.5 h",
        ),
        Scenario(
            name="long-answers",
            source="synthetic:shape=constant,rps=4,isl=500,osl=1500,duration_s=3600",
            ttft_ms=500.0,
            itl_ms=40.0,
            description="decode-heavy flat traffic, ISL 500 / OSL 1500, TTFT 500 ms / ITL 40 ms, 1 h",
        ),
        Scenario(
            name="mid-step",
            source="synthetic:shape=step,rps=3,peak_rps=9,step_at_s=1800,isl=3000,osl=600,duration_s=3600",
            ttft_ms=600.0,
            itl_ms=35.0,
            description="a 3x step up half-way, ISL 3000 / OSL 600, TTFT 600 ms / ITL 35 ms, 1 h",
        ),
        # added after decode's spare from the target attainment (square-root staffing on the running
        # requests), measured once, nothing set on them
        Scenario(
            name="short-chats",
            source="synthetic:shape=constant,rps=8,isl=400,osl=150,duration_s=3600",
            ttft_ms=300.0,
            itl_ms=20.0,
            peak_gpus=5.0,
            description="flat short chats, ISL 400 / OSL 150, TTFT 300 ms / ITL 20 ms, 1 h, 5-GPU peak",
        ),
        Scenario(
            name="long-context-wave",
            source="synthetic:shape=sinusoid,rps=1,peak_rps=6,period_s=1200,isl=6000,osl=800,duration_s=5400",
            ttft_ms=2000.0,
            itl_ms=40.0,
            description="long contexts on a 20-minute wave, 1 <-> 6 req/s, ISL 6000 / OSL 800, TTFT 2 s / ITL 40 ms, 1.5 h",
        ),
        Scenario(
            name="answer-bursts",
            source=(
                "synthetic:shape=burst,rps=2,peak_rps=6,burst_every_s=900,burst_len_s=180,isl=800,osl=1200,"
                "duration_s=3600"
            ),
            itl_ms=40.0,
            peak_gpus=6.0,
            description="three-minute 3x bursts of long answers (ISL 800 / OSL 1200) every 15 minutes, ITL 40 ms, 6-GPU peak",
        ),
        Scenario(
            name="two-gpus",
            source="synthetic:shape=sinusoid,rps=0.5,peak_rps=1.5,period_s=1800,isl=1500,osl=250,duration_s=3600",
            peak_gpus=2.0,
            description="the smallest fleet: a slow wave rate-scaled to a 2-GPU peak (one prefill, one decode at most)",
        ),
        # added after prefill's rate at full passes and the simulator's per-sequence attention and
        # rate scaling by independent draws (2026-11-28), measured once, nothing set on them
        Scenario(
            name="tiny-prompts",
            source="synthetic:shape=constant,rps=10,isl=150,osl=400,duration_s=3600",
            ttft_ms=200.0,
            itl_ms=30.0,
            peak_gpus=6.0,
            description="flat tiny prompts (ISL 150 / OSL 400), TTFT 200 ms / ITL 30 ms, 1 h, 6-GPU peak",
        ),
        Scenario(
            name="rag-wave",
            source="synthetic:shape=sinusoid,rps=1,peak_rps=5,period_s=2700,isl=4000,osl=200,duration_s=5400",
            ttft_ms=800.0,
            itl_ms=40.0,
            peak_gpus=6.0,
            description="retrieval-style prompts (ISL 4000 / OSL 200) on a 45-minute wave, TTFT 800 ms / ITL 40 ms, 1.5 h",
        ),
        Scenario(
            name="plateaus",
            source=(
                "synthetic:shape=burst,rps=2,peak_rps=7,burst_every_s=1500,burst_len_s=600,isl=1200,osl=400,"
                "duration_s=5400"
            ),
            description="ten-minute 3.5x plateaus every 25 minutes, ISL 1200 / OSL 400, 1.5 h",
        ),
        Scenario(
            name="three-gpus-flat",
            source="synthetic:shape=constant,rps=2,isl=2500,osl=350,duration_s=3600",
            peak_gpus=3.0,
            description="flat traffic on a 3-GPU peak (ISL 2500 / OSL 350), where one engine is a third of the fleet",
        ),
        # added after errors re-applied at most at their measured size (2026-11-28), before the two
        # changes below, measured once after them, nothing set on them
        Scenario(
            name="late-rise",
            source="synthetic:shape=step,rps=3,peak_rps=5,step_at_s=2700,isl=1500,osl=250,duration_s=5400",
            description="a 1.7x step up after 45 minutes of flat traffic, ISL 1500 / OSL 250, 1.5 h",
        ),
        Scenario(
            name="small-fleet-step",
            source="synthetic:shape=step,rps=1,peak_rps=3,step_at_s=1800,isl=2000,osl=300,duration_s=3600",
            peak_gpus=3.0,
            description="a 3x step up half-way on a 3-GPU peak, 1 h",
        ),
        Scenario(
            name="long-plateau",
            source=(
                "synthetic:shape=burst,rps=1,peak_rps=4,burst_every_s=3600,burst_len_s=1200,isl=3000,osl=300,"
                "duration_s=5400"
            ),
            ttft_ms_per_1k_isl=100.0,
            description="20-minute 4x plateaus an hour apart (the first at the start), ISL 3000 / OSL 300, ISL-scaled TTFT, 1.5 h",
        ),
        Scenario(
            name="slow-long-wave",
            source="synthetic:shape=sinusoid,rps=1,peak_rps=4,period_s=3600,isl=5000,osl=300,duration_s=7200",
            peak_gpus=6.0,
            ttft_ms_per_1k_isl=100.0,
            description="long prompts (ISL 5000 / OSL 300) on an hour-long wave, ISL-scaled TTFT, 6-GPU peak, 2 h",
        ),
        # added after the seasonal median and prefill's shared queue (2026-11-28), measured once,
        # nothing set on them
        Scenario(
            name="small-bursts",
            source=(
                "synthetic:shape=burst,rps=1,peak_rps=4,burst_every_s=600,burst_len_s=90,isl=1500,osl=300,"
                "duration_s=3600"
            ),
            peak_gpus=3.0,
            description="90-second 4x bursts every 10 minutes on a 3-GPU peak, ISL 1500 / OSL 300, 1 h",
        ),
        Scenario(
            name="slow-chat-wave",
            source="synthetic:shape=sinusoid,rps=2,peak_rps=10,period_s=5400,isl=800,osl=600,duration_s=7200",
            ttft_ms=300.0,
            itl_ms=30.0,
            description="chat (ISL 800 / OSL 600) on a 90-minute wave, TTFT 300 ms / ITL 30 ms, 2 h",
        ),
        Scenario(
            name="long-prompt-flicker",
            source=(
                "synthetic:shape=burst,rps=0.5,peak_rps=2,burst_every_s=120,burst_len_s=20,isl=6000,osl=200,"
                "duration_s=3600"
            ),
            peak_gpus=4.0,
            ttft_ms_per_1k_isl=100.0,
            description="20-second 4x bursts of long prompts (ISL 6000) every 2 minutes, ISL-scaled TTFT, 4-GPU peak",
        ),
        # added after decode's rate from the learned model (2026-11-28), measured once, nothing set on
        # them
        Scenario(
            name="answer-wave",
            source="synthetic:shape=sinusoid,rps=1.5,peak_rps=8,period_s=2400,isl=400,osl=1200,duration_s=7200",
            peak_gpus=6.0,
            ttft_ms=400.0,
            itl_ms=35.0,
            description="long answers (ISL 400 / OSL 1200) on a 40-minute wave, TTFT 400 ms / ITL 35 ms, 6-GPU peak, 2 h",
        ),
        Scenario(
            name="answer-step-down",
            source="synthetic:shape=step,rps=6,peak_rps=2,step_at_s=2400,isl=600,osl=900,duration_s=5400",
            ttft_ms=500.0,
            itl_ms=40.0,
            description="decode-heavy traffic (ISL 600 / OSL 900) stepping down 3x after 40 minutes, ITL 40 ms, 1.5 h",
        ),
        Scenario(
            name="tight-itl-flat",
            source="synthetic:shape=constant,rps=5,isl=1000,osl=500,duration_s=3600",
            peak_gpus=4.0,
            ttft_ms=300.0,
            itl_ms=25.0,
            description="flat chat (ISL 1000 / OSL 500) at a tight ITL of 25 ms, TTFT 300 ms, 4-GPU peak, 1 h",
        ),
        Scenario(
            name="small-answer-bursts",
            source=(
                "synthetic:shape=burst,rps=1,peak_rps=3,burst_every_s=900,burst_len_s=120,isl=500,osl=800,"
                "duration_s=3600"
            ),
            peak_gpus=3.0,
            description="2-minute 3x bursts of long answers (ISL 500 / OSL 800) every 15 minutes, 3-GPU peak, 1 h",
        ),
        # added after the calibrations read what the latency histograms' buckets tell (2026-11-28),
        # measured once, nothing set on them
        Scenario(
            name="mid-itl-wave",
            source="synthetic:shape=sinusoid,rps=2,peak_rps=10,period_s=3000,isl=1500,osl=600,duration_s=6000",
            peak_gpus=6.0,
            ttft_ms=700.0,
            itl_ms=45.0,
            description="a 50-minute wave, ISL 1500 / OSL 600, TTFT 700 ms / ITL 45 ms, 6-GPU peak, 100 min",
        ),
        Scenario(
            name="long-prompt-step-down",
            source="synthetic:shape=step,rps=2,peak_rps=1,step_at_s=2100,isl=7000,osl=250,duration_s=4800",
            peak_gpus=5.0,
            ttft_ms=500.0,
            itl_ms=60.0,
            ttft_ms_per_1k_isl=100.0,
            description="long prompts (ISL 7000) stepping down 2x after 35 minutes, ISL-scaled TTFT, ITL 60 ms, 5-GPU peak",
        ),
        Scenario(
            name="twin-spikes",
            source=(
                "synthetic:shape=burst,rps=2,peak_rps=7,burst_every_s=1500,burst_len_s=90,isl=1800,osl=350,"
                "duration_s=4500"
            ),
            ttft_ms=1200.0,
            itl_ms=35.0,
            description="90-second 3.5x spikes every 25 minutes, ISL 1800 / OSL 350, TTFT 1200 ms / ITL 35 ms, 75 min",
        ),
        Scenario(
            name="two-gpu-wave",
            source="synthetic:shape=sinusoid,rps=0.5,peak_rps=2,period_s=2000,isl=1200,osl=400,duration_s=5400",
            peak_gpus=2.0,
            ttft_ms=400.0,
            itl_ms=30.0,
            description="a 2-GPU fleet on a 33-minute 4x wave, ISL 1200 / OSL 400, TTFT 400 ms / ITL 30 ms, 1.5 h",
        ),
        # added after a prefill backlog was sized on the engines that hold it (2026-11-28), measured
        # once, nothing set on them
        Scenario(
            name="long-prompt-step-up",
            source="synthetic:shape=step,rps=0.8,peak_rps=3,step_at_s=1500,isl=6000,osl=300,duration_s=3600",
            peak_gpus=6.0,
            ttft_ms=600.0,
            itl_ms=50.0,
            ttft_ms_per_1k_isl=100.0,
            description="long prompts (ISL 6000) stepping up 3.75x after 25 minutes, ISL-scaled TTFT, ITL 50 ms, 6-GPU peak",
        ),
        Scenario(
            name="small-fleet-bursts",
            source=(
                "synthetic:shape=burst,rps=0.5,peak_rps=2.5,burst_every_s=1200,burst_len_s=240,isl=2500,osl=250,"
                "duration_s=3600"
            ),
            peak_gpus=3.0,
            description="4-minute 5x bursts every 20 minutes in a 3-GPU fleet, ISL 2500 / OSL 250, 1 h",
        ),
        Scenario(
            name="steep-step",
            source="synthetic:shape=step,rps=1,peak_rps=6,step_at_s=2400,isl=3000,osl=200,duration_s=4800",
            ttft_ms=800.0,
            itl_ms=40.0,
            description="a 6x step up after 40 minutes, ISL 3000 / OSL 200, TTFT 800 ms / ITL 40 ms, 8-GPU peak, 80 min",
        ),
        Scenario(
            name="short-surges",
            source=(
                "synthetic:shape=burst,rps=2,peak_rps=8,burst_every_s=900,burst_len_s=180,isl=1000,osl=500,"
                "duration_s=3600"
            ),
            peak_gpus=6.0,
            ttft_ms=500.0,
            itl_ms=40.0,
            description="3-minute 4x surges every 15 minutes, ISL 1000 / OSL 500, TTFT 500 ms / ITL 40 ms, 6-GPU peak, 1 h",
        ),
        Scenario(
            name="answer-surges",
            source=(
                "synthetic:shape=burst,rps=1,peak_rps=4,burst_every_s=1200,burst_len_s=150,isl=800,osl=1200,"
                "duration_s=3600"
            ),
            peak_gpus=6.0,
            itl_ms=40.0,
            description="150-second 4x surges of long answers every 20 minutes, ISL 800 / OSL 1200, ITL 40 ms, 6-GPU peak, 1 h",
        ),
        Scenario(
            name="prompt-surges",
            source=(
                "synthetic:shape=burst,rps=0.6,peak_rps=2.4,burst_every_s=600,burst_len_s=120,isl=5000,osl=150,"
                "duration_s=3600"
            ),
            peak_gpus=6.0,
            ttft_ms=600.0,
            ttft_ms_per_1k_isl=100.0,
            description="2-minute 4x surges of long prompts every 10 minutes, ISL 5000 / OSL 150, ISL-scaled TTFT, 6-GPU peak, 1 h",
        ),
        Scenario(
            name="small-fleet-answer-step",
            source="synthetic:shape=step,rps=0.6,peak_rps=1.8,step_at_s=1200,isl=1500,osl=800,duration_s=3600",
            peak_gpus=3.0,
            description="a 3x step of long answers after 20 minutes in a 3-GPU fleet, ISL 1500 / OSL 800, 1 h",
        ),
        Scenario(
            name="long-bursts",
            source=(
                "synthetic:shape=burst,rps=2,peak_rps=6,burst_every_s=1800,burst_len_s=600,isl=2000,osl=400,"
                "duration_s=5400"
            ),
            description="10-minute 3x bursts every 30 minutes (longer than a startup), ISL 2000 / OSL 400, 8-GPU peak, 1.5 h",
        ),
    )
}


def scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; valid: {', '.join(SCENARIOS)}") from None


_KINDS = ("servegen", "sinusoid", "synthetic")
_SHAPES = ("constant", "step", "sinusoid", "burst")


def is_generated(source: str) -> bool:
    kind, sep, _ = source.partition(":")
    return bool(sep) and kind in _KINDS


def _params(source: str) -> tuple[str, dict[str, str]]:
    kind, _, rest = source.partition(":")
    out: dict[str, str] = {}
    for item in rest.split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"{source}: expected key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return kind, out


def _path(p: str) -> Path:
    return Path(p)


def _take(params: dict[str, str], key: str, default: float, source: str) -> float:
    text = params.pop(key, None)
    if text is None:
        return default
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{source}: {key} must be a number, got {text!r}") from None


def load_generated(source: str, seed: int = 0) -> tuple[str, list[TraceRequest]]:
    """(name, requests) of a generated source."""
    kind, params = _params(source)
    if kind == "servegen":
        from planner_sim.servegen import sample_servegen

        directory = params.pop("dir", SERVEGEN_SMALL)
        lengths = params.pop("lengths", AZURE_CONV)
        days = _take(params, "days", 1.0, source)
        start_day = _take(params, "start_day", 0.0, source)
        mean_rps = _take(params, "mean_rps", 4.0, source)
        if params:
            raise ValueError(f"{source}: unknown keys {sorted(params)}")
        reqs = sample_servegen(
            _path(directory), mean_rps=mean_rps, days=days, start_day=start_day, lengths=lengths, seed=seed
        )
        return f"servegen-{Path(directory).name}-{days:g}d", reqs
    if kind == "sinusoid":
        lo = _take(params, "min_rps", 1.0, source)
        hi = _take(params, "max_rps", 24.0, source)
        period = _take(params, "period_s", 900.0, source)
        isl = int(_take(params, "isl", 8000, source))
        osl = int(_take(params, "osl", 1000, source))
        duration = _take(params, "duration_s", 3600.0, source)
        if params:
            raise ValueError(f"{source}: unknown keys {sorted(params)}")
        reqs = synthetic("sinusoid", duration, lo, isl, osl, peak_rate_per_s=hi, period_s=period, seed=seed)
        return f"sinusoid-{lo:g}-{hi:g}", reqs
    if kind == "synthetic":
        shape = params.pop("shape", "constant")
        if shape not in _SHAPES:
            raise ValueError(f"{source}: shape must be one of {', '.join(_SHAPES)}, got {shape!r}")
        rps = _take(params, "rps", 4.0, source)
        peak = _take(params, "peak_rps", 2 * rps, source)
        duration = _take(params, "duration_s", 3600.0, source)
        kw = {
            "isl_tokens": int(_take(params, "isl", 2000, source)),
            "osl_tokens": int(_take(params, "osl", 300, source)),
            "peak_rate_per_s": peak,
            "period_s": _take(params, "period_s", 600.0, source),
            "step_at_s": _take(params, "step_at_s", duration / 2, source),
            "burst_every_s": _take(params, "burst_every_s", 300.0, source),
            "burst_len_s": _take(params, "burst_len_s", 30.0, source),
            "length_jitter": _take(params, "length_jitter", 0.5, source),
        }
        if params:
            raise ValueError(f"{source}: unknown keys {sorted(params)}")
        reqs = synthetic(shape, duration, rps, seed=seed, **kw)  # type: ignore[arg-type]
        return f"{shape}-{rps:g}-{peak:g}", reqs
    raise ValueError(f"{source}: unknown generated source kind {kind!r} (valid: {', '.join(_KINDS)})")
