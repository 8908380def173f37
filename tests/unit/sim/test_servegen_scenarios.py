"""ServeGen sampler (window statistics -> requests) and the named scenarios."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner_sim.bench import load_requests
from planner_sim.scenarios import SCENARIOS, STARTUP_SWEEP_S, is_generated, load_generated, scenario
from planner_sim.servegen import sample_servegen
from planner_sim.traces import TraceError, TraceRequest

POOL = [TraceRequest(0.0, 100, 10), TraceRequest(0.0, 3000, 300)]


def _clients(d: Path, cv_b: float = 3.0) -> Path:
    # client a: 10 req/s in window 0, 30 in window 2; window 1 has no data at all (a gap); client b bursty
    (d / "chunk-0-trace.csv").write_text("0,10,1.0,Gamma,1,0.1\n600,0,0,,0,0\n1200,30,1.0,Gamma,1,0.03\n")
    (d / "chunk-1-trace.csv").write_text(f"0,5,{cv_b},Gamma,0.1,2\n600,0,0,,0,0\n1200,5,{cv_b},Gamma,0.1,2\n")
    return d


def test_servegen_rates_gaps_and_lengths(tmp_path: Path) -> None:
    d = _clients(tmp_path)
    reqs = sample_servegen(d, mean_rps=2.0, days=1800 / 86400, lengths=POOL, seed=1)
    t = np.array([r.arrival_s for r in reqs])
    assert np.all(np.diff(t) >= 0) and t.min() >= 0 and t.max() < 1800
    per_window = np.bincount((t // 600).astype(int), minlength=3) / 600.0
    assert float(per_window.mean()) == pytest.approx(2.0, rel=0.1)
    # the gap repeats window 0; window 2 has 35/15 of its rate
    assert per_window[1] == pytest.approx(per_window[0], rel=0.25)
    assert per_window[2] / per_window[0] == pytest.approx(35 / 15, rel=0.25)
    assert {(r.input_tokens, r.output_tokens) for r in reqs} == {(100, 10), (3000, 300)}
    assert sample_servegen(d, mean_rps=2.0, days=1800 / 86400, lengths=POOL, seed=1) == reqs


def test_servegen_keeps_burstiness(tmp_path: Path) -> None:
    """A client with inter-arrival CV 3 gives burstier per-second counts than a Poisson one."""

    def dispersion(cv: float) -> float:
        d = tmp_path / f"cv{cv}"
        d.mkdir()
        (d / "chunk-0-trace.csv").write_text(f"0,10,{cv},Gamma,1,1\n")
        t = np.array([r.arrival_s for r in sample_servegen(d, mean_rps=10.0, days=600 / 86400, lengths=POOL)])
        counts = np.bincount(t.astype(int), minlength=600)
        return float(counts.var() / counts.mean())

    assert dispersion(1.0) == pytest.approx(1.0, abs=0.3)
    assert dispersion(3.0) > 3.0


def test_servegen_bad_line(tmp_path: Path) -> None:
    (tmp_path / "chunk-0-trace.csv").write_text("0,10,1.0,Gamma,1,0.1\n600,-3,1,Gamma,1,1\n")
    with pytest.raises(TraceError, match=r"chunk-0-trace.csv:2: bad window start or rate"):
        sample_servegen(tmp_path, mean_rps=1.0, lengths=POOL)


def test_scenarios() -> None:
    assert set(SCENARIOS) == {
        "azure-conv", "azure-code", "servegen-day", "servegen-week", "sinusoid",
        "flat", "step-up", "step-down", "spikes", "slow-sinusoid", "small-fleet", "long-prompts",
        "fast-sinusoid", "small-step", "long-prompt-spikes", "flicker", "surges", "long-flat", "wide-wave",
        "chat-wave", "long-answers", "mid-step", "short-chats", "long-context-wave", "answer-bursts", "two-gpus",
        "tiny-prompts", "rag-wave", "plateaus", "three-gpus-flat", "late-rise", "small-fleet-step",
        "long-plateau", "slow-long-wave", "small-bursts", "slow-chat-wave", "long-prompt-flicker",
        "answer-wave", "answer-step-down", "tight-itl-flat", "small-answer-bursts",
        "mid-itl-wave", "long-prompt-step-down", "twin-spikes", "two-gpu-wave",
        "long-prompt-step-up", "small-fleet-bursts", "steep-step", "short-surges",
        "answer-surges", "prompt-surges", "small-fleet-answer-step", "long-bursts",
    }  # fmt: skip
    assert all(is_generated(sc.source) for n, sc in SCENARIOS.items() if not n.startswith("azure"))
    assert scenario("long-prompts").ttft_ms_per_1k_isl == 100.0
    s = scenario("sinusoid")
    assert (s.ttft_ms, s.itl_ms, s.peak_gpus) == (3000.0, 35.0, None)
    assert STARTUP_SWEEP_S == (0.0, 30.0, 60.0, 120.0, 180.0, 300.0)
    with pytest.raises(ValueError, match="valid: azure-conv"):
        scenario("nope")
    assert is_generated(s.source) and not is_generated(SCENARIOS["azure-conv"].source)


def test_sinusoid_source() -> None:
    name, reqs = load_generated(
        "sinusoid:min_rps=1,max_rps=24,period_s=900,isl=8000,osl=1000,duration_s=1800"
    )
    t = np.array([r.arrival_s for r in reqs])
    assert name == "sinusoid-1-24" and t.max() < 1800
    assert {r.input_tokens for r in reqs} == {8000} and {r.output_tokens for r in reqs} == {1000}
    per_min = np.bincount((t // 60).astype(int)) / 60.0
    assert per_min[0] < 3 and per_min[7] > 18  # trough at 0, crest at 450 s
    assert len(reqs) == pytest.approx(12.5 * 1800, rel=0.05)
    with pytest.raises(ValueError, match="unknown keys"):
        load_generated("sinusoid:rate=3")


def test_servegen_day_from_shared_data(shared_data: Path) -> None:
    d = shared_data / "traces" / "servegen" / "language" / "m-small"
    if not d.is_dir():
        pytest.skip(f"{d}: ServeGen data absent")
    src = f"servegen:dir={d},days=0.1,mean_rps=2,lengths={shared_data}/traces/AzureLLMInferenceTrace_conv.csv"
    name, reqs = load_requests(src, seed=0)
    assert name == "servegen-m-small-0.1d"
    assert len(reqs) / 9000.0 == pytest.approx(2.0, rel=0.15)  # 15 windows of 600 s


@pytest.mark.parametrize(
    ("source", "check"),
    [
        (
            "synthetic:shape=constant,rps=4,duration_s=1200",
            lambda per_min: per_min.min() > 2.5 and per_min.max() < 5.5,
        ),
        (
            "synthetic:shape=step,rps=1,peak_rps=8,step_at_s=600,duration_s=1200",
            lambda per_min: per_min[:9].mean() < 1.5 and per_min[11:].mean() > 6.5,
        ),
        (
            "synthetic:shape=burst,rps=1,peak_rps=10,burst_every_s=300,burst_len_s=60,duration_s=1200",
            lambda per_min: per_min[0] > 7 and per_min[2] < 2 and per_min[5] > 7,
        ),
    ],
    ids=["constant", "step", "burst"],
)
def test_synthetic_sources(source: str, check: Any) -> None:
    name, reqs = load_generated(source)
    assert name.startswith(source.split("shape=")[1].split(",")[0] + "-")
    t = np.array([r.arrival_s for r in reqs])
    assert t.max() < 1200
    per_min = np.bincount((t // 60).astype(int), minlength=20) / 60.0
    assert check(per_min), per_min
    isl = np.array([r.input_tokens for r in reqs])
    assert 1500 < np.median(isl) < 2500 and isl.std() > 0  # log-normal around 2000 by default
    with pytest.raises(ValueError, match="shape must be one of"):
        load_generated("synthetic:shape=zigzag")
    with pytest.raises(ValueError, match="unknown keys"):
        load_generated("synthetic:shape=constant,rate=4")
