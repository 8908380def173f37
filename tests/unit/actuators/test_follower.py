"""The actuation core's control pass and decision intake against an in-memory backend (no NATS: acks
are recorded instead of published). The same rules run against real backends in
tests/integration/actuators/test_conformance.py; these tables pin the edge cases."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from planner_proto import AckStatus, ScalingDecision, Subjects
from planner_runtime.actuation import (
    ActuationError,
    DecisionFollower,
    NoCapacity,
    Phase,
    Seen,
    WorkerRecord,
)
from planner_runtime.actuation.follower import FollowerMetrics


class Log:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: logging.getLogger("test").debug("%s %s", a, k)


class MemBackend:
    """Workers in a dict; ``start`` can be made to fail or run out of capacity."""

    def __init__(self, capacity: int = 100) -> None:
        self.alive: dict[str, Seen] = {}
        self.draining: set[str] = set()
        self.capacity = capacity
        self.fail_start: ActuationError | None = None
        self.drain_calls = 0
        self.stuck = False
        """Drains never end (remove keeps saying the worker is still there)."""

    def components(self) -> Sequence[str]:
        return ["prefill", "decode"]

    def gpus_per_replica(self, component: str) -> int:
        return 1

    def admit(self, targets: Mapping[str, int], running: Sequence[WorkerRecord]) -> str:
        return "too_big" if sum(targets.values()) > 50 else ""

    async def workers(self, known: Mapping[str, WorkerRecord]) -> list[Seen]:
        return list(self.alive.values())

    def add(self, name: str, comp: str, ready: bool = True, index: int = 0) -> None:
        self.alive[name] = Seen(name=name, component=comp, ready=ready, index=index)

    async def start(self, component: str, count: int, known: Sequence[WorkerRecord]) -> list[WorkerRecord]:
        if self.fail_start is not None:
            raise self.fail_start
        used = {w.index for w in known if w.component == component}
        out = []
        for i in range(1000):
            if len(out) == count:
                break
            if i in used:
                continue
            if len(self.alive) >= self.capacity:
                if out:
                    break
                raise NoCapacity("no room")
            name = f"{component}-{i}"
            self.add(name, component, ready=True, index=i)
            out.append(WorkerRecord(name=name, component=component, index=i, started_at_s=time.time()))
        return out

    async def drain(self, workers: Sequence[WorkerRecord]) -> None:
        self.drain_calls += 1
        self.draining |= {w.name for w in workers}

    async def remove(self, worker: WorkerRecord) -> bool:
        if self.stuck:
            return False
        self.alive.pop(worker.name, None)
        return True


class Follower(DecisionFollower):
    def __init__(self, backend: MemBackend) -> None:
        super().__init__(
            backend=backend,
            subjects=Subjects(ns="t"),
            actuator="actuator-test",
            actuator_id="a",
            ready_timeout_s=60.0,
            status_every_s=1.0,
            poll_s=0.1,
            metrics=FollowerMetrics(CollectorRegistry()),
            log=Log(),
        )
        self.sent: list[tuple[int, str, str]] = []

    async def _ack(self, d: ScalingDecision, status: AckStatus, message: str = "") -> None:
        self.sent.append((d.decision_id, status.value, message))


def decision(i: int, **targets: int) -> ScalingDecision:
    return ScalingDecision(decision_id=i, issued_at_s=0.0, namespace="t", targets=targets)


async def test_scale_up_completes_once_then_down_drains_the_unready_first() -> None:
    b = MemBackend()
    f = Follower(b)
    await f._accept(decision(1, prefill=2))
    await f._pass()  # starts 2, ready at once -> completed
    await f._pass()
    assert f.sent == [(1, "accepted", ""), (1, "completed", "")]
    b.add("prefill-9", "prefill", ready=False, index=9)  # someone else's, not ready
    await f._pass()
    assert f.external_change and f.desired["prefill"] == 3
    await f._accept(decision(2, prefill=2))
    await f._pass()
    assert b.draining == {"prefill-9"}  # the not-ready one goes first
    assert f.sent[-1] == (2, "accepted", "")  # not complete while it drains
    await f._pass()  # removed
    assert f.sent[-1] == (2, "completed", "")
    assert sorted(f.workers) == ["prefill-0", "prefill-1"]


async def test_external_change_fails_only_a_decision_it_touches() -> None:
    b = MemBackend()
    f = Follower(b)
    await f._accept(decision(1, prefill=1, decode=1))
    await f._pass()
    await f._pass()
    await f._accept(decision(2, decode=3))
    b.add("prefill-5", "prefill", index=5)  # prefill changed by hand: decision 2 is about decode
    await f._pass()
    await f._pass()
    assert (2, "failed", "") not in f.sent and f.sent[-1][:2] == (2, "completed")
    assert f.desired == {"prefill": 2, "decode": 3}


@pytest.mark.parametrize("draining", [True, False])
async def test_no_capacity_waits_only_while_workers_drain(draining: bool) -> None:
    b = MemBackend(capacity=2)
    f = Follower(b)
    await f._accept(decision(1, prefill=2))
    await f._pass()
    if draining:
        f.workers["prefill-1"] = WorkerRecord(
            name="prefill-1", component="prefill", index=1, phase=Phase.DRAINING, drain_started_at_s=1.0
        )
        b.stuck = True
    await f._accept(decision(2, prefill=2, decode=1))
    await f._pass()
    if draining:
        assert f.current is not None and f.sent[-1] == (2, "accepted", "")
    else:
        assert f.sent[-1] == (2, "failed", "no room") and f.desired["decode"] == 0


async def test_permanent_start_error_fails_once_and_settles() -> None:
    b = MemBackend()
    b.fail_start = ActuationError("patch prefill=2: 403 Forbidden")
    f = Follower(b)
    await f._accept(decision(1, prefill=2))
    for _ in range(3):
        await f._guarded_pass()
    assert f.sent == [(1, "accepted", ""), (1, "failed", "patch prefill=2: 403 Forbidden")]
    assert f.desired["prefill"] == 0 and f.completed_decision_id == 1


async def test_transient_start_error_then_the_worker_appears_is_not_external() -> None:
    b = MemBackend()
    b.fail_start = ActuationError("timeout", transient=True)
    f = Follower(b)
    await f._accept(decision(1, prefill=1))
    await f._guarded_pass()
    assert f.sent == [(1, "accepted", "")] and not f.backend_ok
    b.fail_start = None
    b.add("prefill-0", "prefill")  # the add went through after all
    await f._guarded_pass()
    assert not f.external_change and f.sent[-1] == (1, "completed", "")


async def test_rejected_and_superseded_are_answered_once() -> None:
    b = MemBackend()
    f = Follower(b)
    await f._accept(decision(1, prefill=60))  # admit refuses
    await f._accept(decision(2, prefill=1))
    await f._accept(decision(3, prefill=2))  # 2 still in progress: superseded
    await f._accept(decision(4, bogus=1))
    await f._pass()
    assert f.sent == [
        (1, "failed", "too_big"),
        (2, "accepted", ""),
        (2, "superseded", "superseded by decision 3"),
        (3, "accepted", ""),
        (3, "superseded", "superseded by decision 4"),
        (4, "failed", "invalid_component: ['bogus'] are not components (['agg', 'decode', 'prefill'])"),
    ]
    assert f.desired == {"prefill": 2}


async def test_a_worker_problem_fails_the_current_decision() -> None:
    b = MemBackend()
    f = Follower(b)
    await f._accept(decision(1, prefill=1))
    await f._pass()
    await f._accept(decision(2, prefill=1, decode=1))
    b.alive["prefill-0"] = Seen(name="prefill-0", component="prefill", ready=False, problem="keeps exiting")
    b.capacity = 1
    await f._pass()
    assert (2, "failed", "keeps exiting") in f.sent


class StuckBackend(MemBackend):
    """``workers`` blocks until released: a control pass waiting on a call that does not return."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.block = False

    async def workers(self, known: Mapping[str, WorkerRecord]) -> list[Seen]:
        if self.block:
            await self.release.wait()
        return await super().workers(known)


class RecordingBus:
    def __init__(self) -> None:
        self.published: list[tuple[float, Any]] = []

    async def publish(self, subject: str, msg: Any) -> None:
        self.published.append((asyncio.get_running_loop().time(), msg))


async def test_status_stays_on_time_while_a_pass_is_stuck() -> None:
    from planner_runtime.decisions import StatusPublisher

    b = StuckBackend()
    f = Follower(b)
    bus = RecordingBus()
    f.status_every_s = 0.2
    f._status = StatusPublisher(bus, "t.replicas", 0.2)  # type: ignore[arg-type]
    stopping = asyncio.Event()
    tasks = [asyncio.create_task(f.control_loop(stopping)), asyncio.create_task(f.status_loop(stopping))]
    try:
        await asyncio.sleep(0.3)
        assert bus.published  # the first pass's status
        b.block = True  # the next pass hangs (a JetStream call during a leader election)
        await asyncio.sleep(0.3)
        stuck_at = asyncio.get_running_loop().time()
        await asyncio.sleep(1.0)
        during = [t for t, _ in bus.published if t >= stuck_at]
        # still published about every 0.2 s although no pass completes
        assert len(during) >= 3, bus.published
        assert max(y - x for x, y in itertools.pairwise(during)) < 0.5
    finally:
        b.release.set()
        stopping.set()
        f.wake.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5.0)


async def test_no_extra_status_while_passes_complete() -> None:
    from planner_runtime.decisions import StatusPublisher

    f = Follower(MemBackend())
    bus = RecordingBus()
    f.status_every_s = 0.2
    f._status = StatusPublisher(bus, "t.replicas", 0.2)  # type: ignore[arg-type]
    stopping = asyncio.Event()
    tasks = [asyncio.create_task(f.control_loop(stopping)), asyncio.create_task(f.status_loop(stopping))]
    await asyncio.sleep(1.05)
    stopping.set()
    f.wake.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 5.0)
    # unchanged status: once per 0.2 s, from the control loop alone (not doubled by the status loop)
    assert 4 <= len(bus.published) <= 7, len(bus.published)


async def test_decisions_passed_over_by_a_takeover_are_answered_superseded_once() -> None:
    """A NATS cluster restart: decision 3 was published while no actuator held the lease, 4 right
    after; the new holder catches up to 4 from the stream, and 3 arrives from the feed afterwards."""
    f = Follower(MemBackend())
    f.last_decision_id, f.completed_decision_id = 2, 1  # 2 was being carried out
    await f._take_over(decision(4, prefill=3))
    foreign = ScalingDecision(decision_id=3, issued_at_s=0.0, namespace="other", targets={"prefill": 9})
    await f.take_in([decision(3, prefill=1), foreign, decision(4, prefill=3)])
    await f.take_in([decision(2, prefill=2)])  # redelivered: answered already
    assert f.sent == [
        (2, "superseded", "superseded by decision 4"),
        (4, "accepted", ""),
        (3, "superseded", "superseded by decision 4"),
    ]
    assert f.desired == {"prefill": 3} and f.last_decision_id == 4


async def test_a_decision_is_taken_only_once_its_state_is_saved() -> None:
    """A whole-cluster NATS restart: the state save fails while decision 3 is taken. It must not be
    answered (a new holder reloading the state at 2 would take it and answer ``accepted`` again):
    the state stays at 2, the feed's message is left unacked, and its redelivery is taken once."""
    import nats

    class Flaky(Follower):
        def __init__(self, backend: MemBackend) -> None:
            super().__init__(backend)
            self.fail_saves = 0

        async def _persist(self, strict: bool = False) -> None:
            if self.fail_saves and strict:  # the save a decision is taken on
                self.fail_saves -= 1
                raise nats.errors.TimeoutError

    f = Flaky(MemBackend())
    await f.take_in([decision(2, prefill=1)])
    f.fail_saves = 1
    with pytest.raises(nats.errors.TimeoutError):
        await f.take_in([decision(3, prefill=2)])
    assert f.last_decision_id == 2 and f.desired == {"prefill": 1}
    await f.take_in([decision(3, prefill=2)])  # the feed delivers it again
    f.fail_saves = 1
    with pytest.raises(nats.errors.TimeoutError):
        await f.take_in([decision(4, prefill=99, decode=99)])  # rejected by admit: not answered either
    await f.take_in([decision(4, prefill=99, decode=99)])
    assert f.sent == [
        (2, "accepted", ""),
        (2, "superseded", "superseded by decision 3"),
        (3, "accepted", ""),
        (3, "superseded", "superseded by decision 4"),
        (4, "failed", "too_big"),
    ]


class MemKV:
    """A KV bucket in memory, as the follower uses it; ``down`` makes every call time out."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[bytes, int]] = {}
        self.revision = 0
        self.down = False

    async def get(self, key: str) -> Any:
        import nats
        from nats.js.errors import KeyNotFoundError

        if self.down:
            raise nats.errors.TimeoutError
        if key not in self.entries:
            raise KeyNotFoundError
        value, rev = self.entries[key]
        return type("Entry", (), {"value": value, "revision": rev, "operation": None})()

    async def put(self, key: str, value: bytes) -> int:
        import nats

        if self.down:
            raise nats.errors.TimeoutError
        self.revision += 1
        self.entries[key] = (value, self.revision)
        return self.revision


@pytest.mark.parametrize("someone_saved_since", [False, True])
async def test_changes_not_saved_in_an_outage_are_saved_later_and_survive_a_retaken_lease(
    someone_saved_since: bool,
) -> None:
    """A NATS outage: the decision's start fails for good, so desired falls back to what runs, and
    the state cannot be saved. The same instance takes its lease back: it keeps its own state (the
    saved one would bring back the target it gave up), unless another holder saved since."""
    b = MemBackend()
    kv = MemKV()
    f = Follower(b)
    f._kv = kv  # type: ignore[assignment]
    await f._accept(decision(1, prefill=2))
    await f._pass()
    await f._pass()
    assert f.desired == {"prefill": 2} and f.completed_decision_id == 1
    await f._accept(decision(2, prefill=4))
    kv.down = True
    b.fail_start = ActuationError("quota exceeded", transient=False)
    await f._pass()  # gives up: desired back to the 2 running, decision 2 failed, not saved
    assert f.desired == {"prefill": 2} and f.sent[-1][:2] == (2, "failed") and f._dirty
    if someone_saved_since:
        kv.down = False
        other = Follower(b)
        other._kv = kv  # type: ignore[assignment]
        await other._reload(kv)  # type: ignore[arg-type]
        other.desired["prefill"] = 3
        await other._persist()
    kv.down = False
    await f._reload(kv)  # type: ignore[arg-type]
    assert f.desired == {"prefill": 3 if someone_saved_since else 2}
    if not someone_saved_since:
        assert not f._dirty and f.completed_decision_id == 2
        g = Follower(b)  # what a new instance would load
        await g._reload(kv)
        assert g.desired == {"prefill": 2} and g.completed_decision_id == 2


async def test_a_failed_save_is_made_on_the_next_pass() -> None:
    b = MemBackend()
    kv = MemKV()
    f = Follower(b)
    f._kv = kv  # type: ignore[assignment]
    await f._accept(decision(1, prefill=1))
    kv.down = True
    await f._pass()  # started
    await f._pass()  # ready: completed, not saved
    assert f._dirty and f.completed_decision_id == 1
    kv.down = False
    await f._pass()  # nothing changed in this pass, but the unsaved state goes out
    assert not f._dirty
    g = Follower(b)
    await g._reload(kv)
    assert g.completed_decision_id == 1 and set(g.workers) == {"prefill-0"}
