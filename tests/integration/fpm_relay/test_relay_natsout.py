"""The relay's batch publish: with the pinned nats-py the fast path is the one in use, and both paths
deliver the payloads byte-identical, in order, on the subject asked for."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.aio.msg import Msg

from planner_fpm_relay.natsout import NatsOut, pub_header
from planner_runtime.bus import flush
from planner_runtime.natsd import NatsServer

pytestmark = pytest.mark.integration


async def test_batch_publish_fast_and_fallback(nats_server: NatsServer) -> None:
    pub = await nats.connect(nats_server.url)
    sub = await nats.connect(nats_server.url)
    got: list[tuple[str, bytes]] = []

    async def cb(msg: Msg) -> None:
        got.append((msg.subject, msg.data))

    try:
        await sub.subscribe("planner.t.fpm.>", cb=cb)
        await flush(sub)
        out = NatsOut(pub)
        assert out.fast, "nats-py internals changed: the relay fell back to one publish() per message"
        subject = "planner.t.fpm.agg.w0"
        fast = [bytes([i % 256]) * (i % 700) for i in range(300)] + [b"\r\nPUB x 1\r\n", b""]
        slow = [b"after", b"\x00\xff" * 50]
        await out.publish(subject, pub_header(subject), fast, sum(map(len, fast)))
        await out.publish(subject, None, slow, sum(map(len, slow)))  # no header: publish() per message
        await flush(pub)
        for _ in range(100):
            if len(got) >= len(fast) + len(slow):
                break
            await asyncio.sleep(0.05)
        assert got == [(subject, p) for p in fast + slow]
        assert pub.stats["out_msgs"] >= len(fast) + len(slow)
    finally:
        await pub.close()
        await sub.close()


async def test_batch_over_max_payload(nats_server: NatsServer) -> None:
    """A batch bigger than the server's max_payload in all still goes out whole; a single payload over
    it is refused, reported to on_drop, and the rest of its batch goes out."""
    pub = await nats.connect(nats_server.url)
    sub = await nats.connect(nats_server.url)
    got: list[bytes] = []
    drops: list[tuple[str, int]] = []

    async def cb(msg: Msg) -> None:
        got.append(msg.data)

    try:
        await sub.subscribe("planner.t.fpm.>", cb=cb)
        await flush(sub)
        out = NatsOut(pub, lambda reason, n: drops.append((reason, n)))
        subject = "planner.t.fpm.agg.w0"
        limit = pub._max_payload
        many = [bytes([i]) * (limit // 8) for i in range(12)]  # 1.5x the limit in all, each 1/8 of it
        mixed = [b"a", b"x" * (limit + 1), b"b"]
        assert await out.publish(subject, pub_header(subject), many, sum(map(len, many))) == (0, 0)
        assert await out.publish(subject, pub_header(subject), mixed, sum(map(len, mixed))) == (1, limit + 1)
        await flush(pub)
        for _ in range(100):
            if len(got) >= len(many) + 2:
                break
            await asyncio.sleep(0.05)
        assert got == [*many, b"a", b"b"]
        assert drops == [("MaxPayloadError", 1)]
    finally:
        await pub.close()
        await sub.close()
