"""The decider over a real nats-server: ids, restarts, ack waits and timeouts, advisory, bad input."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import pytest

from planner_decider.ids import DecisionIds
from planner_proto import AckStatus, Reason, ScalingAck, ScalingDecision
from planner_proto.subjects import STATE_BUCKET
from planner_runtime.bus import Bus
from planner_runtime.natsd import NatsServer

from .decider_helpers import (
    NS,
    SUBJECTS,
    Collector,
    connect,
    feed,
    settings,
    start_decider,
    status,
    stream_decisions,
    wait_until,
    write_profile,
)

pytestmark = pytest.mark.integration


async def ack(bus: Bus, decision_id: int, status: AckStatus = AckStatus.COMPLETED) -> None:
    await bus.publish(SUBJECTS.ack(), ScalingAck(decision_id=decision_id, actuator_id="test", status=status))
    await bus.flush()


async def test_ids_increase_on_the_stream_and_survive_a_restart(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    s = settings(nats_server.url, write_profile(tmp_path))
    bus = await connect(nats_server.url)
    seen = await Collector().start(bus)
    dec = await start_decider(s)
    try:
        await feed(bus, 250)  # need 2.5 -> 3 each
        (d1,) = await seen.wait_count(1)
        assert d1.decision_id == 1 and d1.targets == {"prefill": 3, "decode": 3}
        assert d1.reasons == {"prefill": Reason.SCALE_UP, "decode": Reason.SCALE_UP}
        assert not d1.advisory
        await ack(bus, 1)
        await wait_until(lambda: not dec.svc.book.in_progress, 5)
        await feed(bus, 450, 3, 3)
        d2 = (await seen.wait_count(2))[1]
        assert d2.decision_id == 2 and d2.targets == {"prefill": 5, "decode": 5}
        assert dec.metric("planner_decision_id") == 2
        assert dec.metric("planner_decisions_total", {"component": "prefill", "reason": "scale_up"}) == 2
    finally:
        assert await dec.stop() == 0

    # a new decider carries on: the id from KV, the last targets from the stream
    dec = await start_decider(s)
    try:
        assert dec.svc.ids is not None and dec.svc.ids.value == 2
        assert dec.svc.book.last_issued == {"prefill": 5, "decode": 5}
        await feed(bus, 150, 5, 5)  # need 1.5 -> 2
        d3 = (await seen.wait_count(3))[2]
        assert d3.decision_id == 3 and d3.targets == {"prefill": 2, "decode": 2}
        assert d3.previous == {"prefill": 5, "decode": 5}
    finally:
        assert await dec.stop() == 0
    on_stream = await stream_decisions(bus)
    assert [d.decision_id for d in on_stream] == [1, 2, 3]
    kv = await bus.kv(STATE_BUCKET)
    assert (await kv.get(SUBJECTS.state_key("decider", "decision_id"))).value == b"3"
    await bus.close()


async def test_waits_for_completed_then_proceeds_after_the_timeout(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    s = settings(nats_server.url, write_profile(tmp_path), ack_timeout_s=3.0)
    bus = await connect(nats_server.url)
    seen = await Collector().start(bus)
    dec = await start_decider(s)
    try:
        await feed(bus, 250)
        await seen.wait_count(1)
        # recorded once the stream acknowledged it, which a plain subscriber may see the decision before
        await wait_until(lambda: dec.svc.book.in_progress == {"prefill", "decode"}, 5)
        await feed(bus, 450)
        await asyncio.sleep(0.6)
        assert len(seen.decisions) == 1  # held: waiting for decision 1
        await ack(bus, 1, AckStatus.ACCEPTED)
        await asyncio.sleep(0.4)
        assert len(seen.decisions) == 1  # accepted is not completed
        await ack(bus, 1)
        d2 = (await seen.wait_count(2, 5))[1]
        assert d2.targets == {"prefill": 5, "decode": 5} and d2.reasons["prefill"] is Reason.SCALE_UP
        # no ack for decision 2: the next change waits ack_timeout_s, then goes out saying so
        await feed(bus, 550)
        await asyncio.sleep(0.6)
        assert len(seen.decisions) == 2
        d3 = (await seen.wait_count(3, 8))[2]
        assert d3.targets == {"prefill": 6, "decode": 6}
        assert d3.reasons == {"prefill": Reason.ACK_TIMEOUT, "decode": Reason.ACK_TIMEOUT}
        assert d3.diagnostics["policy_reasons"] == {"prefill": "scale_up", "decode": "scale_up"}
        assert d3.issued_at_s - d2.issued_at_s >= 2.9
        assert dec.metric("planner_ack_timeouts_total") == 2  # one per component
        assert dec.metric("planner_decisions_total", {"component": "decode", "reason": "ack_timeout"}) == 1
    finally:
        assert await dec.stop() == 0
        await bus.close()


async def test_advisory_decisions_are_flagged_and_need_no_ack(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    s = settings(nats_server.url, write_profile(tmp_path), advisory=True)
    bus = await connect(nats_server.url)
    seen = await Collector().start(bus)
    dec = await start_decider(s)
    try:
        await feed(bus, 250)
        await seen.wait_count(1)
        await feed(bus, 450)
        d1, d2 = await seen.wait_count(2)
        assert d1.advisory and d2.advisory
        assert d2.targets == {"prefill": 5, "decode": 5}
    finally:
        assert await dec.stop() == 0
        await bus.close()


async def test_bad_input_messages_are_counted_and_dropped(nats_server: NatsServer, tmp_path: Path) -> None:
    report = tmp_path / "out" / "report.html"
    s = settings(nats_server.url, write_profile(tmp_path), report_path=str(report), report_interval_s=0.2)
    bus = await connect(nats_server.url)
    seen = await Collector().start(bus)
    dec = await start_decider(s)
    try:
        for subject, payload in (
            (SUBJECTS.state("prefill"), b"not json"),
            (SUBJECTS.forecast(), b'{"namespace": "t"}'),
            (SUBJECTS.replicas(), b'{"namespace": ]'),
            (SUBJECTS.ack(), b'{"decision_id": 0, "actuator_id": "x", "status": "completed"}'),
            (SUBJECTS.traffic(), b"{}"),
        ):
            await bus.publish_raw(subject, payload)
        await bus.flush()
        await wait_until(
            lambda: (
                dec.metric("planner_bad_messages_total", {"subject": SUBJECTS.ack(), "reason": "invalid"})
                == 1
            ),
            5,
        )
        assert (
            dec.metric("planner_bad_messages_total", {"subject": SUBJECTS.state(), "reason": "malformed"})
            == 1
        )
        assert (
            dec.metric("planner_bad_messages_total", {"subject": SUBJECTS.forecast(), "reason": "invalid"})
            == 1
        )
        assert (
            dec.metric("planner_bad_messages_total", {"subject": SUBJECTS.replicas(), "reason": "malformed"})
            == 1
        )
        # still deciding
        await feed(bus, 250)
        (d1,) = await seen.wait_count(1)
        assert d1.decision_id == 1
        await wait_until(
            lambda: dec.metric("planner_observed_replicas", {"component": "prefill", "state": "ready"}) == 1,
            5,
        )
        assert dec.metric("planner_predicted_requests") == 250
        assert dec.metric("planner_desired_replicas", {"component": "decode"}) == 3
        await asyncio.sleep(0.3)
        assert dec.metric("planner_gpu_hours_total") > 0
    finally:
        assert await dec.stop() == 0
        await bus.close()
    text = report.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<svg" in text
    assert "prefill 1&rarr;3 (scale_up)" in text


async def test_two_writers_never_take_the_same_id(nats_server: NatsServer) -> None:
    bus = await connect(nats_server.url)
    try:
        kv = await bus.kv(STATE_BUCKET)
        key = SUBJECTS.state_key("decider", "decision_id")
        a, b = DecisionIds(kv, key), DecisionIds(kv, key)
        await a.load()
        await b.load()
        ids = [await a.next(), await b.next(), await a.next(), await b.next()]
        # each writer after the other loses the compare-and-set once, re-reads, and takes the next id
        assert ids == [1, 2, 3, 4]
        assert (a.conflicts, b.conflicts) == (1, 2)
    finally:
        await bus.close()


async def test_the_predictive_floor_sizes_for_the_predictors_demand_forecast(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A demand forecast of another version is counted and dropped; a fresh one sizes the floor of
    both components; without one (stale), the ticks are counted as missing and the report says so."""
    from planner_core.forecast.demand import HorizonDemand
    from planner_core.policy import DecisionInputs
    from planner_core.policy.predictive import predictive_floor
    from planner_core.policy.types import PredictiveState
    from planner_decider.capacity import load_capacity
    from planner_proto import ComponentReplicas, TrafficSample

    report = tmp_path / "out" / "report.html"
    s = settings(
        nats_server.url, write_profile(tmp_path), policy="combined", startup_s=0.2,
        report_path=str(report), report_interval_s=0.2, calibrate_spread=True,
    )  # fmt: skip
    bus = await connect(nats_server.url)
    forecaster = HorizonDemand(startup_s=0.2)
    for i in range(20):
        forecaster.observe(TrafficSample(namespace=NS, start_s=0.1 * i, interval_s=0.1, num_requests=4.0,
                                         mean_isl_tokens=1000.0, mean_osl_tokens=100.0))  # fmt: skip
    fc = forecaster.forecast(NS, time.time())
    assert fc is not None
    dec = await start_decider(s)
    try:
        newer = msgspec.structs.replace(fc, version=fc.version + 1)
        await bus.publish(SUBJECTS.demand(), newer)
        await bus.flush()
        bad = {"subject": SUBJECTS.demand(), "reason": "version"}
        await wait_until(lambda: dec.metric("planner_bad_messages_total", bad) == 1, 5)
        assert dec.svc.latest.demand is None

        await bus.publish(SUBJECTS.replicas(), status(1, 1))
        await bus.publish(SUBJECTS.demand(), msgspec.structs.replace(fc, issued_at_s=time.time()))
        await bus.flush()
        await wait_until(lambda: set(dec.svc.policy_state.predictive.floor) == {"prefill", "decode"}, 5)
        fresh = {"state": "fresh"}
        assert dec.metric("planner_decider_demand_forecast_ticks_total", fresh) >= 1
        # the floor the policy gives for this forecast, on this profile, at this fleet
        inputs = DecisionInputs(
            replicas={c: ComponentReplicas(desired=1, ready=1) for c in ("prefill", "decode")},
            demand=fc, capacity=load_capacity(tmp_path),
        )  # fmt: skip
        sized, sized_state, _ = predictive_floor(inputs, PredictiveState(), dec.svc.cfg, 1.0)
        assert dec.svc.policy_state.predictive.floor == {c: r.target for c, r in sized.items()}
        # no traffic sample has settled a floor yet: the whole spread, as exported
        for c in ("prefill", "decode"):
            await wait_until(
                lambda c=c: dec.metric("planner_decider_spread_scale", {"component": c}) == 1.0, 5
            )
        # nor a first token been timed: prefill's queue is sized with the variability as set
        assert dec.metric("planner_decider_prefill_queue_variability") == dec.svc.cfg.arrival_variability
        # no engine's passes fitted: decode's rate is the profile's (one engine's at the ITL target,
        # before the fleet's spare), exported as such
        rate = sized_state.decode_rate
        assert rate > sized["decode"].diagnostics["per_replica_tok_per_s"]
        await wait_until(
            lambda: (
                dec.metric("planner_decider_decode_engine_rate_tokens_per_second", {"source": "profile"})
                == pytest.approx(rate)
            ),
            5,
        )
        assert dec.metric("planner_decider_decode_batch_at_target") == pytest.approx(
            sized["decode"].diagnostics["batch_at_target"]
        )

        # no newer forecast for longer than two of its intervals: missing, the last floor stands
        missing = {"state": "missing"}
        await wait_until(lambda: dec.metric("planner_decider_demand_forecast_ticks_total", missing) >= 2, 5)
        await bus.publish(SUBJECTS.replicas(), status(1, 1))
        await asyncio.sleep(0.5)

        # steps that do not run 1 .. lead_samples: refused
        broken = msgspec.structs.replace(fc, lead_samples=fc.lead_samples + 3)
        await bus.publish(SUBJECTS.demand(), broken)
        await bus.flush()
        bad = {"subject": SUBJECTS.demand(), "reason": "invalid"}
        await wait_until(lambda: dec.metric("planner_bad_messages_total", bad) == 1, 5)
        # a predictor told another startup_s: its forecast is used, and each one is counted
        other = HorizonDemand(startup_s=0.5)
        for i in range(20):
            other.observe(TrafficSample(namespace=NS, start_s=0.1 * i, interval_s=0.1, num_requests=4.0,
                                        mean_isl_tokens=1000.0, mean_osl_tokens=100.0))  # fmt: skip
        longer = other.forecast(NS, time.time())
        assert longer is not None and longer.lead_samples != fc.lead_samples
        for _ in range(2):
            await bus.publish(SUBJECTS.demand(), longer)
        await bus.flush()
        await wait_until(lambda: dec.metric("planner_decider_demand_lead_mismatch_total") == 2, 5)
        await wait_until(lambda: dec.svc.latest.demand is not None and dec.svc.latest.demand.msg == longer, 5)
    finally:
        assert await dec.stop() == 0
        await bus.close()
    assert "No fresh demand forecast" in report.read_text()


async def test_a_decision_in_flight_when_the_lease_was_lost_is_published_on_the_next_activation(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A NATS cluster restart: the decision went out to plain subscribers, the stream never
    acknowledged it, the lease was lost while the publish was retried. The next activation of this
    instance publishes it (once) unless the stream has a newer decision."""
    bus = await connect(nats_server.url)
    run = await start_decider(settings(nats_server.url, write_profile(tmp_path)))
    try:
        svc = run.svc

        def decision(i: int) -> ScalingDecision:
            return ScalingDecision(decision_id=i, issued_at_s=0.0, namespace=NS, targets={"prefill": i})

        svc._in_flight = decision(7)
        last = await svc._finish_in_flight(decision(6))
        assert last is not None and last.decision_id == 7 and svc._in_flight is None
        svc._in_flight = decision(8)
        last = await svc._finish_in_flight(decision(9))  # another instance went on meanwhile
        assert last is not None and last.decision_id == 9 and svc._in_flight is None
        assert await svc._finish_in_flight(None) is None  # nothing in flight: nothing sent
        ids = [d.decision_id for d in await stream_decisions(bus) if d.decision_id >= 7]
        assert ids == [7]
    finally:
        assert await run.stop() == 0
        await bus.close()
