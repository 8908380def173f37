"""The fan-in: many engines on a few shared ZMQ sockets, attributed by the worker id in each payload;
and overload: a slowed publisher makes the relay shed whole messages, counted, without blocking the
engines, and it recovers by itself."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import zmq
from nats.js.api import KeyValueConfig, StorageType

from planner_proto import Component, EngineInfo, Subjects, encode
from planner_proto.subjects import ENGINES_BUCKET
from planner_runtime.natsd import NatsServer

from .relay_helpers import NS, Collector, FakeEngine, connect, in_process_relay, wait_until

pytestmark = pytest.mark.integration

SUBJECTS = Subjects(ns=NS)


def info(worker_id: str, endpoint: str) -> bytes:
    return encode(
        EngineInfo(namespace=NS, component=Component.DECODE, worker_id=worker_id, zmq_endpoint=endpoint)
    )


async def warm_up(engines: list[FakeEngine], coll: Collector, timeout_s: float = 20.0) -> None:
    """Send from every engine until each one's messages arrive (a SUB misses what precedes its join)."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while len(seen) < len(engines):
        assert time.monotonic() < deadline, f"only {len(seen)}/{len(engines)} engines joined"
        for e in engines:
            if e.worker_id not in seen:
                e.send()
        await asyncio.sleep(0.1)
        seen = {s.rsplit(".", 1)[1] for s, _ in coll.got}


def gap_count(relay: Any, worker: str, reason: str = "gap") -> float:
    relay._publisher.flush_metrics()  # (applied every 0.25 s otherwise)
    v = relay.registry.get_sample_value(
        "planner_fpm_dropped_total", {"component": "decode", "worker": worker, "reason": reason}
    )
    return float(v or 0.0)


async def test_200_engines_on_shared_sockets(nats_server: NatsServer) -> None:
    bus = await connect(nats_server.url)
    engines = [FakeEngine(f"w{i:03d}") for i in range(200)]
    try:
        kv = await bus.js.create_key_value(
            KeyValueConfig(bucket=ENGINES_BUCKET, history=1, storage=StorageType.FILE)
        )
        coll = await Collector(bus).start()
        for e in engines:
            await kv.put(SUBJECTS.engine_key("decode", e.worker_id), info(e.worker_id, e.endpoint))
        async with in_process_relay(nats_server.url, sharding=False, engines_per_socket=50) as relay:
            await wait_until(lambda: len(relay.subs) == 200, 15, "200 engines subscribed")
            assert relay._fanin is not None and len(relay._fanin.sockets) == 4
            await warm_up(engines, coll)
            await asyncio.sleep(0.3)
            mark = len(coll.got)
            sent: dict[str, list[bytes]] = {e.worker_id: [] for e in engines}
            gapped = {e.worker_id for e in engines[::10]}
            before = {w: gap_count(relay, w) for w in sent}
            for round_ in range(15):
                for e in engines:
                    if round_ == 7 and e.worker_id in gapped:
                        e.seq += 3  # three messages this engine never sent: a gap of 3
                    sent[e.worker_id].append(e.send())
            total = sum(map(len, sent.values()))
            await wait_until(lambda: len(coll.got) >= mark + total, 15, "the interleaved burst")
            got: dict[str, list[bytes]] = {w: [] for w in sent}
            for subject, data in coll.got[mark:]:
                got[subject.rsplit(".", 1)[1]].append(data)
            assert got == sent, "payloads changed, reordered within an engine, or misattributed"
            for w in sent:
                assert gap_count(relay, w) - before[w] == (3 if w in gapped else 0), w

            # removed from the registry: its endpoint is disconnected, nothing of it is read any more
            removed = engines[:20]
            for e in removed:
                await kv.delete(SUBJECTS.engine_key("decode", e.worker_id))
            await wait_until(lambda: len(relay.subs) == 180, 10, "20 engines unsubscribed")
            mark = len(coll.got)
            for e in engines:
                e.send()
            last = engines[-1].send()
            await wait_until(lambda: coll.got[-1][1] == last, 10, "the kept engines' messages")
            await asyncio.sleep(0.2)
            from_removed = {s for s, _ in coll.got[mark:]} & {
                SUBJECTS.fpm("decode", e.worker_id) for e in removed
            }
            assert not from_removed
            assert len(coll.got) - mark == 181
            bad = relay.bus.metrics.bad_messages
            assert sum(bad.labels("fpm.unattributed", r)._value.get() for r in ("unknown_engine",)) == 0
    finally:
        for e in engines:
            await e.close()
        await bus.close()


async def test_overload_sheds_counted_engines_never_block_and_recovers(nats_server: NatsServer) -> None:
    bus = await connect(nats_server.url)
    engines = [FakeEngine(f"o{i}") for i in range(10)]
    for e in engines:
        e.sock.setsockopt(zmq.SNDHWM, 1000)  # a real engine's bounded PUB queue
    try:
        coll = await Collector(bus).start()
        static = [f"decode:{e.worker_id}={e.endpoint}" for e in engines]
        async with in_process_relay(
            nats_server.url, sharding=False, watch_engines=False, static_engines=static, max_backlog=300
        ) as relay:
            await wait_until(lambda: len(relay.subs) == 10, 5, "static subscriptions")
            await warm_up(engines, coll)
            publisher = relay._publisher
            assert publisher is not None
            fast = publisher.out.publish_mixed

            async def slow(*args: Any) -> list[int]:
                await asyncio.sleep(0.05)  # a subscriber side that cannot keep up
                return await fast(*args)

            publisher.out.publish_mixed = slow  # type: ignore[method-assign]
            worst = 0.0
            for _ in range(20):  # 20 x 10 x 100 = 20 000 messages, far more than 300 in flight
                for e in engines:
                    for _ in range(100):
                        t0 = time.perf_counter()
                        e.seq += 1
                        e.sock.send_multipart([b"", e.seq.to_bytes(8, "big"), e.sent[-1]], zmq.NOBLOCK)
                        worst = max(worst, time.perf_counter() - t0)
                await asyncio.sleep(0.02)
            assert worst < 0.05, f"an engine's send took {worst:.3f} s"

            def overload() -> float:
                return sum(gap_count(relay, e.worker_id, "overload") for e in engines)

            await wait_until(lambda: overload() > 1000, 10, "messages shed for overload")
            assert relay._fanin is not None and relay._fanin.backlog.n <= 300

            publisher.out.publish_mixed = fast  # type: ignore[method-assign]
            await wait_until(
                lambda: relay._fanin is not None and relay._fanin.backlog.n == 0, 10, "caught up"
            )
            shed = overload()
            mark = len(coll.got)
            for e in engines:
                e.send()
            await wait_until(lambda: len(coll.got) >= mark + 10, 10, "relaying again after the overload")
            assert overload() == shed, "still shedding after the publisher caught up"
            for e in engines:  # shed messages are not counted a second time as sequence gaps
                assert gap_count(relay, e.worker_id) == 0, e.worker_id
    finally:
        for e in engines:
            await e.close()
        await bus.close()
