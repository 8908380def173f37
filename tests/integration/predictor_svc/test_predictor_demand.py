"""The predictor's demand forecast over a real nats-server: every traffic sample learned, a
DemandForecast to the startup lead published by the active instance only; what it learned survives
a restart (KV) and a takeover (the standby learned alongside); a bad saved state means a cold start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from planner_core.forecast.demand import DemandState, lead_samples
from planner_predictor.demand_state import encode_state, restore_state
from planner_predictor.service import PredictorService
from planner_predictor.settings import PredictorSettings
from planner_proto import DemandForecast, Subjects, TrafficSample
from planner_proto.subjects import STATE_BUCKET
from planner_runtime.bus import Bus, kv_raw
from planner_runtime.natsd import NatsServer
from planner_runtime.settings import BaseSettings

from ..inbox import Inbox

pytestmark = pytest.mark.integration

NS = "t"
SUBJECTS = Subjects(ns=NS)
INTERVAL_S = 0.1
STARTUP_S = 0.25
REQUESTS, ISL, OSL = 5.0, 200.0, 20.0


@pytest.fixture
async def client(nats_server: NatsServer) -> AsyncIterator[Bus]:
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    yield bus
    await bus.close()


def make_settings(url: str, **kw: Any) -> PredictorSettings:
    return msgspec.convert(
        {
            "nats_url": url, "namespace": NS, "interval_s": 0.5, "model": "constant",
            "startup_s": STARTUP_S, "state_save_interval_s": 0.2, "lease_ttl_s": 1.5,
            "lease_renew_s": 0.3, **kw,
        },
        PredictorSettings,
    )  # fmt: skip


class Feeder:
    """Traffic samples of ``INTERVAL_S``, one after the other (as a frontend publishes them)."""

    def __init__(self, client: Bus) -> None:
        self.client = client
        self.index = 0

    async def send(self, count: int) -> None:
        for _ in range(count):
            self.index += 1
            sample = TrafficSample(
                namespace=NS, start_s=1000.0 + self.index * INTERVAL_S, interval_s=INTERVAL_S,
                num_requests=REQUESTS, mean_isl_tokens=ISL, mean_osl_tokens=OSL,
            )  # fmt: skip
            await self.client.publish(SUBJECTS.traffic(), sample)
            await asyncio.sleep(0.02)
        await self.client.flush()


def metric(svc: PredictorService, name: str, labels: dict[str, str] | None = None) -> float:
    return svc.registry.get_sample_value(name, labels or {}) or 0.0


async def start(settings: PredictorSettings) -> tuple[PredictorService, asyncio.Task[int]]:
    svc = PredictorService(settings)
    run = asyncio.create_task(svc.run())
    deadline = time.monotonic() + 10
    while not (svc.is_active or (svc._lease is not None and svc._lease.other is not None)):
        assert time.monotonic() < deadline, "the predictor never took its lease or saw the holder"
        await asyncio.sleep(0.05)
    return svc, run


async def stop(svc: PredictorService, run: asyncio.Task[int]) -> None:
    svc.request_stop()
    assert await asyncio.wait_for(run, 15) == 0


async def learn_and_stop(url: str, feeder: Feeder, samples: int) -> DemandState:
    """A predictor that learns ``samples`` traffic samples and stops (saving on the way out): what it
    learned."""
    svc, run = await start(make_settings(url))
    try:
        await feeder.send(samples)
        await asyncio.sleep(0.3)
    finally:
        await stop(svc, run)
    assert svc.demand is not None
    return svc.demand.state


async def test_each_sample_gives_a_demand_forecast_to_the_lead(
    no_task_leak: None, nats_server: NatsServer, client: Bus
) -> None:
    got = Inbox[DemandForecast](history=True)
    await client.subscribe(SUBJECTS.demand(), DemandForecast, got.on)
    svc, run = await start(make_settings(nats_server.url))
    feeder = Feeder(client)
    try:
        await feeder.send(20)
        last = await got.wait(lambda f: f.sample_start_s == 1000.0 + 20 * INTERVAL_S)
        lead = lead_samples(STARTUP_S, INTERVAL_S)
        assert last.lead_samples == lead and last.interval_s == INTERVAL_S and last.model == "horizon"
        assert last.mean_isl_tokens == pytest.approx(ISL) and last.mean_osl_tokens == pytest.approx(OSL)
        rates = {"prefill": REQUESTS * ISL / INTERVAL_S, "decode": REQUESTS * OSL / INTERVAL_S}
        assert {str(c.component) for c in last.components} == set(rates)
        for comp in last.components:
            assert [s.steps_ahead for s in comp.steps] == list(range(1, lead + 1))
            assert [s.for_start_s for s in comp.steps] == pytest.approx(
                [last.sample_start_s + j * INTERVAL_S for j in range(1, lead + 1)]
            )
            # steady traffic: every step forecasts the steady rate, its scenarios spread around it
            for step in comp.steps:
                assert step.forecast == pytest.approx(rates[str(comp.component)], rel=0.01)
                assert min(step.scenarios) < step.forecast < max(step.scenarios)
            assert comp.errors_measured == len(svc.demand.state.prefill.errors) > 0  # type: ignore[union-attr]
        # one forecast per new sample: a sample sent again is not learned twice
        assert len({f.sample_start_s for f in got.got}) == len(got.got)
        assert metric(svc, "planner_demand_forecasts_total", {"outcome": "published"}) == len(got.got)
    finally:
        await stop(svc, run)


async def test_what_was_learned_survives_a_restart_and_a_bad_entry_means_cold(
    no_task_leak: None, nats_server: NatsServer, client: Bus
) -> None:
    kv = await client.kv(STATE_BUCKET)
    key = SUBJECTS.state_key("predictor", "demand_state")
    feeder = Feeder(client)
    learned = await learn_and_stop(nats_server.url, feeder, 15)
    assert learned.prefill.samples == 15
    raw = await kv_raw(kv, key)
    back, outcome, _ = restore_state(raw, NS, time.time(), 900.0)
    assert outcome == "restored" and back == learned

    svc, run = await start(make_settings(nats_server.url))
    try:
        assert metric(svc, "planner_demand_state_restores_total", {"outcome": "restored"}) == 1
        assert svc.demand is not None and svc.demand.state == learned
        got = Inbox[DemandForecast](history=True)
        await client.subscribe(SUBJECTS.demand(), DemandForecast, got.on)
        await feeder.send(1)
        fc = await got.wait(lambda f: f.sample_start_s == 1000.0 + 16 * INTERVAL_S)
        assert fc.components[0].errors_measured == len(learned.prefill.errors) + 1  # carried on
    finally:
        await stop(svc, run)

    await kv.put(key, b'{"version": 1, "saved_at_s": "yesterday"}')
    svc, run = await start(make_settings(nats_server.url))
    try:
        assert metric(svc, "planner_demand_state_restores_total", {"outcome": "invalid"}) == 1
        assert svc.demand is not None and svc.demand.state.prefill.samples == 0
    finally:
        await stop(svc, run)

    await kv.put(key, encode_state(learned, NS, time.time() - 3600.0))
    svc, run = await start(make_settings(nats_server.url, state_max_age_s=600.0))
    try:
        assert metric(svc, "planner_demand_state_restores_total", {"outcome": "stale"}) == 1
        assert svc.demand is not None and svc.demand.state.prefill.samples == 0
    finally:
        await stop(svc, run)


async def test_only_the_active_predictor_publishes_and_a_standby_takes_over_with_what_it_learned(
    no_task_leak: None, nats_server: NatsServer, client: Bus
) -> None:
    got = Inbox[DemandForecast](history=True)
    await client.subscribe(SUBJECTS.demand(), DemandForecast, got.on)
    feeder = Feeder(client)
    a, run_a = await start(make_settings(nats_server.url))
    b, run_b = await start(make_settings(nats_server.url))
    try:
        assert a.is_active and not b.is_active
        await feeder.send(14)
        await got.wait(lambda f: f.sample_start_s == 1000.0 + 14 * INTERVAL_S)
        await asyncio.sleep(0.2)
        assert len(got.got) == 14  # one forecast per sample: the standby learned but did not publish
        assert b.demand is not None and a.demand is not None and b.demand.state == a.demand.state
        await stop(a, run_a)  # releases the lease: the standby takes over
        deadline = time.monotonic() + 10
        while not b.is_active:
            assert time.monotonic() < deadline, "the standby never took over"
            await asyncio.sleep(0.05)
        reads = "planner_demand_state_restores_total"
        outcomes = ("kept_own", "restored", "absent", "unreachable")
        while not any(metric(b, reads, {"outcome": o}) for o in outcomes):
            assert time.monotonic() < deadline, "the new active predictor never read the saved state"
            await asyncio.sleep(0.05)
        assert metric(b, reads, {"outcome": "kept_own"}) == 1
        await feeder.send(1)
        fc = await got.wait(lambda f: f.sample_start_s == 1000.0 + 15 * INTERVAL_S)
        assert fc.components[0].errors_measured == len(b.demand.state.prefill.errors) > 0
    finally:
        await stop(b, run_b)


async def test_a_state_kv_that_does_not_answer_at_takeover_is_read_again_and_never_overwritten(
    no_task_leak: None, nats_server: NatsServer, client: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    kv = await client.kv(STATE_BUCKET)
    key = SUBJECTS.state_key("predictor", "demand_state")
    feeder = Feeder(client)
    learned = await learn_and_stop(nats_server.url, feeder, 15)

    # a cluster just back: the lease answers, the state bucket not yet (twice)
    from planner_runtime import saved_state

    unanswered = 2

    async def slow_kv(bucket: Any, k: str) -> bytes | None:
        nonlocal unanswered
        if k == key and unanswered > 0:
            unanswered -= 1
            raise TimeoutError
        return await kv_raw(bucket, k)

    monkeypatch.setattr(saved_state, "kv_raw", slow_kv)
    monkeypatch.setattr(saved_state, "RETRY_S", 0.4)
    svc, run = await start(make_settings(nats_server.url))
    try:
        assert metric(svc, "planner_demand_state_restores_total", {"outcome": "unreachable"}) == 1
        await feeder.send(3)  # learned alone meanwhile; its saves must not replace the unread state
        await asyncio.sleep(0.3)
        assert metric(svc, "planner_demand_state_saves_total", {"result": "deferred"}) >= 1
        back, _, _ = restore_state(await kv_raw(kv, key), NS, time.time(), 900.0)
        assert back == learned
        deadline = time.monotonic() + 10
        while not metric(svc, "planner_demand_state_restores_total", {"outcome": "restored"}):
            assert time.monotonic() < deadline, "the unanswered read was never tried again"
            await asyncio.sleep(0.05)
        assert unanswered == 0 and svc.demand is not None and svc.demand.state == learned
        saves = metric(svc, "planner_demand_state_saves_total", {"result": "saved"})
        while metric(svc, "planner_demand_state_saves_total", {"result": "saved"}) == saves:
            assert time.monotonic() < deadline, "saving never resumed after the read"
            await asyncio.sleep(0.05)
    finally:
        await stop(svc, run)
