"""GPU budget: the reference's proportional cut for the final targets, and a transition check so that
the GPUs held while old replicas drain and new ones start never exceed the budget (its issue 12428)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from planner_core.policy.types import DECODE, PREFILL
from planner_proto.decision import ComponentReplicas


def apply_budget_pd(p: int, d: int, g_p: int, g_d: int, budget: int, min_replicas: int) -> tuple[int, int]:
    """The reference planner's formula for a prefill/decode pair over budget ``budget`` GPUs (-1 = none)."""
    total = p * g_p + d * g_d
    if budget < 0 or total <= budget:
        return p, d
    if budget < min_replicas * (g_p + g_d):
        return 0, 0
    k = budget / total
    p2 = max(min_replicas, min((budget - min_replicas * g_d) // g_p, math.floor(p * k)))
    d2 = max(min_replicas, (budget - p2 * g_p) // g_d)
    return p2, d2


def apply_budget(
    targets: Mapping[str, int], gpus: Mapping[str, int], budget: int, min_replicas: int
) -> dict[str, int]:
    """Fit the targets into ``budget``: prefill/decode by the reference formula, anything else (agg)
    by cutting the largest GPU holder one replica at a time."""
    out = dict(targets)
    if budget < 0:
        return out
    if PREFILL in out and DECODE in out:
        others = sum(n * gpus[c] for c, n in out.items() if c not in (PREFILL, DECODE))
        out[PREFILL], out[DECODE] = apply_budget_pd(
            out[PREFILL], out[DECODE], gpus[PREFILL], gpus[DECODE], max(budget - others, 0), min_replicas
        )
    while sum(n * gpus[c] for c, n in out.items()) > budget:
        # other components, or the pair when the formula's floors leave it over
        comp = max((c for c in out if out[c] > 0), key=lambda c: out[c] * gpus[c])
        out[comp] -= 1
    return out


@dataclass(frozen=True, kw_only=True)
class Gated:
    targets: dict[str, int]
    gated: frozenset[str]
    """Components whose increase was held back (or cut) to stay within budget during the transition."""
    held_gpus_after: int


def held_gpus(target: int, r: ComponentReplicas, gpus: int) -> int:
    """GPUs a component holds right after ``target`` is issued: removed replicas keep theirs while
    draining, new ones hold theirs from the moment they are scheduled."""
    active = r.ready + r.pending
    return (max(target, active) + r.draining) * gpus


def issuable_targets(
    desired: Mapping[str, int],
    replicas: Mapping[str, ComponentReplicas],
    gpus: Mapping[str, int],
    budget: int,
) -> Gated:
    """The targets that can be issued now without the GPUs held ever exceeding ``budget``.

    Decreases are always issuable (they hold no more GPUs). Increases get the headroom left after
    everything currently held, one replica at a time round-robin so no component starves. The rest is
    issued on a later tick, when draining replicas have released their GPUs.
    """
    active = {c: replicas[c].ready + replicas[c].pending if c in replicas else 0 for c in desired}
    draining = {c: replicas[c].draining if c in replicas else 0 for c in desired}
    out = {c: min(t, active[c]) for c, t in desired.items()}
    held = sum((active[c] + draining[c]) * gpus[c] for c in desired)
    if budget < 0:
        return Gated(targets=dict(desired), gated=frozenset(), held_gpus_after=held)
    wanting = {c: desired[c] - active[c] for c in desired if desired[c] > active[c]}
    progress = True
    while progress and wanting:
        progress = False
        for c in sorted(wanting):
            if wanting[c] > 0 and held + gpus[c] <= budget:
                out[c] += 1
                held += gpus[c]
                wanting[c] -= 1
                progress = True
        wanting = {c: n for c, n in wanting.items() if n > 0}
    # a component whose own replicas already exceed the target but not yet issued is fine; gated are
    # those still wanting more
    return Gated(targets=out, gated=frozenset(wanting), held_gpus_after=held)
