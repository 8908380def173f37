"""A llama-server worker that joins a planner fleet: ``python -m planner_runtime.llamacpp.worker``.

Stock llama-server knows nothing about the planner, so this wrapper (the command an actuator starts)
runs it on its own free loopback port, and once it serves, registers it in ``planner_engines`` with
``engine_kind=llamacpp`` and its ``/metrics`` URL (the relay scrapes it; HTTP clients find the server
at the same address). The entry is refreshed within the bucket TTL.

Drain (SIGTERM, docs/services.md): re-put the entry with ``draining=True`` so routers stop sending,
wait until llama-server has nothing processing or deferred (and ``--drain-grace-s`` passed, for
requests routed just before the flag was seen), delete the entry, stop llama-server, exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import sys
import time
from pathlib import Path

import msgspec

from planner_proto import Component, EngineCapabilities, EngineInfo
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S, Subjects
from planner_runtime.bus import Bus, kv_put
from planner_runtime.llamacpp.server import LlamaServer, get
from planner_runtime.settings import BaseSettings

_GAUGE = re.compile(r"^llamacpp:(requests_processing|requests_deferred)\s+([0-9.eE+-]+)$", re.M)


def busy(metrics_text: str) -> float:
    """Requests processing plus deferred in a llama-server exposition."""
    return sum(float(m.group(2)) for m in _GAUGE.finditer(metrics_text))


async def _idle(url: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, body = await asyncio.to_thread(get, f"{url}/metrics")
        if status == 200 and busy(body.decode(errors="replace")) == 0:
            return True
        if status == 0:  # the server is gone: nothing left to wait for
            return True
        await asyncio.sleep(0.2)
    return False


def _with(info: EngineInfo, **changes: object) -> EngineInfo:
    return msgspec.structs.replace(info, **changes)


async def run(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    server = LlamaServer(
        binary=args.binary or None,
        model=args.model or None,
        parallel=args.parallel,
        ctx_per_slot=args.ctx_per_slot,
        log_dir=Path(args.log_dir) if args.log_dir else None,
    )
    try:
        await asyncio.to_thread(server.start, args.start_timeout_s)
    except (RuntimeError, FileNotFoundError) as exc:
        print(f"llamacpp worker {args.worker_id}: {exc}", file=sys.stderr)
        server.close()
        return 1
    bus = await Bus.connect(BaseSettings(nats_url=args.nats_url), max_wait_s=10)
    try:
        kv = await bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
        key = Subjects(ns=args.namespace).engine_key(args.component, args.worker_id)
        info = EngineInfo(
            namespace=args.namespace,
            component=Component(args.component),
            worker_id=args.worker_id,
            metrics_url=f"{server.url}/metrics",
            engine_kind="llamacpp",
            capabilities=EngineCapabilities(
                num_gpu_blocks=args.parallel * args.ctx_per_slot,
                block_size_tokens=1,
                max_num_seqs=args.parallel,
                max_num_batched_tokens=2048,
                context_length_tokens=args.ctx_per_slot,
            ),
            started_at_s=time.time(),
        )
        await kv_put(kv, key, info)
        print(f"llamacpp worker {args.worker_id}: serving {server.url} (pid {server.pid})", flush=True)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=ENGINES_TTL_S / 3)
            if not server.running:
                print(f"llamacpp worker {args.worker_id}: llama-server exited", file=sys.stderr)
                await kv.delete(key)
                return 1
            if not stop.is_set():
                await kv_put(kv, key, info)
        await kv_put(kv, key, _with(info, draining=True))
        await asyncio.sleep(args.drain_grace_s)
        drained = await _idle(server.url, args.drain_timeout_s)
        print(f"llamacpp worker {args.worker_id}: drained={drained}", flush=True)
        await kv.delete(key)
        return 0
    finally:
        await bus.close()
        await asyncio.to_thread(server.close)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m planner_runtime.llamacpp.worker", description=__doc__)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--component", default="agg", choices=[c.value for c in Component])
    p.add_argument("--namespace", required=True)
    p.add_argument("--nats-url", required=True)
    p.add_argument("--parallel", type=int, default=2, help="llama-server slots (--parallel)")
    p.add_argument("--ctx-per-slot", type=int, default=1024)
    p.add_argument("--binary", default="", help="llama-server (default: PLANNER_LLAMA_SERVER, cache, PATH)")
    p.add_argument("--model", default="", help="GGUF model (default: the tiny generated Llama)")
    p.add_argument("--log-dir", default="", help="folder for llama-server's log")
    p.add_argument("--start-timeout-s", type=float, default=60.0)
    p.add_argument("--drain-grace-s", type=float, default=1.0)
    p.add_argument("--drain-timeout-s", type=float, default=60.0)
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
