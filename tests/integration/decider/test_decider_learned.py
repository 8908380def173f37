"""What the decider's policy learned survives a restart over a real nats-server (KV planner_state):
saved while it runs and when it stops, restored by the next active decider; an entry it cannot use
(malformed, stale, another namespace) means a start from the configuration, counted and logged."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import pytest

from planner_decider.learned import Learned, encode_learned, restore_learned
from planner_proto import TrafficSample
from planner_proto.subjects import STATE_BUCKET
from planner_runtime.bus import kv_raw
from planner_runtime.natsd import NatsServer

from ...unit.decider.decider_helpers import ISL, OSL, capacity
from .decider_helpers import (
    NS,
    SUBJECTS,
    Running,
    connect,
    feed,
    settings,
    start_decider,
    wait_until,
    write_profile,
)

pytestmark = pytest.mark.integration

KEY = SUBJECTS.state_key("decider", "learned_state")


async def read_as(dec: Running, outcome: str) -> None:
    """The decider read the saved entry on activation (just after it took its lease) with ``outcome``."""
    metric = "planner_decider_learned_state_restores_total"
    await wait_until(lambda: dec.metric(metric, {"outcome": outcome}) == 1, 10)


async def test_the_learned_corrections_survive_a_restart_and_a_bad_entry_means_the_configuration(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    profile = write_profile(tmp_path)
    s = settings(nats_server.url, profile, state_save_interval_s=0.2)
    bus = await connect(nats_server.url)
    kv = await bus.kv(STATE_BUCKET)
    try:
        dec = await start_decider(s)
        try:
            await read_as(dec, "absent")
            # first tokens twice as slow as the profile: the prefill correction learns it
            slow_ttft = 2.0 * capacity().prefill.ttft_ms(ISL)
            deadline = time.monotonic() + 10.0
            while dec.svc.policy_state.prefill_correction <= 1.05:
                assert time.monotonic() < deadline, "the prefill correction never learned the slow engines"
                await feed(bus, 100.0)
                sample = TrafficSample(
                    namespace=NS, start_s=time.time(), interval_s=10.0, num_requests=100.0,
                    mean_isl_tokens=ISL, mean_osl_tokens=OSL, mean_ttft_ms=slow_ttft,
                )  # fmt: skip
                await bus.publish(SUBJECTS.traffic(), sample)
                await bus.flush()
                await asyncio.sleep(0.25)
            # saved while it runs
            await wait_until(
                lambda: dec.metric("planner_decider_learned_state_saves_total", {"result": "saved"}) >= 1, 5
            )
        finally:
            assert await dec.stop() == 0
        learned_then = dec.svc.policy_state.prefill_correction
        saved, outcome, _ = restore_learned(await kv_raw(kv, KEY), NS, time.time(), 900.0)
        assert outcome == "restored" and saved is not None
        assert saved.prefill_correction == learned_then  # saved on the way out, as it stopped

        again = await start_decider(s)
        try:
            await read_as(again, "restored")
            assert again.svc.policy_state.prefill_correction == learned_then
        finally:
            assert await again.stop() == 0

        for entry, outcome, overrides in (
            (b'{"version": 1, "saved_at_s": "yesterday"}', "invalid", {}),
            (encode_learned(Learned(prefill_correction=3.0), NS, time.time() - 3600.0), "stale", {}),
            (encode_learned(Learned(prefill_correction=3.0), "other", time.time()), "namespace", {}),
            (
                encode_learned(Learned(prefill_correction=3.0), NS, time.time()),
                "disabled",
                {"state_max_age_s": 0.0},
            ),
        ):
            await kv.put(KEY, entry)
            cold = await start_decider(settings(nats_server.url, profile, **overrides))
            try:
                await read_as(cold, outcome)
                assert cold.svc.policy_state.prefill_correction == 1.0
            finally:
                assert await cold.stop() == 0
    finally:
        await bus.close()


def test_the_saved_entry_is_json_a_reader_can_inspect() -> None:
    raw = encode_learned(Learned(decode_correction=0.7), NS, 100.0)
    doc = msgspec.json.decode(raw)
    assert doc["version"] == 1 and doc["namespace"] == NS
    assert doc["learned"]["decode_correction"] == 0.7 and doc["learned"]["queue"]["log_scale"] == 0.0
