"""Two relay processes share the engines through KV membership and claims: each engine is relayed by
exactly one of them (never a message twice, also while the second relay joins and takes its share),
and when one is SIGKILLed the other takes over its engines within a few seconds."""

from __future__ import annotations

import asyncio
import collections
import signal
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from planner_fpm_relay.sharding import owner
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
    start_relay_process,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.integration


def pick_workers(n_each: int) -> list[str]:
    """Worker ids of which r1 and r2 each own ``n_each`` when both are alive (rendezvous hashing)."""
    by_owner: dict[str, list[str]] = {"r1": [], "r2": []}
    i = 0
    while min(len(v) for v in by_owner.values()) < n_each:
        wid = f"w{i}"
        o = owner(f"decode.{wid}", ["r1", "r2"])
        assert o is not None
        if len(by_owner[o]) < n_each:
            by_owner[o].append(wid)
        i += 1
    return by_owner["r1"] + by_owner["r2"]


async def test_two_relays_split_engines_and_fail_over(nats_server: NatsServer) -> None:
    subjects = Subjects(ns=NS)
    bus = await connect(nats_server.url)
    workers = pick_workers(2)
    engines = [FakeEngine(w) for w in workers]
    procs = []
    try:
        kv = await bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
        for e in engines:
            await kv.put(
                subjects.engine_key("decode", e.worker_id),
                encode(
                    EngineInfo(
                        namespace=NS,
                        component=Component.DECODE,
                        worker_id=e.worker_id,
                        zmq_endpoint=e.endpoint,
                    )
                ),
            )
            e.start(0.01)
        coll = await Collector(bus).start()
        ports = [free_port(), free_port()]
        procs.append(start_relay_process(nats_server.url, "r1", ports[0]))
        await wait_until(lambda: healthy(ports[0]), 20, "r1 healthy", step_s=0.1)
        await wait_until(lambda: all(coll.payloads(w) for w in workers), 10, "r1 relaying every engine")

        procs.append(start_relay_process(nats_server.url, "r2", ports[1]))
        await wait_until(lambda: healthy(ports[1]), 20, "r2 healthy", step_s=0.1)
        relays = await bus.kv("planner_relays")

        async def claims() -> dict[str, str]:
            out = {}
            for w in workers:
                try:
                    entry = await relays.get(f"{NS}.claim.decode.{w}")
                except Exception:
                    continue
                if entry.value:
                    out[w] = entry.value.decode()
            return out

        want = {w: owner(f"decode.{w}", ["r1", "r2"]) for w in workers}
        deadline = time.monotonic() + 10
        while await claims() != want:
            assert time.monotonic() < deadline, f"claims never matched the hashing: {await claims()}"
            await asyncio.sleep(0.2)
        mark = len(coll.got)
        await wait_until(
            lambda: (
                all(d for w in workers for d in [coll.payloads(w)[len(coll.payloads(w)) - 1 :]])
                and all(any(s.endswith(f".{w}") for s, _ in coll.got[mark:]) for w in workers)
            ),
            5,
            "every engine relayed after the split",
        )

        # SIGKILL r1: no cleanup, its claims and membership key must expire (TTL 3 s)
        killed_at = time.monotonic()
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(5)
        r1_workers = [w for w in workers if want[w] == "r1"]
        counts = {w: len(coll.payloads(w)) for w in r1_workers}
        await wait_until(
            lambda: all(len(coll.payloads(w)) > counts[w] + 5 for w in r1_workers), 12, "r2 to take over"
        )
        takeover_s = time.monotonic() - killed_at
        print(f"takeover after SIGKILL: {takeover_s:.2f} s")
        assert takeover_s < 8, takeover_s
        assert await claims() == dict.fromkeys(workers, "r2")

        for e in engines:
            await e.stop()
        await asyncio.sleep(0.3)
        dupes = [k for k, n in collections.Counter(coll.got).items() if n > 1]
        assert not dupes, f"{len(dupes)} messages published twice"
        for w in workers:  # each engine's stream, as relayed, only ever moves forward
            seen = coll.counters(w)
            assert seen == sorted(seen)
    finally:
        for p in procs:
            stop_process(p)
        for e in engines:
            await e.close()
        await bus.close()


def _gauge(port: int, name: str) -> float | None:
    """A gauge of the relay's /metrics (None when unreachable or absent)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            text = r.read().decode()
    except OSError:
        return None
    values = [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]
    return values[0] if values else None


async def test_relays_with_other_engine_sources_name_each_other(nats_server: NatsServer) -> None:
    """Two replicas, one with a static engine the other does not know: both count the other as
    configured differently, and the one with the extra engine says so in its log."""
    ports = [free_port(), free_port()]
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    procs = [
        start_relay_process(nats_server.url, "r1", ports[0], "--static-engines", f'["decode:s1={endpoint}"]'),
        start_relay_process(nats_server.url, "r2", ports[1]),
    ]
    try:
        for p in ports:
            await wait_until(lambda p=p: healthy(p), 20, "relay healthy", step_s=0.1)
        for p in ports:
            await wait_until(
                lambda p=p: _gauge(p, "planner_fpm_relay_config_mismatch") == 1.0,
                15,
                "mismatch counted",
                step_s=0.2,
            )
        procs[0].send_signal(signal.SIGTERM)
        _, err = await asyncio.to_thread(procs[0].communicate, None, 15)
        assert b"relay_config_mismatch" in err and b'"r2"' in err, err.decode(errors="replace")[-2000:]
    finally:
        for proc in procs:
            stop_process(proc)
