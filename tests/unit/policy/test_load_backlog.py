"""A prefill backlog sizes the load policy's scale-up by its drain time: engines that would start
after the backlog drained are not ordered, the pending ones count from when they are ready."""

from __future__ import annotations

import math

import pytest

from planner_core.policy import PolicyConfig, load_policy
from planner_core.policy.load import Backlog, drain_steps
from planner_proto.decision import Reason

from .test_load_policy import EST, NOW, reps, snap, worker

STARTUP = 120.0


def left_after(k: int, q: float, d: float, mu: float, ready: int, pending: int, pending_in: float) -> float:
    """The backlog left one startup after ``k`` engines ordered now are ready, stepping time by 0.1 s
    (an independent integration of dQ/dt = D - served, Q >= 0)."""
    dt, t = 0.1, 0.0
    while t < 2 * STARTUP - 1e-9:
        engines = ready + (pending if t >= pending_in else 0) + (k if t >= STARTUP else 0)
        q = max(0.0, q + (d - mu * engines) * dt)
        t += dt
    return q


@pytest.mark.parametrize(
    ("q", "d", "mu", "ready", "pending", "pending_in"),
    [
        (1_000.0, 100.0, 200.0, 1, 0, STARTUP),  # drains in 10 s: nothing to order
        (30_000.0, 300.0, 200.0, 1, 1, 30.0),  # the pending engine arrives, the backlog outlasts it
        (0.0, 1_000.0, 200.0, 2, 0, STARTUP),  # no backlog yet, demand beyond the fleet
        (2_000_000.0, 5_000.0, 1_000.0, 4, 0, STARTUP),  # the collapse: a deep backlog, demand above
        (2_000_000.0, 5_000.0, 1_000.0, 4, 3, 60.0),  # ... with three engines already on their way
        (50_000.0, 900.0, 1_000.0, 1, 0, STARTUP),  # the one engine drains it at 100 tokens/s: 500 s
    ],
)
def test_drain_steps_orders_the_fewest_that_drain_the_backlog_within_a_startup_of_arriving(
    q: float, d: float, mu: float, ready: int, pending: int, pending_in: float
) -> None:
    k = drain_steps(q, d, mu, ready, pending, pending_in, STARTUP)
    steady = max(0, math.ceil(d / mu - ready - pending - 1e-9))
    assert k >= steady  # the demand alone needs these
    if k > steady:
        # k drains what is left within one more startup (to the integration step), k - 1 does not
        assert left_after(k, q, d, mu, ready, pending, pending_in) <= d * 0.2 + 1e-6
        assert left_after(k - 1, q, d, mu, ready, pending, pending_in) > 0.0
    else:
        # the backlog is gone by the time an engine ordered now could serve, or only the demand needs k
        drained_by_arrival = left_after(0, q, d, mu, ready, pending, min(pending_in, STARTUP)) == 0.0
        assert drained_by_arrival or k == steady


def test_drain_steps_is_monotone() -> None:
    """More backlog or more demand never asks for fewer engines; engines on their way never for more."""
    base = {"backlog_tokens": 400_000.0, "demand": 3_000.0, "per_engine": 1_000.0, "ready": 2,
            "pending": 1, "pending_ready_in_s": 60.0, "startup_s": STARTUP}  # fmt: skip
    k0 = drain_steps(**base)  # type: ignore[arg-type]
    assert k0 > 0
    for key, more in (("backlog_tokens", 800_000.0), ("demand", 4_000.0), ("pending_ready_in_s", 110.0)):
        assert drain_steps(**{**base, key: more}) >= k0  # type: ignore[arg-type]
    for key, fewer in (("pending", 3), ("pending_ready_in_s", 0.0), ("per_engine", 2_000.0)):
        assert drain_steps(**{**base, key: fewer}) <= k0  # type: ignore[arg-type]


def test_drain_steps_without_a_usable_rate_orders_nothing() -> None:
    assert drain_steps(1e6, 1e3, 0.0, 1, 0, 0.0, STARTUP) == 0
    assert drain_steps(1e6, math.nan, 1e3, 1, 0, 0.0, STARTUP) == 0


def test_a_backlog_that_drains_before_a_new_engine_could_serve_orders_none() -> None:
    """Two engines 1 s of queue behind each (100,000 tokens at 0.01 ms/token: 1,050 ms TTFT, over the
    500 ms target): the load policy alone adds 3. With 1,000 prompt tokens/s arriving against the
    2 x 100,000 tokens/s they serve, the queue drains in about a second: none is ordered."""
    workers = [worker(0, q=100_000), worker(1, q=100_000)]
    plain = load_policy("prefill", snap("prefill", workers), reps(2), 2, EST, PolicyConfig(), NOW)
    assert plain.reason is Reason.SCALE_UP and plain.target == 5
    calm = Backlog(demand_tok_per_s=1_000.0, pending_ready_in_s=STARTUP)
    got = load_policy("prefill", snap("prefill", workers), reps(2), 2, EST, PolicyConfig(), NOW, backlog=calm)
    assert got.target == 2 and got.diagnostics["drain_steps"] == 0.0
    assert got.diagnostics["per_engine_tok_per_s"] == pytest.approx(100_000.0)


def test_an_overload_orders_what_drains_it_not_what_spreads_it_at_once() -> None:
    """Demand above the two engines' 200,000 tokens/s: the backlog grows until new engines serve;
    the scale-up is what serves the demand and drains the rest within a startup, capped by what the
    load policy asks (spreading the queue at once)."""
    workers = [worker(0, q=100_000), worker(1, q=100_000)]
    over = Backlog(demand_tok_per_s=250_000.0, pending_ready_in_s=STARTUP)
    cfg = PolicyConfig(startup_s=STARTUP)
    got = load_policy("prefill", snap("prefill", workers), reps(2), 2, EST, cfg, NOW, backlog=over)
    expected = drain_steps(200_000.0, 250_000.0, 100_000.0, 2, 0, STARTUP, STARTUP)
    assert expected >= 1
    assert got.target == 2 + min(expected, 3)
    # the reference planner has no such cap
    ref = PolicyConfig(reference_compat=True)
    assert (
        load_policy("prefill", snap("prefill", workers), reps(2), 2, EST, ref, NOW, backlog=over).target == 3
    )


def test_drain_steps_is_bounded_without_a_startup_or_with_a_crawling_engine() -> None:
    """No startup (engines serve when ordered) or an engine that serves a token a minute: an answer,
    at once (the count was once searched one engine at a time, forever at ``startup_s`` 0)."""
    assert drain_steps(1e6, 1e3, 500.0, 1, 0, 0.0, 0.0) == 1
    assert drain_steps(1e6, 3e3, 500.0, 1, 0, 0.0, 0.0) == 5  # what the demand needs beyond the fleet
    mu, d = 1.0 / 60.0, 1.0
    k = drain_steps(1e9, d, mu, 1, 0, STARTUP, STARTUP)
    left = 1e9 + (d - mu) * STARTUP  # what the one engine leaves by the time k more serve
    assert (mu * (1 + k) - d) * STARTUP >= left > (mu * k - d) * STARTUP  # the fewest that drain it
