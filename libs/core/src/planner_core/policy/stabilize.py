"""Kubernetes-HPA-style stabilisation and rate limits, with windows measured between timestamps.

Going up, take the smallest recommendation of the up window; going down, the largest of the down
window (a recommendation may carry its own hold instead, which the caller may cap); never past the
current count in the other direction (no flipping). Rate limits cap how far the count can move
within ``rate_period_s``, from the count at the start of that period.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from planner_core.policy.config import PolicyConfig
from planner_core.policy.types import Recommendation, ScaleEvent


def prune_recommendations(
    recs: Sequence[Recommendation], cfg: PolicyConfig, now_s: float
) -> tuple[Recommendation, ...]:
    keep_s = max(cfg.up_window_s, cfg.down_window_s)
    return tuple(r for r in recs if now_s - r.at_s <= keep_s and r.at_s <= now_s)


def prune_events(events: Sequence[ScaleEvent], cfg: PolicyConfig, now_s: float) -> tuple[ScaleEvent, ...]:
    return tuple(e for e in events if now_s - e.at_s < cfg.rate_period_s and e.at_s <= now_s)


def stabilize(
    component: str,
    recommendation: int,
    current: int,
    history: Sequence[Recommendation],
    cfg: PolicyConfig,
    now_s: float,
    hold_cap_s: float | None = None,
    plain_hold_s: float | None = None,
) -> int:
    """``history`` must already hold this tick's recommendation. ``hold_cap_s``: a recommendation
    that carries its own hold counts for at most this long (None: its whole hold);
    ``plain_hold_s``: how long one that carries none holds (None: ``down_window_s``)."""
    mine = [r for r in history if r.component == component]
    if recommendation > current:
        window = [r.replicas for r in mine if now_s - r.at_s <= cfg.up_window_s] or [recommendation]
        return max(current, min(window))
    if recommendation < current:
        window = [
            r.replicas for r in mine if now_s - r.at_s <= _held_for(r, cfg, hold_cap_s, plain_hold_s)
        ] or [recommendation]
        return min(current, max(window))
    return current


def _held_for(
    r: Recommendation, cfg: PolicyConfig, hold_cap_s: float | None, plain_hold_s: float | None
) -> float:
    if r.hold_s is None:
        return cfg.down_window_s if plain_hold_s is None else plain_hold_s
    return r.hold_s if hold_cap_s is None else min(r.hold_s, hold_cap_s)


def rate_limit(
    component: str, target: int, current: int, events: Sequence[ScaleEvent], cfg: PolicyConfig
) -> int:
    """Cap the move so that within ``rate_period_s`` the count grows by at most
    max(up_limit_replicas, up_limit_percent of the start count), and shrinks likewise."""
    mine = [e for e in events if e.component == component]
    if target > current:
        added = sum(max(0, e.to_replicas - e.from_replicas) for e in mine)
        start = max(current - added, 0)
        allowed = start + max(cfg.up_limit_replicas, math.ceil(start * cfg.up_limit_percent / 100.0), 1)
        return max(current, min(target, allowed))
    if target < current:
        removed = sum(max(0, e.from_replicas - e.to_replicas) for e in mine)
        start = current + removed
        allowed = start - max(cfg.down_limit_replicas, math.floor(start * cfg.down_limit_percent / 100.0), 1)
        return min(current, max(target, allowed))
    return current
