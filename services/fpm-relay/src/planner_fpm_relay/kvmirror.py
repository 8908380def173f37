"""A local copy of the keys of a KV bucket that match a pattern, kept current by a watch.

nats-py delivers PUT, DEL and PURGE through a watch, but a key that expires through the bucket TTL
simply disappears (a marker only comes when the bucket was created with limit markers). So the
watch is restarted every ``resync_s``: the fresh watch's initial snapshot (last value per key) replaces
the table, which drops the expired keys. Restarting also recovers a watch broken by a reconnect.
Snapshot and live updates come through one consumer in order, so they never race.

Stopping: :meth:`KvMirror.stop` (the service calls it first thing in ``drain``) makes :meth:`run` return
at its next step, whether or not the task is also cancelled. Cancelling alone is not enough on
Python 3.11: ``asyncio.wait_for`` (inside nats-py's ``request``, so inside ``kv.watch``) returns the
inner result and drops the cancellation when both land in the same loop iteration, and a watch that
restarts every ``resync_s`` would then run forever, keeping the process from exiting. So the loops
also check ``Task.cancelling()``, and the update wait uses ``asyncio.timeout`` (no inner task, so it
cannot lose a cancellation).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec
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
        self._stopped = False

    def stop(self) -> None:
        """Make :meth:`run` return at its next step (idempotent; also fine before ``run``)."""
        self._stopped = True

    def _should_stop(self) -> bool:
        task = asyncio.current_task()
        return self._stopped or (task is not None and task.cancelling() > 0)

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
        """Watch until :meth:`stop` or cancelled; errors are logged and the watch restarted with
        backoff."""
        delay = 0.2
        loop = asyncio.get_running_loop()
        while not self._should_stop():
            try:
                await self._watch_once(loop.time() + self.resync_s)
                delay = 0.2
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._should_stop():
                    return
                log.warning("kv_watch_error", mirror=self.name, error=repr(exc), retry_in_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _watch_once(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        watcher = await self.kv.watch(self.pattern)
        try:
            snapshot: dict[str, KvValue] | None = {}
            while not self._should_stop():
                remaining = until - loop.time()
                if remaining <= 0 and snapshot is None:
                    return
                try:
                    async with asyncio.timeout(max(remaining, 0.05) if snapshot is None else 5.0):
                        entry = await anext(watcher)
                except TimeoutError:
                    if snapshot is not None:
                        raise TimeoutError(f"no initial snapshot for {self.pattern}") from None
                    continue
                except StopAsyncIteration:  # the watcher was stopped under us
                    return
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
                await watcher.stop()  # type: ignore[no-untyped-call]  # nats-py leaves KeyWatcher.stop unannotated
            except Exception:
                pass
