"""actuator-circus against a real circusd and real worker processes: scale 0 -> 2 -> 1 with a drain
that lets in-flight work finish, old and advisory decisions ignored, GPU pool and injection guards."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytestmark = pytest.mark.integration


async def test_scale_up_then_drain_one(
    circusd: Any, recorder: Any, make_settings: Any, run_actuator: Any
) -> None:
    settings = make_settings(
        worker_cmd=make_settings().worker_cmd.replace("--inflight-s 1.0", "--inflight-s 1.5")
    )
    async with run_actuator(settings):
        d1 = await recorder.decide({"prefill": 2})
        await recorder.wait_ack(d1, "accepted")
        done = await recorder.wait_ack(d1, "completed", timeout_s=40)
        assert done.ready == {"prefill": 2}
        assert sorted(circusd.watchers()) == ["t_prefill_0", "t_prefill_1"]
        cuda = {e["worker_id"]: e["cuda"] for e in circusd.all_started()}
        assert len(set(cuda.values())) == 2 and set(cuda.values()) <= {"0", "1", "2", "3"}
        keep_pids = circusd.pids("t_prefill_0")

        d2 = await recorder.decide({"prefill": 1})
        done2 = await recorder.wait_ack(d2, "completed", timeout_s=40)
        assert done2.ready == {"prefill": 1}
        # the newest worker (no load data) was drained: SIGTERM -> draining -> in-flight done -> exit
        ev = [e["event"] for e in circusd.events("t_prefill_1")]
        assert ev[-3:] == ["registered", "drain_begin", "drained"], ev
        drained_at = next(e["t"] for e in circusd.events("t_prefill_1") if e["event"] == "drained")
        begun_at = next(e["t"] for e in circusd.events("t_prefill_1") if e["event"] == "drain_begin")
        assert drained_at - begun_at >= 1.4
        assert done2.at_s >= drained_at
        # only that watcher went; the other worker and circusd were not touched (reference issue 985)
        assert circusd.watchers() == ["t_prefill_0"]
        assert circusd.pids("t_prefill_0") == keep_pids
        assert circusd.proc.poll() is None
        st = await recorder.wait_status(
            lambda s: s.last_decision_id == d2 and s.components["prefill"].ready == 1
        )
        assert st.components["prefill"].desired == 1 and st.components["prefill"].draining == 0
        assert not st.external_change


async def test_old_advisory_and_superseded(
    circusd: Any, recorder: Any, make_settings: Any, run_actuator: Any
) -> None:
    async with run_actuator(make_settings()):
        d5 = await recorder.decide({"prefill": 1}, decision_id=5)
        await recorder.wait_ack(d5, "completed", timeout_s=40)
        await recorder.decide({"prefill": 3}, decision_id=3)  # older: ignored
        await recorder.decide({"prefill": 3}, decision_id=6, advisory=True)  # advisory: ignored
        # two pending decisions: 7 is skipped (superseded), 8 is applied
        await recorder.decide({"decode": 1}, decision_id=7)
        d8 = await recorder.decide({"prefill": 1, "decode": 0}, decision_id=8)
        await recorder.wait_ack(d8, "completed", timeout_s=40)
        await asyncio.sleep(0.5)
        assert recorder.acks_for(3) == []
        assert recorder.acks_for(6) == []
        assert "superseded" in recorder.acks_for(7)
        assert "completed" not in recorder.acks_for(7)
        assert circusd.watchers() == ["t_prefill_0"]
        assert len(circusd.all_started()) == 1


async def test_gpu_pool_and_injection_guards(
    circusd: Any, recorder: Any, make_settings: Any, run_actuator: Any
) -> None:
    async with run_actuator(make_settings(gpu_pool=[0, 1, 2, 3])):
        bad = await recorder.decide({"a;rm -rf /": 1, "prefill": 1})
        ack = await recorder.wait_ack(bad, "failed")
        assert "invalid_component" in ack.message
        over = await recorder.decide({"prefill": 3, "decode": 2})
        ack = await recorder.wait_ack(over, "failed")
        assert "gpu_budget" in ack.message
        assert circusd.watchers() == []
        ok = await recorder.decide({"prefill": 2, "decode": 2})
        await recorder.wait_ack(ok, "completed", timeout_s=40)
        started = circusd.all_started()
        assert len(started) == 4
        gpus = [e["cuda"] for e in started]
        assert sorted(gpus) == ["0", "1", "2", "3"]
        for e in started:
            assert ";" not in " ".join(e["argv"])
        assert sorted(circusd.watchers()) == ["t_decode_0", "t_decode_1", "t_prefill_0", "t_prefill_1"]
