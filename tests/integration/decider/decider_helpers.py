"""A decider in-process over a real nats-server, fed synthetic inputs; a collector of its decisions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner_core.profile import save_decode, save_prefill
from planner_decider.service import DeciderService
from planner_decider.settings import DeciderSettings
from planner_proto import (
    ComponentReplicas,
    LoadForecast,
    ReplicaStatus,
    ScalingDecision,
    Subjects,
    decode,
)
from planner_runtime.bus import Bus
from planner_runtime.settings import BaseSettings, load_settings

from ...unit.decider.decider_helpers import forecast, profiles

NS = "t"
SUBJECTS = Subjects(ns=NS)


def write_profile(folder: Path) -> Path:
    pre, dec = profiles()
    save_prefill(pre, folder / "prefill.npz")
    save_decode(dec, folder / "decode.npz")
    return folder


def settings(url: str, profile_dir: Path, **overrides: Any) -> DeciderSettings:
    flags: dict[str, Any] = {
        "nats_url": url,
        "namespace": NS,
        "policy": "throughput",
        "throughput_interval_s": 0.2,
        "ack_poll_s": 0.2,
        "tolerance": 0.0,
        "prefill_max_utilisation": 1.0,  # need = n / 100 exactly (see the unit helpers), no headroom
        "decode_max_utilisation": 1.0,
        "startup_s": 0.0,
        "down_window_s": 0.0,
        "max_gpu_budget": -1,
        "up_limit_replicas": 100,
        "down_limit_replicas": 100,
        "down_limit_percent": 100.0,
        "profile_dir": str(profile_dir),
        "log_level": "warning",
    }
    flags.update(overrides)
    return load_settings(DeciderSettings, flags=flags, env={})


class Running:
    def __init__(self, svc: DeciderService, task: asyncio.Task[int]) -> None:
        self.svc, self.task = svc, task

    async def stop(self) -> int:
        self.svc.request_stop()
        return await asyncio.wait_for(self.task, timeout=15)

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        return self.svc.registry.get_sample_value(name, labels or {}) or 0.0


async def start_decider(s: DeciderSettings) -> Running:
    svc = DeciderService(s)
    task = asyncio.create_task(svc.run(), name="decider-under-test")
    await wait_until(lambda: (svc.ids is not None and bool(svc._tasks)) or task.done(), 10)
    assert not task.done(), "decider stopped during start"
    return Running(svc, task)


async def connect(url: str) -> Bus:
    return await Bus.connect(BaseSettings(nats_url=url, namespace=NS), max_wait_s=5)


def status(p: int, d: int) -> ReplicaStatus:
    return ReplicaStatus(
        namespace=NS,
        actuator_id="test",
        at_s=time.time(),
        components={
            "prefill": ComponentReplicas(desired=p, ready=p),
            "decode": ComponentReplicas(desired=d, ready=d),
        },
    )


async def feed(bus: Bus, n: float, p: int = 1, d: int = 1) -> None:
    """A ReplicaStatus and a forecast of ``n`` requests (need n/100 replicas each)."""
    await bus.publish(SUBJECTS.replicas(), status(p, d))
    fc: LoadForecast = forecast(n, time.time())
    await bus.publish(SUBJECTS.forecast(), fc)
    await bus.flush()


class Collector:
    """Decisions as they are published (a plain subscription sees JetStream publishes too)."""

    def __init__(self) -> None:
        self.decisions: list[ScalingDecision] = []

    async def start(self, bus: Bus) -> Collector:
        async def on(d: ScalingDecision, subject: str) -> None:
            self.decisions.append(d)

        await bus.subscribe(SUBJECTS.decision(), ScalingDecision, on)
        return self

    async def wait_count(self, n: int, timeout_s: float = 10.0) -> list[ScalingDecision]:
        await wait_until(lambda: len(self.decisions) >= n, timeout_s)
        return self.decisions


async def wait_until(pred: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout_s} s")
        await asyncio.sleep(0.02)


async def stream_decisions(bus: Bus) -> list[ScalingDecision]:
    """Every decision the stream holds, read with an ephemeral pull consumer."""
    sub = await bus.js.pull_subscribe(SUBJECTS.decision(), stream=SUBJECTS.decision_stream())
    out: list[ScalingDecision] = []
    try:
        while True:
            try:
                msgs = await sub.fetch(50, timeout=0.5)
            except TimeoutError:
                break
            for m in msgs:
                out.append(decode(m.data, ScalingDecision))
                await m.ack()
    finally:
        await sub.unsubscribe()
    return out
