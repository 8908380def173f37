"""The relay over a real nats-server with fake ZMQ engines: payloads arrive byte-identical; a deleted
or expired registry key closes the subscription; a re-registered engine is followed to its new
endpoint; sequence gaps and restarts are counted."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.api import KeyValueConfig, StorageType

from planner_fpm_relay.publisher import UNATTRIBUTED
from planner_proto import Component, EngineInfo, ForwardPassMetrics, Subjects, encode, encode_fpm, pack_frames
from planner_proto.subjects import ENGINES_BUCKET
from planner_runtime.natsd import NatsServer

from .relay_helpers import NS, Collector, FakeEngine, connect, in_process_relay, wait_until

pytestmark = pytest.mark.integration

SUBJECTS = Subjects(ns=NS)


def info(worker_id: str, endpoint: str) -> bytes:
    return encode(
        EngineInfo(namespace=NS, component=Component.DECODE, worker_id=worker_id, zmq_endpoint=endpoint)
    )


async def warm_up(engine: FakeEngine, coll: Collector) -> None:
    """Send until the relay's SUB has joined (ZMQ drops what a PUB sends before that)."""

    def sent_and_seen() -> bool:
        engine.send()
        return bool(coll.got)

    await wait_until(sent_and_seen, 5, "the relay's ZMQ subscription to join")


async def test_registry_lifecycle_and_byte_identical(nats_server: NatsServer) -> None:
    bus = await connect(nats_server.url)
    engine = FakeEngine("w0")
    engine2 = FakeEngine("w0")
    try:
        kv = await bus.js.create_key_value(
            KeyValueConfig(bucket=ENGINES_BUCKET, ttl=2.0, history=1, storage=StorageType.FILE)
        )
        coll = await Collector(bus).start()
        key = SUBJECTS.engine_key("decode", "w0")
        await kv.put(key, info("w0", engine.endpoint))
        async with in_process_relay(nats_server.url, sharding=False) as relay:
            engine.start(0.005)
            await wait_until(lambda: len(coll.payloads("w0")) > 3, 10, "first relayed messages")
            await engine.stop()
            await asyncio.sleep(0.2)
            mark = len(coll.got)
            burst = [engine.send() for _ in range(300)]
            await wait_until(lambda: len(coll.got) >= mark + 300, 5, "the burst")
            assert [d for _, d in coll.got[mark:]] == burst, "payloads changed or reordered"
            assert {s for s, _ in coll.got} == {SUBJECTS.fpm("decode", "w0")}

            # deleted key -> subscription closed, nothing more relayed
            await kv.delete(key)
            await wait_until(lambda: not relay.subs, 3, "unsubscribe after delete")
            n = len(coll.got)
            engine.send()
            await asyncio.sleep(0.3)
            assert len(coll.got) == n

            # re-registered on a new endpoint -> followed there
            await kv.put(key, info("w0", engine2.endpoint))
            await wait_until(lambda: "decode.w0" in relay.subs, 3, "resubscribe")
            assert relay.subs["decode.w0"].target.zmq_endpoint == engine2.endpoint
            engine2.start(0.01)
            await wait_until(lambda: len(coll.got) > n + 3, 5, "messages from the new endpoint")

            # key no longer refreshed -> expires after the bucket TTL (2 s) -> closed, no marker needed
            waited = await wait_until(lambda: not relay.subs, 6, "unsubscribe after TTL expiry")
            assert waited < 4.5
            relayed = relay.registry.get_sample_value(
                "planner_fpm_relayed_total", {"component": "decode", "worker": "w0"}
            )
            assert relayed is not None and relayed >= 300
    finally:
        await engine.close()
        await engine2.close()
        await bus.close()


async def test_bad_frames_counted_and_relay_keeps_running(nats_server: NatsServer) -> None:
    bus = await connect(nats_server.url)
    engine = FakeEngine("w1")
    try:
        coll = await Collector(bus).start()
        async with in_process_relay(
            nats_server.url,
            sharding=False,
            watch_engines=False,
            static_engines=[f"prefill:w1={engine.endpoint}"],
        ) as relay:
            await wait_until(lambda: "prefill.w1" in relay.subs, 5, "static subscription")
            await warm_up(engine, coll)
            good = engine.send()
            engine.send_raw([b"", (10_000).to_bytes(8, "big")])  # wrong frame count
            engine.send_raw([b"", b"\x00" * 7, good])  # 7-byte sequence
            engine.send_raw([b"", (10_000).to_bytes(8, "big"), good, b"extra"])  # one frame too many
            engine.send_raw(pack_frames(10_001, encode_fpm(ForwardPassMetrics(version=2, worker_id="w1"))))
            engine.send_raw(pack_frames(10_002, b"\xc1garbage"))
            last = engine.send()
            await wait_until(lambda: coll.got[-1][1] == last, 5, "the valid message after the bad ones")
            subject = SUBJECTS.fpm("prefill", "w1")
            bad = relay.bus.metrics.bad_messages
            assert bad.labels(subject, "version")._value.get() == 1
            # on a shared socket a message is attributed by the worker id in its payload: the 7-byte
            # sequence carries one, the other two framing errors have none to read
            assert bad.labels(subject, "framing")._value.get() == 1
            assert bad.labels(UNATTRIBUTED, "framing")._value.get() == 2
            assert bad.labels(UNATTRIBUTED, "malformed")._value.get() == 1
            assert all(d != b"\xc1garbage" for _, d in coll.got)
            assert not relay._failed_engines and "prefill.w1" in relay.subs
    finally:
        await engine.close()
        await bus.close()


async def test_sequence_gaps_and_restarts_counted(nats_server: NatsServer) -> None:
    bus = await connect(nats_server.url)
    engine = FakeEngine("w2")
    try:
        coll = await Collector(bus).start()
        async with in_process_relay(
            nats_server.url, sharding=False, watch_engines=False, static_engines=[f"agg:w2={engine.endpoint}"]
        ) as relay:
            await wait_until(lambda: "agg.w2" in relay.subs, 5, "static subscription")
            await warm_up(engine, coll)
            await asyncio.sleep(0.1)
            labels = {"component": "agg", "worker": "w2", "reason": "gap"}
            before = relay.registry.get_sample_value("planner_fpm_dropped_total", labels) or 0.0
            engine.seq += 5  # five messages never sent: a gap of 5
            engine.send()
            engine.seq = 0  # engine restarted
            last = engine.send()
            await wait_until(lambda: coll.got[-1][1] == last, 5, "the restarted stream")
            assert relay._publisher is not None
            relay._publisher.flush_metrics()  # (applied every 0.25 s otherwise)
            assert relay.registry.get_sample_value("planner_fpm_dropped_total", labels) == before + 5
            assert (
                relay.registry.get_sample_value(
                    "planner_fpm_sequence_restarts_total", {"component": "agg", "worker": "w2"}
                )
                == 1
            )
    finally:
        await engine.close()
        await bus.close()
