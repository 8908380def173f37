"""loadgen's closed-loop clients over a real nats-server: against engine-sim over NATS, and against
OpenAI-compatible HTTP engines (in-process fakes registered in ``planner_engines``): phases of client
counts, least-busy routing that skips a draining engine, a refusal re-sent elsewhere, malformed
streams counted failed, the frontend metrics and the TrafficSample as in the NATS mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from planner_proto import Component, EngineInfo, Subjects, TrafficSample
from planner_proto.subjects import ENGINES_BUCKET
from planner_runtime.bus import Bus, kv_put
from planner_runtime.natsd import NatsServer
from planner_runtime.settings import BaseSettings

from ...unit.loadgen.fake_openai import FakeOpenAI
from .conftest import NS, StartEngine, run_loadgen

pytestmark = pytest.mark.integration
SUBJECTS = Subjects(ns=NS)


async def test_closed_loop_clients_over_nats(nats_server: NatsServer, start_engine: StartEngine) -> None:
    await start_engine("w")
    svc = await run_loadgen(nats_server.url, clients="2:1.0,0:0.3,1:0.5", isl_tokens=64, osl_tokens=4)
    assert svc.results and all(r.ok for r in svc.results)
    assert len(svc.results) > 4  # closed loop: each client sends again once its request is done


async def register(bus: Bus, worker: str, url: str, draining: bool = False) -> None:
    kv = await bus.kv(ENGINES_BUCKET, ttl_s=15.0)
    info = EngineInfo(
        namespace=NS,
        component=Component.AGG,
        worker_id=worker,
        metrics_url=f"{url}/metrics",
        engine_kind="llamacpp",
        draining=draining,
    )
    await kv_put(kv, SUBJECTS.engine_key("agg", worker), info)


async def test_openai_clients_route_retry_and_count(nats_server: NatsServer, tmp_path: Path) -> None:
    # a: answers slowly, and refuses its first request (503) and mangles its third;
    # b: answers slowly; c: drains (never gets a request)
    a = await FakeOpenAI(modes=["503", "ok", "malformed", "ok"], gap_s=0.02).start()
    b = await FakeOpenAI(gap_s=0.02).start()
    c = await FakeOpenAI().start()
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    samples: list[TrafficSample] = []

    async def on_sample(s: TrafficSample, subject: str) -> None:
        samples.append(s)

    try:
        await bus.subscribe(SUBJECTS.traffic(), TrafficSample, on_sample)
        await register(bus, "a", a.url)
        await register(bus, "b", b.url)
        await register(bus, "c", c.url, draining=True)
        results = tmp_path / "requests.jsonl"
        svc = await run_loadgen(
            nats_server.url, target="openai", clients="4:1.0,1:0.5", min_engines=2, interval_s=0.5,
            isl_tokens=8, osl_tokens=3, model="tiny", results_file=str(results),
        )  # fmt: skip
    finally:
        await bus.close()
        for s in (a, b, c):
            await s.close()
    failed = [r for r in svc.results if not r.ok]
    assert [r.error for r in failed] == ["bad_stream"]  # counted, and the run went on
    assert len(svc.results) > 10 and sum(r.attempts - 1 for r in svc.results) == 1  # the 503, re-sent
    assert c.bodies == [] and a.bodies and b.bodies
    assert a.max_in_flight + b.max_in_flight <= 5 and max(a.max_in_flight, b.max_in_flight) >= 2
    assert all(body["model"] == "tiny" and body["max_tokens"] == 3 for body in a.bodies + b.bodies)
    ok = [r for r in svc.results if r.ok]
    assert all(r.ttft_s is not None and r.itl_s is not None and r.tokens == 3 for r in ok)
    assert all(r.workers in (["a"], ["b"]) for r in ok)
    lines = [json.loads(x) for x in results.read_text().splitlines()]
    assert len(lines) == len(svc.results)
    metrics = generate_latest(svc.registry).decode()
    assert (
        f'dynamo_frontend_time_to_first_token_seconds_count{{dynamo_namespace="{NS}",model="tiny"}} {len(ok)}.0'
        in metrics
    )
    assert 'planner_loadgen_failed_requests_total{reason="bad_stream"} 1.0' in metrics
    assert "planner_loadgen_retries_total 1.0" in metrics
    assert sum(s.num_requests for s in samples) == len(svc.results)
    assert sum(s.num_failed for s in samples) == 1
    assert "loadgen summary" in svc.summary_text
