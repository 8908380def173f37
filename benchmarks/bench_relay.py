"""FPM relay speed against the raw nats-py ceiling, on this machine, in one run.

(a) raw ceiling: a nats-py publisher process blasts ~430-byte FPM payloads to the NATS subscriber in
    this process (the same subscriber measures everything).
(b) relay end to end: a ZMQ PUB process (the "engine") -> the relay service in its own process (default
    settings: validation and sharding on) -> NATS -> the same subscriber.
Throughput is counted at the subscriber (first to last message of a blast). Latency runs send at a
fixed rate; each payload is a valid FPM whose ``counter_id`` indexes the send-time table written by
the sending process (CLOCK_MONOTONIC is shared by all processes), so latency = receive - send.
"Added" latency is the relay path minus the raw NATS path at the same rate and percentile.

    uv run python benchmarks/bench_relay.py [--n 100000] [--json]
"""

from __future__ import annotations

import argparse
import array
import asyncio
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from planner_proto import ForwardPassMetrics, QueuedRequestMetrics, ScheduledRequestMetrics, encode_fpm

SUBJECT = "planner.bench.fpm.agg.bench"
_DEC = msgspec.msgpack.Decoder(ForwardPassMetrics)


def payload(counter: int) -> bytes:
    return encode_fpm(
        ForwardPassMetrics(
            worker_id="bench",
            counter_id=counter,
            wall_time=0.0123,
            scheduled_requests=ScheduledRequestMetrics(1, 2000, 3.5, 400, 50, 60000, 123.4),
            queued_requests=QueuedRequestMetrics(2, 3000, 4.5, 5, 6000, 7.5),
        )
    )


# ---- sender processes: read "run START N RATE FILE" lines on stdin, answer "done" -------------------
def paced_send(send: Any, start: int, n: int, rate: float, out: str) -> None:
    payloads = [payload(start + i) for i in range(n)]
    times = array.array("q", bytes(8 * n))
    clock = time.monotonic_ns
    t0 = clock()
    for i in range(n):
        if rate > 0:
            target = t0 + int(i * 1e9 / rate)
            while (now := clock()) < target:
                if target - now > 300_000:
                    time.sleep((target - now - 200_000) / 1e9)
        times[i] = clock()
        send(start + i, payloads[i])
    Path(out).write_bytes(times.tobytes())


def zmq_sender(endpoint: str) -> None:
    import zmq

    from planner_proto import pack_frames

    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.bind(endpoint)
    warm = 0
    joined = False
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], 0.01 if not joined else None)
        if not ready:  # until the first run, a heartbeat so that the relay's SUB can join
            warm += 1
            sock.send_multipart(pack_frames(warm, payload(10**12 + warm)))
            continue
        line = sys.stdin.readline().split()
        if not line or line[0] == "quit":
            return
        start, n, rate, out = int(line[1]), int(line[2]), float(line[3]), line[4]
        joined = True
        seq0 = warm + 1

        def send(counter: int, data: bytes, seq0: int = seq0, start: int = start) -> None:
            sock.send_multipart([b"", (seq0 + counter - start).to_bytes(8, "big"), data], copy=False)

        paced_send(send, start, n, rate, out)
        warm = seq0 + n
        print("done", flush=True)


def nats_sender(url: str) -> None:
    import nats

    async def main() -> None:
        nc = await nats.connect(url)
        loop = asyncio.get_running_loop()
        while True:
            line = (await loop.run_in_executor(None, sys.stdin.readline)).split()
            if not line or line[0] == "quit":
                break
            start, n, rate, out = int(line[1]), int(line[2]), float(line[3]), line[4]
            # Publishing is async: yield now and then so that nats-py's flusher runs.
            payloads = [payload(start + i) for i in range(n)]
            times = array.array("q", bytes(8 * n))
            t0 = time.monotonic_ns()
            for i in range(n):
                if rate > 0:
                    target = t0 + int(i * 1e9 / rate)
                    while (now := time.monotonic_ns()) < target:
                        await asyncio.sleep(max(0.0, (target - now - 200_000) / 1e9))
                times[i] = time.monotonic_ns()
                await nc.publish(SUBJECT, payloads[i])
                if rate == 0 and i % 512 == 0:
                    await asyncio.sleep(0)
            await nc.flush()
            await asyncio.to_thread(Path(out).write_bytes, times.tobytes())
            print("done", flush=True)
        await nc.close()

    asyncio.run(main())


# ---- the measuring side ---------------------------------------------------------------------------
class Sink:
    def __init__(self) -> None:
        self.count = 0
        self.first_ns = 0
        self.last_ns = 0
        self.decode = False
        self.recv: dict[int, int] = {}

    async def cb(self, msg: Any) -> None:
        now = time.monotonic_ns()
        if self.count == 0:
            self.first_ns = now
        self.count += 1
        self.last_ns = now
        if self.decode:
            self.recv[_DEC.decode(msg.data).counter_id] = now

    def reset(self, decode: bool) -> None:
        self.count, self.first_ns, self.last_ns, self.decode, self.recv = 0, 0, 0, decode, {}


class Sender:
    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    async def run(self, start: int, n: int, rate: float, out: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"run {start} {n} {rate} {out}\n")
        self.proc.stdin.flush()
        line = await asyncio.to_thread(self.proc.stdout.readline)
        assert line.strip() == "done", line

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


async def wait_count(sink: Sink, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    idle_since = time.monotonic()
    last = -1
    while sink.count < n and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        if sink.count != last:
            last, idle_since = sink.count, time.monotonic()
        elif time.monotonic() - idle_since > 2.0:
            break  # nothing more is coming


async def throughput(sink: Sink, sender: Sender, start: int, n: int, tmp: str) -> dict[str, float]:
    sink.reset(decode=False)
    await sender.run(start, n, 0, f"{tmp}/tp.bin")
    await wait_count(sink, n, 120)
    span_s = max(1e-9, (sink.last_ns - sink.first_ns) / 1e9)
    return {"msgs_per_s": (sink.count - 1) / span_s, "received": sink.count, "sent": n}


async def latency(
    sink: Sink, sender: Sender, start: int, rate: float, seconds: float, tmp: str
) -> dict[str, float]:
    n = int(rate * seconds)
    sink.reset(decode=True)
    out = f"{tmp}/lat.bin"
    await sender.run(start, n, rate, out)
    await wait_count(sink, n, 30)
    sent = array.array("q")
    sent.frombytes(await asyncio.to_thread(Path(out).read_bytes))
    lat_ms = sorted((sink.recv[start + i] - t) / 1e6 for i, t in enumerate(sent) if start + i in sink.recv)
    if not lat_ms:
        return {"received": 0, "sent": n}
    q = statistics.quantiles(lat_ms, n=100, method="inclusive")
    return {"p50_ms": q[49], "p99_ms": q[98], "max_ms": lat_ms[-1], "received": len(lat_ms), "sent": n}


async def bench(n: int) -> dict[str, Any]:
    import nats
    import zmq  # noqa: F401  (fail early when missing)

    from planner_runtime.natsd import NatsServer, free_port

    out: dict[str, Any] = {"payload_bytes": len(payload(123456)), "cpus": os.cpu_count()}
    with NatsServer() as server, tempfile.TemporaryDirectory() as tmp:
        nc = await nats.connect(server.url)
        sink = Sink()
        await nc.subscribe(SUBJECT, cb=sink.cb, pending_msgs_limit=-1, pending_bytes_limit=-1)
        await nc.flush()

        raw = Sender(["--role", "nats", "--url", server.url])
        try:
            await throughput(sink, raw, 0, min(n, 20_000), tmp)  # warm-up
            out["raw_throughput"] = await throughput(sink, raw, 0, n, tmp)
            out["raw_latency_1k"] = await latency(sink, raw, 0, 1_000, 3.0, tmp)
            out["raw_latency_10k"] = await latency(sink, raw, 0, 10_000, 2.0, tmp)
        finally:
            raw.close()

        endpoint = f"tcp://127.0.0.1:{free_port()}"
        engine = Sender(["--role", "zmq", "--endpoint", endpoint])
        relay = subprocess.Popen(  # noqa: ASYNC220  (started once, before anything is timed)
            [sys.executable, "-m", "planner_fpm_relay", "--nats-url", server.url, "--namespace", "bench",
             "--static-engines", f"agg:bench={endpoint}", "--no-watch-engines", "--zmq-rcvhwm", "0",
             "--log-level", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            sink.reset(decode=False)
            deadline = time.monotonic() + 30
            while sink.count < 5 and time.monotonic() < deadline and relay.poll() is None:
                await asyncio.sleep(0.05)  # until the engine's heartbeats flow through the relay
            if sink.count < 5:
                raise RuntimeError("the relay never relayed the engine's heartbeats")
            await throughput(sink, engine, 0, min(n, 20_000), tmp)  # warm-up
            cpu0 = cpu_s(relay.pid)
            out["relay_throughput"] = await throughput(sink, engine, 0, n, tmp)
            out["relay_cpu_us_per_msg"] = (cpu_s(relay.pid) - cpu0) / n * 1e6
            out["relay_latency_1k"] = await latency(sink, engine, 0, 1_000, 3.0, tmp)
            out["relay_latency_10k"] = await latency(sink, engine, 0, 10_000, 2.0, tmp)
        finally:
            engine.close()
            relay.terminate()
            relay.wait(20)
        await nc.close()

    out["ratio"] = out["relay_throughput"]["msgs_per_s"] / out["raw_throughput"]["msgs_per_s"]
    for rate in ("1k", "10k"):
        r, b = out[f"relay_latency_{rate}"], out[f"raw_latency_{rate}"]
        if "p50_ms" in r and "p50_ms" in b:
            out[f"added_latency_{rate}"] = {
                "p50_ms": r["p50_ms"] - b["p50_ms"],
                "p99_ms": r["p99_ms"] - b["p99_ms"],
            }
    out["targets_met"] = {
        "throughput_ratio_ge_0.8": out["ratio"] >= 0.8,
        "p99_le_3ms_at_1k": out["relay_latency_1k"].get("p99_ms", 1e9) <= 3.0,
    }
    return out


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000, help="messages per throughput blast")
    p.add_argument("--json", action="store_true")
    p.add_argument("--role", choices=["zmq", "nats"], help=argparse.SUPPRESS)
    p.add_argument("--endpoint", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.role == "zmq":
        zmq_sender(a.endpoint)
        return
    if a.role == "nats":
        nats_sender(a.url)
        return
    res = asyncio.run(bench(a.n))
    if a.json:
        print(json.dumps(res, indent=2))
        return
    print(f"payload {res['payload_bytes']} B, {res['cpus']} CPUs")
    print(f"(a) raw nats-py ceiling : {res['raw_throughput']['msgs_per_s']:>10,.0f} msg/s")
    print(f"(b) relay end to end    : {res['relay_throughput']['msgs_per_s']:>10,.0f} msg/s"
          f"  (received {res['relay_throughput']['received']}/{res['relay_throughput']['sent']})")  # fmt: skip
    print(f"    ratio (b)/(a)       : {res['ratio']:.2f}  (target >= 0.8)")
    print(f"    relay CPU per msg   : {res['relay_cpu_us_per_msg']:.1f} us")
    for rate in ("1k", "10k"):
        r, b = res[f"relay_latency_{rate}"], res[f"raw_latency_{rate}"]
        print(f"latency @{rate:>3}/s  relay p50 {r.get('p50_ms', float('nan')):.3f} ms  p99 "
              f"{r.get('p99_ms', float('nan')):.3f} ms | raw NATS p50 {b.get('p50_ms', float('nan')):.3f} ms"
              f"  p99 {b.get('p99_ms', float('nan')):.3f} ms")  # fmt: skip
        if f"added_latency_{rate}" in res:
            d = res[f"added_latency_{rate}"]
            print(f"               added by the relay: p50 {d['p50_ms']:.3f} ms  p99 {d['p99_ms']:.3f} ms")
    print(f"targets met: {res['targets_met']}")


if __name__ == "__main__":
    main()
