"""actuator-k8s against the HTTP fake of the API paths it uses (k8s_fake.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

pytestmark = pytest.mark.integration

DISAGG = {
    "Frontend": {"componentType": "frontend", "replicas": 1},
    "pf": {"componentType": "worker", "subComponentType": "prefill", "replicas": 1},
    "dc": {"componentType": "worker", "subComponentType": "decode", "replicas": 1},
}
LEGACY = {
    "Frontend": {"replicas": 1},
    "VllmPrefillWorker": {"replicas": 1},
    "VllmDecodeWorker": {"replicas": 1},
}


def only_allowed_paths(fake: Any, allowed: tuple[str, ...]) -> None:
    for method, path in fake.requests:
        assert method in ("GET", "PATCH"), (method, path)
        assert path.startswith(allowed), path


async def test_dgd_patch_acks_completed_only_when_ready(
    fake_kube: Any, recorder: Any, k8s_settings: Any, run_k8s: Any
) -> None:
    fake_kube.add_dgd("llm-disagg", DISAGG)
    async with run_k8s(k8s_settings()):
        d1 = await recorder.decide({"prefill": 3}, decision_id=2)
        await recorder.wait_ack(d1, "accepted")
        patched = asyncio.get_running_loop().time()
        done = await recorder.wait_ack(d1, "completed", timeout_s=15)
        assert asyncio.get_running_loop().time() - patched >= 0.6  # the fake's ready delay is 0.8 s
        assert done.ready == {"prefill": 3}
        patch = fake_kube.patches[-1]
        assert patch["spec"] == {"services": {"pf": {"replicas": 3}}}
        assert patch["metadata"]["resourceVersion"]
        st = await recorder.wait_status(
            lambda s: s.last_decision_id == d1 and s.components["prefill"].ready == 3
        )
        assert st.components["decode"].desired == 1 and not st.external_change
        # an older decision is ignored, an unchanged target completes without a write
        await recorder.decide({"prefill": 1}, decision_id=1)
        writes = fake_kube.count("PATCH")
        d3 = await recorder.decide({"prefill": 3, "decode": 1}, decision_id=3)
        await recorder.wait_ack(d3, "completed", timeout_s=10)
        assert fake_kube.count("PATCH") == writes
        assert recorder.acks_for(1) == []
    only_allowed_paths(
        fake_kube, ("/apis/nvidia.com/v1alpha1/namespaces/llm/dynamographdeployments/llm-disagg",)
    )


async def test_dgd_legacy_names_conflict_and_500_are_retried(
    fake_kube: Any, recorder: Any, k8s_settings: Any, run_k8s: Any
) -> None:
    fake_kube.add_dgd("llm-disagg", LEGACY)
    async with run_k8s(k8s_settings()):
        fake_kube.fail_next("PATCH", 500)
        fake_kube.race_next_patch()  # then someone else writes first: our resourceVersion is stale
        d1 = await recorder.decide({"decode": 2, "prefill": 1})
        await recorder.wait_ack(d1, "completed", timeout_s=15)
        assert fake_kube.count("PATCH") == 3  # 500, 409, then the write
        assert fake_kube.patches[-1]["spec"] == {"services": {"VllmDecodeWorker": {"replicas": 2}}}
        # the retry read a fresh resourceVersion
        assert (
            fake_kube.patches[-1]["metadata"]["resourceVersion"]
            != fake_kube.patches[-2]["metadata"]["resourceVersion"]
        )
        assert "failed" not in recorder.acks_for(d1)


async def test_forbidden_is_reported_once(
    fake_kube: Any, recorder: Any, k8s_settings: Any, run_k8s: Any
) -> None:
    fake_kube.add_dgd("llm-disagg", DISAGG)
    async with run_k8s(k8s_settings()):
        fake_kube.fail_next("PATCH", 403)
        d1 = await recorder.decide({"prefill": 2})
        ack = await recorder.wait_ack(d1, "failed")
        assert "403" in ack.message
        await asyncio.sleep(0.8)
        assert fake_kube.count("PATCH") == 1
        assert recorder.acks_for(d1).count("failed") == 1
        # exhausting the attempts on 500s also ends in one failed ack
        fake_kube.fail_next("PATCH", 500, times=5)
        d2 = await recorder.decide({"prefill": 2})
        await recorder.wait_ack(d2, "failed", timeout_s=10)
        assert fake_kube.count("PATCH") == 6
        # a decision for a component the resource does not have fails, nothing is written
        d3 = await recorder.decide({"agg": 2})
        assert "agg" in (await recorder.wait_ack(d3, "failed")).message
        assert fake_kube.count("PATCH") == 6


async def test_scale_subresource_and_external_change(
    fake_kube: Any, recorder: Any, k8s_settings: Any, run_k8s: Any
) -> None:
    fake_kube.add_workload("deployments", "pf", 1)
    fake_kube.add_workload("statefulsets", "dc", 1)
    settings = k8s_settings(target="scale", scale_targets=["prefill=Deployment/pf", "decode=StatefulSet/dc"])
    async with run_k8s(settings):
        d1 = await recorder.decide({"prefill": 2, "decode": 3})
        done = await recorder.wait_ack(d1, "completed", timeout_s=15)
        assert done.ready == {"prefill": 2, "decode": 3}
        assert fake_kube.count("PATCH", "/deployments/pf/scale") == 1
        assert fake_kube.count("PATCH", "/statefulsets/dc/scale") == 1
        fake_kube.fail_next("PATCH", 422)
        d2 = await recorder.decide({"prefill": 4})
        assert "422" in (await recorder.wait_ack(d2, "failed")).message
        # kubectl scale by someone else: reported and adopted, not fought
        fake_kube.set_replicas("statefulsets", "dc", 5)
        st = await recorder.wait_status(lambda s: s.external_change and s.components["decode"].desired == 5)
        assert st.components["prefill"].desired == 2 or st.components["prefill"].desired == 4
        await asyncio.sleep(0.5)
        assert fake_kube.count("PATCH", "/statefulsets/dc/scale") == 1
    only_allowed_paths(
        fake_kube,
        (
            "/apis/apps/v1/namespaces/llm/deployments/pf",
            "/apis/apps/v1/namespaces/llm/statefulsets/dc",
        ),
    )


async def test_decision_held_by_a_dead_predecessor_is_taken_at_once(
    fake_kube: Any, recorder: Any, k8s_settings: Any, run_k8s: Any
) -> None:
    """A predecessor fetched a decision and died before recording it: the durable consumer would
    hand it out again only after its ack wait (30 s); the new holder takes it from the stream now."""
    fake_kube.add_dgd("llm-disagg", DISAGG)
    settings = k8s_settings()
    subjects = recorder.subjects
    durable = f"actuator-k8s-{settings.actuator_id}"
    held = await recorder.bus.js.pull_subscribe(
        subjects.decision(), durable=durable, stream=subjects.decision_stream()
    )
    d = await recorder.decide({"decode": 2}, decision_id=7)
    msgs = await held.fetch(batch=1, timeout=5)
    assert len(msgs) == 1  # delivered to the "predecessor", never acked
    await held.unsubscribe()
    t0 = asyncio.get_running_loop().time()
    async with run_k8s(settings):
        await recorder.wait_ack(d, "accepted", timeout_s=10)
        assert asyncio.get_running_loop().time() - t0 < 10
        await recorder.wait_ack(d, "completed", timeout_s=15)
    assert fake_kube.patches[-1]["spec"] == {"services": {"dc": {"replicas": 2}}}
    assert recorder.acks_for(d).count("accepted") == 1


async def test_a_completed_decision_is_not_completed_again_after_a_restart(
    fake_kube: Any, recorder: Any, k8s_settings: Any, run_k8s: Any
) -> None:
    fake_kube.add_dgd("llm-disagg", DISAGG)
    settings = k8s_settings()
    async with run_k8s(settings):
        d = await recorder.decide({"decode": 2}, decision_id=4)
        await recorder.wait_ack(d, "completed", timeout_s=15)
    restarted = time.time()
    async with run_k8s(settings):
        await recorder.wait_status(
            lambda s: s.at_s > restarted and s.last_decision_id == d and s.components["decode"].ready == 2
        )
        await asyncio.sleep(1.0)  # five polls of the API by the new holder
        writes = fake_kube.count("PATCH")
    assert recorder.acks_for(d) == ["accepted", "completed"]
    assert writes == 1
