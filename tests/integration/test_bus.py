"""Typed pub/sub over a real nats-server: every type, bad payloads, a server restart."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from planner_cli.wire_tour import sample_messages, wire_tour
from planner_proto import EngineInfo, ForwardPassMetrics, Subjects, TrafficSample, decode_fpm, encode_fpm
from planner_runtime.bus import Bus, kv_get, kv_put
from planner_runtime.natsd import NatsServer
from planner_runtime.settings import BaseSettings

pytestmark = pytest.mark.integration


async def _wait(cond: Any, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.02)


async def test_every_type_round_trips(nats_server: NatsServer, no_task_leak: None) -> None:
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    got: dict[str, Any] = {}
    msgs = {k: v for k, v in sample_messages("t", 1.0).items() if not isinstance(v, ForwardPassMetrics)}
    for kind, msg in msgs.items():

        async def handler(m: Any, subject: str, kind: str = kind) -> None:
            got[kind] = m

        await bus.subscribe(f"t.{kind}", type(msg), handler)
    for kind, msg in msgs.items():
        await bus.publish(f"t.{kind}", msg)
    await _wait(lambda: len(got) == len(msgs))
    assert got == msgs
    await bus.close()


async def test_bad_payload_counted_and_dropped(nats_server: NatsServer, no_task_leak: None) -> None:
    registry = CollectorRegistry()
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), registry=registry, max_wait_s=5)
    subject = Subjects(ns="t").traffic()
    got: list[TrafficSample] = []

    async def handler(m: TrafficSample, s: str) -> None:
        got.append(m)

    await bus.subscribe(subject, TrafficSample, handler)
    good = TrafficSample(namespace="t", start_s=0, interval_s=60, num_requests=1)
    await bus.publish(subject, good)
    await bus.publish_raw(subject, b"\x00\xffnot json")
    await bus.publish_raw(subject, b'{"namespace": "t", "start_s": 0, "interval_s": -1, "num_requests": 1}')
    await bus.publish_raw(subject, b'{"namespace": "t", "start_s": 0, "interval_s": 60, "num_requests": NaN}')
    await bus.publish(subject, good)
    await _wait(lambda: len(got) == 2)

    def count(reason: str) -> float:
        value = registry.get_sample_value(
            "planner_bad_messages_total", {"subject": subject, "reason": reason}
        )
        return value or 0.0

    await _wait(lambda: count("malformed") + count("invalid") == 3)
    assert count("malformed") == 2  # garbage bytes, NaN literal (not JSON)
    assert count("invalid") == 1  # negative interval
    await bus.close()


async def test_handler_error_does_not_stop_subscription(nats_server: NatsServer, no_task_leak: None) -> None:
    registry = CollectorRegistry()
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), registry=registry, max_wait_s=5)
    seen: list[float] = []

    async def handler(m: TrafficSample, s: str) -> None:
        seen.append(m.num_requests)
        if m.num_requests == 1:
            raise RuntimeError("boom")

    await bus.subscribe("t.x", TrafficSample, handler)
    for n in (1, 2):
        await bus.publish("t.x", TrafficSample(namespace="t", start_s=0, interval_s=1, num_requests=n))
    await _wait(lambda: len(seen) == 2)
    assert registry.get_sample_value("planner_handler_errors_total", {"subject": "t.x"}) == 1
    await bus.close()


async def test_subscription_is_live_when_subscribe_returns(
    nats_server: NatsServer, no_task_leak: None
) -> None:
    """A publish from another connection right after ``subscribe`` returns is delivered. nats-py's own
    flush can let its PING overtake the queued SUB, which lost ~1 message in 10 here."""
    bus_sub = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    bus_pub = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    got: list[str] = []

    async def on(data: bytes, s: str) -> None:
        got.append(s)

    subjects = [f"t.live.{i}" for i in range(40)]
    for subject in subjects:
        await bus_sub.subscribe_raw(subject, on)
        await bus_pub.publish_raw(subject, b"x")
    await bus_pub.flush()
    await _wait(lambda: len(got) == len(subjects), timeout_s=5)
    assert sorted(got) == sorted(subjects)
    await bus_sub.close()
    await bus_pub.close()


async def test_subscriber_survives_server_restart(nats_server: NatsServer, no_task_leak: None) -> None:
    bus_sub = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    bus_pub = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    subject = "planner.t.fpm.decode.w0"
    got: list[ForwardPassMetrics] = []

    async def on_fpm(data: bytes, s: str) -> None:
        got.append(decode_fpm(data))

    await bus_sub.subscribe_raw("planner.t.fpm.>", on_fpm)
    await bus_pub.publish_raw(subject, encode_fpm(ForwardPassMetrics(worker_id="w0", counter_id=1)))
    await _wait(lambda: len(got) == 1)

    nats_server.restart()  # same port, same store dir
    reconnected = lambda b: b.metrics.reconnects._value.get() >= 1 and b.connected  # noqa: E731
    await _wait(lambda: reconnected(bus_sub) and reconnected(bus_pub), timeout_s=15)
    await bus_sub.flush()  # subscriptions are re-sent on reconnect
    for i in range(2, 5):
        await bus_pub.publish_raw(subject, encode_fpm(ForwardPassMetrics(worker_id="w0", counter_id=i)))
    await _wait(lambda: len(got) >= 4)
    assert [f.counter_id for f in got][-3:] == [2, 3, 4]
    assert bus_sub.metrics.reconnects._value.get() >= 1
    await bus_sub.close()
    await bus_pub.close()


async def test_kv_and_stream_survive_restart(nats_server: NatsServer, no_task_leak: None) -> None:
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    kv = await bus.kv("planner_engines", ttl_s=60)
    info = sample_messages("t", 1.0)["engine"]
    await kv_put(kv, "t.decode.w0", info)
    await bus.ensure_stream("PLANNER_DECISIONS_T", ["planner.t.decision"])
    seq = await bus.js_publish("planner.t.decision", sample_messages("t", 1.0)["decision"])
    assert seq == 1
    nats_server.restart()
    await _wait(lambda: bus.metrics.reconnects._value.get() >= 1 and bus.connected, timeout_s=15)
    kv = await bus.kv("planner_engines", ttl_s=60)
    assert await kv_get(kv, "t.decode.w0", EngineInfo) == info
    assert await kv_get(kv, "t.decode.missing", EngineInfo) is None
    stream = await bus.js.stream_info("PLANNER_DECISIONS_T")
    assert stream.state.messages == 1
    await bus.close()


async def test_an_unacknowledged_publish_is_sent_again_and_kept_once(
    nats_server: NatsServer, no_task_leak: None
) -> None:
    # no stream yet (as while a cluster elects its leader): plain subscribers get the decision, the
    # stream does not answer; with retry_s the publish is sent again until a stream takes it, and its
    # Nats-Msg-Id keeps a second send of the same decision out of the stream
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    subject = "planner.r.decision"
    decision = sample_messages("r", 1.0)["decision"]
    with pytest.raises(Exception, match="no response from stream"):
        await bus.js_publish(subject, decision, timeout_s=0.5)
    pending = asyncio.ensure_future(
        bus.js_publish(subject, decision, timeout_s=0.5, msg_id="r/decision/7", retry_s=10.0)
    )
    await asyncio.sleep(0.5)
    assert not pending.done()
    await bus.ensure_stream("PLANNER_DECISIONS_R", [subject])
    assert await asyncio.wait_for(pending, timeout=10.0) == 1
    assert await bus.js_publish(subject, decision, msg_id="r/decision/7", retry_s=1.0) == 1
    assert (await bus.js.stream_info("PLANNER_DECISIONS_R")).state.messages == 1
    await bus.close()


async def test_connect_gives_up_with_clear_error() -> None:
    from planner_runtime.processes import free_port

    with pytest.raises(ConnectionError, match="cannot connect to NATS"):
        await Bus.connect(BaseSettings(nats_url=f"nats://127.0.0.1:{free_port()}"), max_wait_s=0.5)


async def test_wire_tour_demo_slice() -> None:
    import io

    from rich.console import Console

    out = io.StringIO()
    assert await wire_tour(console=Console(file=out, width=200)) == 0
    assert "all 8 message types round-tripped" in out.getvalue()


def test_embedded_server_dies_with_its_parent(tmp_path: Path) -> None:
    """A killed test run or demo must not leave a nats-server behind (PR_SET_PDEATHSIG)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import time\nfrom planner_runtime.natsd import NatsServer\n"
        "s = NatsServer().start()\nprint(s._proc.pid, flush=True)\ntime.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    raise AssertionError("nats-server outlived its parent")


async def test_only_a_real_outage_is_a_disconnect(
    nats_server: NatsServer, no_task_leak: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Closing the bus is not a disconnect: no warning, not counted (every service's clean stop
    logged one). A server that goes away still is."""
    with caplog.at_level("DEBUG", logger="planner.bus"):
        bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
        await bus.close()
        assert bus.metrics.disconnects._value.get() == 0
        assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text

        bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
        nats_server.restart()
        await _wait(lambda: bus.metrics.disconnects._value.get() >= 1)
        assert any(r.levelname == "WARNING" and "nats_disconnected" in r.getMessage() for r in caplog.records)
        await bus.close()
