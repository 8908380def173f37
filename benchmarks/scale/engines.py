"""Synthetic engines for the scale bench: one process owns many ZMQ PUB sockets, one per engine.

Each engine sends ForwardPassMetrics exactly as a real engine does (section 3 of DESIGN.md:
multipart ``[b"", u64 sequence, msgpack map]``), busy ones at ``rate`` passes per second, idle ones an
all-zero heartbeat every second. Payloads are realistic (decode: 8-160 running requests, 1-3 k tokens
of context each, wall time 20-40 ms; prefill: 0.5-8 k token chunks) and pre-encoded, 32 variants per
engine, so that the sender spends its CPU on sending. Every engine is registered in ``planner_engines``
(EngineInfo with capabilities and a ``started_at_s`` in the past, so regression fits at once) and
refreshed every ENGINES_TTL_S / 3, as an engine sidecar would.

Protocol with the harness (one JSON object per line): on stdout, ``{"endpoints": {...}}`` once the
sockets are bound, then ``{"registered_s": ...}`` once every key is in the registry; on stdin,
``register`` (sockets are bound and sending from the start; the keys go in on this command),
``stats`` (answered with the cumulative counters) and ``stop`` (answered with the counters, keys
deleted, exit 0).

    python benchmarks/scale/engines.py '<json config>'
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import sys
import time
from typing import Any

import zmq

from planner_proto import (
    EngineCapabilities,
    EngineInfo,
    ForwardPassMetrics,
    QueuedRequestMetrics,
    ScheduledRequestMetrics,
    Subjects,
    encode,
    encode_fpm,
)
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S
from planner_runtime.bus import Bus
from planner_runtime.settings import BaseSettings

VARIANTS = 32
TICK_S = 0.005
MAX_LAG_S = 0.5
"""When the sender falls further behind than this, it skips ahead (and counts what it skipped)."""


def worker_id(index: int) -> str:
    return f"e{index:05d}"


def component_of(index: int, prefill_fraction: float) -> str:
    return "prefill" if random.Random(f"c{index}").random() < prefill_fraction else "decode"


def is_idle(index: int, idle_fraction: float) -> bool:
    return random.Random(f"i{index}").random() < idle_fraction


def decode_pass(wid: str, rng: random.Random, counter: int) -> ForwardPassMetrics:
    n = rng.randint(8, 160)
    ctx = rng.randint(1000, 3000)
    kv = n * ctx
    # ~20-40 ms per pass (H200-class decode of an 8B model at this batch and context)
    wall = 0.012 + 0.00006 * n + 6e-8 * kv + rng.gauss(0.0, 0.0005)
    return ForwardPassMetrics(
        worker_id=wid,
        counter_id=counter,
        wall_time=max(wall, 0.005),
        scheduled_requests=ScheduledRequestMetrics(
            num_decode_requests=n, sum_decode_kv_tokens=kv, var_decode_kv_tokens=float(ctx) * 40.0
        ),
        queued_requests=QueuedRequestMetrics(num_decode_requests=rng.randint(0, 4)),
    )


def prefill_pass(wid: str, rng: random.Random, counter: int) -> ForwardPassMetrics:
    tokens = rng.randint(512, 8192)
    wall = 0.008 + 1.2e-5 * tokens + rng.gauss(0.0, 0.001)
    return ForwardPassMetrics(
        worker_id=wid,
        counter_id=counter,
        wall_time=max(wall, 0.005),
        scheduled_requests=ScheduledRequestMetrics(
            num_prefill_requests=rng.randint(1, 4),
            sum_prefill_tokens=tokens,
            var_prefill_length=1.0e5,
            sum_prefill_kv_tokens=rng.randint(0, tokens),
        ),
        queued_requests=QueuedRequestMetrics(
            num_prefill_requests=rng.randint(0, 6), sum_prefill_tokens=rng.randint(0, 20_000)
        ),
    )


class Engine:
    __slots__ = ("component", "endpoint", "idle", "index", "payloads", "seq", "sock", "wid")

    def __init__(self, ctx: zmq.Context[Any], index: int, cfg: dict[str, Any]) -> None:
        self.index = index
        self.wid = worker_id(index)
        self.component = component_of(index, cfg["prefill_fraction"])
        self.idle = is_idle(index, cfg["idle_fraction"])
        self.seq = 0
        self.sock = ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, cfg["sndhwm"])
        if cfg["transport"] == "ipc":
            self.endpoint = f"ipc://{cfg['ipc_dir']}/{self.wid}"
            self.sock.bind(self.endpoint)
        else:
            port = self.sock.bind_to_random_port("tcp://127.0.0.1")
            self.endpoint = f"tcp://127.0.0.1:{port}"
        rng = random.Random(index)
        if self.idle:
            self.payloads = [encode_fpm(ForwardPassMetrics(worker_id=self.wid, wall_time=0.0))]
        else:
            make = prefill_pass if self.component == "prefill" else decode_pass
            self.payloads = [encode_fpm(make(self.wid, rng, i)) for i in range(VARIANTS)]

    def send(self) -> None:
        self.seq += 1
        payloads = self.payloads
        self.sock.send_multipart([b"", self.seq.to_bytes(8, "big"), payloads[self.seq % len(payloads)]])

    def info(self, ns: str, started_at_s: float) -> EngineInfo:
        return EngineInfo(
            namespace=ns,
            component=self.component,  # type: ignore[arg-type]
            worker_id=self.wid,
            zmq_endpoint=self.endpoint,
            capabilities=EngineCapabilities(num_gpu_blocks=20_000, max_num_seqs=256),
            started_at_s=started_at_s,
        )


class Stream:
    """Round-robin over a set of engines at ``per_engine_rate`` each: message k goes to engine
    k mod n at time k / (n * rate), so every engine sends evenly spaced messages."""

    def __init__(self, engines: list[Engine], per_engine_rate: float, t0: float) -> None:
        self.engines = engines
        self.total_rate = per_engine_rate * len(engines)
        self.t0 = t0
        self.k = 0
        self.sent = 0
        self.skipped = 0

    def pump(self, now: float) -> None:
        if not self.engines:
            return
        due = int((now - self.t0) * self.total_rate)
        behind = due - self.k
        if behind > self.total_rate * MAX_LAG_S:
            skip = behind - int(self.total_rate * MAX_LAG_S)
            self.k += skip
            self.skipped += skip
        engines, n = self.engines, len(self.engines)
        k = self.k
        while k < due:
            engines[k % n].send()
            k += 1
        self.sent += k - self.k
        self.k = k


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def main(cfg: dict[str, Any]) -> None:
    ctx: zmq.Context[Any] = zmq.Context(io_threads=1)
    ctx.setsockopt(zmq.MAX_SOCKETS, 65536)
    engines = [Engine(ctx, i, cfg) for i in range(cfg["first"], cfg["first"] + cfg["count"])]
    emit({"endpoints": {f"{e.component}:{e.wid}": e.endpoint for e in engines}})

    ns = cfg["namespace"]
    subjects = Subjects(ns=ns)
    bus = await Bus.connect(BaseSettings(nats_url=cfg["nats_url"]), name="scale-engines", max_wait_s=10)
    kv = await bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
    started_at_s = time.time() - 3600.0
    infos = {subjects.engine_key(e.component, e.wid): encode(e.info(ns, started_at_s)) for e in engines}

    async def register_all() -> float:
        t = time.perf_counter()
        sem = asyncio.Semaphore(128)

        async def put(key: str, value: bytes) -> None:
            async with sem:
                await kv.put(key, value)

        await asyncio.gather(*(put(k, v) for k, v in infos.items()))
        return time.perf_counter() - t

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    busy = Stream([e for e in engines if not e.idle], cfg["rate"], t0)
    idle = Stream([e for e in engines if e.idle], 1.0, t0)
    stop = asyncio.Event()
    go = asyncio.Event()

    def counters() -> dict[str, Any]:
        return {
            "sent": busy.sent + idle.sent,
            "sent_busy": busy.sent,
            "sent_idle": idle.sent,
            "skipped": busy.skipped + idle.skipped,
            "cpu_s": cpu_s(),
            "t": time.monotonic(),
        }

    async def sender() -> None:
        clock = loop.time
        while not stop.is_set():
            now = clock()
            busy.pump(now)
            idle.pump(now)
            await asyncio.sleep(TICK_S)

    async def refresher() -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=ENGINES_TTL_S / 3)
            except TimeoutError:
                try:
                    await register_all()
                except Exception as exc:  # keep sending; the harness sees missing engines
                    emit({"warning": f"refresh failed: {exc!r}"})

    async def commands() -> None:
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while True:
            line = (await reader.readline()).decode().strip()
            if line == "stats":
                emit(counters())
            elif line == "register":
                go.set()
            elif line in ("stop", ""):
                stop.set()
                return

    tasks = [asyncio.create_task(sender()), asyncio.create_task(commands())]
    await go.wait()
    emit({"registered_s": await register_all()})
    tasks.append(asyncio.create_task(refresher()))
    await stop.wait()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    emit(counters())
    try:
        await asyncio.wait_for(asyncio.gather(*(kv.delete(k) for k in infos)), timeout=10)
    except Exception:
        pass
    await bus.close()
    for e in engines:
        e.sock.close(linger=0)
    ctx.term()


if __name__ == "__main__":
    try:
        asyncio.run(main(json.loads(sys.argv[1])))
    except KeyboardInterrupt:
        pass
    os._exit(0)
