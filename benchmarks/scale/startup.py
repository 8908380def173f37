"""Starting the fleet under test: the engine processes (their endpoints once bound), then the decider,
the regression and the relays (KV discovery, or static engine lists split between them), and waiting
until they serve /metrics and the relays see each other."""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from pathlib import Path

import yaml

from planner_runtime.processes import free_port
from scale.config import ScaleConfig
from scale.fleet import Fleet, Proc, read_json_line, tail
from scale.readings import scrape, total

ENGINES_SCRIPT = Path(__file__).with_name("engines.py")


async def start_engines(
    cfg: ScaleConfig, fleet: Fleet, log_dir: Path, nats_url: str
) -> tuple[list[Proc], dict[str, str]]:
    """``cfg.engine_procs`` processes sharing the engines; returns them and every engine's endpoint
    (key ``component:worker``) once all sockets are bound."""
    per = math.ceil(cfg.engines / cfg.engine_procs)
    ipc_dir = log_dir / "ipc"
    ipc_dir.mkdir()
    engine_procs: list[Proc] = []
    for i in range(cfg.engine_procs):
        first, count = i * per, min(per, cfg.engines - i * per)
        if count <= 0:
            break
        spec = {
            "nats_url": nats_url, "namespace": cfg.namespace, "first": first, "count": count, "rate": cfg.rate,
            "idle_fraction": cfg.idle_fraction, "prefill_fraction": cfg.prefill_fraction,
            "transport": cfg.transport, "ipc_dir": str(ipc_dir), "sndhwm": cfg.sndhwm,
        }  # fmt: skip
        engine_procs.append(
            fleet.spawn(
                f"engines-{i}",
                "engines",
                [sys.executable, str(ENGINES_SCRIPT), json.dumps(spec)],
                log_dir,
                pipes=True,
            )
        )
    endpoints: dict[str, str] = {}
    for p in engine_procs:
        endpoints.update((await read_json_line(p, 120))["endpoints"])
    return engine_procs, endpoints


def start_services(
    cfg: ScaleConfig, fleet: Fleet, log_dir: Path, nats_url: str, endpoints: dict[str, str]
) -> tuple[Proc, Proc, list[Proc]]:
    """The decider (advisory, no budget or replica cap), the regression and ``cfg.relays`` relays."""

    def start_service(name: str, role: str, module: str, *extra: str) -> Proc:
        port = free_port()
        args = [sys.executable, "-m", module, "--nats-url", nats_url, "--namespace", cfg.namespace]
        args += ["--http-port", str(port), "--log-level", "warning", *extra]
        return fleet.spawn(name, role, args, log_dir, http_port=port)

    decider = start_service(
        "decider", "decider", "planner_decider", "--advisory", "--max-gpu-budget", "-1", "--max-replicas", "-1",
        "--load-interval-s", str(cfg.decider_interval_s),
    )  # fmt: skip
    regression = start_service(
        "regression", "regression", "planner_regression", "--tick-s", str(cfg.regression_tick_s),
        "--components", "prefill,decode",
    )  # fmt: skip
    relays: list[Proc] = []
    keys = sorted(endpoints)
    for i in range(cfg.relays):
        extra = ["--relay-id", f"relay-{i}", *cfg.relay_args]
        if cfg.discovery == "static":
            mine = keys[i :: cfg.relays]
            conf = log_dir / f"relay-{i}.yaml"
            conf.write_text(yaml.safe_dump({"static_engines": [f"{k}={endpoints[k]}" for k in mine]}))
            extra += ["--no-watch-engines", "--no-sharding", "--config", str(conf)]
        relays.append(start_service(f"relay-{i}", "relay", "planner_fpm_relay", *extra))
    return decider, regression, relays


async def wait_http(procs: list[Proc], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for p in procs:
        while True:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited at start: {tail(p)}")
            try:
                await asyncio.to_thread(scrape, p.http_port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{p.name} did not serve /metrics: {tail(p)}") from None
                await asyncio.sleep(0.2)


async def wait_members(relays: list[Proc], n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = await asyncio.gather(*(asyncio.to_thread(scrape, r.http_port) for r in relays))
        if all(total(m, "planner_fpm_relay_members") >= n for m in got):
            return
        await asyncio.sleep(0.3)
