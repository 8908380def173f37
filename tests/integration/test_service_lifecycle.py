"""A real service process: SIGTERM lets in-flight work finish and exits 0 with no task left;
/metrics and /healthz answer; it reconnects after a NATS restart without being restarted."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest

from planner_proto import LoadForecast, Subjects, TrafficSample
from planner_runtime.bus import Bus
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port
from planner_runtime.settings import BaseSettings

pytestmark = pytest.mark.integration


def start_echo(url: str, port: int, work_s: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PLANNER_NAMESPACE": "t"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "planner_runtime.testing",
            "--nats-url",
            url,
            "--http-port",
            str(port),
            "--work-s",
            str(work_s),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def logs(proc: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    assert proc.stderr is not None
    return [json.loads(line) for line in proc.stderr.read().decode().splitlines() if line.startswith("{")]


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_healthy(port: int, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if http_get(port, "/healthz")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError("service never became healthy")


async def test_sigterm_finishes_in_flight_work(nats_server: NatsServer) -> None:
    port = free_port()
    proc = start_echo(nats_server.url, port, work_s=1.5)
    try:
        await asyncio.to_thread(wait_healthy, port)
        bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
        got: list[LoadForecast] = []

        async def on_fc(m: LoadForecast, s: str) -> None:
            got.append(m)

        subjects = Subjects(ns="t")
        await bus.subscribe(subjects.forecast(), LoadForecast, on_fc)
        await bus.publish(
            subjects.traffic(), TrafficSample(namespace="t", start_s=0, interval_s=60, num_requests=9)
        )
        await bus.flush()
        await asyncio.sleep(0.3)  # the echo service is now inside its 1.5 s of work
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 20)
        await asyncio.sleep(0.2)
        assert code == 0
        assert [m.num_requests for m in got] == [9], "in-flight work was not finished before exit"
        lines = logs(proc)
        stopped = [entry for entry in lines if entry["event"] == "stopped"]
        assert stopped and stopped[-1]["leftover_tasks"] == 0
        assert any(entry["event"] == "drained" and entry["done"] == 1 for entry in lines)
        await bus.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_metrics_health_and_reconnect(nats_server: NatsServer) -> None:
    port = free_port()
    proc = start_echo(nats_server.url, port, work_s=0)
    try:
        await asyncio.to_thread(wait_healthy, port)
        status, body = await asyncio.to_thread(http_get, port, "/metrics")
        assert status == 200 and 'planner_up{service="echo"} 1.0' in body
        # the standard process series, for CPU and memory per service
        assert "process_cpu_seconds_total " in body and "process_resident_memory_bytes " in body
        assert 'python_info{implementation="CPython"' in body
        status, body = await asyncio.to_thread(http_get, port, "/nope")
        assert status == 404

        nats_server.stop()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (await asyncio.to_thread(http_get, port, "/healthz"))[0] == 200:
            await asyncio.sleep(0.1)
        status, body = await asyncio.to_thread(http_get, port, "/healthz")
        assert status == 503 and json.loads(body)["nats_connected"] is False

        nats_server.start()
        await asyncio.to_thread(wait_healthy, port)
        bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
        got: list[LoadForecast] = []

        async def on_fc(m: LoadForecast, s: str) -> None:
            got.append(m)

        subjects = Subjects(ns="t")
        await bus.subscribe(subjects.forecast(), LoadForecast, on_fc)
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            await bus.publish(
                subjects.traffic(), TrafficSample(namespace="t", start_s=0, interval_s=60, num_requests=4)
            )
            await asyncio.sleep(0.2)
        assert got, "the service did not receive again after the NATS restart"
        _, metrics = await asyncio.to_thread(http_get, port, "/metrics")
        assert "planner_nats_reconnects_total 1.0" in metrics
        await bus.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_bad_settings_exit_2_with_message(nats_server: NatsServer) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "planner_runtime.testing", "--work-s", "-3"], capture_output=True, timeout=30
    )
    assert proc.returncode == 2
    assert b"'work_s' (--work-s, PLANNER_WORK_S)" in proc.stderr


async def test_sigterm_with_nats_gone_still_exits_0(nats_server: NatsServer) -> None:
    """NATS died first (a node drain, a crash): SIGTERM must still end the service cleanly and soon,
    without a traceback, whatever nats-py has left to flush."""
    port = free_port()
    proc = start_echo(nats_server.url, port, work_s=1.0)
    try:
        await asyncio.to_thread(wait_healthy, port)
        bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
        await bus.publish(
            Subjects(ns="t").traffic(), TrafficSample(namespace="t", start_s=0, interval_s=60, num_requests=1)
        )
        await bus.flush()
        await bus.close()
        await asyncio.sleep(0.3)  # the echo is working; its answer will find NATS gone
        nats_server.kill()
        await asyncio.sleep(1.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 30)
        assert code == 0
        assert time.monotonic() - t0 < 15
        lines = logs(proc)
        assert any(entry["event"] == "stopped" for entry in lines)
        assert not any(entry.get("level") in ("error", "critical") for entry in lines), lines[-3:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
