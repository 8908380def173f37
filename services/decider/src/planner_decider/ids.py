"""decision_id: strictly increasing across restarts and takeovers.

The counter lives in KV ``planner_state`` under ``{ns}.decider.decision_id``. Each new id is written
with a compare-and-set on the revision last read, before the decision is published: two deciders
racing for the same id cannot both win; the loser re-reads and takes the next one (or gives up after a
few conflicts, which means another decider is active).
"""

from __future__ import annotations

from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from planner_proto import DecodeError, decode, encode


class DecisionIdConflict(RuntimeError):
    """Another writer kept winning the compare-and-set."""


class DecisionIds:
    def __init__(self, kv: KeyValue, key: str, max_attempts: int = 5) -> None:
        self.kv = kv
        self.key = key
        self.value = 0
        self.revision = 0
        self.conflicts = 0
        self.max_attempts = max_attempts

    async def load(self) -> int:
        """Read the stored id and its revision (0 and 0 when the key does not exist)."""
        try:
            entry = await self.kv.get(self.key)
        except KeyDeletedError as exc:
            self.value, self.revision = 0, int(exc.entry.revision) if exc.entry is not None else 0
            return self.value
        except KeyNotFoundError:
            self.value, self.revision = 0, 0
            return self.value
        self.revision = int(entry.revision or 0)
        try:
            self.value = decode(entry.value or b"0", int)
        except DecodeError:
            self.value = 0  # a corrupt counter is overwritten by the next id (the stream floor keeps order)
        return self.value

    def at_least(self, floor: int) -> None:
        """Never issue an id at or below ``floor`` (e.g. the newest id found on the decision stream)."""
        self.value = max(self.value, floor)

    async def next(self) -> int:
        """Reserve the next id: compare-and-set it in KV, then return it."""
        for _ in range(self.max_attempts):
            new = self.value + 1
            try:
                self.revision = await self.kv.update(self.key, encode(new), last=self.revision)
            except KeyWrongLastSequenceError:
                self.conflicts += 1
                floor = self.value
                await self.load()
                self.at_least(floor)
                continue
            self.value = new
            return new
        raise DecisionIdConflict(f"{self.key}: lost the compare-and-set {self.max_attempts} times")
