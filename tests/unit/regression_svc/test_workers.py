"""Per-worker tracks: the fit budget split, liveness by message count, data-parallel ranks."""

from __future__ import annotations

import pytest

from planner_proto import ForwardPassMetrics
from planner_regression.workers import WorkerTrack, new_track, take_pending, worker_key


def track_with(n: int, name: str = "w", max_pending: int = 8) -> WorkerTrack:
    t = WorkerTrack(name, name, max_pending)
    for i in range(n):
        t.pending.append(ForwardPassMetrics(counter_id=i, wall_time=0.01))
    return t


@pytest.mark.parametrize(
    ("pending", "per_worker", "budget", "taken"),
    [
        ([8, 8, 8], 4, 100, [4, 4, 4]),  # per-worker cap
        ([8, 8, 8], 8, 9, [3, 3, 3]),  # budget 9 over 3 workers: 3 each
        ([8, 8, 8, 8], 8, 2, [1, 1, 0, 0]),  # budget below the worker count: 1 each until spent
        ([2, 0, 8], 4, 100, [2, 0, 4]),  # fewer pending than the share; idle worker skipped
    ],
)
def test_budget_split(pending: list[int], per_worker: int, budget: int, taken: list[int]) -> None:
    tracks = [track_with(n, f"w{i}") for i, n in enumerate(pending)]
    got = {t.worker_id: len(p) for t, p in take_pending(tracks, per_worker, budget)}
    assert [got.get(f"w{i}", 0) for i in range(len(pending))] == taken
    assert all(not t.pending for t in tracks)  # the rest is discarded, not carried over


def test_newest_passes_are_kept() -> None:
    t = track_with(8)
    [(_, passes)] = take_pending([t], 3, 100)
    assert [p.counter_id for p in passes] == [5, 6, 7]


def test_liveness_counts_messages_not_clock() -> None:
    t = WorkerTrack("w", "w", 4)
    t.mark_seen(10.0)
    assert t.last_seen_s == 0.0  # nothing received yet
    t.received += 1
    t.mark_seen(11.0)
    t.mark_seen(12.0)  # no new message since: still seen at 11
    assert t.last_seen_s == 11.0


def test_data_parallel_ranks_get_their_own_track() -> None:
    subject = "planner.ns.fpm.decode.eng-1"
    assert worker_key(subject, 0) == subject and worker_key(subject, 2) == subject + "#2"
    t = new_track(subject, 2, 4)
    assert t.worker_id == "eng-1-dp2" and t.engine_id == "eng-1"
