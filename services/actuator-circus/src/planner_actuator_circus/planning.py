"""Pure choices of the circus actuator: GPU placement, budget check, which worker to drain."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from planner_actuator_circus.state import Phase, WorkerRecord


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


def pick_victims(
    active: list[WorkerRecord],
    count: int,
    ready: set[str],
    in_flight: Mapping[str, int],
) -> list[WorkerRecord]:
    """The ``count`` workers cheapest to remove: not yet ready first (nothing to drain), then the
    fewest in-flight requests (unknown load counts as 0), then the newest (highest start time/index)."""
    order = sorted(
        active,
        key=lambda w: (w.name in ready, in_flight.get(w.name, 0), -w.started_at_s, -w.index),
    )
    return order[: max(0, count)]
