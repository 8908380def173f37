"""The circus backend: one circusd watcher per worker, GPUs from a fixed pool."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nats.js.kv import KeyValue
from prometheus_client import Counter

from planner_actuator_circus.circusctl import CircusControl, CircusError, ErrorKind
from planner_actuator_circus.command import TemplateError
from planner_actuator_circus.drain import Drainer
from planner_actuator_circus.planning import allocate, budget_error, next_index
from planner_actuator_circus.settings import CircusActuatorSettings
from planner_actuator_circus.state import name_pattern, parse_watcher_name, watcher_name
from planner_actuator_circus.watcher import cuda_devices, template_values, watcher_options
from planner_proto import Component, DecodeError, EngineInfo, Subjects
from planner_runtime.actuation import ActuationError, NoCapacity, Phase, Seen, WorkerRecord
from planner_runtime.bus import kv_get


class CircusBackend:
    def __init__(
        self,
        settings: CircusActuatorSettings,
        circus: CircusControl,
        engines_kv: KeyValue,
        subjects: Subjects,
        loads: Callable[[], Mapping[str, int]],
        restarts: Counter,
        log: Any,
    ) -> None:
        self.s = settings
        self.circus = circus
        self.engines_kv = engines_kv
        self.subjects = subjects
        self.loads = loads
        self.m_restarts = restarts
        self.log = log
        self.command = settings.command()
        self.gpus_per = {c.value: settings.gpus_for(c.value) for c in Component}
        self.managed = [c.value for c in settings.components]
        self.pattern = name_pattern(settings.namespace)
        self.drainer = Drainer(circus, engines_kv, subjects, settings.worker_drain_timeout_s, log)
        self._gpus: dict[str, list[int]] = {}
        self._restarts: dict[str, int] = {}

    def components(self) -> Sequence[str]:
        return self.managed

    def gpus_per_replica(self, component: str) -> int:
        return self.gpus_per.get(component, 1)

    def admit(self, targets: Mapping[str, int], running: Sequence[WorkerRecord]) -> str:
        self._restarts.clear()  # every new decision gets a fresh restart budget per worker
        ours = {c: n for c, n in targets.items() if c in self.managed}
        others = [w for w in running if w.component not in ours]
        return budget_error(ours, self.gpus_per, len(self.s.gpu_pool), others)

    async def workers(self, known: Mapping[str, WorkerRecord]) -> list[Seen]:
        try:
            statuses = await self.circus.statuses()
        except CircusError as exc:
            raise ActuationError(str(exc), transient=True) from exc
        loads = self.loads()
        out: list[Seen] = []
        for name, status in statuses.items():
            parsed = parse_watcher_name(self.pattern, name)
            if parsed is None or parsed[0].value not in self.managed:
                continue
            comp, index = parsed[0].value, parsed[1]
            if name not in self._gpus:
                rec = known.get(name)
                self._gpus[name] = list(rec.gpus) if rec is not None else await self._watcher_gpus(name)
            running = name not in known or known[name].phase == Phase.RUNNING
            problem = await self._respawn(name, status) if running else ""
            out.append(
                Seen(
                    name=name,
                    component=comp,
                    ready=running and await self._ready(name, comp, status),
                    index=index,
                    gpus=self._gpus[name],
                    load=loads.get(name, 0),
                    problem=problem,
                )
            )
        for name in set(self._gpus) - set(statuses):
            del self._gpus[name]
        return out

    async def _watcher_gpus(self, name: str) -> list[int]:
        try:
            return cuda_devices(await self.circus.env(name))
        except CircusError:
            return []

    async def _ready(self, name: str, comp: str, status: str) -> bool:
        if status != "active":
            return False
        if self.s.ready_source == "circus":
            return True
        try:
            info = await kv_get(self.engines_kv, self.subjects.engine_key(comp, name), EngineInfo)
        except DecodeError:
            info = None
        return info is not None and not info.draining

    async def _respawn(self, name: str, status: str) -> str:
        """Restart a worker whose process exited on its own, at most ``max_restarts`` times; past
        that, say so once (the current decision fails)."""
        if status != "stopped":
            return ""
        count = self._restarts.get(name, 0) + 1
        self._restarts[name] = count
        if count > self.s.max_restarts:
            return (
                f"worker {name} keeps exiting ({count - 1} restarts)"
                if count == self.s.max_restarts + 1
                else ""
            )
        self.log.warning("worker_exited_restarting", watcher=name, restart=count)
        self.m_restarts.inc()
        try:
            await self.circus.start(name)
        except CircusError as exc:
            self.log.warning("worker_restart_failed", watcher=name, error=str(exc))
        return ""

    async def start(self, component: str, count: int, known: Sequence[WorkerRecord]) -> list[WorkerRecord]:
        started: list[WorkerRecord] = []
        for _ in range(count):
            try:
                started.append(await self._start_one(component, [*known, *started]))
            except ActuationError:
                if started:
                    break  # the rest on the next pass
                raise
        return started

    async def _start_one(self, comp: str, known: list[WorkerRecord]) -> WorkerRecord:
        n = self.gpus_per[comp]
        gpus = allocate(self.s.gpu_pool, known, n)
        if gpus is None:
            raise NoCapacity(f"gpu_pool_exhausted: no {n} free GPU(s) for {comp}")
        idx = next_index(w.index for w in known if w.component == comp)
        name = watcher_name(self.s.namespace, comp, idx)
        try:
            argv, env = self.command.render(template_values(self.s, name, comp, idx, gpus))
        except TemplateError as exc:
            raise ActuationError(f"worker_cmd: {exc}") from exc
        try:
            await self.circus.add(name, argv, watcher_options(self.s, name, env, gpus))
        except CircusError as exc:
            if exc.kind == ErrorKind.TRANSIENT:
                raise ActuationError(str(exc), transient=True) from exc
            if "already exist" not in exc.detail:
                raise ActuationError(f"circus add {name}: {exc.detail}") from exc
        self._gpus[name] = gpus
        self._restarts.pop(name, None)
        return WorkerRecord(name=name, component=comp, index=idx, gpus=gpus, started_at_s=time.time())

    async def drain(self, workers: Sequence[WorkerRecord]) -> None:
        for rec in workers:
            await self.drainer.begin(rec)

    async def remove(self, worker: WorkerRecord) -> bool:
        return await self.drainer.finish(worker)
