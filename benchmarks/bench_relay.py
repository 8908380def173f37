"""FPM relay speed against the raw nats-py ceiling, on this machine, in one run.

(a) raw ceiling: a nats-py publisher process blasts ~430-byte FPM payloads to the NATS subscriber in
    this process (the same subscriber measures everything).
(b) relay end to end: a ZMQ PUB process (the "engine") -> the relay service in its own process (default
    settings: validation and sharding on) -> NATS -> the same subscriber.
Throughput is counted at the subscriber (first to last message of a blast). Latency runs send at a
fixed rate; each payload is a valid FPM whose ``counter_id`` indexes the send-time table written by
the sending process (CLOCK_MONOTONIC is shared by all processes), so latency = receive - send.
"Added" latency is the relay path minus the raw NATS path at the same rate and percentile.

After a warm-up, (a) and (b) run ``--reps`` times, alternating, so that both see the same load; the
table shows the median and the range over the repetitions, and the ratio is the median of the
per-repetition ratios. CPU per message of every process on the path is measured from /proc during
the throughput blasts; on a shared machine the ratio follows the total CPU of each path.

    uv run python benchmarks/bench_relay.py [--n 100000] [--reps 5] [--json]
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


