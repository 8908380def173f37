"""Engine speed learned from scraped histograms: a recorded sequence of vLLM expositions, through the
relay's adapter, recovers the ITL-vs-load and TTFT-vs-queued-prefill lines it was made from; bucket
quantiles per interval; the ITL fallbacks (vLLM decode time, SGLang generation throughput)."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import pytest

from planner_core.regression import ScrapedSpeedModel, interval_between, interval_or_skip
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


def test_interval_bucket_quantiles_fall_in_the_bucket_of_the_interval_mean() -> None:
    """The sequence counts each interval's observations at its mean (make_vllm_sequence.py)."""
    samples = samples_from(FIXTURES / "vllm_sequence.txt")
    model = ScrapedSpeedModel()
    bounds = samples[-1].itl_bucket_le_s
    assert bounds == (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2)
    bucket = lambda v: next((i for i, le in enumerate(bounds) if v <= le), len(bounds))  # noqa: E731
    for a, b in itertools.pairwise(samples):
        iv = model.observe_samples(a, b)
        assert iv is not None and iv.itl_s is not None
        q = iv.itl_quantiles
        assert q is not None and q.p50_s <= q.p90_s <= q.p99_s
        if bucket(iv.itl_s) < len(bounds):  # inside a finite bucket: the quantiles interpolate in it
            assert bucket(q.p50_s) == bucket(q.p99_s) == bucket(iv.itl_s), (iv.itl_s, q)
        else:  # in +Inf: Prometheus answers the highest finite bound
            assert q.p50_s == q.p99_s == bounds[-1]
    assert not model.skipped
    recent = model.recent_quantiles("itl")
    assert recent is not None and bounds[0] < recent.p50_s <= recent.p99_s <= bounds[-1]
    assert model.recent_quantiles("ttft") is not None


BOUNDS = (0.01, 0.05)


def _h(t: float, counts: tuple[float, ...], itl_count: float, **kw: float) -> WorkerLoadSample:
    return _sample(
        t, itl_seconds_sum=itl_count * 0.02, itl_seconds_count=itl_count, running_requests=2,
        itl_bucket_le_s=BOUNDS, itl_bucket_counts=counts, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.mark.parametrize(
    ("prev", "cur", "want"),
    [
        # interval counts (10, 90, 100): p50 = 0.01 + 0.04 x (50 - 10) / 80 = 0.03,
        # p90 = 0.01 + 0.04 x 80 / 80 = 0.05, p99 in +Inf -> 0.05
        (_h(0.0, (5.0, 20.0, 20.0), 20.0), _h(10.0, (15.0, 110.0, 120.0), 120.0), (0.03, 0.05, 0.05)),
        # empty buckets (nothing observed in the interval, the sums moved: a torn scrape) -> none
        (_h(0.0, (5.0, 20.0, 20.0), 20.0), _h(10.0, (5.0, 20.0, 20.0), 120.0), None),
        # a NaN count (in-process; the adapter drops them) -> an interval without quantiles
        (_h(0.0, (5.0, 20.0, 20.0), 20.0), _h(10.0, (math.nan, 110.0, 120.0), 120.0), None),
        # the first sample had no buckets (adapter upgrade) -> none
        (_sample(0.0, itl_seconds_sum=0.4, itl_seconds_count=20.0), _h(10.0, (15.0, 110.0, 120.0), 120.0), None),
    ],
)  # fmt: skip
def test_interval_itl_quantiles(
    prev: WorkerLoadSample, cur: WorkerLoadSample, want: tuple[float, float, float] | None
) -> None:
    iv = interval_between(prev, cur)
    assert iv is not None and iv.itl_s == pytest.approx(0.02)
    q = iv.itl_quantiles
    if want is None:
        assert q is None
    else:
        assert q is not None and (q.p50_s, q.p90_s, q.p99_s) == pytest.approx(want)


def test_bucket_counter_reset_skips_the_interval_and_is_counted() -> None:
    model = ScrapedSpeedModel()
    a = _h(0.0, (5.0, 20.0, 20.0), 20.0)
    # sums and counts still rose, but a bucket went backwards: an engine restart between scrapes
    b = _h(10.0, (1.0, 30.0, 40.0), 40.0)
    assert interval_or_skip(a, b) == "counter_reset"
    assert model.observe_samples(a, b) is None
    # a plain counter going backwards is a reset too; a pair at the same instant is not later
    c = _h(20.0, (1.0, 2.0, 2.0), 2.0)
    assert model.observe_samples(b, c) is None
    assert model.observe_samples(c, c) is None
    assert model.skipped == {"counter_reset": 2, "not_later": 1}
    assert model.intervals == 0 and not model.itl_points


def test_vllm_without_itl_histogram_uses_decode_time_over_output_tokens() -> None:
    text = (
        'vllm:num_requests_running{{engine="0"}} {r}\n'
        "vllm:request_decode_time_seconds_sum {s}\nvllm:request_decode_time_seconds_count {n}\n"
        "vllm:request_generation_tokens_sum {tok}\nvllm:request_generation_tokens_count {n}\n"
    )
    reading = lambda t, **kw: WorkerLoadSample(  # noqa: E731
        worker_id="w", engine_kind="vllm", observed_at_s=t,
        **{f: getattr(r, f) for r in [read_load("vllm", text.format(**kw))] for f in READING_FIELDS},
    )  # fmt: skip
    a = reading(0.0, r=4, s=1.0, n=2, tok=102)
    # 18 requests finished, decoding 9.0 s over 468 tokens: 450 gaps after their first tokens
    b = reading(10.0, r=6, s=10.0, n=20, tok=570)
    iv = interval_between(a, b)
    assert iv is not None and iv.itl_source == "decode_time"
    assert iv.itl_s == pytest.approx(9.0 / 450) and iv.decode_load == 5.0


def test_histogram_itl_is_cross_checked_against_decode_time() -> None:
    model = ScrapedSpeedModel()
    a = _sample(0.0, itl_seconds_sum=1.0, itl_seconds_count=50.0)
    # ITL 22 ms from the histogram; decode time 9.0 s over 468 - 18 = 450 gaps = 20 ms
    b = _sample(10.0, itl_seconds_sum=1.0 + 0.022 * 500, itl_seconds_count=550.0, decode_seconds_sum=9.0,
                decode_seconds_count=18.0, decode_output_tokens_sum=468.0, running_requests=4)  # fmt: skip
    iv = model.observe_samples(a, b)
    assert iv is not None and iv.itl_source == "histogram" and iv.itl_s == pytest.approx(0.022)
    assert iv.decode_itl_s == pytest.approx(0.02)
    assert model.itl_cross_check == pytest.approx(1.1)


@pytest.mark.parametrize(
    ("prev", "cur", "want"),
    [
        # no ITL histogram: 16 running at 800 tokens/s -> a step every 20 ms, at the end's batch
        (dict(generation_tokens_total=100.0), dict(generation_tokens_total=8100.0, running_requests=16,
                                                   gen_throughput_tokens_per_s=800.0), (0.02, 16.0)),
        # nothing generated in between: the gauge is stale, the interval idle
        (dict(generation_tokens_total=100.0), dict(generation_tokens_total=100.0, running_requests=16,
                                                   gen_throughput_tokens_per_s=800.0), None),
        # the engine has an ITL histogram, quiet this interval: no fallback
        (dict(itl_seconds_sum=1.0, itl_seconds_count=50.0, generation_tokens_total=100.0),
         dict(itl_seconds_sum=1.0, itl_seconds_count=50.0, generation_tokens_total=8100.0, running_requests=16,
              gen_throughput_tokens_per_s=800.0), None),
        # nothing running
        (dict(generation_tokens_total=100.0), dict(generation_tokens_total=8100.0,
                                                   gen_throughput_tokens_per_s=800.0), None),
    ],
)  # fmt: skip
def test_sglang_gen_throughput_fallback(
    prev: dict[str, float], cur: dict[str, float], want: tuple[float, float] | None
) -> None:
    got = interval_or_skip(_sample(0.0, kind="sglang", **prev), _sample(10.0, kind="sglang", **cur))
    if want is None:
        assert got == "idle"
    else:
        assert not isinstance(got, str) and got.itl_source == "gen_throughput"
        assert (got.itl_s, got.decode_load) == pytest.approx(want)
