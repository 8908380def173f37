"""What the chaos harness watches: when each kind of planner message was last seen on the bus, the
services' /healthz and /metrics, and the pids of circus watchers."""

from __future__ import annotations

import asyncio
import bisect
import re
import time
import urllib.request
from collections import defaultdict
from typing import Any

from planner_cli.demo import processes
from planner_proto import Subjects
from planner_runtime.bus import Bus

KINDS = ("traffic", "forecast", "state", "decision", "ack", "replicas")
"""Low-rate subjects recorded for the whole run (fpm is subscribed to only while a fault needs it)."""


class MessageClock:
    """Wall-clock arrival times of every message, per kind (the subject's third token)."""

    def __init__(self, subjects: Subjects) -> None:
        self.subjects = subjects
        self.times: dict[str, list[float]] = defaultdict(list)
        self._fpm_users = 0
        self._fpm_sub: Any = None

    async def attach(self, bus: Bus) -> None:
        s = self.subjects
        for subject in (
            s.traffic(),
            s.forecast(),
            s.demand(),
            s.state(),
            s.decision(),
            s.ack(),
            s.replicas(),
        ):
            await bus.nc.subscribe(subject, cb=self._on_msg)
        self._bus = bus

    async def _on_msg(self, msg: Any) -> None:
        kind = msg.subject[len(self.subjects.root) + 1 :].split(".", 1)[0]
        self.times[kind].append(time.time())

    async def watch_fpm(self, on: bool) -> None:
        """Record fpm messages while at least one fault measurement needs them (they are many)."""
        self._fpm_users += 1 if on else -1
        if self._fpm_users > 0 and self._fpm_sub is None:
            self._fpm_sub = await self._bus.nc.subscribe(f"{self.subjects.root}.fpm.>", cb=self._on_msg)
        elif self._fpm_users <= 0 and self._fpm_sub is not None:
            sub, self._fpm_sub = self._fpm_sub, None
            try:
                await sub.unsubscribe()
            except Exception:  # the connection may be down (nats fault): the sub dies with it
                pass

    def first_after(self, kind: str, t: float) -> float | None:
        series = self.times.get(kind, [])
        i = bisect.bisect_right(series, t)
        return series[i] if i < len(series) else None

    async def wait_after(self, kind: str, t: float, deadline: float) -> float | None:
        while time.time() < deadline:
            found = self.first_after(kind, t)
            if found is not None:
                return found
            await asyncio.sleep(0.1)
        return None


async def healthy(port: int) -> bool:
    h = await asyncio.to_thread(processes.healthz, port)
    return h is not None and h.get("status") == "ok"


async def wait_healthy(port: int, deadline: float) -> float | None:
    while time.time() < deadline:
        if await healthy(port):
            return time.time()
        await asyncio.sleep(0.2)
    return None


_TICKS = re.compile(r'^planner_tick_seconds_count\{loop="(?P<loop>[^"]+)"\} (?P<n>[0-9.e+]+)$', re.M)


def tick_count(port: int, loop: str) -> float | None:
    """The service's ``planner_tick_seconds_count{loop=...}`` (None when unreachable)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    for m in _TICKS.finditer(text):
        if m.group("loop") == loop:
            return float(m.group("n"))
    return 0.0


async def wait_tick(port: int, loop: str, above: float, deadline: float) -> float | None:
    """Wall time at which the loop's tick count first exceeds ``above``."""
    while time.time() < deadline:
        n = await asyncio.to_thread(tick_count, port, loop)
        if n is not None and n > above:
            return time.time()
        await asyncio.sleep(0.2)
    return None


def watcher_pids(circus: processes.Circus, name: str) -> list[int]:
    pids = circus.call("list", timeout_s=10, name=name).get("pids", [])
    return [int(p) for p in pids] if isinstance(pids, list) else []


def watcher_names(circus: processes.Circus) -> list[str]:
    names = circus.call("list", timeout_s=10).get("watchers", [])
    return [str(w) for w in names] if isinstance(names, list) else []
