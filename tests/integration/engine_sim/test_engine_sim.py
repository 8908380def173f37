"""engine-sim over a real nats-server: FPM on ZMQ, registration, token streams, disaggregation."""

from __future__ import annotations

import asyncio
import itertools
import time

import msgspec
import pytest
import zmq
import zmq.asyncio

from planner_proto import (
    EngineInfo,
    GenerateRequest,
    Subjects,
    TokenChunk,
    decode,
    decode_fpm,
    encode,
    unpack_frames,
)
from planner_proto.subjects import ENGINES_BUCKET
from planner_runtime.bus import Bus, kv_get
from planner_runtime.natsd import NatsServer
from planner_runtime.settings import BaseSettings

from .conftest import NS, StartEngine

pytestmark = pytest.mark.integration
SUBJECTS = Subjects(ns=NS)


async def send_requests(bus: Bus, worker: str, n: int, isl: int, osl: int) -> dict[str, list[TokenChunk]]:
    got: dict[str, list[TokenChunk]] = {str(i): [] for i in range(n)}
    inbox = bus.nc.new_inbox()

    async def cb(msg: object) -> None:
        chunk = decode(msg.data, TokenChunk)  # type: ignore[attr-defined]
        got[chunk.request_id].append(chunk)

    await bus.nc.subscribe(f"{inbox}.*", cb=cb)
    for i in range(n):
        req = GenerateRequest(
            request_id=str(i), input_tokens=isl, output_tokens=osl, reply_subject=f"{inbox}.{i}"
        )
        await bus.nc.publish(SUBJECTS.generate(worker), encode(req))
    return got


async def wait_finished(got: dict[str, list[TokenChunk]], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not all(c and (c[-1].finished or c[-1].error) for c in got.values()):
            await asyncio.sleep(0.02)


async def test_fpm_frames_sequence_and_heartbeat(nats_server: NatsServer, start_engine: StartEngine) -> None:
    eng = await start_engine("w1", heartbeat_interval_s=0.2)
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    kv = await bus.kv(ENGINES_BUCKET)
    info = await kv_get(kv, SUBJECTS.engine_key("agg", "w1"), EngineInfo)
    assert info is not None and info.zmq_endpoint.startswith("tcp://127.0.0.1:")
    ctx = zmq.asyncio.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(info.zmq_endpoint)
    try:
        await asyncio.sleep(0.3)  # slow joiner: let the subscription reach the publisher
        got = await send_requests(bus, "w1", n=4, isl=600, osl=20)
        await wait_finished(got)
        frames: list[tuple[int, object]] = []
        async with asyncio.timeout(5):
            while True:
                seq, payload = unpack_frames(await sub.recv_multipart())
                fpm = decode_fpm(payload)
                frames.append((seq, fpm))
                if fpm.wall_time == 0 and any(f.wall_time > 0 for _, f in frames):  # type: ignore[attr-defined]
                    break  # an idle heartbeat after the passes
        seqs = [s for s, _ in frames]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "sequence must grow by exactly 1"
        passes = [f for _, f in frames if f.wall_time > 0]  # type: ignore[attr-defined]
        assert sum(p.scheduled_requests.sum_prefill_tokens for p in passes) == 4 * 600  # type: ignore[attr-defined]
        assert all(p.worker_id == "w1" and p.version == 1 for p in passes)  # type: ignore[attr-defined]
        # wall_time is the uncompressed model time: a 2400-token prefill pass takes tens of ms on an H200
        assert max(p.wall_time for p in passes) > 0.03  # type: ignore[attr-defined]
        heartbeat = frames[-1][1]
        assert msgspec.structs.asdict(heartbeat.scheduled_requests) == msgspec.structs.asdict(  # type: ignore[attr-defined]
            type(heartbeat.scheduled_requests)()  # type: ignore[attr-defined]
        )
        assert eng.passes >= len(passes)
    finally:
        sub.close(linger=0)
        ctx.term()
        await bus.close()


async def test_registers_streams_and_deregisters(nats_server: NatsServer, start_engine: StartEngine) -> None:
    t0 = time.time()
    eng = await start_engine("w2", startup_delay_s=2.0, max_num_seqs=64, num_gpu_blocks=4096)
    assert time.time() - t0 >= 0.2 - 0.05  # 2 s of model loading at 10x compression
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    kv = await bus.kv(ENGINES_BUCKET)
    key = SUBJECTS.engine_key("agg", "w2")
    info = await kv_get(kv, key, EngineInfo)
    assert info is not None and not info.draining and info.started_at_s >= t0
    assert info.request_subject == SUBJECTS.generate("w2")
    caps = info.capabilities
    assert (caps.max_num_seqs, caps.num_gpu_blocks, caps.block_size_tokens, caps.max_num_batched_tokens) == (
        64,
        4096,
        16,
        8192,
    )
    got = await send_requests(bus, "w2", n=3, isl=200, osl=30)
    await wait_finished(got)
    for chunks in got.values():
        assert chunks[0].tokens == 1 and chunks[-1].finished and chunks[-1].total_tokens == 30
        assert sum(c.tokens for c in chunks) == 30
    # too long for the context: rejected with an error chunk, no token
    bad = await send_requests(bus, "w2", n=1, isl=16000, osl=1000)
    await wait_finished(bad)
    assert bad["0"][-1].error == "context_length_exceeded"
    watcher = await kv.watch(key)
    long_req = await send_requests(bus, "w2", n=1, isl=100, osl=400)
    await asyncio.sleep(0.05)
    eng.request_stop()
    await asyncio.sleep(0.05)
    late = await send_requests(bus, "w2", n=1, isl=100, osl=10)
    await wait_finished(late)
    assert late["0"][-1].error == "draining" and late["0"][-1].tokens == 0
    seen: list[bool | None] = []
    async with asyncio.timeout(10):
        while True:
            e = await watcher.updates(timeout=5)
            if e is None:
                continue
            if e.operation in ("DEL", "PURGE"):
                seen.append(None)
                break
            seen.append(decode(e.value, EngineInfo).draining)
    await watcher.stop()
    assert long_req["0"][-1].finished and long_req["0"][-1].total_tokens == 400, "in-flight work finishes"
    assert seen[-2:] == [True, None], "draining=True must be put before the key is deleted"
    assert await kv_get(kv, key, EngineInfo) is None
    await bus.close()


async def test_disaggregated_prefill_then_decode(nats_server: NatsServer, start_engine: StartEngine) -> None:
    await start_engine("pre", component="prefill")
    await start_engine("dec", component="decode", kv_bandwidth_bytes_per_s=1e9)  # slow link: visible delay
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    inbox = bus.nc.new_inbox()
    got: list[tuple[float, TokenChunk]] = []

    async def cb(msg: object) -> None:
        got.append((time.monotonic(), decode(msg.data, TokenChunk)))  # type: ignore[attr-defined]

    await bus.nc.subscribe(f"{inbox}.*", cb=cb)
    req = GenerateRequest(
        request_id="r",
        input_tokens=4000,
        output_tokens=10,
        reply_subject=f"{inbox}.r",
        prefill_only=True,
        decode_subject=SUBJECTS.generate("dec"),
    )
    await bus.nc.publish(SUBJECTS.generate("pre"), encode(req))
    async with asyncio.timeout(10):
        while not (got and got[-1][1].finished):
            await asyncio.sleep(0.01)
    first_t, first = got[0]
    assert first.worker_id == "pre" and first.tokens == 1 and not first.finished
    rest = [c for _, c in got[1:]]
    assert {c.worker_id for c in rest} == {"dec"} and rest[-1].total_tokens == 10
    assert sum(c.tokens for _, c in got) == 10
    # KV hand-off: 4000 tokens x 128 KiB / 1 GB/s = 0.52 s of model time = 52 ms at 10x
    assert got[-1][0] - first_t > 0.05
    await bus.close()


async def test_token_stamps_keep_the_model_time_through_host_stalls(
    nats_server: NatsServer, start_engine: StartEngine
) -> None:
    """The chunks' engine_time_s is the modelled GPU's clock: a host stall (the event loop blocked,
    as on a loaded CI machine) followed by back-to-back catch-up passes does not shrink or stretch the
    inter-token gaps read off the stamps (the live profiler's ITL)."""
    eng = await start_engine("w4", stream_interval_s=0.002)
    assert eng.choice is not None
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    stop = asyncio.Event()

    async def stall_the_loop() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.02)
            time.sleep(0.03)  # noqa: ASYNC251 - the point: 300 ms of engine time at 10x: dozens of passes late, under max_lag_s

    staller = asyncio.create_task(stall_the_loop())
    try:
        got = await send_requests(bus, "w4", n=1, isl=500, osl=300)
        await wait_finished(got, timeout_s=20)
    finally:
        stop.set()
        await staller
        await bus.close()
    chunks = [c for c in got["0"] if c.tokens > 0]
    assert chunks[-1].finished and chunks[-1].total_tokens == 300
    # how many chunks the stalls split the stream into depends on the host's load (6 to 40+ seen):
    # the stamps are checked across every gap there is, and there must be several
    assert len(chunks) >= 4, "the stalls must have split the stream into several chunks"
    timing = eng.choice.model
    for prev, cur in itertools.pairwise(chunks):
        # decode passes of one request between the two chunks: contexts prev.total .. cur.total - 1
        modelled = sum(
            timing.pass_time_s(0, 0, 1, 500 + k) for k in range(prev.total_tokens, cur.total_tokens)
        )
        assert cur.engine_time_s - prev.engine_time_s == pytest.approx(modelled, rel=0.02), (
            prev.total_tokens,
            cur.total_tokens,
        )
