"""The regression service over a real nats-server: FPMs in, ComponentSnapshots with a fitted model
out; heartbeats and cold-start passes are not fitted; bad payloads are counted; a restarted service
process keeps its model (ready in its first snapshot, from KV)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from planner_core.regression import Admission
from planner_proto import (
    Component,
    ComponentSnapshot,
    EngineCapabilities,
    EngineInfo,
    ForwardPassMetrics,
    QueuedRequestMetrics,
    ScheduledRequestMetrics,
    Subjects,
    WorkerLoadSample,
    encode_fpm,
)
from planner_proto.subjects import ENGINES_BUCKET, STATE_BUCKET
from planner_regression.service import RegressionService
from planner_regression.settings import RegressionSettings
from planner_runtime.bus import Bus, kv_put
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port
from planner_runtime.settings import BaseSettings

from ..inbox import Inbox

pytestmark = pytest.mark.integration

NS = "t"
SUBJECTS = Subjects(ns=NS)
# The generating line: wall_s = 4 ms + 0.2 ms per decode request + 30 ns per KV token.
INTERCEPT_S, PER_REQ_S, PER_KV_S = 0.004, 2e-4, 3e-8


def decode_pass(i: int, slow: float = 1.0, worker: str = "w") -> ForwardPassMetrics:
    n, kv = 1 + (i * 7) % 64, 2000 * (1 + (i * 13) % 50)
    return ForwardPassMetrics(
        worker_id=worker,
        counter_id=i,
        wall_time=slow * (INTERCEPT_S + PER_REQ_S * n + PER_KV_S * kv),
        scheduled_requests=ScheduledRequestMetrics(num_decode_requests=n, sum_decode_kv_tokens=kv),
        queued_requests=QueuedRequestMetrics(num_decode_requests=1, sum_decode_kv_tokens=500),
    )


@pytest.fixture
async def client(nats_server: NatsServer) -> AsyncIterator[Bus]:
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    yield bus
    await bus.close()


def settings(url: str, **kw: Any) -> RegressionSettings:
    base: dict[str, Any] = {
        "nats_url": url,
        "namespace": NS,
        "tick_s": 0.2,
        "fit_passes_per_worker": 64,
        "max_fit_passes_per_tick": 1000,
        "liveness_timeout_s": 3.0,
    }
    base.update(kw)
    return msgspec.convert(base, RegressionSettings)


def coefs_match(snap: ComponentSnapshot, rel: float = 1e-3) -> bool:
    m = snap.model
    return (
        m is not None
        and m.ready
        and m.intercept_s == pytest.approx(INTERCEPT_S, rel=rel)
        and m.coefficients == pytest.approx([PER_REQ_S, PER_KV_S], rel=rel)
    )


async def test_fit_heartbeats_cold_start_and_bad_payloads(
    no_task_leak: None, nats_server: NatsServer, client: Bus
) -> None:
    svc = RegressionService(settings(nats_server.url, components=["decode", "prefill"]))
    run = asyncio.create_task(svc.run())
    snaps = Inbox[ComponentSnapshot](history=True)
    await client.subscribe(SUBJECTS.state("decode"), ComponentSnapshot, snaps.on)
    try:
        await snaps.wait(lambda s: True)  # the service is up and ticking
        engines = await client.kv(ENGINES_BUCKET, ttl_s=15)
        caps = EngineCapabilities(num_gpu_blocks=1000, block_size_tokens=16, max_num_batched_tokens=4096)
        now = time.time()
        for wid, started in (("w1", now - 3600), ("w2", now - 3600), ("new", now)):
            info = EngineInfo(
                namespace=NS,
                component=Component.DECODE,
                worker_id=wid,
                capabilities=caps,
                started_at_s=started,
            )
            await kv_put(engines, SUBJECTS.engine_key("decode", wid), info)
        await asyncio.sleep(0.3)  # let the watch deliver the registrations
        zero = encode_fpm(ForwardPassMetrics(worker_id="w1"))
        for i in range(60):
            wid = "w1" if i % 2 else "w2"
            await client.publish_raw(SUBJECTS.fpm("decode", wid), encode_fpm(decode_pass(i, worker=wid)))
            # heartbeats (wall_time 0, all zeros) would drag the intercept to 0 if they were fitted
            await client.publish_raw(SUBJECTS.fpm("decode", "w1"), zero)
            # a cold worker 10x slower would tilt the line if its passes were fitted
            await client.publish_raw(SUBJECTS.fpm("decode", "new"), encode_fpm(decode_pass(i, 10.0, "new")))
        bad = SUBJECTS.fpm("decode")
        await client.publish_raw(SUBJECTS.fpm("decode", "w1"), b"\xc1not msgpack")
        v2 = msgspec.msgpack.encode({"version": 2, "worker_id": "w1", "wall_time": 0.5})
        await client.publish_raw(SUBJECTS.fpm("decode", "w1"), v2)
        await client.flush()

        snap = await snaps.wait(lambda s: coefs_match(s) and len(s.workers) == 3)
        assert snap.model is not None and snap.model.features == [
            "num_decode_requests",
            "sum_decode_kv_tokens",
        ]
        assert snap.capabilities == caps
        by_id = {w.worker_id: w for w in snap.workers}
        assert by_id["new"].started_at_s == pytest.approx(now)
        # w1's latest message was a heartbeat: idle; w2's a real pass with an ITL estimate
        assert by_id["w1"].running_requests == 0 and by_id["w1"].kv_usage == 0.0
        w2 = by_id["w2"]
        assert w2.est_ttft_ms is None and w2.est_itl_ms is not None and w2.est_itl_ms > INTERCEPT_S * 1000
        assert w2.kv_usage == pytest.approx((w2.scheduled_decode_kv_tokens + 500) / 16000)
        assert snap.avg_num_decode_requests is not None and snap.avg_decode_length_tokens is not None

        model = svc.components[Component.DECODE].model
        assert model.counts[Admission.ACCEPTED] == 60
        assert model.counts[Admission.COLD_START] == 60
        assert model.counts[Admission.HEARTBEAT] == 0  # heartbeats never reach the fit
        reg = svc.registry
        assert (
            reg.get_sample_value("planner_bad_messages_total", {"subject": bad, "reason": "malformed"}) == 1
        )
        assert reg.get_sample_value("planner_bad_messages_total", {"subject": bad, "reason": "version"}) == 1
        await asyncio.sleep(0.3)
        hb = reg.get_sample_value(
            "planner_regression_messages_total", {"component": "decode", "kind": "heartbeat"}
        )
        assert hb == 60

        # a scrape-adapter worker shows up next to the FPM workers
        sample = WorkerLoadSample(
            worker_id="v1",
            engine_kind="vllm",
            observed_at_s=time.time(),
            running_requests=3,
            kv_usage=0.5,
            max_kv_tokens=10000,
        )
        await client.publish(SUBJECTS.load("decode", "v1"), sample)
        snap = await snaps.wait(lambda s: any(w.worker_id == "v1" for w in s.workers))
        v1 = next(w for w in snap.workers if w.worker_id == "v1")
        assert v1.scheduled_decode_kv_tokens == 5000 and v1.est_itl_ms is not None

        # silent workers are dropped after the liveness timeout
        snap = await snaps.wait(lambda s: not s.workers, timeout_s=8.0, since=len(snaps.got))
        assert coefs_match(snap)
    finally:
        svc.request_stop()
        assert await asyncio.wait_for(run, 15) == 0


def start_process(url: str, port: int, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as fh:  # a file, not a pipe: a full pipe would block the service's logging
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "planner_regression",
                "--nats-url",
                url,
                "--namespace",
                NS,
                "--http-port",
                str(port),
                "--tick-s",
                "0.2",
                "--fit-passes-per-worker",
                "64",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=fh,
        )


def stop_process(proc: subprocess.Popen[bytes], log: Path) -> list[dict[str, Any]]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait(5)
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    assert code == 0, lines[-5:]
    return lines


async def test_restarted_service_keeps_its_model(
    nats_server: NatsServer, client: Bus, tmp_path: Path
) -> None:
    snaps = Inbox[ComponentSnapshot](history=True)
    await client.subscribe(SUBJECTS.state("decode"), ComponentSnapshot, snaps.on)
    # persist only at shutdown: the second process can only know the model from the SIGTERM save
    log1, log2 = tmp_path / "first.log", tmp_path / "second.log"
    proc = start_process(
        nats_server.url, free_port(), log1, "--components", "decode", "--persist-every-s", "3600"
    )
    try:
        await snaps.wait(lambda s: True, timeout_s=30)
        for i in range(40):
            await client.publish_raw(SUBJECTS.fpm("decode", "w1"), encode_fpm(decode_pass(i)))
        first = await snaps.wait(coefs_match, timeout_s=20)
    finally:
        lines = await asyncio.to_thread(stop_process, proc, log1)
    assert any(x["event"] == "models_saved" for x in lines)
    kv = await client.kv(STATE_BUCKET)
    assert (await kv.get(SUBJECTS.state_key("regression", "decode"))).value

    await asyncio.sleep(0.2)  # a last snapshot of the first process may still be in flight
    restarted_at = time.time()
    proc = start_process(nats_server.url, free_port(), log2, "--components", "decode")
    try:
        await snaps.wait(lambda s: s.issued_at_s > restarted_at, timeout_s=30)
        # the very first snapshot of the new process: ready, same line, same samples, no worker yet
        snap = next(s for s in snaps.got if s.issued_at_s > restarted_at)
        assert coefs_match(snap)
        assert snap.model is not None and first.model is not None
        assert snap.model.num_samples == first.model.num_samples
        assert snap.workers == []
    finally:
        lines = await asyncio.to_thread(stop_process, proc, log2)
    assert any(x["event"] == "model_restored" and x["ready"] for x in lines)
