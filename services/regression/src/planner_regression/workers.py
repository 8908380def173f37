"""Per-worker state kept by the regression service, and the O(1) per-message ingest.

The hot path only decodes and stores: the latest message of each worker (its load picture) and its
last few real passes (wall_time > 0) awaiting the next fit. Liveness is counted, not timed: a tick
compares a worker's message count with the count it saw last time, so no clock is read per message.
"""

from __future__ import annotations

from collections import deque

from planner_proto import ForwardPassMetrics, WorkerLoadSample


class WorkerTrack:
    """What the service knows about one worker of one component."""

    __slots__ = (
        "engine_id",
        "last_seen_s",
        "latest",
        "pending",
        "received",
        "sample",
        "seen_count",
        "worker_id",
    )

    def __init__(self, worker_id: str, engine_id: str, max_pending: int) -> None:
        self.worker_id = worker_id
        """Shown in the snapshot (``{engine_id}-dp{rank}`` for data-parallel ranks above 0)."""
        self.engine_id = engine_id
        """The subject's worker token: the key of the engine in ``planner_engines``."""
        self.latest: ForwardPassMetrics | None = None
        self.sample: WorkerLoadSample | None = None
        self.pending: deque[ForwardPassMetrics] = deque(maxlen=max_pending)
        self.received = 0
        self.seen_count = 0
        self.last_seen_s = 0.0

    def take_sample(self, sample: WorkerLoadSample) -> None:
        self.sample = sample
        self.received += 1

    def mark_seen(self, now_s: float) -> None:
        """Called once per tick: a worker that sent anything since the last tick was seen now."""
        if self.received != self.seen_count:
            self.seen_count = self.received
            self.last_seen_s = now_s


def worker_key(subject: str, dp_rank: int) -> str:
    """Tracks are keyed by subject; data-parallel ranks sharing one subject get their own track."""
    return subject if dp_rank == 0 else f"{subject}#{dp_rank}"


def new_track(subject: str, dp_rank: int, max_pending: int) -> WorkerTrack:
    """A track for the worker of an ``...fpm.{component}.{worker_id}`` / ``...load...`` subject."""
    engine_id = subject.rsplit(".", 1)[-1]
    wid = engine_id if dp_rank == 0 else f"{engine_id}-dp{dp_rank}"
    return WorkerTrack(wid, engine_id, max_pending)


def take_pending(
    tracks: list[WorkerTrack], per_worker: int, budget: int
) -> list[tuple[WorkerTrack, list[ForwardPassMetrics]]]:
    """Split the per-tick fit budget over the workers with new passes; newest passes first kept.
    Everything not taken is discarded (it still updated the worker's load picture)."""
    ready = [t for t in tracks if t.pending]
    if not ready:
        return []
    share = max(1, min(per_worker, budget // len(ready)))
    out: list[tuple[WorkerTrack, list[ForwardPassMetrics]]] = []
    left = budget
    for t in ready:
        n = min(share, len(t.pending), left)
        if n > 0:
            passes = list(t.pending)[-n:]
            out.append((t, passes))
            left -= n
        t.pending.clear()
    return out
