"""The decision protocol, the same for every actuator: actuator-circus (real circusd and stand-in
workers), actuator-k8s (the HTTP fake of the API server) and the example backend in
examples/process_actuator.py (real local processes). Each test runs against all three."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "process_actuator.py"
DISAGG = {
    "Frontend": {"componentType": "frontend", "replicas": 1},
    "pf": {"componentType": "worker", "subComponentType": "prefill", "replicas": 0},
    "dc": {"componentType": "worker", "subComponentType": "decode", "replicas": 0},
}
FINAL = ("completed", "failed", "superseded")


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("planner_example_process_actuator", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Kind:
    name: str
    durable: str
    run: Callable[[], AbstractAsyncContextManager[Any]]
    count: Callable[[str], int]
    """How many workers of a component exist in the real system (not in the actuator's view)."""


@pytest.fixture
def process_dir(tmp_path: Path) -> Iterator[Path]:
    run_dir = tmp_path / "run"
    yield run_dir
    for f in run_dir.glob("*.pid"):
        with suppress(ProcessLookupError, ValueError):
            os.kill(int(f.read_text()), signal.SIGKILL)
            os.waitpid(int(f.read_text()), 0)


@pytest.fixture(params=["circus", "k8s", "process"])
def kind(request: pytest.FixtureRequest, nats_server: Any) -> Kind:
    if request.param == "circus":
        circusd = request.getfixturevalue("circusd")
        make = request.getfixturevalue("make_settings")
        run = request.getfixturevalue("run_actuator")
        settings = make()
        return Kind(
            "circus",
            f"actuator-circus-{settings.actuator_id}",
            lambda: run(settings),
            lambda comp: sum(1 for w in circusd.watchers() if w.startswith(f"t_{comp}_")),
        )
    if request.param == "k8s":
        fake = request.getfixturevalue("fake_kube")
        fake.add_dgd("llm-disagg", DISAGG)
        k8s = request.getfixturevalue("k8s_settings")()
        run_k8s = request.getfixturevalue("run_k8s")
        svc = {"prefill": "pf", "decode": "dc"}
        return Kind(
            "k8s",
            f"actuator-k8s-{k8s.actuator_id}",
            lambda: run_k8s(k8s),
            lambda comp: fake.objects[("dynamographdeployments", "llm-disagg")].replicas[svc[comp]].spec,
        )
    mod = _example()
    run_dir = request.getfixturevalue("process_dir")
    ps = mod.ProcessSettings(
        namespace="t", nats_url=nats_server.url, run_dir=str(run_dir), ready_timeout_s=30.0, log_json=False
    )

    @asynccontextmanager
    async def run() -> AsyncIterator[Any]:
        svc = mod.ProcessActuator(ps)
        task = asyncio.create_task(svc.run())
        try:
            deadline = time.monotonic() + 20
            while getattr(svc, "feed", None) is None and not task.done():
                assert time.monotonic() < deadline, "actuator did not start"
                await asyncio.sleep(0.05)
            if task.done():
                task.result()
            yield svc
        finally:
            svc.request_stop()
            await asyncio.wait_for(task, timeout=30)

    return Kind(
        "process",
        f"actuator-process-{ps.actuator_id}",
        run,
        lambda comp: len(list(run_dir.glob(f"{comp}-*.pid"))),
    )


def answered_once(recorder: Any) -> None:
    """Every decision: ``accepted`` at most once, and at most one final ack."""
    ids = {a.decision_id for a in recorder.acks}
    for i in ids:
        acks = recorder.acks_for(i)
        assert acks.count("accepted") <= 1, (i, acks)
        assert sum(acks.count(s) for s in FINAL) <= 1, (i, acks)


async def test_scale_up_then_down(kind: Kind, recorder: Any) -> None:
    async with kind.run():
        d1 = await recorder.decide({"prefill": 2, "decode": 1})
        await recorder.wait_ack(d1, "accepted")
        done = await recorder.wait_ack(d1, "completed", timeout_s=40)
        assert done.ready == {"prefill": 2, "decode": 1}
        assert (kind.count("prefill"), kind.count("decode")) == (2, 1)
        d2 = await recorder.decide({"prefill": 1})
        done = await recorder.wait_ack(d2, "completed", timeout_s=40)
        assert done.ready == {"prefill": 1}
        assert (kind.count("prefill"), kind.count("decode")) == (1, 1)
        st = await recorder.wait_status(
            lambda s: s.last_decision_id == d2 and s.components["prefill"].ready == 1
        )
        assert st.components["prefill"].desired == 1 and st.components["prefill"].draining == 0
        assert st.components["decode"].desired == 1 and not st.external_change
    answered_once(recorder)


async def test_old_advisory_and_superseded(kind: Kind, recorder: Any) -> None:
    async with kind.run():
        d5 = await recorder.decide({"prefill": 1}, decision_id=5)
        await recorder.wait_ack(d5, "completed", timeout_s=40)
        await recorder.decide({"prefill": 3}, decision_id=3)  # older: ignored
        await recorder.decide({"prefill": 3}, decision_id=6, advisory=True)  # advisory: ignored
        await recorder.decide({"decode": 1}, decision_id=7)
        d8 = await recorder.decide({"prefill": 1, "decode": 0}, decision_id=8)
        await recorder.wait_ack(d8, "completed", timeout_s=40)
        await asyncio.sleep(0.5)
        assert recorder.acks_for(3) == [] and recorder.acks_for(6) == []
        assert recorder.acks_for(7)[-1] == "superseded"
        assert (kind.count("prefill"), kind.count("decode")) == (1, 0)
    answered_once(recorder)


async def test_unknown_component_fails_and_changes_nothing(kind: Kind, recorder: Any) -> None:
    async with kind.run():
        bad = await recorder.decide({"a;rm -rf /": 1, "prefill": 1})
        assert "invalid_component" in (await recorder.wait_ack(bad, "failed")).message
        await asyncio.sleep(0.5)
        assert kind.count("prefill") == 0
    assert recorder.acks_for(bad) == ["failed"]


async def test_restart_neither_repeats_nor_loses_anything(kind: Kind, recorder: Any) -> None:
    async with kind.run():
        d = await recorder.decide({"prefill": 2}, decision_id=4)
        await recorder.wait_ack(d, "completed", timeout_s=40)
    restarted = time.time()
    async with kind.run():
        st = await recorder.wait_status(
            lambda s: s.at_s > restarted and s.last_decision_id == d and s.components["prefill"].ready == 2
        )
        assert not st.external_change and st.components["prefill"].desired == 2
        await asyncio.sleep(1.0)
        assert kind.count("prefill") == 2
        d2 = await recorder.decide({"prefill": 1})
        await recorder.wait_ack(d2, "completed", timeout_s=40)
        assert kind.count("prefill") == 1
    assert recorder.acks_for(d) == ["accepted", "completed"]
    answered_once(recorder)


async def test_decision_held_by_a_dead_predecessor_is_taken_at_once(kind: Kind, recorder: Any) -> None:
    """A predecessor fetched a decision and died before recording it: the new holder takes it from
    the stream at once instead of waiting for the consumer's ack wait (30 s)."""
    subjects = recorder.subjects
    held = await recorder.bus.js.pull_subscribe(
        subjects.decision(), durable=kind.durable, stream=subjects.decision_stream()
    )
    d = await recorder.decide({"decode": 1}, decision_id=7)
    assert len(await held.fetch(batch=1, timeout=5)) == 1  # delivered, never acked
    await held.unsubscribe()
    t0 = time.monotonic()
    async with kind.run():
        await recorder.wait_ack(d, "accepted", timeout_s=10)
        assert time.monotonic() - t0 < 10
        await recorder.wait_ack(d, "completed", timeout_s=40)
        assert kind.count("decode") == 1
    assert recorder.acks_for(d) == ["accepted", "completed"]
