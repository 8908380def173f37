"""How much of a demand a fleet serves, and the fewest replicas that serve the target share.

The demand is a set of equally likely scenarios (the predictor's :class:`~planner_proto.demand.
DemandForecast` gives them per step ahead): with capacity C tokens/s and scenario demands D_i, the
share of the demand served within target is sum(min(D_i, C)) / sum(D_i) (demand beyond capacity
waits past its target). The predictive floor picks the fewest replicas whose predicted share reaches
the target attainment.

Decode can be sized by its running requests instead (:func:`running_attainment`): there, an
overflow is not the excess's loss alone, since a batch beyond the ITL target's makes every running
request late. Prefill likewise by its queue (:func:`queued_attainment`): a scenario beyond the fleet
builds a backlog every later request waits behind, and below it the requests wait in the queue's tail.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from planner_core.policy.queueing import wait_tail_probability


@dataclass(frozen=True, slots=True)
class QueueTail:
    """One prefill engine's queue, for :func:`queued_within`: the wait a request may have (TTFT target
    less its own prefill), the mean service time (the mean prompt's share of a busy engine) and the variability
    ``c_a^2 + c_s^2`` of the tail (:func:`planner_core.policy.queueing.wait_tail_probability`)."""

    wait_ms: float
    service_ms: float
    variability: float


def predicted_attainment(capacity: float, demands: Sequence[float]) -> float:
    """Share of the demand served within target by ``capacity`` over the demand scenarios (1.0 when
    there is no demand). Per scenario with demand D, the part beyond capacity waits past its target:
    share served min(1, C / D). Queueing below capacity is in the capacity itself (a utilisation cap).
    """
    total = sum(max(d, 0.0) for d in demands)
    if total <= 0.0:
        return 1.0
    cap = max(capacity, 0.0)
    return sum(min(max(d, 0.0), cap) for d in demands) / total


def running_within(replicas: int, load: float, batch: float, variability: float = 1.0) -> float:
    """Probability that ``replicas`` decode engines of ``batch`` requests each at the ITL target hold
    the requests running under a load of ``load`` engines' worth (normal approximation of a count of
    mean ``load x batch`` and variance ``variability`` times it: the running requests of a fleet fed
    by Poisson arrivals are a Poisson count whatever their lengths)."""
    if load <= 0.0:
        return 1.0
    if replicas <= 0:
        return 0.0
    x = (replicas - load) * math.sqrt(batch / (max(variability, 1e-12) * load))
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def running_attainment(
    replicas: int, per_replica: float, demands: Sequence[float], batch: float, variability: float = 1.0
) -> float:
    """Share of the demand served within target by ``replicas`` decode engines over the demand
    scenarios when an overflow of the running requests makes every one of them late (the whole
    batch's ITL rises, not only the excess's): each scenario counts by its demand times the
    probability :func:`running_within` that the engines hold its running requests."""
    total = sum(max(d, 0.0) for d in demands)
    if total <= 0.0:
        return 1.0
    return (
        sum(d * running_within(replicas, d / per_replica, batch, variability) for d in demands if d > 0.0)
        / total
    )


def queued_within(replicas: int, load: float, tail: QueueTail) -> float:
    """Share of the requests whose first token is in time when ``replicas`` prefill engines take a
    load of ``load`` engines' worth (prompt tokens/s over one engine's back-to-back rate): below the
    fleet, those whose wait stays within ``tail.wait_ms`` at utilisation ``load / replicas`` of
    engines sharing the load through a load-aware router (one queue of ``replicas`` servers); at or
    beyond it none (the backlog grows through the sample and every later request waits behind it)."""
    if load <= 0.0:
        return 1.0
    if replicas <= 0 or load >= replicas or tail.wait_ms <= 0.0:
        return 0.0
    return 1.0 - wait_tail_probability(
        load / replicas, tail.wait_ms, tail.service_ms, tail.variability, servers=replicas
    )


def queued_attainment(replicas: int, per_replica: float, demands: Sequence[float], tail: QueueTail) -> float:
    """Share of the demand served within target by ``replicas`` prefill engines of ``per_replica``
    prompt tokens/s each (back to back) over the demand scenarios: each scenario counts by its demand
    times the share :func:`queued_within` of its requests in time. The forecast's spread and the
    queue's tail are asked the target once, together."""
    total = sum(max(d, 0.0) for d in demands)
    if total <= 0.0:
        return 1.0
    return sum(d * queued_within(replicas, d / per_replica, tail) for d in demands if d > 0.0) / total


def pooled_capacity(k: int, headroom: float) -> float:
    """Replicas' worth of capacity ``k`` replicas offer when the fleet keeps ``headroom x sqrt(k)``
    spare (0 for no replica)."""
    return max(k - headroom * math.sqrt(k), 0.0) if k > 0 else 0.0


def fewest_replicas(
    per_replica: float,
    demands: Sequence[float],
    target: float,
    *,
    minimum: int = 0,
    maximum: int = 1024,
    pooled_headroom: float = 0.0,
    batch: float = math.nan,
    variability: float = 1.0,
    tail: QueueTail | None = None,
) -> tuple[int, dict[int, float]]:
    """Fewest replicas (in [minimum, maximum]) whose predicted attainment reaches ``target``, and the
    predicted attainment of the candidates around it (for the decision's diagnostics).

    ``pooled_headroom`` h: ``k`` replicas behind a load-balancing router serve
    ``per_replica x (k - h sqrt(k))`` (square-root staffing: the spare capacity that absorbs the
    fluctuation of the running load grows with the square root of the fleet, not with the fleet; one
    replica keeps the share h spare, nine keep h / 3 each).

    ``batch`` (decode, when known): the attainment is :func:`running_attainment` over engines of
    ``batch`` requests at the ITL target instead (the running requests' fluctuation is in the model;
    ``pooled_headroom`` is not used).

    ``tail`` (prefill, when sized by its queue): the attainment is :func:`queued_attainment` with
    ``per_replica`` one engine's back-to-back rate (``pooled_headroom`` is not used)."""
    if per_replica <= 0 or not math.isfinite(per_replica):
        return maximum, {}

    running = math.isfinite(batch) and batch > 0.0

    def att(k: int) -> float:
        if tail is not None:
            return queued_attainment(k, per_replica, demands, tail)
        if running:
            return running_attainment(k, per_replica, demands, batch, variability)
        return predicted_attainment(per_replica * pooled_capacity(k, pooled_headroom), demands)

    seen: dict[int, float] = {}

    def value(k: int) -> float:
        if k not in seen:
            seen[k] = att(k)
        return seen[k]

    def met(k: int) -> bool:
        return value(k) >= target

    # the attainment grows with the fleet: gallop up from the minimum, then halve the last step (a
    # fleet of hundreds is sized in a dozen evaluations, not hundreds)
    lo, step = minimum, 1  # lo: the largest fleet known short (or the minimum, unchecked)
    if met(lo) or lo >= maximum:
        n = lo
    else:
        hi = min(lo + step, maximum)
        while hi < maximum and not met(hi):
            lo, step = hi, step * 2
            hi = min(lo + step, maximum)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if met(mid) else (mid, hi)
        n = hi
    candidates = {k: value(k) for k in range(max(minimum, n - 2), min(maximum, n + 2) + 1)}
    return n, candidates
