"""Engine speed learned from scraped histograms: a recorded sequence of vLLM expositions, through the
relay's adapter, recovers the ITL-vs-load and TTFT-vs-queued-prefill lines it was made from."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from planner_core.regression import ScrapedSpeedModel, interval_between
from planner_fpm_relay.scrape.adapters import READING_FIELDS, read_load
from planner_proto import WorkerLoadSample

FIXTURES = Path(__file__).parent / "fixtures"


def samples_from(path: Path, kind: str = "vllm") -> list[WorkerLoadSample]:
    """Each ``# scrape t=...`` block of the file as the WorkerLoadSample the relay would publish."""
    out = []
    for block in re.split(r"(?m)^(?=# scrape t=)", path.read_text()):
        if not block.strip():
            continue
        t = float(re.match(r"# scrape t=([0-9.]+)", block).group(1))  # type: ignore[union-attr]
        reading = read_load(kind, block)
        out.append(
            WorkerLoadSample(
                worker_id="w0",
                engine_kind=kind,
                observed_at_s=t,
                **{f: getattr(reading, f) for f in READING_FIELDS},
            )
        )
    return out


def test_recovers_known_itl_and_ttft_lines_within_10_percent() -> None:
    samples = samples_from(FIXTURES / "vllm_sequence.txt")
    assert len(samples) == 40
    model = ScrapedSpeedModel()
    learned = sum(model.observe_samples(a, b) is not None for a, b in itertools.pairwise(samples))
    assert learned == 39
    itl, ttft = model.itl_fit(), model.ttft_fit()
    assert itl.ready and ttft.ready, (itl, ttft)
    # made from ITL = 8 ms + 1.5 ms x batch, TTFT = 40 ms + 0.05 ms x queued tokens (+-4 %, 2 stalls)
    assert itl.intercept_s == pytest.approx(0.008, rel=0.10)
    assert itl.slope_s == pytest.approx(0.0015, rel=0.10)
    assert ttft.intercept_s == pytest.approx(0.040, rel=0.10)
    assert ttft.slope_s == pytest.approx(0.00005, rel=0.10)
    assert model.avg_isl_tokens == pytest.approx(512.0)
    # estimates: a request joining 9 running (batch 10); one arriving behind 4 waiting
    assert model.estimate_itl_s(9) == pytest.approx(0.008 + 0.015, rel=0.10)
    assert model.estimate_ttft_s(4) == pytest.approx(0.040 + 0.00005 * 4 * 512, rel=0.10)


def test_ols_is_pulled_by_the_stalled_intervals_robust_is_not() -> None:
    samples = samples_from(FIXTURES / "vllm_sequence.txt")
    robust, ols = ScrapedSpeedModel(), ScrapedSpeedModel(method="ols")
    for a, b in itertools.pairwise(samples):
        robust.observe_samples(a, b)
        ols.observe_samples(a, b)
    err = lambda m: abs(m.itl_fit().slope_s / 0.0015 - 1) + abs(m.itl_fit().intercept_s / 0.008 - 1)  # noqa: E731
    assert err(robust) < err(ols)


def _sample(t: float, **kw: float) -> WorkerLoadSample:
    return WorkerLoadSample(worker_id="w", engine_kind=str(kw.pop("kind", "vllm")), observed_at_s=t, **kw)  # type: ignore[arg-type]


def test_interval_rejects_restart_same_time_and_idle() -> None:
    a = _sample(0.0, itl_seconds_sum=1.0, itl_seconds_count=100.0)
    assert interval_between(a, _sample(0.0, itl_seconds_sum=2.0, itl_seconds_count=150.0)) is None
    # counters went backwards: the engine restarted
    assert interval_between(a, _sample(10.0, itl_seconds_sum=0.1, itl_seconds_count=5.0)) is None
    # nothing finished in between
    assert interval_between(a, _sample(10.0, itl_seconds_sum=1.0, itl_seconds_count=100.0)) is None
    iv = interval_between(a, _sample(10.0, itl_seconds_sum=2.0, itl_seconds_count=150.0, running_requests=4))
    assert iv is not None and iv.itl_s == pytest.approx(0.02) and iv.decode_load == 2.0 and iv.ttft_s is None


def test_llamacpp_decode_load_is_busy_slots_per_decode_over_the_interval() -> None:
    a = _sample(0.0, kind="llamacpp", engine_steps_total=100.0, step_width_total=100.0,
                itl_seconds_sum=1.0, itl_seconds_count=100.0)  # fmt: skip
    b = _sample(5.0, kind="llamacpp", engine_steps_total=200.0, step_width_total=400.0,
                itl_seconds_sum=5.0, itl_seconds_count=400.0, running_requests=3)  # fmt: skip
    iv = interval_between(a, b)
    assert iv is not None and iv.decode_load == 3.0 and iv.itl_s == pytest.approx(4.0 / 300.0)


def test_too_few_intervals_and_single_load_level() -> None:
    m = ScrapedSpeedModel(min_points=4)
    assert m.estimate_itl_s(1) is None and m.itl_fit().reason == "too_few_intervals"
    t = 0.0
    prev = _sample(t, running_requests=2)
    for k in range(1, 6):
        cur = _sample(
            10.0 * k, running_requests=2, itl_seconds_sum=0.02 * 100 * k, itl_seconds_count=100.0 * k
        )
        m.observe_samples(prev, cur)
        prev = cur
    assert m.itl_fit().ready and m.estimate_itl_s(5) == pytest.approx(0.02)  # flat at the one level seen
    assert m.estimate_ttft_s(0) is None  # never saw a first token
