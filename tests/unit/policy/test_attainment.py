"""Predicted attainment of a capacity over demand scenarios, and the fewest replicas that reach a
target."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner_core.policy.attainment import (
    QueueTail,
    fewest_replicas,
    pooled_capacity,
    predicted_attainment,
    queued_attainment,
    queued_within,
    running_attainment,
    running_within,
)
from planner_core.policy.queueing import max_prefill_utilisation


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


def _scanned(per: float, demands: list[float], target: float, lo: int, hi: int, **kw: object) -> int:
    """The fewest replicas by a scan from ``lo`` up, one fleet at a time."""
    n = lo
    while n < hi and fewest_replicas(per, demands, target, minimum=n, maximum=n + 1, **kw)[1][n] < target:  # type: ignore[arg-type]
        n += 1
    return n


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    demands=st.lists(st.floats(0.0, 50_000.0), min_size=1, max_size=12),
    per=st.floats(50.0, 2_000.0),
    target=st.sampled_from([0.8, 0.9, 0.95, 0.99, 0.995]),
    minimum=st.integers(0, 4),
    span=st.integers(0, 400),
    mode=st.sampled_from(["excess", "pooled", "running", "queued"]),
)
def test_fewest_replicas_finds_what_a_scan_from_the_minimum_finds(
    demands: list[float], per: float, target: float, minimum: int, span: int, mode: str
) -> None:
    """The search over fleet sizes (galloping, then halving) returns the fleet a scan one by one from
    the minimum returns, in every attainment model, up to fleets of hundreds, and the maximum when
    none reaches the target."""
    kw: dict[str, object] = {
        "excess": {},
        "pooled": {"pooled_headroom": 0.25},
        "running": {"batch": 64.0, "variability": 1.5},
        "queued": {"tail": QueueTail(wait_ms=300.0, service_ms=40.0, variability=2.0)},
    }[mode]
    maximum = minimum + span
    n, cands = fewest_replicas(per, demands, target, minimum=minimum, maximum=maximum, **kw)  # type: ignore[arg-type]
    assert n == _scanned(per, demands, target, minimum, maximum, **kw)
    assert n in cands


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


def _mmk_within(k: int, rho: float, wait_over_service: float) -> float:
    """M/M/k: P(W <= w) = 1 - C(k, a) exp(-k (1 - rho) w / s), Erlang C from its closed form."""
    a = k * rho
    top = a**k / math.factorial(k) / (1.0 - rho)
    c = top / (sum(a**n / math.factorial(n) for n in range(k)) + top)
    return 1.0 - c * math.exp(-k * (1.0 - rho) * wait_over_service)


@pytest.mark.parametrize("rho", [0.1, 0.5, 0.8, 0.95])
@pytest.mark.parametrize("wait_over_service", [0.5, 2.0, 8.0])
def test_queued_within_is_the_mmk_wait_below_the_fleet(rho: float, wait_over_service: float) -> None:
    """At Poisson variability (c^2 = 2) the share in time is M/M/k's exactly (one queue of k
    servers: a load-aware router): one engine M/M/1's, P(W <= w) = 1 - rho exp(-(1 - rho) w / s), and
    k engines at the same utilisation keep more of their requests in time."""
    service = 200.0
    tail = QueueTail(wait_ms=wait_over_service * service, service_ms=service, variability=2.0)
    exact = 1.0 - rho * math.exp(-(1.0 - rho) * wait_over_service)
    assert queued_within(1, rho, tail) == pytest.approx(exact)
    for k in (2, 4, 9):
        assert queued_within(k, k * rho, tail) == pytest.approx(_mmk_within(k, rho, wait_over_service))
        assert queued_within(k, k * rho, tail) > exact


def test_queued_within_edges() -> None:
    tail = QueueTail(wait_ms=300.0, service_ms=200.0, variability=2.0)
    assert queued_within(3, 0.0, tail) == 1.0  # no load
    assert queued_within(0, 0.5, tail) == 0.0  # no engine
    assert queued_within(3, 3.0, tail) == 0.0  # at the fleet: the backlog never drains
    assert queued_within(3, 2.0, QueueTail(wait_ms=0.0, service_ms=200.0, variability=2.0)) == 0.0
    # burstier traffic: fewer in time at the same load
    assert queued_within(3, 2.0, QueueTail(300.0, 200.0, 8.0)) < queued_within(3, 2.0, tail)


def test_a_backlog_makes_every_later_request_late() -> None:
    """A scenario beyond the fleet counts as late whole, where the excess model counts its excess as
    the only loss: at a low target the queued model covers the high scenario, the excess one (over
    engines at the utilisation cap) leaves it short."""
    tail = QueueTail(wait_ms=800.0, service_ms=200.0, variability=2.0)
    demands = [10.0, 20.0]  # engines' worth at the back-to-back rate of 1 per engine
    cap = max_prefill_utilisation(200.0, 1000.0, 0.8, 2.0)
    assert queued_attainment(15, 1.0, demands, tail) < 10.0 / 30.0 + 1e-9  # 20 beyond 15: none in time
    excess, _ = fewest_replicas(cap, demands, 0.8)
    queued, cands = fewest_replicas(1.0, demands, 0.8, tail=tail)
    assert excess * cap < 20.0 < queued
    assert cands[queued] >= 0.8 > cands[queued - 1]


@pytest.mark.parametrize("target", [0.8, 0.9, 0.99])
@pytest.mark.parametrize("load", [0.7, 3.0, 11.5, 40.0])
def test_one_scenario_sizes_as_the_queue_at_the_target(target: float, load: float) -> None:
    """Without a spread the queued model asks the queue's tail alone: the fewest engines whose shared
    queue (M/M/k at Poisson variability) keeps the target, no more than engines each at one engine's
    utilisation cap. The excess model over engines at that cap asks the target a second time: it lets
    the one scenario go short by the target's misses, a fleet under the demand it expects (at 0.8,
    80 % of it: a backlog that never drains)."""
    tail = QueueTail(wait_ms=600.0, service_ms=300.0, variability=2.0)
    cap = max_prefill_utilisation(300.0, 900.0, target, 2.0)
    queued, _ = fewest_replicas(1.0, [load], target, tail=tail)
    mmk = next(k for k in range(1, 200) if k > load and _mmk_within(k, load / k, 2.0) >= target)
    assert queued == mmk <= math.ceil(load / cap - 1e-9)
    assert fewest_replicas(cap, [load], target)[0] == math.ceil(target * load / cap - 1e-9)


def test_queued_fleet_grows_with_the_target_and_the_variability() -> None:
    demands = [6.0, 8.0, 10.0, 12.0]
    calm, bursty = QueueTail(400.0, 200.0, 2.0), QueueTail(400.0, 200.0, 8.0)
    fleets = [fewest_replicas(1.0, demands, t, tail=calm)[0] for t in (0.8, 0.9, 0.99, 0.999)]
    assert fleets == sorted(fleets) and fleets[0] < fleets[-1]
    assert fewest_replicas(1.0, demands, 0.99, tail=bursty)[0] > fleets[2]
    # the highest scenario never beyond the fleet at a high target: its backlog alone costs 12/36
    assert fleets[2] > 12
