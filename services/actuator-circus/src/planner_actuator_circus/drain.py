"""Draining one circus worker: SIGTERM (unless the worker already shows it is draining), wait for
its process to exit, SIGKILL after the drain timeout, then remove only that one watcher."""

from __future__ import annotations

import signal
import time
from typing import Any

import nats
from nats.js.kv import KeyValue

from planner_actuator_circus.circusctl import CircusControl, CircusError, ErrorKind
from planner_proto import DecodeError, EngineInfo, Subjects
from planner_runtime.actuation import ActuationError, WorkerRecord
from planner_runtime.bus import kv_get

KILL_GRACE_S = 10.0


class Drainer:
    def __init__(
        self, circus: CircusControl, engines_kv: KeyValue, subjects: Subjects, timeout_s: float, log: Any
    ) -> None:
        self.circus = circus
        self.engines_kv = engines_kv
        self.subjects = subjects
        self.timeout_s = timeout_s
        self.log = log
        self._killed: dict[str, float] = {}

    async def begin(self, rec: WorkerRecord) -> None:
        key = self.subjects.engine_key(rec.component, rec.name)
        try:
            info = await kv_get(self.engines_kv, key, EngineInfo)
        except DecodeError:
            info = None
        if info is not None and info.draining:
            return
        try:
            await self.circus.signal(rec.name, signal.SIGTERM)
        except CircusError as exc:
            if exc.kind != ErrorKind.NOT_FOUND:
                raise ActuationError(str(exc), transient=True) from exc

    async def finish(self, rec: WorkerRecord) -> bool:
        """True once the watcher is gone (its process exited, or was killed past the timeout)."""
        try:
            pids = await self.circus.pids(rec.name)
        except CircusError as exc:
            if exc.kind == ErrorKind.NOT_FOUND:
                return True
            raise ActuationError(str(exc), transient=True) from exc
        now = time.time()
        if pids:
            if now <= (rec.drain_started_at_s or now) + self.timeout_s:
                return False
            killed_at = self._killed.get(rec.name)
            if killed_at is None:
                self.log.warning("drain_timeout_kill", watcher=rec.name, timeout_s=self.timeout_s)
                try:
                    await self.circus.signal(rec.name, signal.SIGKILL)
                except CircusError as exc:
                    raise ActuationError(str(exc), transient=True) from exc
                self._killed[rec.name] = now
                return False
            if now < killed_at + KILL_GRACE_S:
                return False
        try:
            await self.circus.rm(rec.name)
        except CircusError as exc:
            if exc.kind != ErrorKind.NOT_FOUND:
                raise ActuationError(str(exc), transient=True) from exc
        if self._killed.pop(rec.name, None) is not None:
            # a killed engine could not deregister itself
            try:
                await self.engines_kv.delete(self.subjects.engine_key(rec.component, rec.name))
            except (nats.errors.Error, OSError):
                pass
        return True
