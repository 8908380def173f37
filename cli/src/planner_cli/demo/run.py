"""The demo run: everything real (nats-server, circusd, every service, engine-sim workers started by
the circus actuator), traffic that rises and falls to zero, a live view, then a report."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from planner_cli.demo import processes, report, workload
from planner_cli.demo.recorder import Recorder
from planner_cli.demo.view import render
from planner_proto import Subjects
from planner_runtime.bus import Bus
from planner_runtime.natscluster import NatsCluster
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import ManagedProcess, free_port
from planner_runtime.settings import BaseSettings

REPO = Path(__file__).resolve().parents[4]


@dataclass(frozen=True)
class DemoConfig:
    out_dir: Path = Path("out/demo")
    namespace: str = "demo"
    load_s: float = 150.0
    """How long the traffic lasts (wall seconds); then it stops and the fleet must scale down."""
    cooldown_s: float = 75.0
    """Longest wait after the traffic for the scale-down to finish."""
    base_rate_per_s: float = 2.5
    peak_rate_per_s: float = 14.0
    time_compression: float = 1.0
    startup_delay_s: float = 8.0
    gpu: str = "l40s"
    """The fleet: Llama-3.1-8B-class engines on this GPU, timed by the roofline model; the decider
    gets a profile estimated from the same model, as `planner profile --estimate` would write it."""
    ttft_ms: float = 500.0
    itl_ms: float = 50.0
    policy: str = "combined"
    gpu_budget: int = 8
    trace: Path | None = field(
        default_factory=lambda: REPO.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"
    )
    live: bool = True
    nats_cluster: int = 0
    """0: one nats-server; N >= 2: an N-node JetStream cluster on loopback (streams and KV with
    replicas = min(3, N)); every process gets the list of all nodes."""


def _service_argv(
    name: str, cfg: DemoConfig, nats_url: str, http_port: int, circus_endpoint: str, fleet: dict[str, Any]
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        f"planner_{name.replace('-', '_')}",
        "--nats-url",
        nats_url,
        "--namespace",
        cfg.namespace,
        "--http-port",
        str(http_port),
    ]
    c = cfg.time_compression
    if name == "decider":
        argv += [
            "--policy",
            cfg.policy,
            "--ttft-target-ms",
            str(cfg.ttft_ms),
            "--itl-target-ms",
            str(cfg.itl_ms),
            "--load-interval-s",
            "3",
            "--throughput-interval-s",
            "10",
            "--max-gpu-budget",
            str(cfg.gpu_budget),
            "--startup-s",
            str(cfg.startup_delay_s),
            "--down-window-s",
            "15",
            "--report-path",
            str(cfg.out_dir / "decider-report.html"),
            "--report-interval-s",
            "10",
            "--profile-dir",
            str(fleet["profile_dir"]),
        ]
    elif name == "predictor":
        # the demand forecast reaches the first sample a worker ordered now serves: the decider's lead
        argv += ["--interval-s", "5", "--startup-s", str(cfg.startup_delay_s)]
    elif name == "regression":
        # engine-sim workers are warm right after their simulated model loading; real engines keep
        # the default 120 s cold-start exclusion.
        argv += ["--cold-start-s", "10"]
    elif name == "actuator-circus":
        worker = (
            f"{sys.executable} -m planner_engine_sim --worker-id {{worker_id}} --component {{component}} "
            f"--namespace {{namespace}} --nats-url {{nats_url}} --zmq-port-base 0 --http-port 0 "
            f"--time-compression {c} --startup-delay-s {cfg.startup_delay_s} --timing roofline "
            f"--model-config {fleet['model_config']} --gpu {cfg.gpu} --num-gpu-blocks {fleet['num_gpu_blocks']} "
            f"--stream-interval-s 0.5 --log-json"
        )
        argv += [
            "--circus-endpoint",
            circus_endpoint,
            "--worker-cmd",
            f"'{worker}'",
            "--worker-log-dir",
            str(cfg.out_dir / "logs"),
            "--gpu-pool",
            ",".join(str(i) for i in range(cfg.gpu_budget)),
            "--worker-drain-timeout-s",
            "120",
            "--components",
            "prefill,decode",
        ]
    return argv


async def _wait_ready(rec: Recorder, components: tuple[str, ...], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        st = rec.latest_replicas()
        if st and all(st.components.get(c) and st.components[c].ready >= 1 for c in components):
            return True
        await asyncio.sleep(0.5)
    return False


@dataclass
class Stack:
    """A running planner: nats-server, circusd with every service as a watcher, a recorder on the
    bus, and (once started) the loadgen. Built by :func:`running_stack`; the demo and ``planner
    chaos`` both drive it."""

    cfg: DemoConfig
    nats: NatsServer | None
    """The single nats-server (None with ``nats_cluster``)."""
    circus: processes.Circus
    ports: dict[str, int]
    """HTTP (/healthz, /metrics) port of every service watcher."""
    bus: Bus
    rec: Recorder
    requests: int
    """Requests in the workload."""
    loadgen: ManagedProcess | None = None
    cluster: NatsCluster | None = None

    @property
    def nats_url(self) -> str:
        if self.cluster is not None:
            return self.cluster.url
        assert self.nats is not None
        return self.nats.url

    def start_loadgen(self) -> ManagedProcess:
        out = self.cfg.out_dir
        loadgen_log = (out / "logs" / "loadgen.log").open("ab")
        self.loadgen = ManagedProcess.start(
            [
                sys.executable,
                "-m",
                "planner_loadgen",
                "--nats-url",
                self.nats_url,
                "--namespace",
                self.cfg.namespace,
                "--http-port",
                str(free_port()),
                "--trace",
                str(out / "workload.jsonl"),
                "--interval-s",
                "5",
                "--latency-scale",
                str(self.cfg.time_compression),
                "--results-file",
                str(out / "requests.jsonl"),
                "--mode",
                "disagg",
            ],
            stdout=loadgen_log,
            stderr=subprocess.STDOUT,
        )
        loadgen_log.close()
        return self.loadgen

    def stop_loadgen(self) -> None:
        if self.loadgen is not None:
            self.loadgen.stop(timeout_s=30)


@contextlib.asynccontextmanager
async def running_stack(cfg: DemoConfig, console: Console) -> AsyncIterator[Stack]:
    """Workload, fleet profile, nats-server, circusd and every service, a recorder attached, and the
    first prefill and decode workers ready. Everything is stopped on exit."""
    out = cfg.out_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    reqs = workload.build(cfg.trace, cfg.load_s, cfg.base_rate_per_s, cfg.peak_rate_per_s)
    workload.write_mooncake(reqs, out / "workload.jsonl")
    console.print(
        f"[bold]workload[/]: {len(reqs)} requests over {cfg.load_s:.0f} s "
        f"(rate {cfg.base_rate_per_s:g} -> {cfg.peak_rate_per_s:g} -> 0 req/s, ISL/OSL from the Azure conv trace)"
    )

    fleet = _prepare_fleet(cfg, console)
    # A fresh JetStream store per run: decisions, decision ids and actuator state left by an earlier
    # run in the same folder describe workers that no longer exist.
    shutil.rmtree(out / "nats", ignore_errors=True)
    nats: NatsServer | None = None
    cluster: NatsCluster | None = None
    if cfg.nats_cluster >= 2:
        cluster = NatsCluster(cfg.nats_cluster, store_dir=out / "nats")
        try:
            cluster.start()
        except BaseException:
            cluster.close()
            raise
        nats_url = cluster.url
    else:
        nats = NatsServer(store_dir=out / "nats").start()
        nats_url = nats.url
    circus: processes.Circus | None = None
    stack: Stack | None = None
    bus: Bus | None = None
    try:
        if cluster is not None:
            console.print(
                f"[bold]nats cluster[/] {cluster.size} nodes (JetStream R{min(3, cluster.size)}): {nats_url}"
            )
        else:
            console.print(f"[bold]nats-server[/] {nats_url}")
        ports = {name: free_port() for name in processes.DEMO_SERVICES}
        circus = processes.start_circus(out, {}, {})
        watchers = {
            name: _service_argv(name, cfg, nats_url, ports[name], circus.endpoint, fleet)
            for name in processes.DEMO_SERVICES
        }
        for name, argv in watchers.items():
            log = out / "logs" / f"{name}.log"
            circus.call(
                "add",
                timeout_s=60,
                name=name,
                cmd=" ".join(argv),
                start=True,
                options={
                    "copy_env": True,
                    "graceful_timeout": 60,
                    "stdout_stream": {"class": "FileStream", "filename": str(log)},
                    "stderr_stream": {"class": "FileStream", "filename": str(log)},
                },
            )
        console.print(f"[bold]circusd[/] {circus.endpoint}: {', '.join(processes.DEMO_SERVICES)}")
        unhealthy = await asyncio.to_thread(processes.wait_healthy, ports, 90)
        if unhealthy:
            raise RuntimeError(f"services not healthy: {unhealthy}; see {out / 'logs'}")

        bus = await Bus.connect(BaseSettings(nats_url=nats_url, namespace=cfg.namespace), max_wait_s=10)
        rec = Recorder(Subjects(ns=cfg.namespace))
        await rec.attach(bus)
        console.print("waiting for the first prefill and decode workers (started by the actuator) ...")
        if not await _wait_ready(rec, ("prefill", "decode"), 120):
            raise RuntimeError(f"no ready workers after 120 s; see {out / 'logs'}")
        stack = Stack(
            cfg=cfg,
            nats=nats,
            circus=circus,
            ports=ports,
            bus=bus,
            rec=rec,
            requests=len(reqs),
            cluster=cluster,
        )
        yield stack
    finally:
        if stack is not None:
            stack.stop_loadgen()
        if bus is not None:
            await bus.close()
        if circus is not None:
            await asyncio.to_thread(circus.stop, 120)
        if nats is not None:
            nats.close()
        if cluster is not None:
            cluster.close()


async def run_demo(cfg: DemoConfig, console: Console) -> dict[str, Any]:
    out = cfg.out_dir
    async with running_stack(cfg, console) as stack:
        rec = stack.rec
        loadgen = stack.start_loadgen()
        t_load = time.monotonic()
        total = cfg.load_s + cfg.cooldown_s
        phase = "load"

        def done() -> bool:
            if loadgen.poll() is None:
                return False
            st = rec.latest_replicas()
            at_min = st is not None and all(
                cr.ready <= 1 and cr.desired <= 1 and cr.draining == 0 for cr in st.components.values()
            )
            return at_min and not rec.unacked_decisions()

        async def loop(update: Any) -> None:
            nonlocal phase
            while True:
                elapsed = time.monotonic() - t_load
                if loadgen.poll() is not None and phase == "load":
                    phase = "traffic over: scaling down"
                update(render(rec, elapsed, total, cfg.ttft_ms, cfg.itl_ms, phase))
                if done() or elapsed > total + 60:
                    return
                await asyncio.sleep(1.0)

        if cfg.live and console.is_terminal:
            with Live(console=console, refresh_per_second=2, transient=False) as live:
                await loop(live.update)
        else:
            last = [0.0]

            def printer(_: Any) -> None:
                if time.monotonic() - last[0] > 15:
                    last[0] = time.monotonic()
                    console.print(
                        render(rec, time.monotonic() - t_load, total, cfg.ttft_ms, cfg.itl_ms, phase)
                    )

            await loop(printer)
        await asyncio.sleep(1.0)
        results = read_results(out / "requests.jsonl")
        figures = report.summary(rec, results, cfg.ttft_ms, cfg.itl_ms)
        figures["scaled_down_at_end"] = done()
        figures["wall_s"] = round(time.monotonic() - t_load, 1)
        png = out / "demo.png"
        report.plot(rec, png, cfg.ttft_ms, cfg.itl_ms)
        report.write_html(rec, figures, png, out / "report.html")
        (out / "summary.json").write_text(json.dumps(figures, indent=2, default=str))
        return figures


def _prepare_fleet(cfg: DemoConfig, console: Console) -> dict[str, Any]:
    from planner_cli.estimate import load_model, write_default_model_config, write_profile
    from planner_core.profiling.model_estimate import estimate_model

    model = REPO.parent / "shared" / "data" / "model_configs" / "meta-llama--Llama-3.1-8B.json"
    if not model.exists():
        model = write_default_model_config(cfg.out_dir / "model-config.json")
    # the demo's simulated engines run the plain roofline: the decider's profile must describe them
    estimate = estimate_model(
        load_model(model), cfg.gpu, ttft_ms=cfg.ttft_ms, itl_ms=cfg.itl_ms, plain_roofline=True
    )
    summary = write_profile(estimate, cfg.out_dir / "profile")
    console.print(
        f"[bold]fleet[/]: Llama-3.1-8B-class engines on {cfg.gpu} (roofline timing), "
        f"{summary['prefill_req_per_s_per_engine']} req/s prefill and {summary['decode_req_per_s_per_engine']} "
        f"req/s decode per engine at the SLA; profile for the decider in {cfg.out_dir / 'profile'}"
    )
    return {
        "model_config": model.resolve(),
        "profile_dir": (cfg.out_dir / "profile").resolve(),
        "num_gpu_blocks": summary["num_gpu_blocks"],
    }


def read_results(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def print_summary(figures: dict[str, Any], out: Path, console: Console) -> None:
    table = Table(title="demo summary")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for k, v in figures.items():
        table.add_row(k, str(v))
    console.print(table)
    console.print(f"report: {out / 'report.html'}  plot: {out / 'demo.png'}  logs: {out / 'logs'}")
