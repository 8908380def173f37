"""Membership claims against a fake KV: bounded renewal concurrency, per-claim deadlines, the
renew/release and create/expiry races, and a KV watch that stops even when a cancellation is lost."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import nats.js.errors
import pytest

from planner_fpm_relay.kvmirror import KvMirror, KvValue
from planner_fpm_relay.membership import Membership, config_fingerprint


class FakeKv:
    """Revisions per key, compare-and-swap like JetStream; every call takes ``delay_s``."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.rev = 0
        self.keys: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.deleted: list[tuple[str, int | None]] = []
        self.create_error: BaseException | None = None

    async def _io(self) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1

    async def put(self, key: str, value: bytes) -> int:
        await self._io()
        self.rev += 1
        self.keys[key] = self.rev
        return self.rev

    async def create(self, key: str, value: bytes) -> int:
        await self._io()
        if self.create_error is not None:
            raise self.create_error
        if key in self.keys:
            raise nats.js.errors.KeyWrongLastSequenceError()
        self.rev += 1
        self.keys[key] = self.rev
        return self.rev

    async def update(self, key: str, value: bytes, last: int) -> int:
        await self._io()
        if self.keys.get(key) != last:
            raise nats.js.errors.KeyWrongLastSequenceError()
        self.rev += 1
        self.keys[key] = self.rev
        return self.rev

    async def delete(self, key: str, last: int | None = None) -> bool:
        await self._io()
        if last is not None and self.keys.get(key) != last:
            raise nats.js.errors.BadRequestError(code=400, err_code=10071)
        self.keys.pop(key, None)
        self.deleted.append((key, last))
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def membership(kv: FakeKv, clock: Clock, concurrency: int = 4) -> Membership:
    kv_any: Any = kv
    return Membership(kv_any, "t", "r1", 6.0, 2.0, lambda: None, clock, concurrency)


async def test_renewal_is_bounded_and_each_deadline_counts_from_its_own_send() -> None:
    kv, clock = FakeKv(delay_s=0.001), Clock()
    ms = membership(kv, clock, concurrency=4)
    assert await ms.claim_many([f"decode.w{i}" for i in range(40)]) == {f"decode.w{i}" for i in range(40)}
    assert kv.max_in_flight == 4

    real_update = kv.update

    async def update(key: str, value: bytes, last: int) -> int:
        clock.now += 0.1  # the clock moves while the round goes on
        return await real_update(key, value, last)

    kv.update = update  # type: ignore[method-assign]
    kv.max_in_flight = 0
    assert await ms.renew() == []
    assert kv.max_in_flight == 4
    deadlines = sorted(lease.valid_until for lease in ms.leases.values())
    assert deadlines[0] < deadlines[-1] - 3.0  # later sends, later deadlines (40 x 0.1 s)
    assert all(d <= clock.now + 5.0 for d in deadlines)


async def test_release_waits_for_a_renewal_in_flight_and_deletes_at_its_revision() -> None:
    kv, clock = FakeKv(delay_s=0.05), Clock()
    ms = membership(kv, clock)
    assert await ms.claim("decode.w1")
    renewing = asyncio.create_task(ms.renew())
    await asyncio.sleep(0.01)  # the update is in flight
    await ms.release("decode.w1")
    assert await renewing == []
    assert "t.claim.decode.w1" not in kv.keys, "the delete lost to the renewal: key held for a TTL"
    assert kv.deleted == [("t.claim.decode.w1", kv.rev)]  # the renewal's revision


async def test_a_failed_renewal_does_not_drop_a_claim_taken_again_meanwhile() -> None:
    kv, clock = FakeKv(delay_s=0.05), Clock()
    ms = membership(kv, clock)
    assert await ms.claim("decode.w1")
    old = ms.leases["decode.w1"]
    kv.keys["t.claim.decode.w1"] = 999  # someone else wrote it: this renewal will fail
    renewing = asyncio.create_task(ms.renew())
    await asyncio.sleep(0.01)
    ms.leases.pop("decode.w1")
    kv.keys.pop("t.claim.decode.w1")
    assert await ms.claim("decode.w1")  # re-taken while the old renewal is in flight
    assert await renewing == []
    assert "decode.w1" in ms.leases and ms.leases["decode.w1"] is not old


async def test_create_finding_the_key_expired_between_its_steps_is_a_lost_race() -> None:
    kv, clock = FakeKv(), Clock()
    ms = membership(kv, clock)
    kv.create_error = nats.js.errors.KeyNotFoundError()
    assert await ms.claim("decode.w1") is False
    assert await ms.claim_many(["decode.w2"]) == set()


async def test_leave_releases_concurrently_and_no_member_put_after_it() -> None:
    kv, clock = FakeKv(delay_s=0.01), Clock()
    ms = membership(kv, clock, concurrency=8)
    await ms.heartbeat()
    await ms.claim_many([f"decode.w{i}" for i in range(32)])
    kv.max_in_flight = 0
    await asyncio.wait_for(ms.leave(), timeout=1.0)  # sequential would take 0.33 s at least
    assert kv.max_in_flight == 8
    assert kv.keys == {}
    await ms.heartbeat()
    assert kv.keys == {}, "a heartbeat after leave() put the membership key back"


class FakeWatcher:
    def __init__(self) -> None:
        self.updates: asyncio.Queue[Any] = asyncio.Queue()
        self.updates.put_nowait(None)  # empty initial snapshot
        self.stopped = False

    def __aiter__(self) -> FakeWatcher:
        return self

    async def __anext__(self) -> Any:
        return await self.updates.get()

    async def stop(self) -> None:
        self.stopped = True


class SwallowingKv:
    """``watch`` swallows a cancellation the way asyncio.wait_for in nats-py's request can on 3.11."""

    def __init__(self) -> None:
        self.watchers: list[FakeWatcher] = []
        self.entered = asyncio.Event()

    async def watch(self, pattern: str) -> FakeWatcher:
        self.entered.set()
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            pass  # lost
        w = FakeWatcher()
        self.watchers.append(w)
        return w


@pytest.mark.parametrize("how", ["cancel", "stop"])
async def test_kv_mirror_stops_even_when_a_cancellation_is_lost(how: str) -> None:
    kv: Any = SwallowingKv()
    mirror = KvMirror(kv, "t.member.*", 0.2, lambda: None, "members")
    task = asyncio.create_task(mirror.run())
    await asyncio.wait_for(mirror.synced.wait(), 1.0)
    kv.entered.clear()
    await asyncio.wait_for(kv.entered.wait(), 1.0)  # the next resync: inside watch() now
    if how == "stop":
        mirror.stop()
    task.cancel()
    await asyncio.wait_for(asyncio.wait({task}), timeout=1.0)
    assert task.done()
    assert all(w.stopped for w in kv.watchers)


def test_config_fingerprint_is_order_free_and_tells_configs_apart() -> None:
    a = config_fingerprint(["10.0.0.1:8000", "10.0.0.2:8000"], ["prefill:llm:app=prefill"])
    assert a == config_fingerprint(["10.0.0.2:8000", "10.0.0.1:8000"], ["prefill:llm:app=prefill"])
    assert a != config_fingerprint(["10.0.0.1:8000"], ["prefill:llm:app=prefill"])
    assert a != config_fingerprint(["10.0.0.1:8000", "10.0.0.2:8000"], [])


def test_relays_with_another_config_are_named() -> None:
    kv = FakeKv()
    kv_any: Any = kv
    m = Membership(kv_any, "t", "r1", 6.0, 2.0, lambda: None, Clock(), 4, config="aaa")
    same = KvValue(msgspec.json.encode({"relay": "r2", "config": "aaa"}), 1)
    other = KvValue(msgspec.json.encode({"relay": "r3", "config": "bbb"}), 2)
    older = KvValue(b"r4", 3)  # a relay that publishes only its id: not judged
    m.mirror.entries = {"t.member.r2": same, "t.member.r3": other, "t.member.r4": older}
    assert m.differing() == ["r3"]
    assert m.members() == ["r1", "r2", "r3", "r4"]
