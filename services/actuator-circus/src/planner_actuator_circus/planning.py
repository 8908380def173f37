"""Pure choices of the circus actuator: GPU placement, budget check, which worker to drain."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from planner_runtime.actuation.backend import pick_victims
from planner_runtime.actuation.records import Phase, WorkerRecord

__all__ = ["allocate", "budget_error", "free_gpus", "next_index", "pick_victims"]


def free_gpus(pool: Iterable[int], workers: Iterable[WorkerRecord]) -> list[int]:
    """GPUs of the pool held by no worker (draining workers still hold theirs)."""
    held = {g for w in workers for g in w.gpus}
    return [g for g in pool if g not in held]


def allocate(pool: Iterable[int], workers: Iterable[WorkerRecord], n: int) -> list[int] | None:
    """The first ``n`` free GPUs of the pool, or None when fewer are free (never over the pool)."""
    free = free_gpus(pool, workers)
    return free[:n] if len(free) >= n else None


def budget_error(
    targets: Mapping[str, int],
    gpus_per: Mapping[str, int],
    pool_size: int,
    others: Iterable[WorkerRecord],
) -> str:
    """Why ``targets`` cannot fit in the pool once drains end, or "" when they fit.

    ``others`` are the non-draining workers of components the decision does not name: they stay.
    E.g. targets prefill=3, decode=4 at 1 GPU each with a pool of 6: 7 > 6 -> error.
    """
    need = sum(n * gpus_per.get(c, 1) for c, n in targets.items())
    need += sum(len(w.gpus) for w in others if w.phase != Phase.DRAINING)
    if need > pool_size:
        return f"gpu_budget: the targets need {need} GPUs, the pool has {pool_size}"
    return ""


def next_index(used: Iterable[int]) -> int:
    """The smallest worker index not in use (names stay short and reusable)."""
    taken = set(used)
    k = 0
    while k in taken:
        k += 1
    return k
