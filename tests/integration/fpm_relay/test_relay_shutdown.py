"""Stopping and surviving: relay processes holding claims exit 0 within seconds of SIGTERM and hand
their claims back (no key left for a TTL); the publisher survives NATS refusing messages during a
long outage (counted and dropped) and relays again once NATS is back."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
import urllib.request

import pytest

from planner_proto import Component, EngineInfo, Subjects, encode
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port

from .relay_helpers import (
    NS,
    Collector,
    FakeEngine,
    connect,
    healthy,
    in_process_relay,
    start_relay_process,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.integration


def wait_exit(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        return None  # still running (stop_process kills it)


def claims_held(ports: list[int]) -> list[float]:
    return [metric(p, "planner_fpm_relay_claims") for p in ports]


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


async def test_relays_holding_claims_exit_0_soon_after_sigterm(nats_server: NatsServer) -> None:
    """Three rounds of two relay processes sharing 40 engines: every SIGTERM ends in exit 0 within
    5 s, and no claim or membership key is left behind. (Before the fix, a cancellation lost inside
    nats-py left a KV watch restarting forever: about one stop in four hung with an idle loop.)"""
    subjects = Subjects(ns=NS)
    bus = await connect(nats_server.url)
    engines = [FakeEngine(f"w{i}") for i in range(40)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        kv = await bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
        for e in engines:
            info = EngineInfo(
                namespace=NS, component=Component.DECODE, worker_id=e.worker_id, zmq_endpoint=e.endpoint
            )
            await kv.put(subjects.engine_key("decode", e.worker_id), encode(info))
            e.start(0.05)
        relays = await bus.kv("planner_relays", ttl_s=3.0)

        async def relay_keys() -> list[str]:
            try:
                return [k for k in await relays.keys() if k.startswith(f"{NS}.")]
            except Exception:  # NoKeysError
                return []

        for rnd in range(3):
            ports = [free_port(), free_port()]
            procs = [start_relay_process(nats_server.url, f"s{rnd}-{i}", p) for i, p in enumerate(ports)]
            await wait_until(lambda: all(map(healthy, ports)), 20, "relays healthy", step_s=0.1)  # noqa: B023
            await wait_until(
                lambda: sum(claims_held(ports)) == len(engines) and min(claims_held(ports)) > 0,  # noqa: B023
                15,
                "both relays holding their claims",
                step_s=0.2,
            )
            await asyncio.sleep(0.3 * rnd)  # land the SIGTERM at different points of the cycles
            sent_at = time.monotonic()
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                code = await asyncio.to_thread(wait_exit, p, 10.0)
                took = time.monotonic() - sent_at
                err = p.stderr.read().decode(errors="replace")[-2000:] if p.stderr else ""
                assert code == 0, f"round {rnd}: exit code {code}: {err}"
                assert took < 5.0, f"round {rnd}: exit took {took:.1f} s: {err}"
            left = await relay_keys()
            assert not left, f"round {rnd}: keys left behind: {left}"
            for p in procs:
                stop_process(p)
            procs = []
    finally:
        for p in procs:
            stop_process(p)
        for e in engines:
            await e.close()
        await bus.close()


async def test_publisher_survives_nats_refusing_messages(nats_server: NatsServer) -> None:
    engine = FakeEngine("w9")
    bus = await connect(nats_server.url)
    try:
        coll = await Collector(bus).start()
        async with in_process_relay(
            nats_server.url,
            sharding=False,
            watch_engines=False,
            static_engines=[f"decode:w9={engine.endpoint}"],
        ) as relay:
            await wait_until(lambda: "decode.w9" in relay.subs, 5, "static subscription")
            engine.start(0.002)
            await wait_until(lambda: len(coll.got) > 20, 10, "relaying")
            relay.bus.nc._max_pending_size = 4096  # a long outage, in small: the buffer fills at once

            def drops() -> float:
                return sum(
                    relay.registry.get_sample_value("planner_fpm_publish_dropped_total", {"reason": r}) or 0.0
                    for r in ("OutboundBufferLimitError", "ConnectionClosedError")
                )

            nats_server.stop()
            await wait_until(lambda: drops() > 50, 10, "messages refused while NATS is away")
            assert relay._publisher_task is not None and not relay._publisher_task.done()
            nats_server.start()
            mark = len(coll.got)
            await wait_until(lambda: len(coll.got) > mark + 50, 20, "relaying again after NATS is back")
            assert relay._publisher_task is not None and not relay._publisher_task.done()
            assert not relay._failed, relay._failed
            assert relay.metrics.publish_errors._value.get() == 0
    finally:
        await engine.close()
        await bus.close()
