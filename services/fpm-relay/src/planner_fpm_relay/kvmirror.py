"""A local copy of the keys of a KV bucket that match a pattern, kept current by a watch.

nats-py delivers PUT, DEL and PURGE through a watch, but a key that expires through the bucket TTL
simply disappears (a marker only comes when the bucket was created with limit markers). So the
watch is restarted every ``resync_s``: the fresh watch's initial snapshot (last value per key) replaces
the table, which drops the expired keys. Restarting also recovers a watch broken by a reconnect.
Snapshot and live updates come through one consumer in order, so they never race.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec
import nats.errors
from nats.js.kv import KeyValue

from planner_runtime.logs import get_logger

log = get_logger("planner.fpm-relay.kvmirror")

_DELETES = ("DEL", "PURGE")


class KvValue(msgspec.Struct, frozen=True):
    value: bytes
    revision: int


class KvMirror:
    def __init__(
        self, kv: KeyValue, pattern: str, resync_s: float, on_change: Callable[[], None], name: str
    ) -> None:
        self.kv = kv
        self.pattern = pattern
        self.resync_s = resync_s
        self.on_change = on_change
        self.name = name
        self.entries: dict[str, KvValue] = {}
        self.synced = asyncio.Event()
        """Set once the first snapshot is in."""

    def _replace(self, fresh: dict[str, KvValue]) -> None:
        if fresh != self.entries:
            self.entries = fresh
            self.on_change()
        self.synced.set()

    def _apply(self, key: str, op: str | None, value: bytes | None, revision: int) -> None:
        if op in _DELETES:
            if self.entries.pop(key, None) is not None:
                self.on_change()
            return
        entry = KvValue(value or b"", revision)
        if self.entries.get(key) != entry:
            self.entries[key] = entry
            self.on_change()

    async def run(self) -> None:
        """Watch forever (until cancelled); errors are logged and the watch restarted with backoff."""
        delay = 0.2
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self._watch_once(loop.time() + self.resync_s)
                delay = 0.2
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("kv_watch_error", mirror=self.name, error=repr(exc), retry_in_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _watch_once(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        watcher = await self.kv.watch(self.pattern)
        try:
            snapshot: dict[str, KvValue] | None = {}
            while True:
                remaining = until - loop.time()
                if remaining <= 0 and snapshot is None:
                    return
                try:
                    entry = await watcher.updates(timeout=max(remaining, 0.05) if snapshot is None else 5.0)
                except nats.errors.TimeoutError:
                    if snapshot is not None:
                        raise TimeoutError(f"no initial snapshot for {self.pattern}") from None
                    continue
                if entry is None:  # end of the initial snapshot
                    if snapshot is not None:
                        self._replace(snapshot)
                        snapshot = None
                    continue
                if snapshot is not None:
                    if entry.operation in _DELETES:
                        snapshot.pop(entry.key, None)
                    else:
                        snapshot[entry.key] = KvValue(entry.value or b"", entry.revision or 0)
                else:
                    self._apply(entry.key, entry.operation, entry.value, entry.revision or 0)
        finally:
            try:
                await watcher.stop()
            except Exception:
                pass
