"""Queue-aware TTFT: wait behind the queue + own prefill, and the utilisation cap of the TTFT target."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner_core.engine import CalibratedTiming, Scheduler, SchedulerConfig
from planner_core.engine.request import EngineRequest, EngineRole
from planner_core.engine.timing import lone_ttft_s
from planner_core.policy.predictive import prefill_rate_per_replica
from planner_core.policy.queueing import (
    decode_spare,
    max_prefill_utilisation,
    queued_ttft_ms,
    wait_tail_probability,
)


def linear_pass(tokens: float) -> float:
    """10 ms + 0.01 ms per token (seconds)."""
    return 0.010 + tokens * 1e-5


@pytest.mark.parametrize(
    ("queued", "isl", "batch", "expected_ms"),
    [
        (0, 1000, 8192, 20.0),  # own prefill only: 10 + 10
        (7192, 1000, 8192, 91.92),  # queue + own fill exactly one pass: 10 + 81.92
        (8192, 1000, 8192, 91.92 + 20.0),  # one full pass of queue, then own chunk
        (20000, 1000, 8192, 2 * 91.92 + (10 + 46.16)),  # 21000 = 2 x 8192 + 4616
        (0, 0, 8192, 0.0),
    ],
)
def test_queued_ttft_is_queue_wait_plus_prefill(
    queued: float, isl: float, batch: int, expected_ms: float
) -> None:
    assert queued_ttft_ms(queued, isl, linear_pass, batch) == pytest.approx(expected_ms)


def test_queued_ttft_grows_with_the_queue_not_only_with_the_prompt() -> None:
    alone = queued_ttft_ms(0, 2000, linear_pass, 8192)
    behind = queued_ttft_ms(30000, 2000, linear_pass, 8192)
    # 32000 tokens = 3 full passes (3 x 91.92) + 7424 tokens (84.24)
    assert behind == pytest.approx(3 * 91.92 + 84.24)
    assert behind > 10 * alone


def test_queued_ttft_rejects_a_zero_batch() -> None:
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        queued_ttft_ms(0, 100, linear_pass, 0)


@pytest.mark.parametrize(
    ("rho", "wait", "service", "c2", "expected"),
    [
        (0.0, 100, 10, 2.0, 0.0),
        (1.0, 100, 10, 2.0, 1.0),
        (0.5, 0, 10, 2.0, 0.5),  # P(W > 0) = rho
        (0.5, 100, 10, 2.0, 0.5 * math.exp(-5.0)),  # 2 * 100 * 0.5 / (10 * 2)
        (0.5, 100, 10, 4.0, 0.5 * math.exp(-2.5)),  # burstier arrivals: heavier tail
    ],
)
def test_wait_tail(rho: float, wait: float, service: float, c2: float, expected: float) -> None:
    assert wait_tail_probability(rho, wait, service, c2) == pytest.approx(expected)


def test_utilisation_cap_meets_its_quantile_exactly() -> None:
    # 30 ms prefill, 500 ms target: allowed wait 470 ms
    rho = max_prefill_utilisation(30.0, 500.0, 0.99)
    assert 0.5 < rho < 0.95
    assert wait_tail_probability(rho, 470.0, 30.0) == pytest.approx(0.01, rel=1e-6)


@pytest.mark.parametrize(
    ("service", "target", "quantile", "expected"),
    [
        (600.0, 500.0, 0.99, 0.0),  # one prompt alone misses: no fleet helps it
        (0.0, 500.0, 0.99, 1.0),
    ],
)
def test_utilisation_cap_edges(service: float, target: float, quantile: float, expected: float) -> None:
    assert max_prefill_utilisation(service, target, quantile) == expected


def test_utilisation_cap_is_lower_for_stricter_quantiles_and_burstier_traffic() -> None:
    base = max_prefill_utilisation(40.0, 500.0, 0.95)
    assert max_prefill_utilisation(40.0, 500.0, 0.999) < base
    assert max_prefill_utilisation(40.0, 500.0, 0.95, variability=6.0) < base
    assert max_prefill_utilisation(40.0, 3000.0, 0.95) > base  # a looser target allows more


def test_utilisation_cap_rejects_a_bad_quantile() -> None:
    with pytest.raises(ValueError, match="quantile"):
        max_prefill_utilisation(30.0, 500.0, 1.0)


def test_decode_spare_keeps_the_running_requests_within_the_fleet_at_its_quantile() -> None:
    """At ``k - h sqrt(k)`` engines' worth of load, a Poisson count of running requests stays within
    ``k x batch`` with at least the quantile's probability (the normal approximation is slightly
    conservative), and not by much more: the spare is what the quantile needs, not a margin."""
    from scipy.stats import poisson

    for q in (0.8, 0.9, 0.99, 0.999):
        for batch in (20.0, 100.0, 700.0):
            h = decode_spare(q, batch)
            for k in (1, 4, 16):
                mean = max(k - h * math.sqrt(k), 0.0) * batch
                within = float(poisson.cdf(k * batch, mean))
                assert within >= q - 0.01, (q, batch, k, within)
                # a spare 20 % smaller already falls under the quantile on larger fleets
                smaller = max(k - 0.8 * h * math.sqrt(k), 0.0) * batch
                if k >= 4 and batch >= 100:
                    assert float(poisson.cdf(k * batch, smaller)) < q, (q, batch, k)


def test_decode_spare_shrinks_with_the_batch_and_grows_with_the_quantile_and_variability() -> None:
    assert decode_spare(0.99, 700.0) < decode_spare(0.99, 100.0) < decode_spare(0.99, 20.0)
    assert decode_spare(0.9, 100.0) < decode_spare(0.99, 100.0) < decode_spare(0.999, 100.0)
    assert decode_spare(0.99, 100.0, 2.0) == pytest.approx(math.sqrt(2.0) * decode_spare(0.99, 100.0))
    # z(0.99) = 2.326: sqrt(1/100) of it
    assert decode_spare(0.99, 100.0) == pytest.approx(0.2326, abs=1e-4)


@pytest.mark.parametrize(("quantile", "batch"), [(0.5, 100.0), (0.3, 100.0), (0.99, 0.0), (0.99, math.nan)])
def test_decode_spare_edges(quantile: float, batch: float) -> None:
    assert decode_spare(quantile, batch) == 0.0


@pytest.mark.parametrize("quantile", [0.0, 1.0, -0.5, 1.5])
def test_decode_spare_rejects_a_bad_quantile(quantile: float) -> None:
    with pytest.raises(ValueError, match="quantile"):
        decode_spare(quantile, 100.0)


def _fleet_ttft_ms(
    timing: CalibratedTiming, arrivals_s: np.ndarray, isl: np.ndarray, budget: int, engines: int
) -> np.ndarray:
    """First-token times of ``engines`` simulated prefill engines behind a router that sends each
    request to the engine with the fewest requests still waiting for their first token (the
    simulator's least-outstanding routing)."""
    cfg = SchedulerConfig(max_num_batched_tokens=budget, role=EngineRole.PREFILL, enable_prefix_caching=False)
    fleet = [Scheduler(cfg, timing) for _ in range(engines)]
    clock = [0.0] * engines
    waiting: list[set[int]] = [set() for _ in range(engines)]
    first: dict[int, float] = {}

    def run_until(e: int, until: float) -> None:
        while clock[e] < until:
            p = fleet[e].step(clock[e])
            if p.duration_s == 0:
                clock[e] = until
                return
            clock[e] += p.duration_s
            for rid in p.first_token_ids:
                first[rid] = clock[e]

    for i, at in enumerate(arrivals_s):
        for e in range(engines):
            run_until(e, float(at))
            waiting[e] = {r for r in waiting[e] if first.get(r, math.inf) > at}
        e = min(range(engines), key=lambda x: len(waiting[x]))
        fleet[e].add_request(EngineRequest(i, int(isl[i]), 2))
        waiting[e].add(i)
    for e in range(engines):
        run_until(e, math.inf)
    return np.array([first[k] - arrivals_s[k] for k in range(len(arrivals_s))]) * 1000.0


@pytest.mark.parametrize(
    ("isl", "quantile"), [(300, 0.99), (300, 0.9), (1000, 0.99), (1000, 0.9), (3000, 0.99)]
)
def test_the_prefill_cap_holds_on_an_engine_that_packs_its_queue(isl: int, quantile: float) -> None:
    """Poisson arrivals of log-normal prompts on one simulated engine at the load the floor's cap allows
    (the engine's rate at full passes, each prompt's share of it the tail's service): the engine keeps
    the quantile of TTFTs within the target, and for short prompts the cap uses most of the engine
    (it holds the target to 95 % of its full-pass rate). A cap from one prompt per pass would leave
    half of it idle (300 tokens: a quarter)."""
    timing = CalibratedTiming(
        p_base_ms=18.5, p_token_ms=0.0144, p_attn_ms=7.3e-7, d_base_ms=4.4, d_request_ms=0.031, d_kv_ms=3e-5
    )
    budget, target, sigma = 8192, 500.0, 0.5
    service = lone_ttft_s(timing, isl) * 1000.0
    full = lone_ttft_s(timing, budget) * 1000.0
    rate = prefill_rate_per_replica(service, isl, full, budget)
    cap = max_prefill_utilisation(
        service, target, quantile, 1.0 + math.expm1(sigma**2), share_ms=isl / rate * 1e3
    )
    load = rate * cap  # prompt tokens/s
    rng = np.random.default_rng(11)
    n = 4000
    arrivals = np.cumsum(rng.exponential(isl / load, n))
    lengths = np.clip(rng.lognormal(math.log(isl) - sigma**2 / 2, sigma, n), 1, 30000).astype(int)
    ttft = _fleet_ttft_ms(timing, arrivals, lengths, budget, engines=1)
    feasible = np.array([lone_ttft_s(timing, int(x)) * 1000.0 <= target for x in lengths])
    assert np.mean(ttft[feasible] <= target) >= quantile - 0.005
    if isl <= 1000:
        assert load >= 0.8 * budget / (full / 1000.0)


@pytest.mark.parametrize(("isl", "engines"), [(1000, 3), (3000, 3), (3000, 4)])
def test_a_fleet_behind_a_load_aware_router_holds_the_pooled_tail(isl: int, engines: int) -> None:
    """Poisson arrivals of log-normal prompts on ``engines`` simulated engines behind least-outstanding
    routing, at the load the floor's queue model (one queue of ``engines`` servers) allows at 0.99:
    the fleet keeps the quantile of TTFTs within the target, at a load well beyond ``engines`` lone
    engines at their own cap (3,000-token prompts: 87 % busy where one engine is capped at 64 %)."""
    timing = CalibratedTiming(
        p_base_ms=18.5, p_token_ms=0.0144, p_attn_ms=7.3e-7, d_base_ms=4.4, d_request_ms=0.031, d_kv_ms=3e-5
    )
    budget, target, sigma, quantile = 8192, 500.0, 0.5, 0.99
    service = lone_ttft_s(timing, isl) * 1000.0
    rate = prefill_rate_per_replica(service, isl, lone_ttft_s(timing, budget) * 1000.0, budget)
    share, c2 = isl / rate * 1e3, 1.0 + math.expm1(sigma**2)
    lone_cap = max_prefill_utilisation(service, target, quantile, c2, share_ms=share)
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        ok = wait_tail_probability(mid, target - service, share, c2, servers=engines) <= 1 - quantile
        lo, hi = (mid, hi) if ok else (lo, mid)
    assert lo > lone_cap + 0.05
    load = rate * lo * engines  # prompt tokens/s
    rng = np.random.default_rng(11)
    n = 2500 * engines
    arrivals = np.cumsum(rng.exponential(isl / load, n))
    lengths = np.clip(rng.lognormal(math.log(isl) - sigma**2 / 2, sigma, n), 1, 30000).astype(int)
    ttft = _fleet_ttft_ms(timing, arrivals, lengths, budget, engines)
    feasible = np.array([lone_ttft_s(timing, int(x)) * 1000.0 <= target for x in lengths])
    assert np.mean(ttft[feasible] <= target) >= quantile - 0.005
