"""A backlog sizes the load policy's scale-up by its drain time: engines that would start after the
backlog drained are not ordered, the pending ones count from when they are ready. Prefill's backlog
is its queued prompt tokens, each engine's its own (an engine ordered now takes none of it); decode's
the output of the requests waiting for admission."""

from __future__ import annotations

import math
from collections.abc import Callable

import msgspec
import pytest

from planner_core.policy import PolicyConfig, load_policy
from planner_core.policy.load import Backlog, drain_steps, own_queue_steps
from planner_proto.decision import Reason
from planner_proto.load import WorkerLoad

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
        # decode in the second surge (``surges`` at knob 0.9, 1,330 s): 716k output tokens waiting, two
        # engines, five on their way; the seven drain it within a startup of an engine ordered now
        (716_000.0, 50_000.0, 11_500.0, 2, 5, 110.0),
    ],
)
def test_drain_steps_orders_the_fewest_that_drain_the_backlog_within_a_startup_of_arriving(
    q: float, d: float, mu: float, ready: int, pending: int, pending_in: float
) -> None:
    k = drain_steps(q, d, mu, ready, pending, pending_in, STARTUP)
    steady = max(0, math.ceil(d / mu - ready - pending - 1e-9))
    assert k >= steady  # the demand alone needs these
    # k drains what is left within one more startup (to the integration step) ...
    assert left_after(k, q, d, mu, ready, pending, pending_in) <= d * 0.2 + 1e-6
    if k > steady:
        # ... and k - 1 does not
        assert left_after(k - 1, q, d, mu, ready, pending, pending_in) > 0.0


STEPS = pytest.mark.parametrize("steps", [drain_steps, own_queue_steps], ids=["shared", "own"])


@STEPS
def test_drain_steps_is_monotone(steps: Callable[..., int]) -> None:
    """More backlog or more demand never asks for fewer engines; engines on their way never for more."""
    base = {"backlog_tokens": 400_000.0, "demand": 3_000.0, "per_engine": 1_000.0, "ready": 2,
            "pending": 1, "pending_ready_in_s": 60.0, "startup_s": STARTUP}  # fmt: skip
    k0 = steps(**base)
    assert k0 > 0
    for key, more in (("backlog_tokens", 800_000.0), ("demand", 4_000.0), ("pending_ready_in_s", 110.0)):
        assert steps(**{**base, key: more}) >= k0
    for key, fewer in (("pending", 3), ("pending_ready_in_s", 0.0), ("per_engine", 2_000.0)):
        assert steps(**{**base, key: fewer}) <= k0


@STEPS
def test_drain_steps_without_a_usable_rate_orders_nothing(steps: Callable[..., int]) -> None:
    assert steps(1e6, 1e3, 0.0, 1, 0, 0.0, STARTUP) == 0
    assert steps(1e6, math.nan, 1e3, 1, 0, 0.0, STARTUP) == 0


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


def test_an_overload_orders_what_serves_the_arrivals_not_what_spreads_the_queue_at_once() -> None:
    """Demand above the two engines' 200,000 tokens/s: their queues grow until new engines serve, and
    the new engines take none of them; the scale-up is what serves the arrivals from then on
    (:func:`own_queue_steps`), capped by what the load policy asks (spreading the queue at once)."""
    workers = [worker(0, q=100_000), worker(1, q=100_000)]
    over = Backlog(demand_tok_per_s=250_000.0, pending_ready_in_s=STARTUP)
    cfg = PolicyConfig(startup_s=STARTUP)
    got = load_policy("prefill", snap("prefill", workers), reps(2), 2, EST, cfg, NOW, backlog=over)
    expected = own_queue_steps(200_000.0, 250_000.0, 100_000.0, 2, 0, STARTUP, STARTUP)
    assert expected == 3  # the two are still working through their queues when the three serve
    assert got.target == 2 + min(expected, 3)
    # the reference planner has no such cap
    ref = PolicyConfig(reference_compat=True)
    assert (
        load_policy("prefill", snap("prefill", workers), reps(2), 2, EST, ref, NOW, backlog=over).target == 3
    )


def own_queues(
    k: int, q: float, d: float, mu: float, ready: int, pending: int, pending_in: float
) -> tuple[float, float]:
    """Engines that each work through their own queue, new requests routed to the one with the least
    queued (an independent integration, 0.05 s steps): ``ready`` engines sharing the backlog ``q``
    evenly, ``pending`` more from ``pending_in``, ``k`` ordered now from ``STARTUP``. Returns what
    the ``ready`` engines still hold when the ``k`` serve, and the prompt tokens routed to one of them
    still working through its queue from then until they have all worked through theirs."""
    dt, t = 0.05, 0.0
    queues = [q / ready] * ready
    held, behind = 0.0, 0.0
    while t < STARTUP or (any(queues[:ready]) and t < 20 * STARTUP):
        n = ready + (pending if t >= pending_in else 0) + (k if t >= STARTUP else 0)
        while len(queues) < n:
            queues.append(0.0)
        if t < STARTUP:
            held = sum(queues[:ready])
        i = queues.index(min(queues))
        if t >= STARTUP and i < ready and queues[i] > 0.0:
            behind += d * dt
        queues[i] += d * dt
        queues = [max(0.0, x - mu * dt) for x in queues]
        t += dt
    return held, behind


@pytest.mark.parametrize(
    ("q", "d", "mu", "ready", "pending", "pending_in"),
    [
        (30_000.0, 300.0, 200.0, 1, 1, 30.0),  # the pending engine arrives, the first is still busy
        (2_000_000.0, 5_000.0, 1_000.0, 4, 0, STARTUP),  # the collapse: a deep backlog, demand above
        (2_000_000.0, 5_000.0, 1_000.0, 4, 3, 60.0),  # ... with three engines already on their way
        (50_000.0, 900.0, 1_000.0, 1, 0, STARTUP),  # the one engine drains it at 100 tokens/s: 500 s
        (9_710_000.0, 195_000.0, 56_200.0, 1, 6, 60.0),  # the recorded step (below): none to order
    ],
)
def test_own_queue_steps_orders_the_fewest_that_keep_arrivals_off_the_queued_engines(
    q: float, d: float, mu: float, ready: int, pending: int, pending_in: float
) -> None:
    """The queued engines are still working through their queues when an engine ordered now serves:
    with the engines ordered, no request arriving from then on is routed behind those queues (to
    the integration step); with one fewer, some are."""
    k = own_queue_steps(q, d, mu, ready, pending, pending_in, STARTUP)
    held, behind = own_queues(k, q, d, mu, ready, pending, pending_in)
    assert held > 0.0
    assert behind <= d * 0.05 * 2
    if k > 0:
        assert own_queues(k - 1, q, d, mu, ready, pending, pending_in)[1] > d * 0.05 * 2


def test_own_queue_steps_orders_for_the_demand_alone_once_the_queues_are_gone() -> None:
    """The queued engines work through their queues before an engine ordered now could serve: only
    what the demand needs beyond the fleet (none here; two with the demand doubled and more)."""
    assert own_queues(0, 1_000.0, 100.0, 200.0, 1, 0, STARTUP)[0] == 0.0
    assert own_queue_steps(1_000.0, 100.0, 200.0, 1, 0, STARTUP, STARTUP) == 0
    assert own_queue_steps(0.0, 1_000.0, 200.0, 2, 1, 30.0, STARTUP) == 2


def test_the_recorded_prefill_pile_up_orders_no_engine_beyond_what_serves_the_arrivals() -> None:
    """The 4x step (``step-up``) at knob 0.9 (2026-11-28, 1,875 s into the run): one prefill engine
    with 9.71M prompt tokens queued, 195,000 arriving per second against 56,200 per engine, six more
    on their way. One more was ordered at every tick, up to 20 (the first tokens were no sooner: TTFT
    attainment over the second half hour 92.0 % either way, 1.77x against 1.33x the clairvoyant's
    GPU-hours). The six serve the arrivals while the first works through its queue: none is ordered,
    on the engines' own queues or on a shared one."""
    q, d, mu = 9.71e6, 195_000.0, 56_200.0
    assert drain_steps(q, d, mu, 1, 6, 60.0, STARTUP) == 0
    assert own_queue_steps(q, d, mu, 1, 6, 60.0, STARTUP) == 0
    workers = [worker(0, q=int(q))]
    cfg = PolicyConfig(startup_s=STARTUP, max_step_up=8)
    plain = load_policy("prefill", snap("prefill", workers), reps(1, 7), 7, EST, cfg, NOW)
    assert plain.reason is Reason.SCALE_UP
    recorded = Backlog(demand_tok_per_s=d, pending_ready_in_s=60.0)
    got = load_policy("prefill", snap("prefill", workers), reps(1, 7), 7, EST, cfg, NOW, backlog=recorded)
    assert got.target in (None, 7)


def test_drain_steps_is_bounded_without_a_startup_or_with_a_crawling_engine() -> None:
    """No startup (engines serve when ordered) or an engine that serves a token a minute: an answer,
    at once (the count was once searched one engine at a time, forever at ``startup_s`` 0)."""
    assert drain_steps(1e6, 1e3, 500.0, 1, 0, 0.0, 0.0) == 1
    assert drain_steps(1e6, 3e3, 500.0, 1, 0, 0.0, 0.0) == 5  # what the demand needs beyond the fleet
    mu, d = 1.0 / 60.0, 1.0
    k = drain_steps(1e9, d, mu, 1, 0, STARTUP, STARTUP)
    left = 1e9 + (d - mu) * STARTUP  # what the one engine leaves by the time k more serve
    assert (mu * (1 + k) - d) * STARTUP >= left > (mu * k - d) * STARTUP  # the fewest that drain it


def decode_worker(i: int, running: int, waiting: int) -> WorkerLoad:
    """A decode engine with ``running`` requests of 500 KV tokens each and ``waiting`` more queued
    for admission (the cache of 160,000 tokens holds 320)."""
    w = WorkerLoad(
        worker_id=f"w{i}",
        last_seen_s=NOW,
        running_requests=running,
        waiting_requests=waiting,
        scheduled_decode_kv_tokens=500 * running,
        queued_decode_kv_tokens=500 * waiting,
    )
    return msgspec.structs.replace(w, est_itl_ms=EST.itl_ms(None, w.scheduled_decode_kv_tokens))  # type: ignore[arg-type]


def decode_backlog(demand: float, rate: float, osl: float, ready_in: float = STARTUP) -> Backlog:
    return Backlog(
        demand_tok_per_s=demand,
        pending_ready_in_s=ready_in,
        per_engine_tok_per_s=rate,
        tokens_per_request=osl,
    )


FULL = [decode_worker(0, running=300, waiting=300), decode_worker(1, running=300, waiting=300)]
"""Two decode engines, each full and with as many requests again waiting for admission."""


def test_a_decode_backlog_that_drains_before_a_new_engine_could_serve_orders_none() -> None:
    """The waiting requests overflow the cache twice over: spread over more engines at once, the
    load policy alone adds engines. They ask for 600 x 200 output tokens; the two engines give
    2 x 6,000 tokens/s against 2,000 arriving, so the backlog is gone in 12 s: none is ordered."""
    cfg = PolicyConfig(startup_s=STARTUP)
    plain = load_policy("decode", snap("decode", FULL), reps(2), 2, EST, cfg, NOW)
    assert plain.reason is Reason.SCALE_UP and plain.target is not None and plain.target > 2
    calm = decode_backlog(demand=2_000.0, rate=6_000.0, osl=200.0)
    got = load_policy("decode", snap("decode", FULL), reps(2), 2, EST, cfg, NOW, backlog=calm)
    assert got.target == 2 and got.diagnostics["drain_steps"] == 0.0
    assert got.diagnostics["backlog_tokens"] == pytest.approx(600 * 200.0)


def test_a_decode_overload_orders_what_drains_it_within_a_startup() -> None:
    """Output demand beyond the two engines: what serves it and drains the waiting requests within a
    startup of arriving, no more than the load policy asks."""
    cfg = PolicyConfig(startup_s=STARTUP)
    plain = load_policy("decode", snap("decode", FULL), reps(2), 2, EST, cfg, NOW)
    over = decode_backlog(demand=14_000.0, rate=6_000.0, osl=200.0)
    got = load_policy("decode", snap("decode", FULL), reps(2), 2, EST, cfg, NOW, backlog=over)
    expected = drain_steps(600 * 200.0, 14_000.0, 6_000.0, 2, 0, STARTUP, STARTUP)
    assert expected >= 1
    assert plain.target is not None
    assert got.target == 2 + min(expected, plain.target - 2)
    # the reference planner has no such cap
    ref = PolicyConfig(reference_compat=True)
    assert load_policy("decode", snap("decode", FULL), reps(2), 2, EST, ref, NOW, backlog=over).target == 3


def test_the_recorded_decode_pile_up_orders_one_engine_not_four() -> None:
    """The 3x step (``mid-step``) at knob 0.8 (2026-11-28, 1,980 s into the run): three decode engines full and
    1,331 requests waiting (700 output tokens each), a fourth engine ready in 50 s, 19,700 output
    tokens/s arriving against 6,160 per engine. The load policy spread the waiting requests over the
    fleet at once and ordered four more (then three and two: 13 engines where the instant oracle
    needs 4). The backlog drains 70 s after the fourth engine arrives: one more is worth its startup."""
    waiting = (444, 444, 443)
    workers = [decode_worker(i, running=300, waiting=w) for i, w in enumerate(waiting)]
    cfg = PolicyConfig(startup_s=STARTUP, max_step_up=8)
    plain = load_policy("decode", snap("decode", workers), reps(3, 4), 4, EST, cfg, NOW)
    assert plain.target is not None and plain.target >= 4 + 3
    recorded = decode_backlog(demand=19_700.0, rate=6_160.0, osl=700.0, ready_in=50.0)
    got = load_policy("decode", snap("decode", workers), reps(3, 4), 4, EST, cfg, NOW, backlog=recorded)
    assert got.target == 5
    assert left_after(1, 1_331 * 700.0, 19_700.0, 6_160.0, 3, 1, 50.0) == 0.0
    assert left_after(0, 1_331 * 700.0, 19_700.0, 6_160.0, 3, 1, 50.0) > 0.0


def test_requests_queued_for_prefill_count_in_decode_s_backlog_not_its_growth() -> None:
    """Each request queued for prefill comes to decode once prefilled, as fast as prefill works
    through its queue: work on its way, drained like the waiting requests. What that does to the
    waiting requests' growth is not demand that stays (it lasts as long as prefill's queue): a growth
    passed for decode is not read."""
    cfg = PolicyConfig(startup_s=STARTUP)
    calm = decode_backlog(demand=2_000.0, rate=6_000.0, osl=200.0)
    coming = Backlog(
        demand_tok_per_s=2_000.0,
        queue_growth_tok_per_s=40_000.0,
        pending_ready_in_s=STARTUP,
        per_engine_tok_per_s=6_000.0,
        tokens_per_request=200.0,
        upstream_tokens=3_000_000.0,
    )
    assert load_policy("decode", snap("decode", FULL), reps(2), 2, EST, cfg, NOW, backlog=calm).target == 2
    got = load_policy("decode", snap("decode", FULL), reps(2), 2, EST, cfg, NOW, backlog=coming)
    assert got.diagnostics["backlog_demand_tok_per_s"] == pytest.approx(2_000.0)
    assert got.diagnostics["backlog_tokens"] == pytest.approx(600 * 200.0 + 3_000_000.0)
    expected = drain_steps(600 * 200.0 + 3_000_000.0, 2_000.0, 6_000.0, 2, 0, STARTUP, STARTUP)
    assert expected >= 1 and got.target == 2 + expected


def test_a_decode_batch_over_target_with_nothing_waiting_orders_what_the_arrivals_need() -> None:
    """Two engines over the ITL target with no request waiting for admission (a burst of prefilled
    requests in their batches): the load policy alone adds engines, which serve a startup later,
    when the batch has long finished (a request lasts its output's passes, seconds). With the
    arrivals within the two engines' rate none is ordered; with arrivals beyond it, what they need and
    what queues until those serve."""
    busy = [decode_worker(0, running=300, waiting=0), decode_worker(1, running=300, waiting=0)]
    cfg = PolicyConfig(startup_s=STARTUP)
    plain = load_policy("decode", snap("decode", busy), reps(2), 2, EST, cfg, NOW)
    assert plain.reason is Reason.SCALE_UP
    calm = decode_backlog(demand=10_000.0, rate=6_000.0, osl=200.0)
    got = load_policy("decode", snap("decode", busy), reps(2), 2, EST, cfg, NOW, backlog=calm)
    assert got.target == 2 and got.diagnostics["drain_steps"] == 0.0
    more = decode_backlog(demand=20_000.0, rate=6_000.0, osl=200.0)
    got = load_policy("decode", snap("decode", busy), reps(2), 2, EST, cfg, NOW, backlog=more)
    expected = drain_steps(0.0, 20_000.0, 6_000.0, 2, 0, STARTUP, STARTUP)
    assert expected == 3  # two for the arrivals, one for what queues before they serve
    assert got.target == 2 + expected


def test_decode_engines_over_target_are_held_while_no_engine_ordered_now_would_help() -> None:
    """Two engines over the ITL target, 600 requests waiting, the backlog gone before an engine
    ordered now serves: none is ordered, and none may be given back while they are over target
    (``backlog_hold``: the predictive floor's count does not take the fleet down under it). Without
    that hold, on the 4x step at knob 0.9 the floor took decode from 7 engines to 5 while their ITL
    was 56 ms against 50 and 1.7M output tokens waited: 63.5 % over the next five minutes."""
    cfg = PolicyConfig(startup_s=STARTUP)
    calm = decode_backlog(demand=2_000.0, rate=6_000.0, osl=200.0)
    got = load_policy("decode", snap("decode", FULL), reps(2), 2, EST, cfg, NOW, backlog=calm)
    assert (got.target, got.reason) == (2, Reason.NO_CHANGE) and got.diagnostics["backlog_hold"] == 1.0
    idle = [decode_worker(0, running=10, waiting=0), decode_worker(1, running=10, waiting=0)]
    got = load_policy("decode", snap("decode", idle), reps(2), 2, EST, cfg, NOW, backlog=calm)
    assert "backlog_hold" not in got.diagnostics


def test_requests_waiting_on_a_fleet_that_fits_them_hold_no_decode_engine() -> None:
    """Requests wait for admission now and then at ordinary load (one engine's cache full for a
    pass). The drain caps a scale-up only: engines the ITL signal can give back (the waiting
    requests fit on fewer) go, whatever the backlog would say of demand against the floor's rate. A
    hold there kept 14 decode engines through the sinusoid's trough (floor 2-8) at 0.99."""
    workers = [decode_worker(i, running=20, waiting=50) for i in range(3)]
    cfg = PolicyConfig(startup_s=STARTUP)
    busy = decode_backlog(demand=5_000.0, rate=2_000.0, osl=2_000.0)
    got = load_policy("decode", snap("decode", workers), reps(3), 3, EST, cfg, NOW, backlog=busy)
    plain = load_policy("decode", snap("decode", workers), reps(3), 3, EST, cfg, NOW)
    assert plain.reason is Reason.SCALE_DOWN
    assert got.target == plain.target and "drain_steps" not in got.diagnostics
