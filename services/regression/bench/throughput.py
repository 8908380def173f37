"""Throughput check of the regression service: a publisher process sends FPMs for N engines at a
target rate through a local nats-server to a real regression process; the received rate and the tick
time are read from the service's /metrics.

    uv run python services/regression/bench/throughput.py --engines 1000 --rate 50000 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from planner_proto import ForwardPassMetrics, ScheduledRequestMetrics, Subjects, encode_fpm
from planner_runtime.bus import Bus
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port
from planner_runtime.settings import BaseSettings


def metric(port: int, name: str, labels: str = "") -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        body = r.read().decode()
    total = 0.0
    for line in body.splitlines():
        if line.startswith(name) and labels in line and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_up(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError("service did not start")


async def publish(url: str, engines: int, rate: float, seconds: float) -> int:
    subjects = Subjects(ns="bench")
    bus = await Bus.connect(BaseSettings(nats_url=url), max_wait_s=5)
    comps = ("prefill", "decode", "agg")
    msgs = []
    for e in range(engines):
        comp = comps[e % 3]
        s = ScheduledRequestMetrics(
            num_prefill_requests=1,
            sum_prefill_tokens=100 + e,
            num_decode_requests=1 + e % 64,
            sum_decode_kv_tokens=1000 * (1 + e % 50),
        )
        payload = encode_fpm(
            ForwardPassMetrics(worker_id=f"e{e}", wall_time=0.01 + e * 1e-6, scheduled_requests=s)
        )
        msgs.append((subjects.fpm(comp, f"e{e}"), payload))
    sent = 0
    t0 = time.perf_counter()
    batch = 500
    while (elapsed := time.perf_counter() - t0) < seconds:
        target = int(rate * elapsed)
        while sent < target:
            for _ in range(min(batch, target - sent)):
                subj, payload = msgs[sent % engines]
                await bus.nc.publish(subj, payload)
                sent += 1
            await asyncio.sleep(0)
        await asyncio.sleep(0.002)
    await bus.nc.flush()
    await bus.close()
    return sent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engines", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=50_000.0, help="FPM per second, all engines together")
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    with NatsServer() as server:
        port = free_port()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "planner_regression",
                "--nats-url",
                server.url,
                "--namespace",
                "bench",
                "--http-port",
                str(port),
                "--log-level",
                "warning",
            ],
        )
        try:
            wait_up(port)
            cpu0, got0 = cpu_s(proc.pid), metric(port, "planner_regression_messages_total")
            t0 = time.perf_counter()
            sent = asyncio.run(publish(server.url, args.engines, args.rate, args.seconds))
            pub_s = time.perf_counter() - t0
            # let the service catch up (bounded), then read its counters
            deadline = time.monotonic() + 30
            got = 0.0
            while time.monotonic() < deadline:
                got = metric(port, "planner_regression_messages_total")
                if got >= sent:
                    break
                time.sleep(0.25)
            done_s = time.perf_counter() - t0
            cpu = cpu_s(proc.pid) - cpu0
            ticks = metric(port, "planner_tick_seconds_count", 'loop="tick"')
            tick_sum = metric(port, "planner_tick_seconds_sum", 'loop="tick"')
            print(
                json.dumps(
                    {
                        "engines": args.engines,
                        "target_rate_per_s": args.rate,
                        "sent": sent,
                        "publish_rate_per_s": round(sent / pub_s),
                        "received": int(got),
                        "processed_rate_per_s": round(got / done_s),
                        "lag_s": round(done_s - pub_s, 2),
                        "mean_tick_ms": round(1000 * tick_sum / max(ticks, 1), 1),
                        "service_cpu_s": round(cpu, 2),
                        "cpu_us_per_msg": round(1e6 * cpu / max(got - got0, 1), 2),
                        "one_core_capacity_per_s": round((got - got0) / max(cpu, 1e-9)),
                    }
                )
            )
        finally:
            proc.terminate()
            proc.wait(20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
