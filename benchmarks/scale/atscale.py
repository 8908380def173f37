"""The regression service and the decider with 1000 workers, in one process each's real code path on
an embedded nats-server:

- regression ingest: the service's own FPM handler (decode + track update, as subscribed on the
  connection) fed realistic decode/prefill payloads of ``workers`` engines round-robin; CPU us/FPM
  and the rate one process sustains.
- snapshot: the regression's ``update`` (fit + snapshot) with every worker live; its encoded size
  against the server's max payload (NATS refuses a message above it).
- decider tick: a real DeciderService (advisory, active) whose inputs are those snapshots and a
  replica status; ``_tick`` timed back to back, mean and p99.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from typing import Any

import msgspec
from nats.aio.msg import Msg

from planner_decider.service import DeciderService
from planner_decider.settings import DeciderSettings
from planner_proto import Component, ComponentReplicas, ReplicaStatus, Subjects, encode, encode_fpm
from planner_regression.service import RegressionService
from planner_regression.settings import RegressionSettings
from planner_runtime.natsd import NatsServer
from planner_runtime.settings import load_settings
from scale.engines import decode_pass, prefill_pass

NS = "atscale"


async def _started(ready: Any, task: asyncio.Task[Any], what: str) -> None:
    for _ in range(600):
        if task.done():
            raise RuntimeError(f"{what} exited: {task.exception()!r}")
        if ready():
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{what} did not start")


async def _run(workers: int, messages: int, ticks: int) -> dict[str, Any]:
    subjects = Subjects(ns=NS)
    out: dict[str, Any] = {"workers": workers}
    with NatsServer() as nats:
        common = {"nats_url": nats.url, "namespace": NS, "log_level": "warning"}
        reg = RegressionService(msgspec.convert({**common, "tick_s": 3600.0}, RegressionSettings))
        reg_task = asyncio.create_task(reg.run())
        dec = DeciderService(
            load_settings(
                DeciderSettings,
                flags={
                    **common,
                    "advisory": True,
                    "max_gpu_budget": -1,
                    "max_replicas": -1,
                    "load_interval_s": 60.0,
                },
                env={},
            )
        )
        dec_task = asyncio.create_task(dec.run())
        try:
            await _started(lambda: len(reg.components) >= 2, reg_task, "regression")
            await _started(lambda: dec.ids is not None, dec_task, "decider (active)")
            # -- regression ingest: 3/4 decode, 1/4 prefill, realistic payloads
            rng = random.Random(7)
            msgs: list[tuple[Any, Msg]] = []
            per_comp: dict[Component, int] = {}
            for i in range(workers):
                comp = Component.PREFILL if i % 4 == 0 else Component.DECODE
                per_comp[comp] = per_comp.get(comp, 0) + 1
                wid = f"w{i:05d}"
                make = prefill_pass if comp == Component.PREFILL else decode_pass
                handler = reg._fpm_handler(reg.components[comp])
                for k in range(4):
                    data = encode_fpm(make(wid, rng, k))
                    msgs.append(
                        (handler, Msg(_client=reg.bus.nc, subject=subjects.fpm(comp, wid), data=data))
                    )
            order = [msgs[(j % workers) * 4 + (j // workers) % 4] for j in range(messages)]
            cpu0, t0 = time.process_time(), time.perf_counter()
            for handler, msg in order:
                await handler(msg)
            cpu = time.process_time() - cpu0
            wall = time.perf_counter() - t0
            out["regression_us_per_fpm"] = 1e6 * cpu / messages
            out["regression_fpm_per_s"] = messages / wall
            # -- snapshots with every worker
            now = time.time()
            max_payload = int(reg.bus.nc._max_payload)
            out["max_payload_bytes"] = max_payload
            snaps = {}
            for comp, cs in reg.components.items():
                t1 = time.perf_counter()
                snap = reg.update(cs, now)
                size = len(encode(snap))
                snaps[comp] = snap
                out[f"snapshot_{comp}"] = {
                    "workers": len(snap.workers),
                    "bytes": size,
                    "update_ms": 1000 * (time.perf_counter() - t1),
                }
            out["snapshot_max_bytes"] = max(v["bytes"] for k, v in out.items() if k.startswith("snapshot_"))
            # -- decider tick with those snapshots
            for comp, snap in snaps.items():
                await dec._on_snapshot(snap, subjects.state(comp))
            status = ReplicaStatus(
                namespace=NS,
                actuator_id="atscale",
                at_s=time.time(),
                components={str(c): ComponentReplicas(desired=n, ready=n) for c, n in per_comp.items()},
            )
            await dec._on_replicas(status, subjects.replicas())
            times = []
            for _ in range(ticks):
                t2 = time.perf_counter()
                await dec._tick()
                times.append(time.perf_counter() - t2)
            times.sort()
            out["decider_tick_mean_ms"] = 1000 * statistics.fmean(times)
            out["decider_tick_p99_ms"] = 1000 * times[min(len(times) - 1, int(0.99 * len(times)))]
            out["decider_workers"] = sum(len(s.workers) for s in snaps.values())
        finally:
            for svc in (reg, dec):
                svc.request_stop()
            await asyncio.wait({reg_task, dec_task}, timeout=30)
    return out


def measure(workers: int = 1000, messages: int = 100_000, ticks: int = 200) -> dict[str, Any]:
    return asyncio.run(_run(workers, messages, ticks))
