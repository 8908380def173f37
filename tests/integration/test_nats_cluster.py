"""A real 3-node nats-server cluster on loopback: the runtime connects to the list of servers and
creates JetStream streams and KV buckets with 3 replicas; when the node a publisher is on is killed,
its messages go on through another node, the R3 decision stream loses nothing, and a KV lease is
kept or handed over with one node down."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import msgspec
import pytest

from planner_proto import decode
from planner_runtime.bus import Bus
from planner_runtime.lease import Lease, lease_kv, this_holder
from planner_runtime.natscluster import NatsCluster
from planner_runtime.settings import BaseSettings

pytestmark = pytest.mark.integration

STREAM = "T_DECISIONS"
SUBJECT = "planner.t.decision"


class Note(msgspec.Struct):
    n: int


@pytest.fixture
def cluster() -> Iterator[NatsCluster]:
    c = NatsCluster(3)
    try:
        c.start()
        yield c
    finally:
        c.close()


async def wait_until(cond: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.05)


async def connect(url: str) -> Bus:
    return await Bus.connect(BaseSettings(nats_url=url), max_wait_s=10)


def node_of(cluster: NatsCluster, bus: Bus) -> int:
    url = bus.nc.connected_url
    assert url is not None and url.port is not None
    i = cluster.index_of(url.port)
    assert i is not None
    return i


@pytest.fixture
async def buses(cluster: NatsCluster) -> AsyncIterator[list[Bus]]:
    out: list[Bus] = []
    yield out
    for b in out:
        await b.close()


async def test_publisher_node_killed_messages_continue_and_r3_stream_survives(
    cluster: NatsCluster, buses: list[Bus]
) -> None:
    pub = await connect(cluster.url)
    buses.append(pub)
    assert pub.replicas == 3
    await pub.ensure_stream(STREAM, [SUBJECT])
    info = await pub.js.stream_info(STREAM)
    assert info.config.num_replicas == 3
    victim = node_of(cluster, pub)
    # the subscriber on another node: core NATS messages cross the routes
    sub = await connect(cluster.urls[(victim + 1) % 3])
    buses.append(sub)
    got: list[int] = []

    async def on_note(msg: Note, subject: str) -> None:
        got.append(msg.n)

    await sub.subscribe("planner.t.note", Note, on_note)
    # the subscription's interest reaches the publisher's node over the routes a moment later
    deadline = time.monotonic() + 10
    while not got:
        assert time.monotonic() < deadline, "the subscription never reached the publisher's node"
        await pub.publish("planner.t.note", Note(-1))
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    got.clear()
    acked: list[int] = []
    for n in range(20):
        await pub.publish("planner.t.note", Note(n))
        acked.append(await pub.js_publish(SUBJECT, Note(n)))
    await wait_until(lambda: len(got) == 20, 5, "notes before the kill")

    cluster.kill(victim)
    t_kill = time.monotonic()
    n = 20
    deadline = time.monotonic() + 30
    while len(acked) < 40:  # decisions: each one acked by the R3 stream, retried over the failover
        assert time.monotonic() < deadline, f"only {len(acked)} decisions acked after the kill"
        try:
            await pub.publish("planner.t.note", Note(n))
            acked.append(await pub.js_publish(SUBJECT, Note(n), timeout_s=2.0))
            n += 1
        except Exception:  # NoRespondersError / timeout / reconnecting: the next try goes through
            await asyncio.sleep(0.2)
    failover_s = time.monotonic() - t_kill
    assert node_of(cluster, pub) != victim
    await wait_until(lambda: max(got) >= 39, 10, "notes through another node after the kill")
    assert failover_s < 20
    assert acked == sorted(acked) and len(set(acked)) == len(acked), "stream sequence not increasing"

    # the stream kept every acknowledged decision, once, on the two remaining nodes
    info = await pub.js.stream_info(STREAM)
    assert info.state.messages >= 40
    seen: list[int] = []
    for seq in acked:
        msg = await pub.js.get_msg(STREAM, seq)
        assert msg.data is not None
        seen.append(decode(msg.data, Note).n)
    assert seen == list(range(40)), "an acknowledged decision is missing or out of place"

    # the killed node comes back and catches up (its replica of the stream is current again)
    cluster.start_node(victim)
    assert cluster.wait_healthy(30)
    back = await connect(cluster.urls[victim])
    buses.append(back)
    info = await back.js.stream_info(STREAM)
    assert info.state.last_seq == acked[-1]


async def test_kv_lease_kept_and_handed_over_with_a_node_down(cluster: NatsCluster, buses: list[Bus]) -> None:
    ttl_s, renew_s = 2.0, 0.4
    leases: list[Lease] = []
    for i in range(2):
        bus = await connect(cluster.urls[i])  # one holder per node
        buses.append(bus)
        kv, ttl = await lease_kv(bus.js, ttl_s, bus.replicas)
        status = await kv.status()
        assert status.stream_info.config.num_replicas == 3
        lease = Lease(kv, "t.decider", this_holder(f"h{i}"), ttl, renew_s)
        await lease.start(bus.nc)
        leases.append(lease)
    try:
        await wait_until(lambda: any(le.is_active for le in leases), 10, "a holder")
        active = next(i for i, le in enumerate(leases) if le.is_active)
        overlap = 0

        async def watch() -> None:
            nonlocal overlap
            while True:
                overlap += sum(le.is_active for le in leases) > 1
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch())
        try:
            cluster.kill(node_of(cluster, buses[active]))  # the holder's node dies
            # the holder reconnects to another node: the lease is still there (R3) and someone holds it
            await asyncio.sleep(ttl_s + 1.0)
            await wait_until(lambda: any(le.is_active for le in leases), 10, "a holder after the node died")
            holder = next(i for i, le in enumerate(leases) if le.is_active)
            # the holder goes away cleanly: the other takes over, with one node still down
            await leases[holder].stop()
            other = leases[1 - holder]
            await wait_until(lambda: other.is_active, ttl_s + 5, "hand-over to the other holder")
        finally:
            watcher.cancel()
        assert overlap == 0, "two holders active at once"
    finally:
        for le in leases:
            await le.stop()


async def test_partitioned_node_is_cut_off_and_catches_up_when_healed(
    cluster: NatsCluster, buses: list[Bus]
) -> None:
    pub = await connect(cluster.urls[0])
    buses.append(pub)
    await pub.ensure_stream(STREAM, [SUBJECT])
    cluster.partition(2)
    # the majority side keeps a quorum: decisions are acknowledged
    seqs = [await pub.js_publish(SUBJECT, Note(n), timeout_s=5.0) for n in range(10)]
    lone = await connect(cluster.urls[2])
    buses.append(lone)
    assert lone.nc.connected_url is not None and lone.nc.connected_url.port == cluster.client_ports[2]
    with pytest.raises(Exception):  # noqa: B017 - no quorum on the cut-off node: timeout or no responders
        await lone.js_publish(SUBJECT, Note(-1), timeout_s=1.0)
    cluster.heal(2)  # a restart of node 2 with its routes: its clients reconnect
    assert cluster.wait_healthy(30)
    back = await connect(cluster.urls[2])
    buses.append(back)
    deadline = time.monotonic() + 20
    while True:
        try:
            info = await back.js.stream_info(STREAM)
            if info.state.last_seq >= seqs[-1]:
                break
        except Exception:  # the stream leader may still be settling
            pass
        assert time.monotonic() < deadline, "node 2 did not catch up after the heal"
        await asyncio.sleep(0.2)
