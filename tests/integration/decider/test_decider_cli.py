"""`planner watch --json` shows decisions and acks; `planner ack` reaches the decider; the external
actuator example applies decisions idempotently and acks them."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from planner_proto import ScalingDecision
from planner_runtime.natsd import NatsServer

from .decider_helpers import (
    NS,
    SUBJECTS,
    Collector,
    connect,
    feed,
    settings,
    start_decider,
    wait_until,
    write_profile,
)

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


async def cli(*argv: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "planner_cli.main",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def next_json(proc: asyncio.subprocess.Process, kind: str, timeout_s: float = 10.0) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=timeout_s)
        assert line, "the command exited early"
        obj: dict[str, Any] = json.loads(line)
        if obj["kind"] == kind:
            return obj


async def test_watch_json_and_planner_ack(nats_server: NatsServer, tmp_path: Path) -> None:
    url = nats_server.url
    bus = await connect(url)
    seen = await Collector().start(bus)
    dec = await start_decider(settings(url, write_profile(tmp_path)))
    watch = await cli("watch", "--nats-url", url, "--namespace", NS, "--json", "--from-start")
    try:
        await feed(bus, 250)
        await seen.wait_count(1)
        shown = await next_json(watch, "decision")
        assert shown["decision_id"] == 1 and shown["targets"] == {"prefill": 3, "decode": 3}
        assert shown["reasons"] == {"prefill": "scale_up", "decode": "scale_up"}
        # recorded once the stream acknowledged it, which a plain subscriber may see the decision before
        await wait_until(lambda: dec.svc.book.in_progress == {"prefill", "decode"}, 5)

        ack = await cli(
            "ack", "1", "--status", "completed", "--ready", "prefill=3,decode=3",
            "--actuator-id", "external-1", "--nats-url", url, "--namespace", NS,
        )  # fmt: skip
        _, err = await asyncio.wait_for(ack.communicate(), timeout=20)
        assert ack.returncode == 0, err.decode()
        await wait_until(lambda: not dec.svc.book.in_progress, 5)
        assert dec.metric("planner_acks_total", {"status": "completed"}) == 1
        shown_ack = await next_json(watch, "ack")
        assert shown_ack["decision_id"] == 1 and shown_ack["actuator_id"] == "external-1"
        assert shown_ack["status"] == "completed" and shown_ack["ready"] == {"prefill": 3, "decode": 3}

        watch.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(watch.wait(), timeout=10) == 0
    finally:
        if watch.returncode is None:
            watch.kill()
            await watch.wait()
        assert await dec.stop() == 0
        await bus.close()


async def test_planner_ack_rejects_bad_ready() -> None:
    proc = await cli(
        "ack", "3", "--status", "completed", "--ready", "prefill=two", "--nats-url", "nats://127.0.0.1:1"
    )
    _, err = await asyncio.wait_for(proc.communicate(), timeout=20)
    assert proc.returncode == 2 and b"prefill" in err


async def example(url: str, state: Path, idle_exit_s: float = 1.5) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "examples" / "external_actuator.py"),
        "--nats-url", url, "--namespace", NS, "--state-file", str(state),
        "--idle-exit-s", str(idle_exit_s), "--durable", "ext-test",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def test_external_actuator_example(nats_server: NatsServer, tmp_path: Path) -> None:
    url = nats_server.url
    bus = await connect(url)
    seen = await Collector().start(bus)
    acks: list[dict[str, Any]] = []

    async def on_ack(m: Any) -> None:
        acks.append(json.loads(m.data))

    await bus.nc.subscribe(SUBJECTS.ack(), cb=on_ack)
    state = tmp_path / "applied.json"
    dec = await start_decider(settings(url, write_profile(tmp_path)))
    ext = await example(url, state, idle_exit_s=30)
    try:
        await feed(bus, 250)
        await seen.wait_count(1)
        # the example applies decision 1 and acks it completed: the decider is free to move again
        await wait_until(
            lambda: state.exists() and json.loads(state.read_text())["applied_decision_id"] == 1, 10
        )
        await wait_until(lambda: not dec.svc.book.in_progress, 5)
        await feed(bus, 450, 3, 3)
        await seen.wait_count(2)
        await wait_until(lambda: json.loads(state.read_text())["applied_decision_id"] == 2, 10)
        assert json.loads(state.read_text())["replicas"] == {"prefill": 5, "decode": 5}
        await wait_until(lambda: len(acks) >= 4, 10)  # the state file is written before the acks land
        assert [(a["decision_id"], a["status"]) for a in acks] == [
            (1, "accepted"),
            (1, "completed"),
            (2, "accepted"),
            (2, "completed"),
        ]
        # its ReplicaStatus reached the decider
        await wait_until(
            lambda: dec.metric("planner_observed_replicas", {"component": "decode", "state": "ready"}) == 5, 5
        )
        ext.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(ext.wait(), timeout=10) == 0
    finally:
        if ext.returncode is None:
            ext.kill()
            await ext.wait()
        assert await dec.stop() == 0

    # an old decision replayed onto the stream is ignored (superseded), the applied state stays put
    old = ScalingDecision(decision_id=1, issued_at_s=0.0, namespace=NS, targets={"prefill": 1, "decode": 1})
    await bus.js_publish(SUBJECTS.decision(), old)
    acks.clear()
    ext = await example(url, state, idle_exit_s=1.0)
    out, err = await asyncio.wait_for(ext.communicate(), timeout=20)
    assert ext.returncode == 0, err.decode()
    assert json.loads(state.read_text()) == {
        "applied_decision_id": 2,
        "replicas": {"prefill": 5, "decode": 5},
    }
    events = [json.loads(line) for line in out.decode().splitlines()]
    assert events == [{"event": "superseded", "decision_id": 1, "targets": {"prefill": 1, "decode": 1}}]
    await wait_until(lambda: (1, "superseded") in [(a["decision_id"], a["status"]) for a in acks], 5)
    await bus.close()
