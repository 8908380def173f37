"""The KV lease, one step at a time: a fake KV with revisions and a TTL, and a clock stepped as a number."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.errors import APIError, KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from planner_runtime.lease import LOST_RETRY_S, Holder, Lease, deadline, holder_is_dead, margin_for

TTL_S = 8.0
RENEW_S = 2.0
KEY = "t.decider"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeKv:
    """One revision counter for the bucket, a delete marker, and the bucket TTL counted from the
    last write, like a JetStream KV bucket with history 1."""

    def __init__(self, clock: Clock, ttl_s: float = TTL_S) -> None:
        self.clock = clock
        self.ttl_s = ttl_s
        self.seq = 0
        self.entries: dict[str, tuple[bytes | None, int, float]] = {}  # value (None: deleted), rev, at
        self.fail_updates: BaseException | None = None
        self.apply_failed_updates = False

    def _current(self, key: str) -> tuple[bytes | None, int] | None:
        e = self.entries.get(key)
        if e is None:
            return None
        if self.clock() >= e[2] + self.ttl_s:
            del self.entries[key]
            return None
        return e[0], e[1]

    def _write(self, key: str, value: bytes | None) -> int:
        self.seq += 1
        self.entries[key] = (value, self.seq, self.clock())
        return self.seq

    async def create(self, key: str, value: bytes) -> int:
        cur = self._current(key)
        if cur is not None and cur[0] is not None:
            raise KeyWrongLastSequenceError(description="wrong last sequence")
        return self._write(key, value)

    async def update(self, key: str, value: bytes, last: int | None = None) -> int:
        cur = self._current(key)
        if (cur[1] if cur else 0) != (last or 0):
            raise KeyWrongLastSequenceError(description="wrong last sequence")
        if self.fail_updates is not None:
            if self.apply_failed_updates:
                self._write(key, value)  # applied on the server, but the answer never came back
            raise self.fail_updates
        return self._write(key, value)

    async def delete(self, key: str, last: int | None = None) -> bool:
        cur = self._current(key)
        if last and (cur[1] if cur else 0) != last:
            raise APIError(err_code=10071, description="wrong last sequence")
        self._write(key, None)
        return True

    async def get(self, key: str) -> KeyValue.Entry:
        cur = self._current(key)
        if cur is None:
            raise KeyNotFoundError()
        entry = KeyValue.Entry("planner_leases", key, cur[0], cur[1], None, None, None)
        if cur[0] is None:
            raise KeyDeletedError(entry=entry, op="DEL")
        return entry


def holder(pid: int, host: str = "h") -> Holder:
    return Holder(service="decider", host=host, boot_id="b", pid_ns="pid:[1]", pid=pid, nonce=str(pid))


def never_dead(other: Holder, me: Holder) -> bool:
    return False


def pair(clock: Clock, kv: FakeKv) -> tuple[Lease, Lease]:
    a = Lease(kv, KEY, holder(1), TTL_S, RENEW_S, clock=clock, is_dead=never_dead)
    b = Lease(kv, KEY, holder(2), TTL_S, RENEW_S, clock=clock, is_dead=never_dead)
    return a, b


@pytest.mark.parametrize(
    ("sent_at", "ttl_s", "want"),
    [
        (100.0, 8.0, 106.0),  # margin min(2, 8/4) = 2: 100 + 8 - 2
        (100.0, 2.0, 101.5),  # margin 2/4 = 0.5: 100 + 2 - 0.5
        (0.0, 40.0, 38.0),  # margin capped at 2: 0 + 40 - 2
    ],
)
def test_deadline_falls_before_the_server_expiry(sent_at: float, ttl_s: float, want: float) -> None:
    assert deadline(sent_at, ttl_s, margin_for(ttl_s)) == want
    assert want < sent_at + ttl_s


@pytest.mark.parametrize(
    ("other", "alive", "dead"),
    [
        (holder(7), False, True),  # same machine, boot and PID namespace, PID gone
        (holder(7), True, False),  # PID still there
        (holder(1), False, False),  # our own PID: this very process
        (holder(7, host="other"), False, False),  # another machine: cannot tell
        (Holder(host="h", pid=7), False, False),  # no boot id / namespace: cannot tell
        (Holder(service="?"), False, False),  # an unreadable value
    ],
)
def test_holder_is_dead_only_when_provably_so(other: Holder, alive: bool, dead: bool) -> None:
    assert holder_is_dead(other, holder(1), alive=lambda pid: alive) is dead


async def test_two_holders_exactly_one_active() -> None:
    clock = Clock()
    kv = FakeKv(clock)
    a, b = pair(clock, kv)
    assert await a.try_acquire()
    assert not await b.try_acquire()
    assert a.is_active and not b.is_active
    assert b.other == holder(1)


async def test_renewal_keeps_the_lease_and_moves_the_deadline() -> None:
    clock = Clock()
    kv = FakeKv(clock)
    a, b = pair(clock, kv)
    await a.try_acquire()
    assert a.valid_until == 106.0  # 100 + 8 - 2
    for _ in range(10):
        clock.now += RENEW_S
        assert await a.renew()
        assert not await b.try_acquire()
    assert a.is_active and a.valid_until == clock.now + TTL_S - 2.0


async def test_a_holder_that_cannot_renew_stops_before_anyone_else_can_start() -> None:
    clock = Clock()
    kv = FakeKv(clock)
    a, b = pair(clock, kv)
    await a.try_acquire()
    kv.fail_updates = TimeoutError()
    stopped_at = started_at = None
    while started_at is None:
        clock.now += 0.25
        if clock.now < 108.0:
            with pytest.raises(TimeoutError):
                await a.renew()
        if stopped_at is None and not a.is_active:
            stopped_at = clock.now
        if await b.try_acquire():
            started_at = clock.now
    assert stopped_at == 106.0  # 100 + 8 - 2: the holder's own deadline
    assert started_at == 108.0  # the key expired at 100 + 8
    assert not await a.renew() and a.revision is None  # and it learns it lost the lease


async def test_release_lets_a_standby_in_at_once() -> None:
    clock = Clock()
    kv = FakeKv(clock)
    a, b = pair(clock, kv)
    await a.try_acquire()
    await a.release()
    assert not a.is_active
    assert await b.try_acquire() and b.is_active
    await a.release()  # nothing held: no-op
    assert b.is_active


async def test_a_lost_lease_is_noticed_on_the_next_renewal() -> None:
    clock = Clock()
    kv = FakeKv(clock)
    a, b = pair(clock, kv)
    await a.try_acquire()
    clock.now += TTL_S  # a stalled process: the key expired, b took it
    assert await b.try_acquire()
    assert not a.is_active
    assert not await a.renew()
    assert a.revision is None
    await a.release()  # deletes nothing of b's
    assert b.is_active and await b.renew()


async def test_a_renewal_applied_but_unanswered_is_adopted_not_waited_out() -> None:
    clock = Clock()
    kv = FakeKv(clock)
    a, b = pair(clock, kv)
    await a.try_acquire()
    kv.fail_updates, kv.apply_failed_updates = TimeoutError(), True
    clock.now += RENEW_S
    with pytest.raises(TimeoutError):
        await a.renew()
    kv.fail_updates = None
    clock.now += RENEW_S
    assert await a.renew()  # the stored revision is newer, but the value is ours
    assert a.is_active and not await b.try_acquire()


async def test_a_dead_holders_key_is_taken_at_once_a_live_ones_is_not() -> None:
    clock = Clock()
    kv = FakeKv(clock)
    a = Lease(kv, KEY, holder(1), TTL_S, RENEW_S, clock=clock, is_dead=never_dead)
    await a.try_acquire()
    live = Lease(kv, KEY, holder(2), TTL_S, RENEW_S, clock=clock, is_dead=never_dead)
    assert not await live.try_acquire()
    restarted = Lease(kv, KEY, holder(3), TTL_S, RENEW_S, clock=clock, is_dead=lambda o, m: o.pid == 1)
    assert await restarted.try_acquire() and restarted.takeovers == 1
    assert not await a.renew()  # the old revision is gone


async def test_step_drops_the_lease_at_the_deadline_without_any_kv_call() -> None:
    clock = Clock()
    kv = FakeKv(clock)
    a, _ = pair(clock, kv)
    await a.try_acquire()
    kv.fail_updates = RuntimeError("the KV must not be called")
    clock.now = a.valid_until
    a.pause(3600.0)  # and no new attempt: the step returns at once after dropping
    task = asyncio.ensure_future(a.step())
    await asyncio.sleep(0)
    assert a.revision is None
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.wait_for(a.wait(active=False), timeout=1.0)


async def test_a_lease_lost_to_a_nats_outage_is_retried_fast_one_lost_to_another_holder_is_not() -> None:
    clock = Clock()
    kv = FakeKv(clock)
    a, b = pair(clock, kv)
    await a.try_acquire()
    assert a.acquire_every_s() == RENEW_S
    a.drop("not_renewed_in_time")  # renewals did not get through: the key is still ours
    assert a.acquire_every_s() == min(RENEW_S, LOST_RETRY_S) < RENEW_S
    assert await a.try_acquire() and a.acquire_every_s() == RENEW_S  # back: ordinary cadence
    a.drop("not_renewed_in_time")
    clock.now += TTL_S  # meanwhile the key expired and b took it
    assert await b.try_acquire()
    a.pause(0.0)
    task = asyncio.ensure_future(a.step())  # one failed attempt: an ordinary standby from then on
    for _ in range(20):
        await asyncio.sleep(0)
    assert not a.is_active and a.acquire_every_s() == RENEW_S
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_renewal_that_finds_its_key_expired_retries_fast_one_that_finds_it_taken_does_not() -> None:
    clock = Clock()
    kv = FakeKv(clock)
    a, b = pair(clock, kv)
    await a.try_acquire()
    clock.now += TTL_S + 0.1  # NATS answered again only after the key expired on the server
    a.valid_until = clock.now + 1.0  # (the local deadline kept, to reach the renewal itself)
    assert not await a.renew()
    assert a.revision is None and a.acquire_every_s() == min(RENEW_S, LOST_RETRY_S) < RENEW_S
    assert await a.try_acquire() and a.acquire_every_s() == RENEW_S
    clock.now += TTL_S + 0.1
    assert await b.try_acquire()  # this time another instance took the expired key first
    a.valid_until = clock.now + 1.0
    assert not await a.renew()
    assert a.revision is None and a.other is not None and a.acquire_every_s() == RENEW_S
