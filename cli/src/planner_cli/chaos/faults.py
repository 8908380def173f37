"""Fault injection: kill -9 one service watcher (circusd respawns it) or the nats-server (restarted
on the same port and store), and measure how long each service takes to be back at work."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.request
from dataclasses import dataclass

from planner_cli.chaos import probe
from planner_cli.chaos.probe import MessageClock
from planner_cli.demo.run import Stack
from planner_runtime.natscluster import NatsCluster


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
    "predictor": ServiceSpec("demand", 5.0, "demand forecast (each traffic sample, 5 s)"),
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


async def _services_back(
    stack: Stack,
    clock: MessageClock,
    target: str,
    at_s: float,
    trigger: str,
    what: str,
    t_kill: float,
    t_back: float,
    timeout_s: float,
) -> list[FaultResult]:
    """One row for the NATS fault and one per service (and the loadgen's traffic): each must be
    healthy and at work again within 2 of its ticks once NATS is back (``t_back``), lease holders
    too after a whole-cluster restart that outlived their leases."""
    deadline = t_back + timeout_s

    async def one(name: str) -> FaultResult:
        spec = SPECS[name]
        port = stack.ports[name]
        t_healthy = await probe.wait_healthy(port, deadline)
        after = max(t_back, t_healthy or t_back)
        t_msg = await _first_message(clock, spec, port, after, deadline)
        return _judge(f"{target} > {name}", at_s, "reconnect", spec, t_kill, t_back, t_healthy, t_msg)

    rows = list(await asyncio.gather(*(one(n) for n in SPECS)))
    t_traffic = await clock.wait_after(LOADGEN_TRAFFIC.kind, t_back, deadline)
    rows.append(
        _judge(f"{target} > loadgen", at_s, "reconnect", LOADGEN_TRAFFIC, t_kill, t_back, t_back, t_traffic)
    )
    server = FaultResult(
        target,
        round(at_s, 1),
        trigger,
        round(t_back - t_kill, 2),
        max((r.healthy_s or 0.0 for r in rows), default=None),
        max((r.message_s or 0.0 for r in rows), default=None),
        what,
        max(r.limit_s for r in rows),
        all(r.ok for r in rows),
        "" if all(r.ok for r in rows) else "see the rows below",
    )
    return [server, *rows]


async def kill_nats(
    stack: Stack, clock: MessageClock, at_s: float, down_s: float, timeout_s: float
) -> tuple[list[FaultResult], tuple[float, float]]:
    """kill -9 the nats-server, restart it ``down_s`` later on the same port and store; one result for
    the server and one per service (and the loadgen's traffic). Returns the outage window too."""
    if stack.nats is None:
        raise ValueError(f"{NATS}: the stack runs a NATS cluster; use the {', '.join(CLUSTER_FAULTS)} faults")
    await clock.watch_fpm(True)
    try:
        t_kill = time.time()
        # On the event loop's thread, not in a worker thread: the server is started with
        # PR_SET_PDEATHSIG, which fires when the *thread* that started it ends.
        stack.nats.kill()
        await asyncio.sleep(down_s)
        stack.nats.start()
        t_back = time.time()
        rows = await _services_back(
            stack, clock, NATS, at_s, f"restart after {down_s:g} s", "every service reconnected",
            t_kill, t_back, timeout_s,
        )  # fmt: skip
        return rows, (t_kill, t_back)
    finally:
        await clock.watch_fpm(False)


NODE_KILL = "nats-node-kill"
PARTITION = "nats-partition"
CLUSTER_RESTART = "nats-cluster-restart"
CLUSTER_FAULTS = (NODE_KILL, PARTITION, CLUSTER_RESTART)
DECIDER_CONNECTION = "planner-decider"
"""The decider's NATS connection name (``planner-<service>``, see planner_runtime.service)."""


def node_of_client(cluster: NatsCluster, name: str) -> int | None:
    """The cluster node a client connection named ``name`` is on (from each node's ``/connz``)."""
    for i in range(cluster.size):
        if not cluster.nodes[i].running:
            continue
        url = f"http://{cluster.host}:{cluster.monitor_ports[i]}/connz?limit=4096"
        try:
            with urllib.request.urlopen(url, timeout=2.0) as r:
                conns = json.loads(r.read()).get("connections") or []
        except (OSError, ValueError):
            continue
        if any(c.get("name") == name for c in conns):
            return i
    return None


async def _streams_answer(stack: Stack, deadline: float) -> bool:
    """True once every JetStream stream (KV buckets included) answers a ``stream_info``."""
    js = stack.bus.js
    while time.time() < deadline:
        try:
            names = [i.config.name for i in await js.streams_info()]
            for name in names:
                await js.stream_info(str(name))
            return True
        except Exception:
            await asyncio.sleep(0.2)
    return False


async def cluster_fault(
    stack: Stack, clock: MessageClock, fault: str, at_s: float, down_s: float, timeout_s: float
) -> tuple[list[FaultResult], tuple[float, float]]:
    """One fault on the NATS cluster (see ``planner_runtime.natscluster``), then every service must be
    back at work within 2 ticks:

    - ``nats-node-kill``: kill -9 the node the decider is connected to; the clients fail over to the
      other nodes at once (R3 streams and KV keep a quorum); the node is restarted ``down_s`` later.
    - ``nats-partition``: the decider's node is cut off from the other two for ``down_s`` (clients that
      reconnect to it get no JetStream quorum there), then healed.
    - ``nats-cluster-restart``: every node stopped, then all started again (stores kept).

    Node processes are started on the event loop's thread (PR_SET_PDEATHSIG, see :func:`kill_nats`);
    only the health polling runs in a worker thread."""
    cluster = stack.cluster
    if cluster is None:
        raise ValueError(f"{fault} needs the stack to run a NATS cluster (--nats-cluster 3)")
    await clock.watch_fpm(True)
    try:
        node = await asyncio.to_thread(node_of_client, cluster, DECIDER_CONNECTION)
        i = 0 if node is None else node
        where = f"n{i}" + (" (the decider's)" if node is not None else " (decider's node not found)")
        t_kill = time.time()
        failed = ""
        try:
            if fault == NODE_KILL:
                cluster.kill(i)
                trigger, what = f"kill -9 {where}, back after {down_s:g} s", "clients failed over"
                t_back = time.time()  # the others serve at once: the services must not wait for the node
                await asyncio.sleep(down_s)
                cluster.nodes[i].start()
            elif fault == PARTITION:
                trigger, what = f"partition {where} for {down_s:g} s", "cluster healed"
                cluster.partition(i)
                await asyncio.sleep(down_s)
                cluster.heal(i)
                t_back = time.time()
            elif fault == CLUSTER_RESTART:
                trigger, what = f"all {cluster.size} nodes down {down_s:g} s", "cluster restarted"
                for n in cluster.nodes:
                    n.stop()
                await asyncio.sleep(down_s)
                for n in cluster.nodes:
                    n.start()
                t_back = time.time()
            else:
                raise ValueError(f"unknown cluster fault {fault!r}")
        except (RuntimeError, OSError) as exc:  # a node that would not start: reported, then restored
            failed = f"fault failed: {str(exc)[:160]}"
            trigger, what = fault, "cluster restored"
            if i in cluster.partitioned:
                cluster.heal(i)
            for n in cluster.nodes:
                if not n.running:
                    n.start()
            t_back = time.time()
        healthy = await asyncio.to_thread(cluster.wait_healthy, timeout_s)
        healthy = healthy and await _streams_answer(stack, time.time() + timeout_s)
        t_healthy = time.time()
        if fault != NODE_KILL:
            # NATS is back once JetStream is (every node's /healthz, and every stream and KV bucket
            # answering: each has elected its leader, which after a full restart takes a raft election
            # timeout per asset), not when the processes listen: the services' 2 ticks count from there
            trigger += f"; JetStream back {t_healthy - t_back:.1f} s later"
            t_back = t_healthy
        rows = await _services_back(stack, clock, fault, at_s, trigger, what, t_kill, t_back, timeout_s)
        if failed or not healthy:
            rows[0].ok, rows[0].note = False, failed or "cluster not healthy again"
        return rows, (t_kill, t_healthy)
    finally:
        await clock.watch_fpm(False)
