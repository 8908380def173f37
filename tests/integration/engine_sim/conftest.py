"""Fixtures for engine-sim / loadgen integration: in-process services on the test's loop (fast), and
engine-sim subprocesses when a real SIGTERM is needed. Everything started here is stopped at teardown,
also when the test fails."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any

import pytest

from planner_engine_sim.service import EngineSimService
from planner_engine_sim.settings import EngineSimSettings
from planner_loadgen.service import LoadgenService
from planner_loadgen.settings import LoadgenSettings
from planner_runtime.natsd import NatsServer

NS = "t"
FAST = {"time_compression": 10.0, "zmq_port_base": 0, "log_level": "warning", "namespace": NS}

StartEngine = Callable[..., Coroutine[Any, Any, EngineSimService]]


@pytest.fixture
async def start_engine(nats_server: NatsServer) -> AsyncIterator[StartEngine]:
    running: list[tuple[EngineSimService, asyncio.Task[int]]] = []

    async def start(worker_id: str, **overrides: Any) -> EngineSimService:
        settings = EngineSimSettings(
            **{**FAST, "nats_url": nats_server.url, "worker_id": worker_id, **overrides}
        )
        svc = EngineSimService(settings)
        task = asyncio.create_task(svc.run(), name=f"engine-{worker_id}")
        running.append((svc, task))
        async with asyncio.timeout(15):
            while not svc.registered:
                if task.done():
                    raise RuntimeError(f"engine {worker_id} exited early: {task.result()}")
                await asyncio.sleep(0.02)
        return svc

    yield start
    for svc, _ in running:
        svc.request_stop()
    for _, task in running:
        try:
            await asyncio.wait_for(task, 30)
        except TimeoutError:
            task.cancel()


async def run_loadgen(nats_url: str, timeout_s: float = 40.0, **overrides: Any) -> LoadgenService:
    """Run a loadgen to completion (exit_when_done) and return it for its results."""
    settings = LoadgenSettings(
        **{"namespace": NS, "nats_url": nats_url, "log_level": "warning", "stall_timeout_s": 5.0, **overrides}
    )
    svc = LoadgenService(settings)
    task = asyncio.create_task(svc.run(), name="loadgen")
    try:
        code = await asyncio.wait_for(asyncio.shield(task), timeout_s)
    except TimeoutError:
        svc.request_stop()
        await asyncio.wait_for(task, 30)
        raise
    assert code == 0, f"loadgen exit code {code}"
    return svc


@pytest.fixture
def engine_process(nats_server: NatsServer) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(worker_id: str, *args: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "planner_engine_sim", "--nats-url", nats_server.url, "--namespace", NS]
        cmd += ["--worker-id", worker_id, "--zmq-port-base", "0", "--time-compression", "10", *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ))
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
