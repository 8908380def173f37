"""Prefill's queueing calibrated on the requests' own TTFT: samples within the allowed share of misses
lower the variability, misses beyond it raise it (one sample by at most ``CLIP`` times the share),
within bounds; over a long run the TTFT misses land at the allowed share; and inside ``decide`` a
steady traffic whose first tokens are all in time runs prefill hotter, on fewer engines."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import msgspec
import numpy as np
import pytest

from planner_core.policy import PolicyConfig, PolicyKind
from planner_core.policy.calibration import Share, share_bounds, share_within
from planner_core.policy.queue_calibration import (
    CLIP,
    KAPPA,
    MAX_LOG_SCALE,
    QueueCalibration,
    allowed_itl_miss,
    allowed_ttft_miss,
    settle_decode,
    settle_queue,
)
from planner_proto.traffic import TPOT_BOUNDS_MS, LatencyHistogram, TrafficSample
from tests.unit.policy.test_calibration import INTERVAL, drive, hist, steady


def timed(i: int, n: float = 200.0, late: float = 0.0) -> TrafficSample:
    """Sample ``i`` with ``n`` first tokens, the share ``late`` of them past a 500 ms target."""
    h = hist([250.0, 500.0, 1000.0], [n * (1 - late), n * (1 - late), n], n)
    return TrafficSample(
        namespace="t", start_s=INTERVAL * i, interval_s=INTERVAL, num_requests=n, ttft_histogram=h
    )


def settle(
    cal: QueueCalibration, i: int, within: float | None, n: float = 200.0, itl: float | None = None
) -> QueueCalibration:
    return settle_queue(cal, timed(i, n), within, itl, target=0.99, memory=60)


@pytest.mark.parametrize(
    ("target", "itl_miss", "allowed"),
    [
        (0.99, 0.0, 0.0075),  # a quarter point under the target's misses: the band's middle
        (0.9, 0.0, 0.0975),
        (0.999, 0.0, 0.0005),  # the target's misses are under half a point: half of them
        (0.99, 0.004, 0.0035),  # what decode misses counts against the same requests
        (0.99, 0.05, 0.0075 / 4),  # never under a quarter of the aim
    ],
)
def test_the_allowed_share_aims_at_the_band_and_leaves_room_for_decode(
    target: float, itl_miss: float, allowed: float
) -> None:
    assert allowed_ttft_miss(target, itl_miss) == pytest.approx(allowed)


def test_a_memory_of_samples_in_time_halves_the_variability() -> None:
    cal = QueueCalibration()
    for i in range(60):
        cal = settle(cal, i, 1.0)
    assert cal.settled == 60
    assert cal.scale == pytest.approx(0.5, rel=1e-9)


def test_misses_beyond_the_share_raise_it_in_proportion_and_one_sample_counts_at_most_clip() -> None:
    base = replace(QueueCalibration(), level=200.0, settled=100)
    up = settle(base, 1, 1.0 - 0.0375)  # 5x the allowed share
    assert up.log_scale == pytest.approx(KAPPA * 4 / 60)
    all_late = settle(base, 1, 0.0)
    assert all_late.log_scale == pytest.approx(KAPPA * (CLIP - 1) / 60)
    big = settle(base, 1, 1.0 - 0.0375, n=400.0)  # twice the average sample counts twice
    assert big.log_scale == pytest.approx(2 * KAPPA * 4 / 60, rel=0.05)


def test_a_sample_settles_once_and_one_without_first_tokens_leaves_the_scale() -> None:
    cal = settle(QueueCalibration(), 1, 1.0)
    assert settle(cal, 1, 0.0) == cal
    assert settle(cal, 0, 0.0) == cal
    quiet = settle(cal, 2, None, itl=0.9)
    assert quiet.log_scale == cal.log_scale and quiet.settled_s == 2 * INTERVAL
    assert quiet.itl_miss > 0.0  # the ITL misses are still counted
    empty = settle(cal, 3, 1.0, n=0.0)
    assert empty.log_scale == cal.log_scale
    assert settle(cal, 4, float("nan")).log_scale == cal.log_scale


def test_the_variability_stays_within_its_bounds() -> None:
    low, high = QueueCalibration(), QueueCalibration()
    for i in range(2000):
        low, high = settle(low, i, 1.0), settle(high, i, 0.0)
    assert low.log_scale == pytest.approx(-MAX_LOG_SCALE) and high.log_scale == pytest.approx(MAX_LOG_SCALE)
    assert math.isclose(low.scale * high.scale, 1.0)


@pytest.mark.parametrize("target", [0.9, 0.99])
def test_long_run_ttft_misses_land_at_the_allowed_share(target: float) -> None:
    """Misses that grow as the variability the floor assumes falls (a hotter fleet): the calibrated
    scale finds where the long-run TTFT miss share is the allowed one."""
    rng = np.random.default_rng(11)
    cal, missed, total = QueueCalibration(), 0.0, 0.0
    allowed = allowed_ttft_miss(target, 0.0)
    for i in range(1, 6001):
        p_miss = min(2.0 * allowed / cal.scale**1.5, 1.0)  # twice the share at the default variability
        n = float(rng.poisson(200))
        m = float(rng.binomial(int(n), p_miss))
        if i > 1000:
            missed += m
            total += n
        cal = settle_queue(cal, timed(i, n), 1.0 - m / n, None, target=target, memory=60)
    assert missed / total == pytest.approx(allowed, rel=0.1)
    assert cal.scale > 1.0  # the default variability was too low for this traffic


def late_steady(samples: int, late_from: int, field: str, bounds_ms: list[float]) -> list[TrafficSample]:
    """Steady traffic whose latency histogram ``field`` puts every request within its middle bound
    (the target) until sample ``late_from``, a fifth of them past it from there."""
    out = []
    for i in range(samples):
        s = steady(i, 1.0)
        late = 0.2 if i >= late_from else 0.0
        n = s.num_requests
        h = LatencyHistogram(bounds_ms=bounds_ms, counts=[n * (1 - late)] * 2 + [n], total=n)
        out.append(msgspec.structs.replace(s, **{field: h}))
    return out


def test_inside_decide_first_tokens_in_time_run_prefill_hotter_and_misses_cool_it(shared_data: Path) -> None:
    if not (shared_data / "dynamo").is_dir():
        pytest.skip("profile data (dynamo/) not found under the shared data folder")

    def run(calibrate: bool, late_from: int) -> list[tuple[int, float]]:
        cfg = replace(
            PolicyConfig(), policy=PolicyKind.COMBINED, max_gpu_budget=-1, calibrate_queue=calibrate
        )
        samples = late_steady(120, late_from, "ttft_histogram", [250.0, 500.0, 1000.0])
        return [
            (st.predictive.floor["prefill"], st.predictive.queue.scale)
            for st in drive(shared_data, cfg, samples)
        ]

    plain = run(False, late_from=10_000)
    hotter = run(True, late_from=100)
    assert all(scale == 1.0 for _, scale in plain)
    # a memory's worth of steady samples all in time: half the variability, a hotter cap, no more
    # engines (twenty engines sharing one queue: the tail at the target is nearly the load alone)
    assert hotter[99][1] < 0.6
    assert hotter[99][0] <= plain[99][0]
    # a fifth of the first tokens late: the variability rises at once, sample after sample
    assert hotter[-1][1] > hotter[99][1] * 1.5
    assert hotter[-1][0] > hotter[99][0]


def test_a_sample_in_time_counts_as_far_as_the_engines_ran_near_their_cap() -> None:
    base = replace(QueueCalibration(), level=200.0, settled=100)
    full = settle_queue(base, timed(1), 1.0, None, target=0.99, memory=60, load=1.0)
    trough = settle_queue(base, timed(1), 1.0, None, target=0.99, memory=60, load=0.25)
    assert full.log_scale == pytest.approx(-KAPPA / 60)
    assert trough.log_scale == pytest.approx(
        -KAPPA / 60 / 4
    )  # a quarter of the cap: a quarter of the evidence


@pytest.mark.parametrize(("load", "warming"), [(1.5, False), (0.8, True)])
def test_misses_the_queue_model_was_not_asked_about_raise_nothing(load: float, warming: bool) -> None:
    """Traffic beyond what the fleet was sized for (mean load past the cap), or a floor still sized
    for the stand-in spread: the misses are the forecast's."""
    base = replace(QueueCalibration(), level=200.0, settled=100)
    late = settle_queue(base, timed(1), 0.5, None, target=0.99, memory=60, load=load, warming=warming)
    assert late.log_scale == base.log_scale and late.settled == base.settled + 1
    asked = settle_queue(base, timed(1), 0.5, None, target=0.99, memory=60, load=0.8)
    assert asked.log_scale > base.log_scale


def itl_timed(i: int, n: float = 200.0) -> TrafficSample:
    """Sample ``i`` with ``n`` requests' ITLs measured (the share in time is given to the settle)."""
    h = hist([25.0, 50.0, 100.0], [n, n, n], n)
    return TrafficSample(
        namespace="t", start_s=INTERVAL * i, interval_s=INTERVAL, num_requests=n, itl_histogram=h
    )


def settle_dec(
    cal: QueueCalibration, i: int, within: float | None, n: float = 200.0, **kw: float | bool
) -> QueueCalibration:
    return settle_decode(cal, itl_timed(i, n), within, target=0.99, memory=60, **kw)  # type: ignore[arg-type]


def test_decode_aims_at_half_the_share_prefill_aims_at() -> None:
    assert allowed_itl_miss(0.99) == pytest.approx(0.0075 / 2)
    assert allowed_itl_miss(0.9) == pytest.approx(0.0975 / 2)
    # prefill gets what decode leaves when decode misses its own share
    assert allowed_ttft_miss(0.99, allowed_itl_miss(0.99)) == pytest.approx(allowed_itl_miss(0.99))


def test_decode_variability_falls_in_time_rises_on_misses_and_leaves_prefill_alone() -> None:
    cal = QueueCalibration()
    for i in range(60):
        cal = settle_dec(cal, i, 1.0)
    assert cal.decode_settled == 60 and cal.decode_scale == pytest.approx(0.5, rel=1e-9)
    assert cal.log_scale == 0.0 and cal.settled == 0  # prefill's scale is its own
    base = replace(QueueCalibration(), decode_level=200.0, decode_settled=100)
    allowed = allowed_itl_miss(0.99)
    up = settle_dec(base, 1, 1.0 - 5 * allowed)
    assert up.decode_log_scale == pytest.approx(KAPPA * 4 / 60)
    assert settle_dec(base, 1, 0.0).decode_log_scale == pytest.approx(KAPPA * (CLIP - 1) / 60)
    # a sample settles once; one without ITLs leaves the scale
    assert settle_dec(up, 1, 0.0) == up
    assert settle_dec(up, 2, None).decode_log_scale == up.decode_log_scale


@pytest.mark.parametrize(("load", "warming"), [(1.5, False), (0.8, True)])
def test_decode_misses_its_model_was_not_asked_about_raise_nothing(load: float, warming: bool) -> None:
    base = replace(QueueCalibration(), decode_level=200.0, decode_settled=100)
    late = settle_dec(base, 1, 0.5, load=load, warming=warming)
    assert late.decode_log_scale == base.decode_log_scale
    trough = settle_dec(base, 1, 1.0, load=0.25)
    assert trough.decode_log_scale == pytest.approx(-KAPPA / 60 / 4)


def test_inside_decide_decode_staffing_calibrates_its_variability_on_the_itls(shared_data: Path) -> None:
    """With ``decode_staffing``, steady traffic whose ITLs are all in time lowers decode's running
    variability (a floor no larger than the uncalibrated one); a fifth of them late raises it, and
    the floor with it. Without the option, decode's scale is never touched."""
    if not (shared_data / "dynamo").is_dir():
        pytest.skip("profile data (dynamo/) not found under the shared data folder")

    def run(staffing: bool, calibrate: bool, late_from: int) -> list[tuple[int, float]]:
        cfg = replace(
            PolicyConfig(), policy=PolicyKind.COMBINED, max_gpu_budget=-1, calibrate_queue=calibrate,
            decode_staffing=staffing,
        )  # fmt: skip
        samples = late_steady(160, late_from, "itl_histogram", [25.0, 50.0, 100.0])
        return [
            (st.predictive.floor["decode"], st.predictive.queue.decode_scale)
            for st in drive(shared_data, cfg, samples)
        ]

    off = run(False, True, late_from=10_000)
    assert all(scale == 1.0 for _, scale in off)
    plain = run(True, False, late_from=10_000)
    cooled = run(True, True, late_from=120)
    assert all(scale == 1.0 for _, scale in plain)
    assert cooled[119][1] < 0.95
    assert cooled[119][0] <= plain[119][0]
    assert cooled[-1][1] > cooled[119][1] * 1.5
    assert cooled[-1][0] > cooled[119][0] and cooled[-1][0] > plain[-1][0]


def test_requests_inside_the_targets_bucket_hold_the_variability_where_a_linear_reading_raised_it() -> None:
    """ITLs of 30-40 ms against a 40 ms target, all in vLLM's 25-50 ms bucket: every request met it,
    but the bucket read linearly counts 40 % late. The calibrations hold on what cannot be told."""
    n = 200.0
    counts = [0.0 if b < 50.0 else n for b in TPOT_BOUNDS_MS]
    h = LatencyHistogram(bounds_ms=list(TPOT_BOUNDS_MS), counts=counts, total=n)
    linear, told = share_within(h, 40.0), share_bounds(h, 40.0)
    assert linear == pytest.approx(0.6) and told == Share(0.0, 1.0)
    base = replace(QueueCalibration(), decode_level=n, decode_settled=100, level=n, settled=100)
    sample = msgspec.structs.replace(itl_timed(1, n), itl_histogram=h)
    assert settle_decode(base, sample, linear, target=0.99, memory=60).decode_log_scale > 0.0
    held = settle_decode(base, sample, told, target=0.99, memory=60)
    assert held.decode_log_scale == 0.0 and held.decode_settled == base.decode_settled + 1
    # nor does it count against prefill's share as decode's misses
    assert settle_queue(base, timed(1, n), 1.0, told, target=0.99, memory=60).itl_miss == 0.0
    # where the buckets do tell (requests past the bucket's upper bound) the misses count
    late = LatencyHistogram(bounds_ms=list(TPOT_BOUNDS_MS), counts=[c * 0.9 for c in counts], total=n)
    raised = settle_decode(base, sample, share_bounds(late, 40.0), target=0.99, memory=60)
    assert raised.decode_log_scale > 0.0


def test_inside_decide_itls_inside_the_targets_bucket_leave_decodes_variability(shared_data: Path) -> None:
    """Steady traffic whose requests all finish at a mean ITL inside vLLM's 25-50 ms bucket, against a
    40 ms target: decode's running variability and floor stay those of the uncalibrated policy."""
    if not (shared_data / "dynamo").is_dir():
        pytest.skip("profile data (dynamo/) not found under the shared data folder")

    def run(calibrate: bool) -> list[tuple[int, float]]:
        cfg = replace(
            PolicyConfig(), policy=PolicyKind.COMBINED, max_gpu_budget=-1, calibrate_queue=calibrate,
            decode_staffing=True, itl_target_ms=40.0,
        )  # fmt: skip
        samples = []
        for i in range(120):
            s = steady(i, 1.0)
            n = s.num_requests
            counts = [0.0 if b < 50.0 else n for b in TPOT_BOUNDS_MS]
            h = LatencyHistogram(bounds_ms=list(TPOT_BOUNDS_MS), counts=counts, total=n)
            samples.append(msgspec.structs.replace(s, itl_histogram=h))
        return [
            (st.predictive.floor["decode"], st.predictive.queue.decode_scale)
            for st in drive(shared_data, cfg, samples)
        ]

    plain, calibrated = run(False), run(True)
    assert all(scale == 1.0 for _, scale in calibrated)
    assert [f for f, _ in calibrated] == [f for f, _ in plain]
