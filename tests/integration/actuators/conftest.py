"""Fixtures for the actuator tests: a real circusd per test on free loopback ports, the stand-in
worker command, an in-process actuator, and a NATS helper that records acks and replica status."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from circus.client import CircusClient
from circus.exc import CallError

from planner_actuator_circus.service import CircusActuator
from planner_actuator_circus.settings import CircusActuatorSettings
from planner_proto import ReplicaStatus, ScalingAck, ScalingDecision, Subjects
from planner_runtime.bus import Bus
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port
from planner_runtime.settings import BaseSettings

HERE = Path(__file__).resolve().parent
STANDIN = HERE / "standin_worker.py"


@dataclass
class Circusd:
    endpoint: str
    proc: subprocess.Popen[bytes]
    marker_dir: Path
    log: Path

    def call(self, command: str, **props: Any) -> dict[str, Any]:
        client = CircusClient(endpoint=self.endpoint, timeout=5.0)
        try:
            res: dict[str, Any] = client.send_message(command, **props)
            return res
        finally:
            client.stop()

    def watchers(self) -> list[str]:
        return list(self.call("list")["watchers"])

    def pids(self, name: str) -> list[int]:
        return list(self.call("list", name=name).get("pids", []))

    def events(self, worker_id: str) -> list[dict[str, Any]]:
        path = self.marker_dir / f"{worker_id}.events"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def all_started(self) -> list[dict[str, Any]]:
        out = []
        for p in sorted(self.marker_dir.glob("*.events")):
            out += [e for e in self.events(p.name.removesuffix(".events")) if e["event"] == "started"]
        return out


def _wait_circusd(endpoint: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"circusd exited with {proc.returncode}")
        client = CircusClient(endpoint=endpoint, timeout=0.5)
        try:
            if client.send_message("list").get("status") == "ok":
                return
        except CallError:
            pass
        finally:
            client.stop()
        time.sleep(0.1)
    raise TimeoutError("circusd did not answer")


@pytest.fixture
def circusd(tmp_path: Path) -> Iterator[Circusd]:
    """circusd on two free loopback ports (control, pubsub). Multicast discovery is off (empty
    endpoint) and so is circusd-stats (``statsd = false``: nothing binds the stats endpoint)."""
    ctl, pub = free_port(), free_port()
    ini = tmp_path / "circus.ini"
    ini.write_text(
        "[circus]\n"
        f"endpoint = tcp://127.0.0.1:{ctl}\n"
        f"pubsub_endpoint = tcp://127.0.0.1:{pub}\n"
        "multicast_endpoint =\n"
        "statsd = false\n"
        "check_delay = 1\n"
    )
    markers = tmp_path / "markers"
    markers.mkdir()
    log = tmp_path / "circusd.log"
    circusd_bin = str(Path(sys.executable).parent / "circusd")
    proc = subprocess.Popen(
        [circusd_bin, str(ini), "--log-output", str(log), "--log-level", "info"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    c = Circusd(endpoint=f"tcp://127.0.0.1:{ctl}", proc=proc, marker_dir=markers, log=log)
    try:
        _wait_circusd(c.endpoint, proc, 15)
        yield c
    finally:
        _stop_everything(c)


def _stop_everything(c: Circusd) -> None:
    """Workers first (they run in their own sessions, so they are found through their start
    markers; a test's workers have nothing left to drain), then circusd."""
    for e in c.all_started():
        with suppress(ProcessLookupError, PermissionError):
            os.kill(int(e["pid"]), signal.SIGKILL)
    if c.proc.poll() is None:
        c.proc.send_signal(signal.SIGTERM)
        try:
            c.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            c.proc.kill()
            c.proc.wait(timeout=5)
    for e in c.all_started():
        with suppress(ProcessLookupError, PermissionError):
            os.kill(int(e["pid"]), signal.SIGKILL)


def worker_cmd(marker_dir: Path, inflight_s: float = 1.0) -> str:
    return (
        f"{sys.executable} {STANDIN} --worker-id {{worker_id}} --component {{component}} "
        f"--namespace {{namespace}} --nats-url {{nats_url}} --marker-dir {marker_dir} "
        f"--inflight-s {inflight_s}"
    )


def actuator_settings(nats: NatsServer, c: Circusd, **over: Any) -> CircusActuatorSettings:
    base: dict[str, Any] = {
        "namespace": "t",
        "nats_url": nats.url,
        "circus_endpoint": c.endpoint,
        "worker_cmd": worker_cmd(c.marker_dir),
        "gpu_pool": [0, 1, 2, 3],
        "gpus_per_worker": ["prefill=1", "decode=1", "agg=1"],
        "worker_drain_timeout_s": 20.0,
        "ready_timeout_s": 30.0,
        "status_interval_s": 0.5,
        "log_json": False,
    }
    base.update(over)
    return CircusActuatorSettings(**base)


@asynccontextmanager
async def running_actuator(settings: CircusActuatorSettings) -> AsyncIterator[CircusActuator]:
    svc = CircusActuator(settings)
    task = asyncio.create_task(svc.run(), name="actuator")
    try:
        deadline = time.monotonic() + 20
        while not hasattr(svc, "feed") and not task.done():
            assert time.monotonic() < deadline, "actuator did not start"
            await asyncio.sleep(0.05)
        if task.done():
            task.result()
        yield svc
    finally:
        svc.request_stop()
        await asyncio.wait_for(task, timeout=30)


@dataclass
class Recorder:
    bus: Bus
    subjects: Subjects
    acks: list[ScalingAck] = field(default_factory=list)
    status: list[ReplicaStatus] = field(default_factory=list)
    next_id: int = 0

    async def decide(
        self, targets: dict[str, int], decision_id: int | None = None, advisory: bool = False
    ) -> int:
        if decision_id is None:
            self.next_id += 1
            decision_id = self.next_id
        self.next_id = max(self.next_id, decision_id)
        d = ScalingDecision(
            decision_id=decision_id,
            issued_at_s=time.time(),
            namespace=self.subjects.ns,
            targets=targets,
            advisory=advisory,
        )
        await self.bus.js_publish(self.subjects.decision(), d)
        return decision_id

    def acks_for(self, decision_id: int) -> list[str]:
        return [a.status.value for a in self.acks if a.decision_id == decision_id]

    async def wait_ack(self, decision_id: int, status: str, timeout_s: float = 30.0) -> ScalingAck:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for a in self.acks:
                if a.decision_id == decision_id and a.status.value == status:
                    return a
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {status} ack for {decision_id}; got {self.acks_for(decision_id)}")

    async def wait_status(self, pred: Any, timeout_s: float = 30.0) -> ReplicaStatus:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for s in reversed(self.status):
                if pred(s):
                    return s
            await asyncio.sleep(0.05)
        raise AssertionError(f"no matching ReplicaStatus; last: {self.status[-1:]}")


@pytest.fixture
async def recorder(nats_server: NatsServer) -> AsyncIterator[Recorder]:
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=10)
    subjects = Subjects(ns="t")
    rec = Recorder(bus=bus, subjects=subjects)
    await bus.ensure_stream(subjects.decision_stream(), [subjects.decision()])

    async def on_ack(a: ScalingAck, s: str) -> None:
        rec.acks.append(a)

    async def on_status(r: ReplicaStatus, s: str) -> None:
        rec.status.append(r)

    await bus.subscribe(subjects.ack(), ScalingAck, on_ack)
    await bus.subscribe(subjects.replicas(), ReplicaStatus, on_status)
    try:
        yield rec
    finally:
        await bus.close()


async def wait_until(pred: Any, timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await asyncio.to_thread(pred):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def make_settings(nats_server: NatsServer, circusd: Circusd) -> Any:
    def make(**over: Any) -> CircusActuatorSettings:
        return actuator_settings(nats_server, circusd, **over)

    return make


@pytest.fixture
def run_actuator() -> Any:
    return running_actuator


def _load_fake() -> Any:
    spec = importlib.util.spec_from_file_location("planner_tests_k8s_fake", HERE / "k8s_fake.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


k8s_fake = _load_fake()


@pytest.fixture
def fake_kube() -> Iterator[Any]:
    fake = k8s_fake.FakeKube(namespace="llm", ready_delay_s=0.8).start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def k8s_settings(nats_server: NatsServer, fake_kube: Any) -> Any:
    from planner_actuator_k8s.settings import K8sActuatorSettings

    def make(**over: Any) -> K8sActuatorSettings:
        base: dict[str, Any] = {
            "namespace": "t",
            "nats_url": nats_server.url,
            "api_url": fake_kube.url,
            "k8s_namespace": "llm",
            "target": "dgd",
            "dgd_name": "llm-disagg",
            "poll_interval_s": 0.2,
            "backoff_base_s": 0.05,
            "backoff_max_s": 0.2,
            "ready_timeout_s": 20.0,
            "log_json": False,
        }
        base.update(over)
        return K8sActuatorSettings(**base)

    return make


@asynccontextmanager
async def running_k8s(settings: Any) -> AsyncIterator[Any]:
    from planner_actuator_k8s.service import K8sActuator

    svc = K8sActuator(settings)
    task = asyncio.create_task(svc.run(), name="actuator-k8s")
    try:
        deadline = time.monotonic() + 20
        while not hasattr(svc, "feed") and not task.done():
            assert time.monotonic() < deadline, "actuator did not start"
            await asyncio.sleep(0.05)
        if task.done():
            task.result()
        yield svc
    finally:
        svc.request_stop()
        await asyncio.wait_for(task, timeout=30)


@pytest.fixture
def run_k8s() -> Any:
    return running_k8s
