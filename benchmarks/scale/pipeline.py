"""A scale run: N synthetic engines -> 3 fpm-relays -> regression -> decider, all real processes.

Layout: an embedded nats-server (JetStream, monitoring port), ``engine_procs`` engine processes
(:mod:`engines`, each owning N/procs ZMQ PUB sockets and their ``planner_engines`` keys), ``relays``
fpm-relay processes (KV discovery with sharding and claims, or static engine lists split between them
with sharding off), one regression and one decider process. This process plays the actuator: it
publishes a ReplicaStatus every 2 s (so that the decider decides; it runs advisory, with no budget or
replica cap), and records every ComponentSnapshot and ScalingDecision it sees.

Phases: start everything; warm-up until every engine is subscribed by exactly one relay and appears
in the regression snapshots (both times are reported); then a measurement window of ``duration_s``
bracketed by two reads of every /metrics, the nats-server /varz, the engines' counters and
/proc/<pid>/stat; then a graceful stop (engines, relays, regression, decider, nats-server). Whatever
happens (error, Ctrl-C, SIGTERM), every process started here is stopped; children also get SIGTERM if
this process dies (PR_SET_PDEATHSIG).

Its parts: :mod:`config` (what a run is), :mod:`fleet` (the processes), :mod:`startup` (starting
them), :mod:`recorder` (what the harness hears on the bus), :mod:`readings` (/proc, /metrics,
/varz) and :mod:`report` (the result from the two readings).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from planner_proto import ComponentReplicas, ReplicaStatus, Subjects, encode
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S
from planner_runtime.bus import Bus
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port
from planner_runtime.settings import BaseSettings
from scale.config import ScaleConfig
from scale.fleet import Fleet, command, tail
from scale.readings import Samples, machine_cpu, proc_cpu_s, proc_mem_mb, scrape, timed_scrape, total, varz
from scale.recorder import Recorder
from scale.report import report
from scale.startup import start_engines, start_services, wait_http, wait_members

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"[scale] {msg}", file=sys.stderr, flush=True)


def run(cfg: ScaleConfig, log: Log = _stderr) -> dict[str, Any]:
    """One full run; returns the result dict. Every process is stopped before this returns or raises."""
    fleet = Fleet()
    tmp = tempfile.TemporaryDirectory(prefix="planner-scale-")
    log_dir = Path(tmp.name)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM -> KeyboardInterrupt
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 4 * cfg.engines + 4096))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # children inherit it
    result: dict[str, Any] = {}
    try:
        result = asyncio.run(_run(cfg, fleet, log_dir, log))
        return result
    finally:
        codes = fleet.stop_all(cfg.stop_timeout_s)
        signal.signal(signal.SIGTERM, previous)
        bad = {n: c for n, c in codes.items() if c not in (0, None)}
        if result:
            result["exit_codes_nonzero"] = bad
        if bad:
            log(f"processes that did not exit 0: {bad}")
        if cfg.keep_logs:
            dest = Path(cfg.keep_logs)
            dest.mkdir(parents=True, exist_ok=True)
            for p in log_dir.glob("*.log"):
                (dest / p.name).write_bytes(p.read_bytes())
        tmp.cleanup()


async def _run(cfg: ScaleConfig, fleet: Fleet, log_dir: Path, log: Log) -> dict[str, Any]:
    ns = cfg.namespace
    subjects = Subjects(ns=ns)
    monitor = free_port()
    fleet.nats = NatsServer(store_dir=log_dir / "nats", extra_args=["-m", str(monitor)]).start()
    url = fleet.nats.url
    bus = await Bus.connect(BaseSettings(nats_url=url), name="scale-harness", max_wait_s=10)
    try:
        return await _run_connected(cfg, fleet, log_dir, log, bus, subjects, monitor)
    finally:
        await bus.close()


async def _run_connected(
    cfg: ScaleConfig, fleet: Fleet, log_dir: Path, log: Log, bus: Bus, subjects: Subjects, monitor: int
) -> dict[str, Any]:
    ns = cfg.namespace
    nats_url = fleet.nats.url if fleet.nats else ""
    await bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
    rec = Recorder()
    await bus.subscribe_raw(subjects.state(), rec.on_snapshot)
    await bus.subscribe_raw(subjects.decision(), rec.on_decision)

    # engines first (static mode needs their endpoints before the relays start)
    t_start = time.monotonic()
    engine_procs, endpoints = await start_engines(cfg, fleet, log_dir, nats_url)
    t_bound = time.monotonic()
    log(f"{len(endpoints)} engines bound in {t_bound - t_start:.1f} s ({cfg.transport})")
    components = defaultdict(int)
    for key in endpoints:
        components[key.split(":")[0]] += 1

    decider, regression, relays = start_services(cfg, fleet, log_dir, nats_url, endpoints)
    services = [decider, regression, *relays]
    t_services = time.monotonic()

    # the actuator's side: replica counts, so that the decider decides
    status = ReplicaStatus(
        namespace=ns,
        actuator_id="scale-bench",
        at_s=0.0,
        components={c: ComponentReplicas(desired=n, ready=n) for c, n in components.items()},
    )

    async def replicas_loop() -> None:
        while True:
            await bus.publish_raw(
                subjects.replicas(), encode(msgspec.structs.replace(status, at_s=time.time()))
            )
            await asyncio.sleep(2.0)

    replicas_task = asyncio.create_task(replicas_loop())
    try:
        await wait_http(services, 60)
        if cfg.discovery == "kv":  # all relays have joined: no relay starts out owning every engine
            await wait_members(relays, cfg.relays, 30)
        registered = [await command(p, "register", 120) for p in engine_procs]
        t_registered = time.monotonic()
        log(
            f"services up in {t_registered - t_services:.1f} s; registry filled in "
            f"{max(r['registered_s'] for r in registered):.1f} s"
        )

        # warm-up: every engine served by exactly one relay, and in the snapshots
        want = {k.split(":")[1] for k in endpoints}
        t_subscribed = t_in_snap = None
        deadline = time.monotonic() + cfg.warmup_timeout_s
        subscribed = 0
        while time.monotonic() < deadline:
            samples = await asyncio.gather(
                *(asyncio.to_thread(scrape, r.http_port) for r in relays), return_exceptions=True
            )
            ok = [s for s in samples if not isinstance(s, BaseException)]
            if len(ok) < len(samples):
                log(f"{len(samples) - len(ok)} relay(s) did not answer /metrics within 10 s")
            subscribed = int(sum(total(s, "planner_fpm_engines_subscribed") for s in ok))
            claims = int(sum(total(s, "planner_fpm_relay_claims") for s in ok))
            if cfg.discovery == "kv" and claims != subscribed:
                subscribed = min(subscribed, claims)
            now = time.monotonic()
            if t_subscribed is None and subscribed >= cfg.engines:
                t_subscribed = now
                log(f"all {cfg.engines} engines subscribed {now - t_registered:.1f} s after registration")
            if t_in_snap is None and want <= rec.all_workers():
                t_in_snap = now
                log(f"all engines in the snapshots {now - t_registered:.1f} s after registration")
            if t_subscribed is not None and t_in_snap is not None:
                break
            for p in (*services, *engine_procs):
                if not p.alive():
                    raise RuntimeError(f"{p.name} died during warm-up: {tail(p)}")
            await asyncio.sleep(0.5)
        else:
            log(
                f"warm-up timed out: {subscribed}/{cfg.engines} subscribed, "
                f"{len(want & rec.all_workers())} in snapshots"
            )
        await asyncio.sleep(2.0)  # let the first ticks with the full fleet pass

        # the measurement window
        pids = {p.name: p.pid for p in (*services, *engine_procs)}
        nats_proc = fleet.nats._proc if fleet.nats else None
        if nats_proc is not None:
            pids["nats-server"] = nats_proc.pid

        unresponsive: list[str] = []

        async def read_all() -> dict[str, Any]:
            got = await asyncio.gather(
                *(asyncio.to_thread(timed_scrape, p.http_port) for p in services), return_exceptions=True
            )
            metrics: list[Samples] = []
            times: dict[str, float] = {}
            for p, m in zip(services, got, strict=True):
                if isinstance(m, BaseException):
                    unresponsive.append(p.name)
                    log(f"{p.name} did not answer /metrics: {m!r}")
                    m = (math.nan, {})
                times[p.name] = m[0]
                metrics.append(m[1])
            eng = await asyncio.gather(*(command(p, "stats") for p in engine_procs))
            return {
                "t": time.monotonic(),
                "metrics": dict(zip([p.name for p in services], metrics, strict=True)),
                "times": times,
                "engines": eng,
                "varz": await asyncio.to_thread(varz, monitor),
                "cpu": {n: proc_cpu_s(pid) for n, pid in pids.items()},
                "self_cpu": time.process_time(),
                "machine": machine_cpu(),
                "snaps": {c: len(v) for c, v in rec.snaps.items()},
                "decisions": len(rec.decisions),
            }

        log(f"measuring for {cfg.duration_s:.0f} s")
        r0 = await read_all()
        await asyncio.sleep(cfg.duration_s)
        r1 = await read_all()
        mem = {n: proc_mem_mb(pid) for n, pid in pids.items()}
        dead = [p.name for p in (*services, *engine_procs) if not p.alive()]

        # graceful stop of the engines (final counters), then the rest in Fleet.stop_all
        for p in engine_procs:
            with contextlib.suppress(Exception):
                await command(p, "stop", timeout_s=15)
        for p in engine_procs:  # they delete their registry keys, then exit
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(p.popen.wait, 15)
    finally:
        replicas_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await replicas_task

    return report(
        cfg,
        r0,
        r1,
        mem,
        rec,
        relays,
        regression,
        decider,
        {
            "bind_s": t_bound - t_start,
            "registry_fill_s": max(r["registered_s"] for r in registered),
            "all_subscribed_after_registration_s": None
            if t_subscribed is None
            else t_subscribed - t_registered,
            "all_in_snapshots_after_registration_s": None if t_in_snap is None else t_in_snap - t_registered,
            "subscribed_at_warmup_end": subscribed,
        },
        dict(components),
        dead,
        unresponsive,
    )
