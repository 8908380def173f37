"""Fault injection: kill -9 one service watcher (circusd respawns it) or the nats-server (restarted
on the same port and store), and measure how long each service takes to be back at work."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass

from planner_cli.chaos import probe
from planner_cli.chaos.probe import MessageClock
from planner_cli.demo.run import Stack


@dataclass(frozen=True)
class ServiceSpec:
    kind: str
    """What the service publishes: a subject kind, or ``tick:<loop>`` for a /metrics tick counter."""
    tick_s: float
    """Its tick in the demo configuration (``demo.run._service_argv`` and the service defaults)."""
    what: str


SPECS: dict[str, ServiceSpec] = {
    "fpm-relay": ServiceSpec("fpm", 2.0, "fpm message (relay heartbeat 2 s)"),
    "regression": ServiceSpec("state", 1.0, "snapshot (tick 1 s)"),
    "predictor": ServiceSpec("forecast", 5.0, "forecast (interval 5 s)"),
    "decider": ServiceSpec("tick:decide", 3.0, "decision tick (3 s)"),
    "actuator-circus": ServiceSpec("replicas", 2.0, "replicas status (2 s)"),
}
NATS = "nats-server"
LOADGEN_TRAFFIC = ServiceSpec("traffic", 5.0, "traffic sample (loadgen interval 5 s)")


@dataclass
class FaultResult:
    target: str
    at_s: float
    """Seconds since the traffic started."""
    trigger: str
    back_s: float | None
    """kill -> a new process (respawned watcher, restarted nats-server)."""
    healthy_s: float | None
    """kill -> /healthz 200 again."""
    message_s: float | None
    """kill -> its next message of its kind."""
    what: str
    limit_s: float
    """2 ticks: the next message must come at most this long after the service is healthy again."""
    ok: bool
    note: str = ""


def _judge(
    target: str,
    at_s: float,
    trigger: str,
    spec: ServiceSpec,
    t_kill: float,
    t_back: float | None,
    t_healthy: float | None,
    t_msg: float | None,
    note: str = "",
) -> FaultResult:
    def rel(t: float | None) -> float | None:
        return None if t is None else round(t - t_kill, 2)

    limit = 2 * spec.tick_s
    ok = t_healthy is not None and t_msg is not None and t_msg - t_healthy <= limit
    if not ok and not note:
        if t_back is None:
            note = "no new process"
        elif t_healthy is None:
            note = "never healthy again"
        elif t_msg is None:
            note = f"no {spec.kind} after the restart"
        else:
            note = f"first {spec.kind} {t_msg - t_healthy:.1f} s after healthy (limit {limit:g} s)"
    return FaultResult(
        target, round(at_s, 1), trigger, rel(t_back), rel(t_healthy), rel(t_msg), spec.what, limit, ok, note
    )


async def _first_message(
    clock: MessageClock, spec: ServiceSpec, port: int | None, after: float, deadline: float
) -> float | None:
    if spec.kind.startswith("tick:"):
        assert port is not None
        loop = spec.kind.split(":", 1)[1]
        base = await asyncio.to_thread(probe.tick_count, port, loop)
        return await probe.wait_tick(port, loop, base or 0.0, deadline)
    return await clock.wait_after(spec.kind, after, deadline)


async def kill_service(
    stack: Stack, clock: MessageClock, name: str, at_s: float, trigger: str, timeout_s: float
) -> FaultResult:
    spec = SPECS[name]
    port = stack.ports[name]
    old = await asyncio.to_thread(probe.watcher_pids, stack.circus, name)
    if not old:
        return _judge(name, at_s, trigger, spec, time.time(), None, None, None, "no process to kill")
    if spec.kind == "fpm":
        await clock.watch_fpm(True)
    try:
        t_kill = time.time()
        os.kill(old[0], signal.SIGKILL)
        deadline = t_kill + timeout_s
        t_back = None
        while time.time() < deadline:
            pids = await asyncio.to_thread(probe.watcher_pids, stack.circus, name)
            if pids and pids[0] not in old:
                t_back = time.time()
                break
            await asyncio.sleep(0.2)
        if t_back is None:
            return _judge(name, at_s, trigger, spec, t_kill, None, None, None)
        t_healthy = await probe.wait_healthy(port, deadline)
        if spec.kind.startswith("tick:"):
            # a fresh process: its tick counter starts at 0
            t_msg = await probe.wait_tick(port, spec.kind.split(":", 1)[1], 0.0, deadline)
        else:
            t_msg = await clock.wait_after(spec.kind, t_kill + 0.05, deadline)
        return _judge(name, at_s, trigger, spec, t_kill, t_back, t_healthy, t_msg)
    finally:
        if spec.kind == "fpm":
            await clock.watch_fpm(False)


async def kill_nats(
    stack: Stack, clock: MessageClock, at_s: float, down_s: float, timeout_s: float
) -> tuple[list[FaultResult], tuple[float, float]]:
    """kill -9 the nats-server, restart it ``down_s`` later on the same port and store; one result for
    the server and one per service (and the loadgen's traffic). Returns the outage window too."""
    await clock.watch_fpm(True)
    try:
        t_kill = time.time()
        # On the event loop's thread, not in a worker thread: the server is started with
        # PR_SET_PDEATHSIG, which fires when the *thread* that started it ends.
        stack.nats.kill()
        await asyncio.sleep(down_s)
        stack.nats.start()
        t_back = time.time()
        deadline = t_back + timeout_s

        async def one(name: str) -> FaultResult:
            spec = SPECS[name]
            port = stack.ports[name]
            t_healthy = await probe.wait_healthy(port, deadline)
            after = max(t_back, t_healthy or t_back)
            t_msg = await _first_message(clock, spec, port, after, deadline)
            return _judge(f"{NATS} > {name}", at_s, "reconnect", spec, t_kill, t_back, t_healthy, t_msg)

        rows = list(await asyncio.gather(*(one(n) for n in SPECS)))
        t_traffic = await clock.wait_after(LOADGEN_TRAFFIC.kind, t_back, deadline)
        rows.append(
            _judge(f"{NATS} > loadgen", at_s, "reconnect", LOADGEN_TRAFFIC, t_kill, t_back, t_back, t_traffic)
        )
        server = FaultResult(
            NATS,
            round(at_s, 1),
            f"restart after {down_s:g} s",
            round(t_back - t_kill, 2),
            max((r.healthy_s or 0.0 for r in rows), default=None),
            max((r.message_s or 0.0 for r in rows), default=None),
            "every service reconnected",
            max(r.limit_s for r in rows),
            all(r.ok for r in rows),
            "" if all(r.ok for r in rows) else "see the rows below",
        )
        return [server, *rows], (t_kill, t_back)
    finally:
        await clock.watch_fpm(False)
