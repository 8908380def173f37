"""The relay's socket hub: many engines read in shared passes, in order and complete, backlogs split
by ``max_batch``, a failing socket reported once and no longer read. Real ZMQ sockets (inproc)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import pytest
import zmq

from planner_fpm_relay.targets import EngineTarget
from planner_fpm_relay.zmqsub import Batch, EngineSubscription, ReaderHub
from planner_proto import pack_frames

_ids = itertools.count()


class Fleet:
    def __init__(self, n: int, max_batch: int, window_s: float) -> None:
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.queue: asyncio.Queue[list[Batch]] = asyncio.Queue()
        self.hub = ReaderHub(self.queue, max_batch, window_s)
        self.pubs: list[zmq.Socket[bytes]] = []
        self.subs: list[EngineSubscription] = []
        for i in range(n):
            endpoint = f"inproc://hub-{next(_ids)}"
            pub = self.ctx.socket(zmq.PUB)
            pub.setsockopt(zmq.SNDHWM, 0)
            pub.bind(endpoint)
            self.pubs.append(pub)
            target = EngineTarget(component="decode", worker_id=f"w{i}", zmq_endpoint=endpoint)
            sub = EngineSubscription(self.ctx, target, f"planner.t.fpm.decode.w{i}", 0, max_batch)
            self.subs.append(sub)
            self.hub.add(sub)
        self.task = asyncio.create_task(self.hub.run())

    async def joined(self) -> None:
        """Until every SUB receives (a PUB drops what is sent before its subscriber joined)."""
        for pub, sub in zip(self.pubs, self.subs, strict=True):
            for _ in range(200):
                pub.send_multipart([b"", (0).to_bytes(8, "big"), b"hello"])
                await asyncio.sleep(0.005)
                if sub.last_seq is not None or await self._saw(sub):
                    break
            else:
                pytest.fail(f"{sub.target.key} never joined")

    async def _saw(self, sub: EngineSubscription) -> bool:
        seen = False
        while not self.queue.empty():
            for batch in self.queue.get_nowait():
                seen = seen or batch.sub is sub
        return seen

    async def collect(self, want: int, timeout_s: float = 10.0) -> tuple[dict[str, list[int]], int]:
        """Sequences per engine (heartbeats left out) and the number of passes they came in."""
        got: dict[str, list[int]] = {}
        passes = count = 0
        async with asyncio.timeout(timeout_s):
            while count < want:
                batches = await self.queue.get()
                passes += 1
                for batch in batches:
                    assert batch.error is None
                    seqs = [int.from_bytes(f[1], "big") for f in batch.frames if f[2] != b"hello"]
                    got.setdefault(batch.sub.target.worker_id, []).extend(seqs)
                    count += len(seqs)
        return got, passes

    async def close(self) -> None:
        await self.hub.stop()
        for sub in self.subs:
            sub.close()
        for pub in self.pubs:
            pub.close(linger=0)
        self.ctx.term()


@pytest.fixture
async def fleet(request: pytest.FixtureRequest) -> AsyncIterator[Fleet]:
    n, max_batch, window_s = request.param
    f = Fleet(n, max_batch, window_s)
    try:
        await f.joined()
        yield f
    finally:
        await f.close()


@pytest.mark.parametrize("fleet", [(30, 16, 0.002)], indirect=True)
async def test_many_engines_share_passes(fleet: Fleet) -> None:
    for seq in range(1, 21):  # 30 engines x 20 messages, interleaved, a little at a time
        for pub in fleet.pubs:
            pub.send_multipart(pack_frames(seq, b"x" * seq))
        await asyncio.sleep(0.001)
    got, passes = await fleet.collect(30 * 20)
    assert got == {f"w{i}": list(range(1, 21)) for i in range(30)}
    assert passes < 30 * 20 / 4  # several engines (and messages) per pass, not one wake-up each


@pytest.mark.parametrize("fleet", [(2, 10, 0.0)], indirect=True)
async def test_backlog_is_split_by_max_batch_and_shared_fairly(fleet: Fleet) -> None:
    for seq in range(1, 101):
        fleet.pubs[0].send_multipart(pack_frames(seq, b"p"))
    fleet.pubs[1].send_multipart(pack_frames(1, b"q"))
    sizes: list[int] = []
    got: list[int] = []
    other_at = -1
    async with asyncio.timeout(10):
        while len(got) < 100 or other_at < 0:
            for batch in await fleet.queue.get():
                if batch.sub is fleet.subs[1]:
                    other_at = len(got)
                    continue
                sizes.append(len(batch.frames))  # (a late join heartbeat may ride along)
                got += [int.from_bytes(f[1], "big") for f in batch.frames if f[2] != b"hello"]
    assert got == list(range(1, 101))
    assert max(sizes) == 10
    assert other_at < 100  # the quiet engine was not kept waiting behind the whole backlog


@pytest.mark.parametrize("fleet", [(2, 10, 0.0)], indirect=True)
async def test_failing_socket_is_reported_once_and_no_longer_read(fleet: Fleet) -> None:
    broken, healthy = fleet.subs

    def fail() -> list[tuple[bytes, ...]]:
        raise zmq.ZMQError(zmq.ENOTSOCK)

    broken.drain = fail  # type: ignore[method-assign]
    fleet.pubs[0].send_multipart(pack_frames(5, b"a"))
    fleet.pubs[1].send_multipart(pack_frames(5, b"b"))
    errors: list[Batch] = []
    relayed: list[Batch] = []
    async with asyncio.timeout(10):
        while not (errors and relayed):
            for batch in await fleet.queue.get():
                (errors if batch.error is not None else relayed).append(batch)
    assert [b.sub for b in errors] == [broken] and isinstance(errors[0].error, zmq.ZMQError)
    fleet.pubs[0].send_multipart(pack_frames(6, b"a"))
    fleet.pubs[1].send_multipart(pack_frames(6, b"b"))
    async with asyncio.timeout(10):
        later = await fleet.queue.get()
    assert [b.sub for b in later] == [healthy]  # the broken socket is not read (or reported) again
