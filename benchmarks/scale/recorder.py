"""What the harness hears on the bus: every ComponentSnapshot (arrival time, size, worker ages) and
every ScalingDecision."""

from __future__ import annotations

import json
import time
from collections import defaultdict

import msgspec

from planner_proto import ComponentSnapshot


class Recorder:
    def __init__(self) -> None:
        self.snaps: dict[str, list[tuple[float, int, int, float]]] = defaultdict(list)
        """component -> (monotonic arrival, workers, bytes, max worker age at issue time)."""
        self.workers: dict[str, set[str]] = {}
        self.decisions: list[tuple[float, int]] = []
        self._dec = msgspec.json.Decoder(ComponentSnapshot)

    async def on_snapshot(self, data: bytes, subject: str) -> None:
        snap = self._dec.decode(data)
        age = max((snap.issued_at_s - w.last_seen_s for w in snap.workers), default=0.0)
        self.snaps[str(snap.component)].append((time.monotonic(), len(snap.workers), len(data), age))
        self.workers[str(snap.component)] = {w.worker_id for w in snap.workers}

    async def on_decision(self, data: bytes, subject: str) -> None:
        self.decisions.append((time.monotonic(), int(json.loads(data).get("decision_id", 0))))

    def all_workers(self) -> set[str]:
        return set().union(*self.workers.values()) if self.workers else set()
