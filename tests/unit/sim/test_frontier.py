"""Frontier reading: GPU-hours at an attainment level, interpolated on the upper envelope."""

from __future__ import annotations

import pytest

from planner_sim.frontier import (
    KNOBS,
    MORE_IS_UP,
    Point,
    calibration,
    envelope,
    frontier_policies,
    gpu_hours_at,
    max_attainment,
    reversals,
)


def pts(*xy: tuple[float, float]) -> list[Point]:
    return [Point(g, a) for g, a in xy]


@pytest.mark.parametrize(
    ("points", "target", "expected"),
    [
        # interpolated between the dearest point below and the cheapest reaching it
        (pts((10, 90), (12, 98), (14, 100)), 99.0, 13.0),
        (pts((10, 90), (12, 98), (14, 100)), 95.0, 10 + 2 * 5 / 8),
        # the cheapest point already reaches it: no extrapolation below the sweep
        (pts((10, 99.5), (12, 99.9)), 99.0, 10.0),
        # exactly on a point
        (pts((10, 90), (12, 99), (14, 100)), 99.0, 12.0),
        # a dearer point that does worse is not on the frontier
        (pts((10, 90), (11, 99.5), (13, 96), (15, 100)), 99.0, 10 + 9 / 9.5),
        # order of the points does not matter
        (pts((14, 100), (10, 90), (12, 98)), 99.0, 13.0),
        # never reached
        (pts((10, 90), (12, 98), (14, 98.9)), 99.0, None),
        ([], 99.0, None),
    ],
)
def test_gpu_hours_at(points: list[Point], target: float, expected: float | None) -> None:
    got = gpu_hours_at(points, target)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_envelope_is_increasing_in_both() -> None:
    env = envelope(pts((15, 100), (13, 96), (11, 99.5), (10, 90), (12, 99.5)))
    assert [(p.gpu_hours, p.attainment_pct) for p in env] == [(10, 90), (11, 99.5), (15, 100)]


def test_max_attainment_and_knobs() -> None:
    assert max_attainment(pts((10, 90), (13, 96))) == 96
    for name, (_, sweep) in KNOBS.items():
        assert 5 <= len(sweep) <= 9, name
        assert list(sweep) == sorted(sweep), name
    assert 0.99 in KNOBS["combined"][1] and 1.0 in KNOBS["sla"][1]
    assert frontier_policies(["static-peak", "static-average", "sla", "combined[kalman]"]) == [
        "static",
        "sla",
        "combined[kalman]",
    ]


def test_sla_headroom_knob_scales_the_forecast() -> None:
    from planner_core.forecast import ForecastConfig
    from planner_core.policy import PolicyConfig, PolicyKind
    from planner_proto.traffic import TrafficSample
    from planner_sim.controllers import PlannerController
    from tests.unit.sim.sim_helpers import settings

    def forecast(scale: float) -> float | None:
        cfg = PolicyConfig(policy=PolicyKind.THROUGHPUT, reference_compat=True)
        c = PlannerController(
            "sla", cfg, settings(), {"prefill": 1, "decode": 1},
            forecast=ForecastConfig(model="constant", interval_s=60.0), demand_scale=scale,
        )  # fmt: skip
        for i in range(3):
            sample = TrafficSample(
                namespace="sim", start_s=60.0 * i, interval_s=60.0, num_requests=100.0,
                mean_isl_tokens=1000.0, mean_osl_tokens=100.0,
            )  # fmt: skip
            c.observe_traffic(sample, 60.0 * (i + 1))
        assert c.forecast is not None
        return c.forecast.num_requests

    base = forecast(1.0)
    assert base is not None and base > 0
    assert forecast(1.7) == pytest.approx(1.7 * base)
    with pytest.raises(ValueError, match="demand_scale"):
        forecast(0.0)


def test_calibration_is_achieved_minus_target_for_attainment_knobs_only() -> None:
    points = [Point(6.0, 99.6, 0.99), Point(5.0, 93.0, 0.95), Point(4.0, 70.0, None)]
    assert calibration("combined", points) == [(0.95, pytest.approx(-2.0)), (0.99, pytest.approx(0.6))]
    assert calibration("combined[kalman]", points)[1] == (0.99, pytest.approx(0.6))
    assert calibration("sla", [Point(6.0, 99.6, 2.0)]) == []


@pytest.mark.parametrize(
    ("policy", "points", "expected"),
    [
        # the recorded pile-up: a lower target costing more GPU-hours is a reversal
        ("combined", [Point(14.85, 88.0, 0.8), Point(12.97, 92.0, 0.9), Point(10.57, 99.2, 0.99)], 2),
        ("combined", [Point(9.0, 88.0, 0.8), Point(10.0, 92.0, 0.9), Point(10.57, 99.2, 0.99)], 0),
        # within the tolerance of one run's noise: not a reversal
        ("combined", [Point(10.05, 95.0, 0.95), Point(10.0, 99.0, 0.99)], 0),
        # a factor knob asks for more as it falls: a lower factor costing less is the reversal
        ("easy", [Point(12.0, 99.0, 0.1), Point(10.0, 95.0, 0.5), Point(11.0, 90.0, 1.0)], 1),
        ("easy", [Point(12.0, 99.0, 0.1), Point(10.0, 95.0, 0.5), Point(9.0, 90.0, 1.0)], 0),
    ],
)
def test_reversals_find_where_asking_more_costs_less(policy: str, points: list[Point], expected: int) -> None:
    assert len(reversals(policy, points)) == expected


def test_every_knob_family_says_which_way_asks_for_more() -> None:
    assert set(MORE_IS_UP) == set(KNOBS)
