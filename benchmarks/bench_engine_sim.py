"""engine-sim capacity: the highest request rate one engine-sim process sustains on one core.

Starts an embedded nats-server and one engine-sim process pinned to one CPU (calibrated H200 timing,
``--compression`` 100 by default so that the simulated GPU is not the limit), then offers Poisson
traffic at rising rates (x``--factor`` per step, ``--step-s`` seconds each) from this process, pinned
to the other CPUs. A step is sustained when all its requests complete within ``--settle-s`` after it,
the engine's median real-time lag stays under ``--max-lag-ms`` without resets, and its CPU stays under 95 %.

    uv run python benchmarks/bench_engine_sim.py [--isl 512] [--osl 64] [--start-rate 50] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass

import msgspec
import nats

from planner_proto import GenerateRequest, Subjects, TokenChunk, encode
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port

CLK_TCK = os.sysconf("SC_CLK_TCK")
DECODER = msgspec.json.Decoder(TokenChunk)


@dataclass
class Step:
    offered_per_s: float
    sent: int
    completed_per_s: float
    passes_per_s: float
    engine_cpu_pct: float
    max_lag_ms: float
    lag_resets: int
    ttft_p50_ms: float
    unfinished: int
    sustained: bool
    limit: str


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for name in (
        "planner_engine_passes_total",
        "planner_engine_lag_seconds",
        "planner_engine_lag_resets_total",
    ):
        m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out


def registered(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return bool(json.loads(r.read()).get("registered"))
    except OSError:
        return False


async def wait_registered(port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await asyncio.to_thread(registered, port):
            return
        await asyncio.sleep(0.2)
    raise TimeoutError("engine-sim did not register")


async def run_step(
    nc: nats.NATS, subject: str, rate: float, args: argparse.Namespace, pid: int, http_port: int, step_no: int
) -> Step:
    inbox = nc.new_inbox()
    sent_at: dict[str, float] = {}
    ttft: list[float] = []
    done: list[float] = []
    seen_first: set[str] = set()

    async def on_chunk(msg: nats.aio.msg.Msg) -> None:
        c = DECODER.decode(msg.data)
        now = time.monotonic()
        if c.tokens and c.request_id not in seen_first:
            seen_first.add(c.request_id)
            ttft.append(now - sent_at[c.request_id])
        if c.finished or c.error:
            done.append(now)

    sub = await nc.subscribe(f"{inbox}.*", cb=on_chunk)
    rng = random.Random(step_no)
    lags: list[float] = []
    before = await asyncio.to_thread(scrape, http_port)
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    next_scrape = t0 + 0.5
    t, i = 0.0, 0
    while True:
        t += rng.expovariate(rate)
        if t >= args.step_s:
            break
        delay = t0 + t - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        rid = f"{step_no}-{i}"
        sent_at[rid] = time.monotonic()
        req = GenerateRequest(
            request_id=rid, input_tokens=args.isl, output_tokens=args.osl, reply_subject=f"{inbox}.{i}"
        )
        await nc.publish(subject, encode(req))
        i += 1
        if time.monotonic() >= next_scrape:
            lags.append((await asyncio.to_thread(scrape, http_port))["planner_engine_lag_seconds"])
            next_scrape += 0.5
    t_end = time.monotonic()
    after = await asyncio.to_thread(scrape, http_port)
    cpu = (cpu_seconds(pid) - cpu0) / (t_end - t0)
    settle_deadline = t_end + args.settle_s
    while len(done) < i and time.monotonic() < settle_deadline:
        await asyncio.sleep(0.05)
    await sub.unsubscribe()
    in_window = sum(1 for d in done if d <= t_end + 0.5)
    resets = int(after["planner_engine_lag_resets_total"] - before["planner_engine_lag_resets_total"])
    max_lag = max([*lags, after["planner_engine_lag_seconds"]])
    unfinished = i - len(done)
    limit = ""
    if cpu >= 0.95:
        limit = "cpu"
    elif resets or sorted(lags or [0.0])[len(lags) // 2] * 1e3 > args.max_lag_ms:  # median: spikes are noise
        limit = "lag"
    elif unfinished:
        limit = "queue"
    ttft.sort()
    return Step(
        offered_per_s=rate,
        sent=i,
        completed_per_s=in_window / (t_end - t0),
        passes_per_s=(after["planner_engine_passes_total"] - before["planner_engine_passes_total"])
        / (t_end - t0),
        engine_cpu_pct=cpu * 100,
        max_lag_ms=max_lag * 1e3,
        lag_resets=resets,
        ttft_p50_ms=ttft[len(ttft) // 2] * 1e3 if ttft else float("nan"),
        unfinished=unfinished,
        sustained=not limit,
        limit=limit or "-",
    )


async def bench(args: argparse.Namespace) -> dict[str, object]:
    cpus = sorted(os.sched_getaffinity(0))
    engine_cpu, others = cpus[0], set(cpus[1:]) or {cpus[0]}
    http_port = free_port()
    with NatsServer() as server:
        cmd = [
            sys.executable, "-m", "planner_engine_sim", "--nats-url", server.url, "--namespace", "bench",
            "--worker-id", "bench", "--zmq-port-base", "0", "--http-port", str(http_port),
            "--time-compression", str(args.compression), "--log-level", "warning",
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: ASYNC220
        try:
            os.sched_setaffinity(proc.pid, {engine_cpu})
            os.sched_setaffinity(0, others)
            await wait_registered(http_port)
            nc = await nats.connect(server.url)
            subject = Subjects(ns="bench").generate("bench")
            steps: list[Step] = []
            rate = args.start_rate
            for n in range(args.max_steps):
                step = await run_step(nc, subject, rate, args, proc.pid, http_port, n)
                steps.append(step)
                if not args.json:
                    print_row(step, header=n == 0)
                if not step.sustained:
                    break
                rate *= args.factor
            await nc.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    best = max((s for s in steps if s.sustained), key=lambda s: s.offered_per_s, default=None)
    return {
        "isl_tokens": args.isl,
        "osl_tokens": args.osl,
        "time_compression": args.compression,
        "engine_cpu": engine_cpu,
        "max_sustained_req_per_s": best.completed_per_s if best else 0.0,
        "passes_per_s_at_max": best.passes_per_s if best else 0.0,
        "engine_cpu_pct_at_max": best.engine_cpu_pct if best else 0.0,
        "first_limit": next((s.limit for s in steps if not s.sustained), "none reached"),
        "steps": [asdict(s) for s in steps],
    }


COLUMNS = (
    ("offered/s", "offered_per_s", "{:.0f}"),
    ("done/s", "completed_per_s", "{:.0f}"),
    ("passes/s", "passes_per_s", "{:.0f}"),
    ("cpu %", "engine_cpu_pct", "{:.0f}"),
    ("lag ms", "max_lag_ms", "{:.1f}"),
    ("resets", "lag_resets", "{}"),
    ("ttft p50 ms", "ttft_p50_ms", "{:.1f}"),
    ("unfinished", "unfinished", "{}"),
    ("limit", "limit", "{}"),
)


def print_row(step: Step, header: bool) -> None:
    if header:
        print("  ".join(f"{c[0]:>11}" for c in COLUMNS))
    row = asdict(step)
    print("  ".join(f"{c[2].format(row[c[1]]):>11}" for c in COLUMNS), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--isl", type=int, default=512)
    p.add_argument("--osl", type=int, default=64)
    p.add_argument("--compression", type=float, default=100.0)
    p.add_argument("--start-rate", type=float, default=50.0)
    p.add_argument("--factor", type=float, default=1.5)
    p.add_argument("--step-s", type=float, default=4.0)
    p.add_argument("--settle-s", type=float, default=3.0)
    p.add_argument("--max-lag-ms", type=float, default=50.0)
    p.add_argument("--max-steps", type=int, default=12)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    result = asyncio.run(bench(args))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"\nmax sustained: {result['max_sustained_req_per_s']:.0f} req/s, "
            f"{result['passes_per_s_at_max']:.0f} passes/s at {result['engine_cpu_pct_at_max']:.0f} % of one core "
            f"(ISL {args.isl}, OSL {args.osl}, compression {args.compression:g}x); "
            f"first limit hit: {result['first_limit']}"
        )


if __name__ == "__main__":
    main()
