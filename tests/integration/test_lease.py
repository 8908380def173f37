"""The KV lease over a real nats-server: one active holder, takeover after a crash, after a clean
release and from a killed process; a holder that cannot renew stops first; two deciders at once."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats.errors
import pytest

from planner_decider.service import DeciderService
from planner_proto import AckStatus, ScalingAck
from planner_runtime.bus import Bus
from planner_runtime.lease import Lease, lease_kv, this_holder
from planner_runtime.natsd import NatsServer
from planner_runtime.service import Service
from planner_runtime.settings import BaseSettings, LeaseSettings

from .decider.decider_helpers import (
    SUBJECTS,
    Collector,
    connect,
    feed,
    settings,
    stream_decisions,
    wait_until,
    write_profile,
)

pytestmark = pytest.mark.integration

TTL_S = 1.5
RENEW_S = 0.3
KEY = "t.decider"


@asynccontextmanager
async def holder(url: str, ttl_s: float = TTL_S) -> AsyncIterator[Lease]:
    """A lease holder on its own NATS connection (as a separate instance would have)."""
    bus = await Bus.connect(BaseSettings(nats_url=url), max_wait_s=5)
    kv, ttl = await lease_kv(bus.js, ttl_s)
    lease = Lease(kv, KEY, this_holder("test"), ttl, RENEW_S)
    await lease.start(bus.nc)
    try:
        yield lease
    finally:
        await lease.stop()
        await bus.close()


async def watch_overlap(leases: list[Lease], stop: asyncio.Event) -> int:
    """Sample every 5 ms; the number of samples in which two holders believed they were active."""
    both = 0
    while not stop.is_set():
        if sum(lease.is_active for lease in leases) > 1:
            both += 1
        await asyncio.sleep(0.005)
    return both


async def first_active(leases: list[Lease], timeout_s: float) -> tuple[Lease, float]:
    t0 = time.monotonic()
    await wait_until(lambda: any(lease.is_active for lease in leases), timeout_s)
    return next(lease for lease in leases if lease.is_active), time.monotonic() - t0


async def test_exactly_one_active_then_takeover_after_a_crash_and_after_a_release(
    nats_server: NatsServer,
) -> None:
    async with holder(nats_server.url) as a, holder(nats_server.url) as b, holder(nats_server.url) as c:
        stop = asyncio.Event()
        overlap = asyncio.ensure_future(watch_overlap([a, b, c], stop))
        assert a.is_active  # the first one is active at once: nobody held the key
        await asyncio.sleep(3 * TTL_S)  # many renewals: nothing changes
        assert a.is_active and not b.is_active and not c.is_active

        await a.stop(release=False)  # a crash: renewals stop, the key stays until it expires
        nxt, took_s = await first_active([b, c], timeout_s=TTL_S + 2 * RENEW_S + 1.0)
        assert took_s <= TTL_S + RENEW_S + 0.5  # the expiry (<= ttl after the last renewal) + a poll
        last = c if nxt is b else b

        await nxt.stop()  # a clean stop deletes the key: the last one takes over at once
        t0 = time.monotonic()
        await wait_until(lambda: last.is_active, 1.0)
        assert time.monotonic() - t0 < 0.5
        stop.set()
        assert await overlap == 0


class StuckUpdates:
    """A KV whose updates (renewals) never answer: the holder's NATS is slow or gone."""

    def __init__(self, kv: Any) -> None:
        self.kv = kv
        self.stuck = False

    async def create(self, key: str, value: bytes) -> int:
        rev: int = await self.kv.create(key, value)
        return rev

    async def update(self, key: str, value: bytes, last: int | None = None) -> int:
        if self.stuck:
            await asyncio.sleep(3600)
        rev: int = await self.kv.update(key, value, last=last)
        return rev

    async def delete(self, key: str, last: int | None = None) -> bool:
        return bool(await self.kv.delete(key, last=last))

    async def get(self, key: str) -> Any:
        return await self.kv.get(key)


async def test_a_holder_that_cannot_renew_stops_acting_before_the_ttl(nats_server: NatsServer) -> None:
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    kv, ttl = await lease_kv(bus.js, TTL_S)
    stuck_kv = StuckUpdates(kv)
    a = Lease(stuck_kv, KEY, this_holder("a"), ttl, RENEW_S)
    await a.start(bus.nc)
    try:
        async with holder(nats_server.url) as b:
            assert a.is_active and not b.is_active
            stop = asyncio.Event()
            overlap = asyncio.ensure_future(watch_overlap([a, b], stop))
            stuck_kv.stuck = True
            t0 = time.monotonic()
            await wait_until(lambda: not a.is_active, TTL_S + 1.0)
            stopped_s = time.monotonic() - t0
            await wait_until(lambda: b.is_active, TTL_S + 2.0)
            started_s = time.monotonic() - t0
            stop.set()
            assert await overlap == 0
            # a stops at its last renewal + ttl - margin, b starts no earlier than that renewal + ttl
            assert stopped_s < TTL_S
            assert started_s - stopped_s >= a.margin_s - 0.1
    finally:
        await a.stop()
        await bus.close()


HOLD_AND_WAIT = """
import asyncio, sys
from planner_runtime.bus import Bus
from planner_runtime.lease import Lease, lease_kv, this_holder
from planner_runtime.settings import BaseSettings

async def main():
    bus = await Bus.connect(BaseSettings(nats_url=sys.argv[1]), max_wait_s=5)
    kv, ttl = await lease_kv(bus.js, float(sys.argv[2]))
    lease = Lease(kv, sys.argv[3], this_holder("child"), ttl, 0.3)
    await lease.start(bus.nc)
    print("active" if lease.is_active else "standby", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_killed_processes_lease_is_taken_at_once(nats_server: NatsServer) -> None:
    """Same machine, its PID gone: no need to wait for the TTL (30 s here) to be sure it is dead."""
    ttl_s = 30.0
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLD_AND_WAIT,
        nats_server.url,
        str(ttl_s),
        KEY,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), timeout=20)
        assert line.strip() == b"active"
        async with holder(nats_server.url, ttl_s=ttl_s) as b:
            assert not b.is_active
            child.kill()  # SIGKILL: no release
            await asyncio.wait_for(child.wait(), timeout=10)
            _, took_s = await first_active([b], timeout_s=5.0)
            assert took_s < 2.0 and b.takeovers == 1
    finally:
        if child.returncode is None:
            child.kill()
            await asyncio.wait_for(child.wait(), timeout=10)


# ---- two deciders -------------------------------------------------------------------------------


class Instance:
    def __init__(self, svc: DeciderService, task: asyncio.Task[int]) -> None:
        self.svc, self.task = svc, task

    def published(self) -> list[int]:
        return [row.decision_id for row in self.svc.history.decisions]

    async def stop(self) -> None:
        self.svc.request_stop()
        assert await asyncio.wait_for(self.task, timeout=15) == 0

    async def crash(self) -> None:
        """Stop dead: no drain, no release, the connection dropped (renewals just stop)."""
        svc = self.svc
        assert svc._lease is not None
        await svc._lease.stop(release=False)
        self.task.cancel()
        tasks = [self.task, *svc._tasks]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await svc.bus.nc.close()
        await svc.http.stop()


async def start(s: Any, started: Callable[[DeciderService], bool]) -> Instance:
    svc = DeciderService(s)
    task = asyncio.create_task(svc.run(), name="decider")
    await wait_until(lambda: started(svc) or task.done(), 15)
    assert not task.done()
    return Instance(svc, task)


def health(svc: DeciderService) -> dict[str, object]:
    return svc._health()[1]


async def test_two_deciders_publish_from_one_and_ids_keep_increasing_across_a_failover(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    s = settings(nats_server.url, write_profile(tmp_path), lease_ttl_s=TTL_S, lease_renew_s=RENEW_S)
    bus = await connect(nats_server.url)
    seen = await Collector().start(bus)
    a = await start(s, lambda svc: svc.is_active and svc.ids is not None)
    b = await start(s, lambda svc: svc._lease is not None)
    try:
        assert health(a.svc)["role"] == "active" and health(b.svc)["role"] == "standby"
        assert a.svc._health()[0] and b.svc._health()[0]  # a standby is healthy

        await feed(bus, 250)  # need 2.5 -> 3 each
        (d1,) = await seen.wait_count(1)
        await bus.publish(
            SUBJECTS.ack(), ScalingAck(decision_id=1, actuator_id="t", status=AckStatus.COMPLETED)
        )
        await feed(bus, 450, 3, 3)  # need 4.5 -> 5 each
        d2 = (await seen.wait_count(2))[1]
        assert (d1.decision_id, d2.decision_id) == (1, 2)
        assert a.published() == [1, 2] and b.published() == []

        await a.crash()
        t0 = time.monotonic()
        await wait_until(lambda: b.svc.is_active and b.svc.ids is not None, TTL_S + 3.0)
        assert time.monotonic() - t0 <= TTL_S + 1.0
        assert b.svc.ids is not None and b.svc.ids.value == 2
        assert b.svc.book.last_issued == {"prefill": 5, "decode": 5}  # what a published

        await feed(bus, 150, 5, 5)  # need 1.5 -> 2
        d3 = (await seen.wait_count(3))[2]
        assert d3.decision_id == 3 and d3.previous == {"prefill": 5, "decode": 5}
        assert b.published() == [3]
        on_stream = [d.decision_id for d in await stream_decisions(bus)]
        assert on_stream == [1, 2, 3]
    finally:
        if not a.task.done():
            await a.stop()
        await b.stop()
        await bus.close()


# ---- activation on a JetStream that is not there yet --------------------------------------------


class Flaky(Service[LeaseSettings]):
    """Its activation fails ``fail`` times with ``error`` (a cluster whose stream leaders are still
    being elected answers a JetStream call with a timeout)."""

    name = "flaky"
    settings_type = LeaseSettings
    lease = "flaky"

    def __init__(self, settings: LeaseSettings, fail: int, error: Exception) -> None:
        super().__init__(settings)
        self.fail, self.error, self.calls = fail, error, 0

    async def activate(self) -> None:
        self.calls += 1
        if self.calls <= self.fail:
            raise self.error


async def run_flaky(url: str, fail: int, error: Exception, until: Callable[[Flaky], bool]) -> Flaky:
    svc = Flaky(
        LeaseSettings(nats_url=url, namespace="flaky", http_port=0, lease_ttl_s=TTL_S, lease_renew_s=RENEW_S),
        fail,
        error,
    )
    task = asyncio.create_task(svc.run(), name="flaky")
    try:
        await wait_until(lambda: until(svc) or task.done(), 15)
        assert not task.done()
        return svc
    finally:
        svc.request_stop()
        await asyncio.wait_for(task, timeout=15)


async def test_an_activation_that_meets_a_nats_timeout_is_retried_holding_the_lease(
    nats_server: NatsServer,
) -> None:
    svc = await run_flaky(nats_server.url, 2, nats.errors.TimeoutError(), lambda s: s.calls >= 3)
    assert svc.calls == 3
    assert svc._m_changes.labels("standby")._value.get() == 0  # never stepped down
    assert svc._lease is not None and svc._lease.takeovers == 0


async def test_an_activation_that_fails_otherwise_steps_down_and_retries_after_a_pause(
    nats_server: NatsServer,
) -> None:
    t0 = time.monotonic()
    svc = await run_flaky(nats_server.url, 1, ValueError("broken backend"), lambda s: s.calls >= 2)
    assert svc._m_changes.labels("standby")._value.get() == 1
    assert time.monotonic() - t0 >= 2 * 1.0  # the step-down pause: 2 renewals (at least 1 s each)
