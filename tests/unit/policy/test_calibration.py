"""The floor's spread calibrated on what its floors covered: narrowed while they cover more than the
target asks, widened back at a shortfall, never past the measured spread; over a long run the floors'
demand-weighted shortfall lands at the target's share; and inside ``decide`` a steady traffic's floor
comes down as its coverage is seen."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import msgspec
import numpy as np
import pytest

from planner_core.policy import DecisionInputs, PolicyConfig, PolicyKind, PolicyState, decide
from planner_core.policy.calibration import (
    MAX_PENDING,
    MAX_SCALE,
    Share,
    SpreadCalibration,
    coverage,
    demand_of,
    record,
    scaled,
    settle,
    settle_latency,
    share_bounds,
    share_within,
)
from planner_proto.decision import ComponentReplicas
from planner_proto.demand import DemandStep
from planner_proto.traffic import LatencyHistogram, TrafficSample
from planner_sim.bench import _profile
from tests.unit.policy.factories import fed, predictor

INTERVAL = 30.0


def sample(i: int, requests: float = 300.0, isl: float = 1000.0) -> TrafficSample:
    return TrafficSample(
        namespace="t",
        start_s=INTERVAL * i,
        interval_s=INTERVAL,
        num_requests=requests,
        mean_isl_tokens=isl,
        mean_osl_tokens=100.0,
    )


def step(for_i: int, forecast: float, scenarios: list[float]) -> DemandStep:
    return DemandStep(
        steps_ahead=1,
        for_start_s=INTERVAL * for_i,
        forecast=forecast,
        scenarios=scenarios,
        forecaster="steady",
    )


def floor_for(cal: SpreadCalibration, i: int, capacity: float) -> SpreadCalibration:
    return record(cal, [step(i, 1.0, [1.0])], capacity)


def test_scaled_spread_keeps_the_forecast_and_shrinks_both_sides() -> None:
    s = step(1, 100.0, [40.0, 100.0, 180.0])
    assert scaled(s, 1.0) == [40.0, 100.0, 180.0]
    assert scaled(s, 0.5) == [70.0, 100.0, 140.0]
    assert scaled(s, 0.0) == [100.0, 100.0, 100.0]
    assert min(scaled(step(1, 10.0, [-50.0]), 0.5)) == 0.0


def test_covered_floors_narrow_by_at_most_one_memory_share_per_sample() -> None:
    cal = SpreadCalibration()
    scales = []
    for i in range(1, 6):
        cal = floor_for(cal, i, capacity=1e9)
        cal = settle(cal, sample(i), demand_of(sample(i), 1000.0), target=0.99, memory=60)
        scales.append(cal.scale)
    # a sample at the average demand, fully covered: -1/60 each
    assert scales == pytest.approx([1 - k / 60 for k in range(1, 6)])
    assert coverage(cal) == pytest.approx(1.0)


def test_a_shortfall_widens_at_once_and_never_past_the_measured_spread() -> None:
    cal = replace(SpreadCalibration(), scale=0.2, level=10_000.0)
    demand = demand_of(sample(1), 1000.0)
    assert demand == pytest.approx(10_000.0)
    cal = settle(floor_for(cal, 1, capacity=9_000.0), sample(1), demand, target=0.99, memory=60)
    # 10 % short where 1 % is allowed: + (0.10 - 0.01) / (60 x 0.01) = +0.15
    assert cal.scale == pytest.approx(0.35)
    cal = settle(floor_for(cal, 2, capacity=0.0), sample(2), demand, target=0.99, memory=60)
    # a whole sample short: the floor is back at the measured spread, the excess kept on the books
    assert cal.applied == 1.0 and cal.scale == pytest.approx(MAX_SCALE)
    assert coverage(cal) is not None and coverage(cal) < 0.99  # type: ignore[operator]


def test_settling_matches_samples_once_and_drops_floors_whose_sample_never_came() -> None:
    cal = SpreadCalibration()
    for i in (3, 4, 5):
        cal = floor_for(cal, i, capacity=1e9)
    cal = floor_for(cal, 5, capacity=0.0)  # a second floor on the same forecast is not recorded
    assert [s for s, _ in cal.pending] == [90.0, 120.0, 150.0]
    # sample 4 comes (3 never did): 3 dropped, 4 settled, 5 waits
    cal = settle(cal, sample(4), 10_000.0, target=0.99, memory=60)
    assert [s for s, _ in cal.pending] == [150.0] and cal.scale < 1.0
    again = settle(cal, sample(4), 10_000.0, target=0.99, memory=60)
    assert again == cal
    # no demand (a sample without request lengths) settles without moving the scale
    quiet = settle(cal, sample(5, isl=float("nan")), None, target=0.99, memory=60)
    assert quiet.scale == cal.scale and quiet.pending == ()


def test_pending_floors_are_bounded_without_traffic() -> None:
    cal = SpreadCalibration()
    for i in range(MAX_PENDING + 10):
        cal = floor_for(cal, i, capacity=1.0)
    assert len(cal.pending) == MAX_PENDING and cal.pending[-1][0] == INTERVAL * (MAX_PENDING + 9)


@pytest.mark.parametrize("target", [0.9, 0.95, 0.99])
def test_long_run_shortfall_lands_at_the_target_share(target: float) -> None:
    """Demand is log-normal around a forecast of 100; the floor covers the forecast plus the scaled
    spread of a (too wide) error record. Unclipped by the upper bound, the floors' demand-weighted
    shortfall converges to 1 - target."""
    rng = np.random.default_rng(7)
    errors = np.sort(rng.normal(0.0, 120.0, 400))  # the record: 3x wider than the traffic's spread
    cal, missed, total = SpreadCalibration(), 0.0, 0.0
    for i in range(1, 6001):
        scen = scaled(step(i, 100.0, list(100.0 + errors)), cal.scale)
        capacity = float(np.quantile(scen, target))
        cal = floor_for(cal, i, capacity)
        demand = float(100.0 * np.exp(rng.normal(0.0, 0.4) - 0.08))
        if i > 1000:
            missed += max(demand - capacity, 0.0)
            total += demand
        cal = settle(cal, sample(i), demand, target=target, memory=60)
    assert missed / total == pytest.approx(1.0 - target, abs=0.25 * (1.0 - target))
    assert 0.0 < cal.scale < MAX_SCALE


def steady(i: int, x: float) -> TrafficSample:
    """Sample ``i`` of 400 req/s times ``x``, 2000 prompt and 200 output tokens."""
    return msgspec.structs.replace(sample(i, requests=INTERVAL * 400 * x, isl=2000.0), mean_osl_tokens=200.0)


def drive(shared: Path, cfg: PolicyConfig, samples: list[TrafficSample]) -> list[PolicyState]:
    """The samples through ``decide`` one after the other (40 prefill and 40 decode replicas ready,
    the profile's capacity): the policy state after each."""
    capacity = _profile(str(shared / "dynamo"))[2]
    st, demand = PolicyState(), predictor(cfg)
    reps = {c: ComponentReplicas(desired=40, ready=40) for c in ("prefill", "decode")}
    out = []
    for i, s in enumerate(samples):
        now = INTERVAL * (i + 1)
        _, st = decide(
            fed(demand, DecisionInputs(replicas=reps, traffic=s, capacity=capacity), now), st, cfg, now
        )
        out.append(st)
    return out


def run(shared: Path, calibrate: bool, pattern: list[float]) -> list[tuple[int, float]]:
    """400 req/s times ``pattern[i]`` at sample ``i`` through ``decide``: per sample the prefill floor
    and the share of the spread it sized for."""
    # the coverage calibration measures each floor against engines at the utilisation cap: the
    # excess model over capped engines it was made for, not prefill sized by its queue
    cfg = replace(
        PolicyConfig(), policy=PolicyKind.COMBINED, max_gpu_budget=-1, calibrate_spread=calibrate,
        calibrate_on="coverage", prefill_staffing=False,
    )  # fmt: skip
    out = []
    for st in drive(shared, cfg, [steady(i, x) for i, x in enumerate(pattern)]):
        cal = st.predictive.calibration.get("prefill")
        out.append((st.predictive.floor["prefill"], cal.applied if cal is not None else 1.0))
    return out


def test_inside_decide_covered_floors_narrow_and_a_shortfall_restores_the_spread(shared_data: Path) -> None:
    if not (shared_data / "dynamo").is_dir():
        pytest.skip("profile data (dynamo/) not found under the shared data folder")
    steady = [1.05 if i % 2 else 0.95 for i in range(80)]
    jump = steady + [2.0] * 12
    plain = run(shared_data, calibrate=False, pattern=steady)
    calibrated = run(shared_data, calibrate=True, pattern=jump)
    assert all(scale == 1.0 for _, scale in plain)
    # +-5 % traffic: the floors cover it with room, the spread narrows, the floor is no higher
    assert calibrated[79][1] < 0.9
    assert sum(f for f, _ in calibrated[40:80]) <= sum(f for f, _ in plain[40:80])
    # the traffic doubles: the floors made before it fall short, the whole spread is back
    assert calibrated[-1][1] == 1.0


def hist(bounds: list[float], counts: list[float], total: float) -> LatencyHistogram:
    return LatencyHistogram(bounds_ms=bounds, counts=counts, total=total)


@pytest.mark.parametrize(
    ("target_ms", "share"),
    [
        (500.0, 0.9),  # on a bound: the requests counted at it
        (50.0, 0.05),  # inside the first bucket: linear from 0
        (750.0, 0.95),  # halfway between 500 and 1000
        (5000.0, 1.0),  # past the last bound: the counted ones (all here)
    ],
)
def test_share_within_reads_the_histogram_as_prometheus_does(target_ms: float, share: float) -> None:
    h = hist([100.0, 500.0, 1000.0], [20.0, 180.0, 200.0], 200.0)
    assert share_within(h, target_ms) == pytest.approx(share)


@pytest.mark.parametrize(
    "bad",
    [
        hist([100.0, 500.0], [20.0], 200.0),  # lengths differ
        hist([500.0, 100.0], [20.0, 180.0], 200.0),  # bounds not ascending
        hist([100.0, 500.0], [180.0, 20.0], 200.0),  # counts not cumulative
        hist([100.0, 500.0], [20.0, 300.0], 200.0),  # more under a bound than in all
        hist([100.0, float("nan")], [20.0, 180.0], 200.0),
        hist([100.0, 500.0], [0.0, 0.0], 0.0),  # no requests
    ],
)
def test_a_histogram_that_is_not_one_says_nothing(bad: LatencyHistogram) -> None:
    assert share_within(bad, 500.0) is None
    assert share_bounds(bad, 500.0) is None


@pytest.mark.parametrize(
    ("counts", "target_ms", "low", "high"),
    [
        ([20.0, 180.0, 200.0], 500.0, 0.9, 0.9),  # on a bound: exactly the requests counted at it
        ([20.0, 180.0, 200.0], 50.0, 0.0, 0.1),  # inside the first bucket: none to all of it
        ([20.0, 180.0, 200.0], 750.0, 0.9, 1.0),  # inside 500-1000
        ([20.0, 180.0, 200.0], 5000.0, 1.0, 1.0),  # past the last bound, every request counted
        ([20.0, 180.0, 190.0], 5000.0, 0.95, 1.0),  # past it with some in +Inf only
    ],
)
def test_share_bounds_are_what_the_buckets_tell(
    counts: list[float], target_ms: float, low: float, high: float
) -> None:
    got = share_bounds(hist([100.0, 500.0, 1000.0], counts, 200.0), target_ms)
    assert got == Share(pytest.approx(low), pytest.approx(high))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("share", "misses"),
    [
        (Share(0.0, 1.0), 0.01),  # the buckets cannot tell: the allowed share, nothing moves
        (Share(0.9, 0.95), 0.05),  # at least 5 % missed: that many
        (Share(0.995, 1.0), 0.005),  # at most half a point missed: that many
        (Share.exactly(0.97), 0.03),
    ],
)
def test_the_misses_the_buckets_allow_nearest_the_allowed_share(share: Share, misses: float) -> None:
    assert share.misses_nearest(0.01) == pytest.approx(misses)


def test_a_sample_whose_buckets_cannot_tell_leaves_the_latency_scale() -> None:
    cal = settle_latency(SpreadCalibration(), 0.0, 200.0, 1.0, target=0.99, memory=60)
    held = settle_latency(cal, INTERVAL, 200.0, Share(0.0, 1.0), target=0.99, memory=60)
    assert held.scale == cal.scale and held.settled_s == INTERVAL
    late = settle_latency(cal, INTERVAL, 200.0, Share(0.5, 0.9), target=0.99, memory=60)
    assert late.scale > cal.scale


def test_latency_misses_within_the_target_share_narrow_and_beyond_it_widen() -> None:
    cal = SpreadCalibration()
    for i in range(30):  # 0.5 % misses against a 1 % share: narrows
        cal = settle_latency(cal, INTERVAL * i, 200.0, 0.995, target=0.99, memory=60)
    narrowed = cal.scale
    assert narrowed < 1.0
    again = settle_latency(cal, INTERVAL * 29, 200.0, 0.0, target=0.99, memory=60)
    assert again == cal  # a sample settles once
    cal = settle_latency(cal, INTERVAL * 30, 200.0, 0.9, target=0.99, memory=60)
    # 10 % misses: 9 points past the share, widened by gamma x 0.09 = 0.15 at once
    assert cal.scale == pytest.approx(narrowed + 0.09 / (60 * 0.01), rel=0.02)
    assert coverage(cal) is not None and coverage(cal) < 0.995


def test_long_run_latency_misses_land_at_the_target_share() -> None:
    """Misses that fall as the spread widens (a fleet sized for more of it): the calibrated scale
    finds the spread where the long-run miss rate is the target's share."""
    rng = np.random.default_rng(3)
    cal, missed, total = SpreadCalibration(), 0.0, 0.0
    for i in range(1, 4001):
        p_miss = 0.04 * (1.0 - cal.applied) ** 2 + 0.002  # 4.2 % with no spread, 0.2 % with all
        n = float(rng.poisson(200))
        m = float(rng.binomial(int(n), p_miss))
        if i > 500:
            missed += m
            total += n
        cal = settle_latency(cal, INTERVAL * i, n, 1.0 - m / n, target=0.99, memory=60)
    assert missed / total == pytest.approx(0.01, abs=0.002)
    assert 0.0 < cal.applied < 1.0


def test_inside_decide_latency_within_target_narrows_and_misses_widen(shared_data: Path) -> None:
    """calibrate_on latency: steady traffic whose requests all meet their targets narrows both
    components' spread; then a third of the first tokens late widens prefill's at once."""
    if not (shared_data / "dynamo").is_dir():
        pytest.skip("profile data (dynamo/) not found under the shared data folder")
    cfg = replace(
        PolicyConfig(), policy=PolicyKind.COMBINED, max_gpu_budget=-1, calibrate_spread=True,
        calibrate_on="latency",
    )  # fmt: skip

    def lat(n: float, late: float, bounds: list[float]) -> LatencyHistogram:
        return hist(bounds, [n * (1 - late), n * (1 - late), n], n)

    samples = []
    for i in range(90):
        s = steady(i, 1.05 if i % 2 else 0.95)
        n, late = s.num_requests, (0.33 if i >= 80 else 0.0)
        samples.append(
            msgspec.structs.replace(
                s,
                ttft_histogram=lat(n, late, [250.0, 500.0, 1000.0]),
                itl_histogram=lat(n, 0.0, [25.0, 50.0, 100.0]),
            )
        )
    scales = [
        (st.predictive.calibration["prefill"].applied, st.predictive.calibration["decode"].applied)
        for st in drive(shared_data, cfg, samples)
    ]
    assert scales[79][0] < 0.5 and scales[79][1] < 0.5  # every request in time: both narrowed
    assert scales[-1][0] == 1.0 and scales[-1][1] < 0.5  # TTFT misses widen prefill only
