"""Requests each worker holds, from the latest ComponentSnapshots: what a scale-down picks the
least-loaded workers (circus) or pods (Kubernetes) by."""

from __future__ import annotations

import time

from planner_proto import ComponentSnapshot


class RecentLoads:
    """Running plus waiting requests per worker id, each forgotten ``max_age_s`` after the snapshot
    that reported it (a stale figure must not decide which worker is drained)."""

    def __init__(self, max_age_s: float) -> None:
        self.max_age_s = max_age_s
        self._seen: dict[str, tuple[float, int]] = {}

    async def on_snapshot(self, snap: ComponentSnapshot, subject: str) -> None:
        now = time.monotonic()
        for w in snap.workers:
            self._seen[w.worker_id] = (now, w.running_requests + w.waiting_requests)

    def current(self) -> dict[str, int]:
        now = time.monotonic()
        self._seen = {k: v for k, v in self._seen.items() if now - v[0] <= self.max_age_s}
        return {k: n for k, (_, n) in self._seen.items()}
