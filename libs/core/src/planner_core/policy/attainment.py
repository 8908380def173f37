"""How much of a demand a fleet serves, and the fewest replicas that serve the target share.

The demand is a set of equally likely scenarios (the predictor's :class:`~planner_proto.demand.
DemandForecast` gives them per step ahead): with capacity C tokens/s and scenario demands D_i, the
share of the demand served within target is sum(min(D_i, C)) / sum(D_i) (demand beyond capacity
waits past its target). The predictive floor picks the fewest replicas whose predicted share reaches
the target attainment.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


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
) -> tuple[int, dict[int, float]]:
    """Fewest replicas (in [minimum, maximum]) whose predicted attainment reaches ``target``, and the
    predicted attainment of the candidates around it (for the decision's diagnostics).

    ``pooled_headroom`` h: ``k`` replicas behind a load-balancing router serve
    ``per_replica x (k - h sqrt(k))`` (square-root staffing: the spare capacity that absorbs the
    fluctuation of the running load grows with the square root of the fleet, not with the fleet; one
    replica keeps the share h spare, nine keep h / 3 each)."""
    if per_replica <= 0 or not math.isfinite(per_replica):
        return maximum, {}

    def att(k: int) -> float:
        return predicted_attainment(per_replica * pooled_capacity(k, pooled_headroom), demands)

    n = minimum
    while n < maximum and att(n) < target:
        n += 1
    candidates = {k: att(k) for k in range(max(minimum, n - 2), min(maximum, n + 2) + 1)}
    return n, candidates
