"""Predicted attainment of a capacity over demand scenarios, and the fewest replicas that reach a
target."""

from __future__ import annotations

import math

import pytest

from planner_core.policy.attainment import (
    fewest_replicas,
    pooled_capacity,
    predicted_attainment,
    running_attainment,
    running_within,
)


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


@pytest.mark.parametrize("batch", [20.0, 100.0, 400.0])
@pytest.mark.parametrize("load", [2.0, 8.0, 30.0])
@pytest.mark.parametrize("replicas_over", [0.0, 0.5, 1.0, 2.0])
def test_running_within_is_the_poisson_count_held(batch: float, load: float, replicas_over: float) -> None:
    """The chance ``k`` engines of ``batch`` requests hold the running requests of ``load`` engines'
    worth is the Poisson count's (mean ``load x batch``) at most ``k x batch``, to the normal
    approximation's accuracy."""
    stats = pytest.importorskip("scipy.stats")
    k = math.ceil(load + replicas_over * math.sqrt(load / batch) * 2.0)
    exact = float(stats.poisson.cdf(k * batch, load * batch))
    assert running_within(k, load, batch) == pytest.approx(exact, abs=0.05)


def test_running_within_edges_and_variability() -> None:
    assert running_within(3, 0.0, 100.0) == 1.0
    assert running_within(0, 1.0, 100.0) == 0.0
    assert running_within(10, 10.0, 100.0) == pytest.approx(0.5)
    # a burstier count is held less often above its mean, more often below it
    assert running_within(11, 10.0, 100.0, 4.0) < running_within(11, 10.0, 100.0)
    assert running_within(9, 10.0, 100.0, 4.0) > running_within(9, 10.0, 100.0)


def test_an_overflow_makes_the_whole_batch_late() -> None:
    """A scenario beyond the fleet counts as late whole (every running request's ITL rises), where
    the excess model counts only its excess: at a low target the running model covers the high
    scenario, the excess model leaves it short."""
    demands = [100.0, 200.0]
    # capacity 150: the excess model serves 100 + 150 of 300; the running one only the scenario held
    assert predicted_attainment(150.0, demands) == pytest.approx(250.0 / 300.0)
    assert running_attainment(150, 1.0, demands, 1000.0) == pytest.approx(100.0 / 300.0, abs=1e-6)
    excess, _ = fewest_replicas(1.0, demands, 0.8)
    running, cands = fewest_replicas(1.0, demands, 0.8, batch=1000.0)
    assert excess < 200 <= running
    assert cands[running] >= 0.8 > cands[running - 1]


def test_running_fleet_grows_with_the_target_and_the_variability() -> None:
    # one scenario of 10 engines' worth: the count's tail alone, 10 + z sqrt(v x 10 / batch)
    demands = [1000.0]
    lo, _ = fewest_replicas(100.0, demands, 0.9, batch=50.0)  # 10 + 1.28 x 0.45
    hi, _ = fewest_replicas(100.0, demands, 0.99, batch=50.0)  # 10 + 2.33 x 0.45
    bursty, _ = fewest_replicas(100.0, demands, 0.99, batch=50.0, variability=4.0)  # 10 + 2.33 x 0.89
    big_batch, _ = fewest_replicas(100.0, demands, 0.99, batch=5000.0)  # 10 + 2.33 x 0.045
    assert (lo, hi, bursty, big_batch) == (11, 12, 13, 11)
