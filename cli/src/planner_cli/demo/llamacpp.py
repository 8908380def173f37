"""``planner demo --engine llamacpp``: the loop with real inference engines and nothing but their
stock ``/metrics``.

Real llama-server workers (llama.cpp on a tiny generated model, ``--threads 1 --parallel N``, one
process and port each) are started and drained by actuator-circus through the
``planner_runtime.llamacpp.worker`` wrapper, which registers each in ``planner_engines``. The
fpm-relay scrapes them with its llama.cpp adapter (no FPM anywhere), the regression service learns
their speed from the scraped counters, and the decider's load policy scales the fleet. Traffic is
real HTTP (``/v1/completions``) from closed-loop clients, routed to the least busy registered worker
that is not draining: a few clients, then many (slots fill up, requests are deferred, the fleet
grows), then none (it shrinks back). A request refused before it was accepted (its worker drained
between the routing and the send) is re-sent elsewhere, as a router would; any other error counts
as failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from planner_cli.demo import processes
from planner_cli.demo.recorder import Recorder
from planner_proto import DecodeError, EngineInfo, Subjects, decode
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S
from planner_runtime.bus import Bus, kv_watch
from planner_runtime.llamacpp.binary import ENV_VAR, find_llama_server
from planner_runtime.llamacpp.tinymodel import ensure_tiny_llama
from planner_runtime.natsd import NatsServer, free_port
from planner_runtime.settings import BaseSettings

SERVICES = ("fpm-relay", "regression", "decider", "actuator-circus")


@dataclass(frozen=True)
class LlamaDemoConfig:
    out_dir: Path = Path("out/demo-llamacpp")
    namespace: str = "demo"
    low_clients: int = 1
    high_clients: int = 6
    warm_s: float = 10.0
    """Few clients first: the regression learns the workers' speed."""
    load_s: float = 25.0
    """Many clients: the slots fill up and requests are deferred."""
    cooldown_s: float = 60.0
    """Longest wait for the scale-down after the traffic stops."""
    max_tokens: int = 32
    parallel: int = 2
    ctx_per_slot: int = 512
    max_workers: int = 2
    ttft_ms: float = 5000.0
    itl_ms: float = 500.0
    down_window_s: float = 6.0
    live: bool = True


@dataclass
class Traffic:
    """Closed-loop HTTP clients over the registered llama-server workers."""

    engines: dict[str, EngineInfo] = field(default_factory=dict)
    outstanding: dict[str, int] = field(default_factory=dict)
    ok: int = 0
    failed: int = 0
    resent: int = 0
    errors: list[str] = field(default_factory=list)
    clients: int = 0

    def routable(self) -> list[str]:
        return [k for k, i in self.engines.items() if not i.draining and i.engine_kind == "llamacpp"]

    def pick(self) -> str | None:
        keys = self.routable()
        if not keys:
            return None
        return min(keys, key=lambda k: self.outstanding.get(k, 0))

    @staticmethod
    def base_url(info: EngineInfo) -> str:
        return info.metrics_url.removesuffix("/metrics")

    async def one(self, client: Any, body: dict[str, Any]) -> None:
        import httpx

        for _ in range(5):
            key = self.pick()
            if key is None:
                await asyncio.sleep(0.2)
                continue
            info = self.engines[key]
            self.outstanding[key] = self.outstanding.get(key, 0) + 1
            try:
                r = await client.post(f"{self.base_url(info)}/v1/completions", json=body)
            except httpx.ConnectError:
                self.resent += 1  # never accepted (the worker is gone): send it elsewhere
                await asyncio.sleep(0.1)
                continue
            except httpx.HTTPError as exc:
                self.failed += 1
                self.errors.append(f"{key}: {type(exc).__name__}: {exc}"[:200])
                return
            finally:
                self.outstanding[key] -= 1
            if r.status_code == 200:
                self.ok += 1
            else:
                self.failed += 1
                self.errors.append(f"{key}: HTTP {r.status_code} {r.text[:120]}")
            return
        self.failed += 1
        self.errors.append("no worker accepted the request")

    async def client_loop(self, idx: int, stop: asyncio.Event, max_tokens: int) -> None:
        import httpx

        async with httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=2.0)) as client:
            k = 0
            while not stop.is_set() and idx < self.clients:
                body = {
                    "prompt": f"client {idx} request {k}: the quick brown fox jumps over the lazy dog",
                    "max_tokens": max_tokens,
                    "temperature": 0.0,
                    "ignore_eos": True,
                }
                await self.one(client, body)
                k += 1
                if idx >= self.clients:
                    return


async def _watch_engines(bus: Bus, namespace: str, traffic: Traffic, stop: asyncio.Event) -> None:
    import nats.errors

    kv = await bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
    watcher = await kv_watch(kv, f"{namespace}.>")
    try:
        while not stop.is_set():
            try:
                entry = await watcher.updates(timeout=0.5)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            if entry is None:
                continue
            if entry.operation in ("DEL", "PURGE") or not entry.value:
                traffic.engines.pop(entry.key, None)
                continue
            try:
                traffic.engines[entry.key] = decode(entry.value, EngineInfo)
            except DecodeError:
                continue
    finally:
        with contextlib.suppress(Exception):
            await watcher.stop()


def _argv(name: str, cfg: LlamaDemoConfig, nats_url: str, port: int, circus: str, binary: Path) -> list[str]:
    argv = [sys.executable, "-m", f"planner_{name.replace('-', '_')}", "--nats-url", nats_url,
            "--namespace", cfg.namespace, "--http-port", str(port)]  # fmt: skip
    if name == "fpm-relay":
        argv += ["--scrape-interval-s", "1", "--scrape-timeout-s", "1"]
    elif name == "decider":
        argv += [
            "--policy", "load", "--components", "agg",
            "--ttft-target-ms", str(cfg.ttft_ms), "--itl-target-ms", str(cfg.itl_ms),
            "--load-interval-s", "2", "--max-gpu-budget", str(cfg.max_workers),
            "--startup-s", "5", "--cold-start-s", "2", "--down-window-s", str(cfg.down_window_s),
            "--stale-after-s", "10",
        ]  # fmt: skip
    elif name == "actuator-circus":
        worker = (
            f"{sys.executable} -m planner_runtime.llamacpp.worker --worker-id {{worker_id}} "
            f"--component {{component}} --namespace {{namespace}} --nats-url {{nats_url}} "
            f"--parallel {cfg.parallel} --ctx-per-slot {cfg.ctx_per_slot} --binary {binary} "
            f"--log-dir {cfg.out_dir / 'logs'}"
        )
        argv += [
            "--circus-endpoint", circus, "--worker-cmd", f"'{worker}'",
            "--worker-log-dir", str(cfg.out_dir / "logs"),
            "--gpu-pool", ",".join(str(i) for i in range(cfg.max_workers)),
            "--worker-drain-timeout-s", "60", "--components", "agg", "--status-interval-s", "1",
        ]  # fmt: skip
    return argv


def _ready(rec: Recorder) -> int:
    st = rec.latest_replicas()
    cr = st.components.get("agg") if st is not None else None
    return cr.ready if cr is not None else 0


async def run_llamacpp_demo(cfg: LlamaDemoConfig, console: Console) -> dict[str, Any]:
    """Runs the loop and returns its figures; every process started is stopped on return."""
    binary = find_llama_server()
    if binary is None:
        raise RuntimeError(f"no llama-server: run scripts/ensure-llama-server.sh and set {ENV_VAR}")
    ensure_tiny_llama()
    out = cfg.out_dir
    (out / "logs").mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "nats", ignore_errors=True)
    nats = NatsServer(store_dir=out / "nats").start()
    circus: processes.Circus | None = None
    bus: Bus | None = None
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    traffic = Traffic()
    timeline: list[dict[str, Any]] = []
    try:
        ports = {name: free_port() for name in SERVICES}
        circus = processes.start_circus(out, {}, {})
        for name in SERVICES:
            log = out / "logs" / f"{name}.log"
            circus.call(
                "add",
                timeout_s=60,
                name=name,
                cmd=" ".join(_argv(name, cfg, nats.url, ports[name], circus.endpoint, binary)),
                start=True,
                options={
                    "copy_env": True,
                    "graceful_timeout": 60,
                    "stdout_stream": {"class": "FileStream", "filename": str(log)},
                    "stderr_stream": {"class": "FileStream", "filename": str(log)},
                },
            )
        unhealthy = await asyncio.to_thread(processes.wait_healthy, ports, 60)
        if unhealthy:
            raise RuntimeError(f"services not healthy: {unhealthy}; see {out / 'logs'}")
        bus = await Bus.connect(BaseSettings(nats_url=nats.url, namespace=cfg.namespace), max_wait_s=10)
        rec = Recorder(Subjects(ns=cfg.namespace))
        await rec.attach(bus)
        tasks.append(asyncio.create_task(_watch_engines(bus, cfg.namespace, traffic, stop)))
        t0 = time.monotonic()
        while not (_ready(rec) >= 1 and traffic.routable()):
            if time.monotonic() - t0 > 60:
                raise RuntimeError(f"no llama-server worker ready after 60 s; see {out / 'logs'}")
            await asyncio.sleep(0.2)
        console.print(f"[bold]llama-server[/] worker ready: {traffic.routable()}")

        def note(phase: str) -> None:
            timeline.append(
                {
                    "t": round(time.monotonic() - t0, 1),
                    "phase": phase,
                    "ready": _ready(rec),
                    "ok": traffic.ok,
                    "failed": traffic.failed,
                }
            )
            console.print(timeline[-1])

        def start_clients(n: int) -> None:
            for i in range(traffic.clients, n):
                tasks.append(asyncio.create_task(traffic.client_loop(i, stop, cfg.max_tokens)))
            traffic.clients = n

        start_clients(cfg.low_clients)
        note("low traffic")
        await asyncio.sleep(cfg.warm_s)
        start_clients(cfg.high_clients)
        note("high traffic")
        peak = 1
        deadline = time.monotonic() + cfg.load_s
        while time.monotonic() < deadline:
            peak = max(peak, _ready(rec))
            await asyncio.sleep(0.5)
        note("traffic stops")
        traffic.clients = 0
        clients = [t for t in tasks[1:] if not t.done()]
        await asyncio.gather(*clients, return_exceptions=True)
        note("traffic stopped")
        deadline = time.monotonic() + cfg.cooldown_s
        while time.monotonic() < deadline:
            peak = max(peak, _ready(rec))
            st = rec.latest_replicas()
            cr = st.components.get("agg") if st is not None else None
            at_one = cr is not None and cr.ready == 1 and cr.desired == 1 and cr.draining == 0
            if peak >= 2 and at_one and not rec.unacked_decisions():
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)
        note("end")
        decisions = [
            {
                "id": d.decision_id,
                "t": round(t, 1),
                "agg": d.targets.get("agg") if d.targets else None,
                "reason": str(d.reasons.get("agg", "")) if d.reasons else "",
                "acks": sorted({a.status for _, a in rec.acks if a.decision_id == d.decision_id}),
            }
            for t, d in rec.decisions
            if not d.advisory
        ]
        snaps = rec.snapshots.get("agg", [])
        # the model behind the snapshots that had workers (before any, there is nothing to learn from)
        sources = sorted({s.model_source for _, s in snaps if s.workers})
        figures: dict[str, Any] = {
            "ok": traffic.ok,
            "failed": traffic.failed,
            "resent": traffic.resent,
            "errors": traffic.errors[:5],
            "peak_ready": peak,
            "final_ready": _ready(rec),
            "decisions": decisions,
            "unacked_decisions": rec.unacked_decisions(),
            "model_sources": sources,
            "timeline": timeline,
        }
        (out / "summary.json").write_text(json.dumps(figures, indent=2, default=str))
        return figures
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if bus is not None:
            await bus.close()
        if circus is not None:
            await asyncio.to_thread(circus.stop, 90)
        nats.close()
