"""A stand-in engine for the circus actuator tests (until engine-sim drops in through --worker-cmd).

It follows the drain protocol of docs/services.md: registers its EngineInfo in ``planner_engines``
(refreshed every 5 s), and on SIGTERM re-puts it with ``draining=True``, finishes its simulated
in-flight work (``--inflight-s``), deletes its key and exits 0. Markers in ``--marker-dir`` let the
tests see what happened: ``{worker_id}.events`` gets one JSON line per event.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

from planner_proto import Component, EngineInfo
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S, Subjects
from planner_runtime.bus import Bus, kv_put
from planner_runtime.settings import BaseSettings


def event(marker_dir: Path, worker_id: str, kind: str, **fields: object) -> None:
    line = json.dumps({"event": kind, "worker_id": worker_id, "pid": os.getpid(), "t": time.time(), **fields})
    with (marker_dir / f"{worker_id}.events").open("a") as f:
        f.write(line + "\n")


async def main(args: argparse.Namespace) -> int:
    marker_dir = Path(args.marker_dir)
    event(
        marker_dir,
        args.worker_id,
        "started",
        argv=sys.argv[1:],
        cuda=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    bus = await Bus.connect(BaseSettings(nats_url=args.nats_url), max_wait_s=10)
    kv = await bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
    subjects = Subjects(ns=args.namespace)
    key = subjects.engine_key(args.component, args.worker_id)
    info = EngineInfo(
        namespace=args.namespace,
        component=Component(args.component),
        worker_id=args.worker_id,
        started_at_s=time.time(),
    )
    await asyncio.sleep(args.startup_s)
    await kv_put(kv, key, info)
    event(marker_dir, args.worker_id, "registered")
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=ENGINES_TTL_S / 3)
        except TimeoutError:
            await kv_put(kv, key, info)
    # Drain: deregister for routers, finish in-flight work, delete the key, exit 0.
    await kv_put(kv, key, EngineInfo(**{**_fields(info), "draining": True}))
    event(marker_dir, args.worker_id, "drain_begin")
    await asyncio.sleep(args.inflight_s)
    event(marker_dir, args.worker_id, "drained", inflight_s=args.inflight_s)
    await kv.delete(key)
    await bus.close()
    return 0


def _fields(info: EngineInfo) -> dict[str, object]:
    return {f: getattr(info, f) for f in info.__struct_fields__}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--worker-id", required=True)
    p.add_argument("--component", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--nats-url", required=True)
    p.add_argument("--marker-dir", required=True)
    p.add_argument("--inflight-s", type=float, default=1.0)
    p.add_argument("--startup-s", type=float, default=0.0)
    raise SystemExit(asyncio.run(main(p.parse_args())))
