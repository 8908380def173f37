"""The predictor over a real nats-server: TrafficSample in, LoadForecast out every interval; no data
is "unknown" (not zero), zero requests is zero; NaN payloads are counted and dropped; warm start."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from planner_predictor.service import PredictorService
from planner_predictor.settings import PredictorSettings
from planner_proto import LoadForecast, Subjects, TrafficSample
from planner_runtime.bus import Bus
from planner_runtime.natsd import NatsServer
from planner_runtime.settings import BaseSettings

from ..inbox import Inbox

pytestmark = pytest.mark.integration

NS = "t"
SUBJECTS = Subjects(ns=NS)


@pytest.fixture
async def client(nats_server: NatsServer) -> AsyncIterator[Bus]:
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    yield bus
    await bus.close()


def make_settings(url: str, **kw: Any) -> PredictorSettings:
    return msgspec.convert(
        {"nats_url": url, "namespace": NS, "interval_s": 0.4, "model": "constant", **kw}, PredictorSettings
    )


async def feed(client: Bus, stop: asyncio.Event, n: float, isl: float | None = 100.0) -> None:
    """Every 0.1 s a 0.1 s sample of ``n`` requests: ``4 n`` per 0.4 s forecast interval."""
    while not stop.is_set():
        sample = TrafficSample(
            namespace=NS,
            start_s=0.0,
            interval_s=0.1,
            num_requests=n,
            mean_isl_tokens=isl,
            mean_osl_tokens=20.0,
        )
        await client.publish(SUBJECTS.traffic(), sample)
        await asyncio.sleep(0.1)


async def test_traffic_in_forecast_out(no_task_leak: None, nats_server: NatsServer, client: Bus) -> None:
    fcs = Inbox[LoadForecast]()
    await client.subscribe(SUBJECTS.forecast(), LoadForecast, fcs.on)
    svc = PredictorService(make_settings(nats_server.url, min_intervals=2))
    run = asyncio.create_task(svc.run())
    try:
        first = await fcs.wait(lambda f: True)
        assert first.reason == "no_data" and first.num_requests is None

        stop = asyncio.Event()
        feeder = asyncio.create_task(feed(client, stop, 5.0))
        await fcs.wait(lambda f: f.reason == "warming_up")
        fc = await fcs.wait(lambda f: f.reason == "" and f.num_requests == pytest.approx(20.0, rel=0.3))
        assert fc.mean_isl_tokens == pytest.approx(100.0) and fc.mean_osl_tokens == pytest.approx(20.0)
        assert fc.model == "constant" and fc.interval_s == 0.4

        # NaN cannot travel as JSON (it becomes null): such a sample is counted as bad and dropped
        await client.publish_raw(
            SUBJECTS.traffic(),
            json.dumps({"namespace": NS, "start_s": 0, "interval_s": 0.1, "num_requests": None}).encode(),
        )
        await client.publish_raw(
            SUBJECTS.traffic(), b'{"namespace": "t", "start_s": 0, "interval_s": 0.1, "num_requests": NaN}'
        )
        await client.flush()
        await asyncio.sleep(0.2)
        bad = (
            svc.registry.get_sample_value(
                "planner_bad_messages_total", {"subject": SUBJECTS.traffic(), "reason": "invalid"}
            )
            or 0.0
        )
        bad += (
            svc.registry.get_sample_value(
                "planner_bad_messages_total", {"subject": SUBJECTS.traffic(), "reason": "malformed"}
            )
            or 0.0
        )
        assert bad == 2

        # silence: intervals are unknown, the forecast keeps the last level (no data is not zero)
        stop.set()
        await feeder
        unknown0 = (
            svc.registry.get_sample_value("planner_predictor_intervals_total", {"outcome": "unknown"}) or 0
        )
        await asyncio.sleep(1.0)
        unknown1 = (
            svc.registry.get_sample_value("planner_predictor_intervals_total", {"outcome": "unknown"}) or 0
        )
        assert unknown1 >= unknown0 + 2
        assert svc.last_forecast is not None and svc.last_forecast.num_requests == pytest.approx(
            20.0, rel=0.3
        )

        # zero requests is data: the forecast goes to zero; the means without requests are kept
        stop = asyncio.Event()
        feeder = asyncio.create_task(feed(client, stop, 0.0, isl=None))
        fc = await fcs.wait(lambda f: f.num_requests == 0.0)
        assert fc.mean_isl_tokens == pytest.approx(100.0)
        stop.set()
        await feeder
        err = svc.registry.get_sample_value("planner_forecast_abs_pct_error", {"series": "requests"})
        assert err is not None and err < 50.0
    finally:
        svc.request_stop()
        assert await asyncio.wait_for(run, 15) == 0


async def test_warm_start_from_trace(
    no_task_leak: None, nats_server: NatsServer, client: Bus, tmp_path: Path
) -> None:
    # 30 intervals of 0.4 s with 8 requests each (ISL 500, OSL 50): the first forecast is ready at once
    trace = tmp_path / "mooncake.jsonl"
    lines = [
        json.dumps({"timestamp": round(k * 50), "input_length": 500, "output_length": 50, "hash_ids": [k]})
        for k in range(240)
    ]
    trace.write_text("\n".join(lines) + "\n")
    fcs = Inbox[LoadForecast]()
    await client.subscribe(SUBJECTS.forecast(), LoadForecast, fcs.on)
    svc = PredictorService(
        make_settings(
            nats_server.url,
            model="auto",
            auto_candidates=["constant", "moving_average", "holt", "kalman"],
            warm_start=str(trace),
            min_intervals=5,
        )
    )
    run = asyncio.create_task(svc.run())
    try:
        fc = await fcs.wait(lambda f: True)
        assert fc.reason == ""
        assert fc.num_requests == pytest.approx(8.0, rel=0.2)
        assert fc.mean_isl_tokens == pytest.approx(500.0) and fc.mean_osl_tokens == pytest.approx(50.0)
        assert fc.num_requests is not None and fc.num_requests_upper is not None
        assert fc.num_requests_upper >= fc.num_requests
    finally:
        svc.request_stop()
        assert await asyncio.wait_for(run, 15) == 0
