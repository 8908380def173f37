"""loadgen against engine-sim over a real nats-server: load vs TTFT, drain without loss, dead engines,
disaggregated routing, TrafficSample, frontend metrics and the results file."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from planner_loadgen.service import LoadgenService
from planner_proto import EngineInfo, GenerateRequest, Subjects, TokenChunk, TrafficSample, decode, encode
from planner_proto.subjects import ENGINES_BUCKET
from planner_runtime.bus import Bus, kv_get, kv_put
from planner_runtime.natsd import NatsServer
from planner_runtime.settings import BaseSettings

from .conftest import NS, StartEngine, run_loadgen

pytestmark = pytest.mark.integration
SUBJECTS = Subjects(ns=NS)


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


async def fake_engine(
    bus: Bus, worker_id: str, handler: Callable[[Any], Awaitable[None]]
) -> Callable[[], Awaitable[None]]:
    """Register an agg engine ``worker_id`` in the KV whose generate subject ``handler`` serves (a
    stand-in for a misbehaving engine); returns the coroutine that deregisters it."""
    kv = await bus.kv(ENGINES_BUCKET, ttl_s=15.0)
    key = SUBJECTS.engine_key("agg", worker_id)
    info = EngineInfo(
        namespace=NS, component="agg", worker_id=worker_id, request_subject=SUBJECTS.generate(worker_id)
    )  # type: ignore[arg-type]
    await kv_put(kv, key, info)
    sub = await bus.nc.subscribe(SUBJECTS.generate(worker_id), cb=handler)

    async def remove() -> None:
        await sub.unsubscribe()
        await kv.delete(key)

    return remove


async def run_beside_fake(url: str, **extra: Any) -> LoadgenService:
    """A short constant load over two engines: a fake one (:func:`fake_engine`) and a real one."""
    return await run_loadgen(
        url, shape="constant", rate_per_s=20.0, duration_s=1.0, isl_tokens=256, osl_tokens=8, min_engines=2,
        **extra,
    )  # fmt: skip


async def test_ttft_rises_with_offered_load(
    nats_server: NatsServer, start_engine: StartEngine, tmp_path: Path
) -> None:
    # a small engine (8 sequences, 2048-token passes): a 4096-token prompt needs two prefill passes,
    # ~100 ms of model time = ~25 ms wall at compression 4, so it serves ~40 req/s at most: 90 req/s
    # overloads it and requests queue, while 3 req/s never waits
    await start_engine("w", time_compression=4.0, max_num_seqs=8, max_num_batched_tokens=2048)
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    samples: list[TrafficSample] = []

    async def on_sample(s: TrafficSample, subject: str) -> None:
        samples.append(s)

    await bus.subscribe(SUBJECTS.traffic(), TrafficSample, on_sample)
    common = {
        "shape": "constant",
        "isl_tokens": 4096,
        "osl_tokens": 16,
        "interval_s": 0.5,
        "latency_scale": 4.0,
    }
    low = await run_loadgen(nats_server.url, rate_per_s=3.0, duration_s=2.0, **common)
    results = tmp_path / "high.jsonl"
    high = await run_loadgen(
        nats_server.url, rate_per_s=90.0, duration_s=2.0, results_file=str(results), **common
    )
    for svc in (low, high):
        assert svc.results and all(r.ok for r in svc.results)
    ttft_low = mean([r.ttft_s for r in low.results if r.ttft_s is not None])
    ttft_high = mean([r.ttft_s for r in high.results if r.ttft_s is not None])
    assert ttft_high > 2 * ttft_low, (ttft_low, ttft_high)

    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(lines) == len(high.results) and all(line["tokens"] == 16 for line in lines)
    assert {"ttft_s", "itl_s", "duration_s", "attempts", "workers"} <= set(lines[0])

    metrics = generate_latest(high.registry).decode()
    for name in (
        "dynamo_frontend_time_to_first_token_seconds_bucket",
        "dynamo_frontend_inter_token_latency_seconds_bucket",
        "dynamo_frontend_request_duration_seconds_count",
        "dynamo_frontend_input_sequence_tokens_sum",
        "dynamo_frontend_output_sequence_tokens_sum",
    ):
        assert f'{name}{{dynamo_namespace="t",model="engine-sim"' in metrics or name in metrics, name
    assert (
        f'dynamo_frontend_requests_total{{dynamo_namespace="t",model="engine-sim"}} {len(high.results)}.0'
        in (metrics)
    )
    async with asyncio.timeout(3):
        while sum(s.num_requests for s in samples) < len(low.results) + len(high.results):
            await asyncio.sleep(0.05)
    busy = [s for s in samples if s.mean_ttft_ms is not None]
    assert busy and all(s.namespace == NS and s.num_failed == 0 for s in samples)
    assert max(s.mean_isl_tokens or 0 for s in samples) == 4096
    await bus.close()


async def test_sigterm_during_load_loses_no_request(
    nats_server: NatsServer,
    start_engine: StartEngine,
    engine_process: Callable[..., subprocess.Popen[bytes]],
) -> None:
    victim = engine_process("victim", "--log-level", "warning")
    await start_engine("survivor")
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    kv = await bus.kv(ENGINES_BUCKET)
    async with asyncio.timeout(20):
        while await kv_get(kv, SUBJECTS.engine_key("agg", "victim"), EngineInfo) is None:
            await asyncio.sleep(0.05)

    async def terminate_soon() -> int:
        await asyncio.sleep(0.8)
        victim.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(victim.wait, 20)

    killer = asyncio.create_task(terminate_soon())
    lg = await run_loadgen(
        nats_server.url,
        shape="constant",
        rate_per_s=60.0,
        duration_s=2.5,
        isl_tokens=2048,
        osl_tokens=200,
        min_engines=2,
    )
    assert await killer == 0, "the drained engine must exit 0"
    n = len(lg.workload.requests) if lg.workload else 0
    assert len(lg.results) == n and n > 100
    assert all(r.ok for r in lg.results), [r.error for r in lg.results if not r.ok]
    by_worker = {w for r in lg.results for w in r.workers}
    assert by_worker == {"victim", "survivor"}
    assert await kv_get(kv, SUBJECTS.engine_key("agg", "victim"), EngineInfo) is None
    await bus.close()


async def test_dead_engine_request_is_failed_and_run_goes_on(
    nats_server: NatsServer, start_engine: StartEngine
) -> None:
    """A fake engine that answers the first token and then goes silent (as if killed)."""
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)

    async def half_answer(msg: object) -> None:
        req = decode(msg.data, GenerateRequest)  # type: ignore[attr-defined]
        chunk = TokenChunk(request_id=req.request_id, worker_id="zombie", tokens=1, total_tokens=1)
        await bus.nc.publish(req.reply_subject, encode(chunk))

    remove_zombie = await fake_engine(bus, "zombie", half_answer)
    await start_engine("healthy")
    lg = await run_beside_fake(nats_server.url, stall_timeout_s=0.8)
    failed = [r for r in lg.results if not r.ok]
    ok = [r for r in lg.results if r.ok]
    assert failed and ok and len(lg.results) == len(lg.workload.requests if lg.workload else [])
    assert {r.error for r in failed} == {"stalled"} and all(r.workers == ["zombie"] for r in failed)
    assert all(r.workers == ["healthy"] for r in ok)
    assert "failed" in lg.summary_text and f"failed {len(failed)}" in lg.summary_text
    await remove_zombie()
    await bus.close()


async def test_rejected_requests_are_retried_elsewhere(
    nats_server: NatsServer, start_engine: StartEngine
) -> None:
    """A fake engine that rejects everything (as a draining engine does before routers notice)."""
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)

    async def reject(msg: object) -> None:
        req = decode(msg.data, GenerateRequest)  # type: ignore[attr-defined]
        await bus.nc.publish(
            req.reply_subject,
            encode(TokenChunk(request_id=req.request_id, worker_id="nope", error="draining")),
        )

    remove_nope = await fake_engine(bus, "nope", reject)
    await start_engine("good")
    lg = await run_beside_fake(nats_server.url)
    assert lg.results and all(r.ok and r.workers == ["good"] for r in lg.results)
    assert any(r.attempts == 2 for r in lg.results), "some requests went to the rejecting engine first"
    await remove_nope()
    await bus.close()


async def test_loadgen_routes_prefill_then_decode(nats_server: NatsServer, start_engine: StartEngine) -> None:
    await start_engine("p1", component="prefill")
    await start_engine("d1", component="decode")
    await start_engine("d2", component="decode")
    lg = await run_loadgen(
        nats_server.url, shape="constant", rate_per_s=30.0, duration_s=1.0, isl_tokens=512, osl_tokens=20
    )
    assert lg.results and all(r.ok and r.tokens == 20 for r in lg.results)
    assert all(r.workers[0] == "p1" and r.workers[-1] in {"d1", "d2"} for r in lg.results)
    assert {r.workers[-1] for r in lg.results} == {"d1", "d2"}, "least-outstanding spreads the decode work"


async def test_request_that_never_got_a_token_is_retried(
    nats_server: NatsServer, start_engine: StartEngine
) -> None:
    """A black hole that takes requests and never answers (as a request published during a NATS outage
    would be lost): nothing was ever streamed, so loadgen re-sends it and it completes elsewhere."""
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    swallowed: list[bytes] = []

    async def swallow(msg: object) -> None:
        swallowed.append(msg.data)  # type: ignore[attr-defined]

    remove_hole = await fake_engine(bus, "hole", swallow)
    await start_engine("healthy")
    lg = await run_beside_fake(nats_server.url, stall_timeout_s=0.8)
    assert swallowed, "the black hole should have received some requests"
    assert all(r.ok for r in lg.results), [r.error for r in lg.results if not r.ok]
    assert len(lg.results) == len(lg.workload.requests if lg.workload else [])
    await remove_hole()
    await bus.close()
