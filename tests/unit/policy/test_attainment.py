"""Predicted attainment of a capacity over demand scenarios, and the fewest replicas that reach a
target."""

from __future__ import annotations

import pytest

from planner_core.policy.attainment import fewest_replicas, pooled_capacity, predicted_attainment


@pytest.mark.parametrize(
    ("capacity", "demands", "expected"),
    [
        (100.0, [50.0, 100.0], 1.0),
        (100.0, [200.0, 200.0], 0.5),
        (100.0, [100.0, 300.0], 200.0 / 400.0),  # (100 + 100) / (100 + 300)
        (0.0, [10.0], 0.0),
        (5.0, [], 1.0),
        (5.0, [0.0, 0.0], 1.0),
    ],
)
def test_predicted_attainment(capacity: float, demands: list[float], expected: float) -> None:
    assert predicted_attainment(capacity, demands) == pytest.approx(expected)


def test_fewest_replicas_meets_the_target_and_one_less_does_not() -> None:
    demands = [800.0, 900.0, 1000.0, 1100.0, 1500.0]
    n, cands = fewest_replicas(100.0, demands, 0.99, minimum=1)
    assert predicted_attainment(n * 100.0, demands) >= 0.99
    assert predicted_attainment((n - 1) * 100.0, demands) < 0.99
    assert cands[n] >= 0.99
    assert n - 1 in cands and n + 1 in cands


def test_fewest_replicas_cheaper_at_a_lower_target() -> None:
    demands = [800.0, 900.0, 1000.0, 1100.0, 1500.0]
    hi, _ = fewest_replicas(100.0, demands, 0.99)
    lo, _ = fewest_replicas(100.0, demands, 0.9)
    assert lo < hi


def test_fewest_replicas_respects_bounds() -> None:
    assert fewest_replicas(100.0, [0.0], 0.99, minimum=2)[0] == 2
    assert fewest_replicas(1.0, [1e9], 0.99, maximum=8)[0] == 8
    assert fewest_replicas(0.0, [10.0], 0.99, maximum=8)[0] == 8


@pytest.mark.parametrize(
    ("demand", "linear", "pooled"),
    [
        (70.0, 1, 1),  # one engine: the same cap (0.75) either way
        (140.0, 2, 2),  # 2 - 0.25 sqrt 2 = 1.65 engines' worth >= 1.4; linear 1.5 >= 1.4
        (850.0, 12, 10),  # 850 / 75 -> 12 linearly; 10 - 0.25 sqrt 10 = 9.21 >= 8.5 > 9 - 0.75
        (2000.0, 27, 22),  # 22 - 1.17 = 20.8 >= 20 > 21 - 1.15
    ],
)
def test_pooled_headroom_grows_with_the_square_root_of_the_fleet(
    demand: float, linear: int, pooled: int
) -> None:
    assert fewest_replicas(75.0, [demand], 1.0)[0] == linear
    assert fewest_replicas(100.0, [demand], 1.0, pooled_headroom=0.25)[0] == pooled
    assert pooled_capacity(1, 0.25) == pytest.approx(0.75) and pooled_capacity(0, 0.25) == 0.0
    spare = [k - pooled_capacity(k, 0.25) for k in (1, 4, 9, 16)]
    assert spare == pytest.approx([0.25, 0.5, 0.75, 1.0])
