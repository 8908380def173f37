"""actuator-k8s drains on scale-down: the least-loaded pod is annotated and its engines marked
draining, the fake's controller removes that pod (not another), ReplicaStatus reports it draining
while it terminates, and ``completed`` is acked only once it is gone."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from planner_proto import ComponentSnapshot, EngineInfo, WorkerLoad
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S
from planner_runtime.bus import kv_get, kv_put

pytestmark = pytest.mark.integration

COST = "controller.kubernetes.io/pod-deletion-cost"
GRACE_S = 2.0


@contextlib.asynccontextmanager
async def snapshots(recorder: Any, component: str, loads: dict[str, int]) -> AsyncIterator[None]:
    """The regression's ComponentSnapshot for ``component``, every 0.2 s."""

    async def loop() -> None:
        while True:
            snap = ComponentSnapshot(
                namespace="t",
                component=component,  # type: ignore[arg-type]
                issued_at_s=time.time(),
                workers=[
                    WorkerLoad(worker_id=w, last_seen_s=time.time(), running_requests=n, waiting_requests=0)
                    for w, n in loads.items()
                ],
            )
            await recorder.bus.publish(recorder.subjects.state(component), snap)
            await asyncio.sleep(0.2)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def register(recorder: Any, component: str, worker_id: str, metrics_url: str) -> Any:
    kv = await recorder.bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
    info = EngineInfo(
        namespace="t",
        component=component,  # type: ignore[arg-type]
        worker_id=worker_id,
        metrics_url=metrics_url,
        engine_kind="vllm",
    )
    await kv_put(kv, recorder.subjects.engine_key(component, worker_id), info)
    return kv


async def terminating(fake: Any, name: str, svc: str = "", timeout_s: float = 10.0) -> list[str]:
    """The pods of ``name`` that terminate, once some do."""
    deadline = time.monotonic() + timeout_s
    while not (pods := fake.pods_of(name, svc, terminating=True)):
        assert time.monotonic() < deadline, "no pod was deleted"
        await asyncio.sleep(0.05)
    return list(pods)


async def follow_drain(fake: Any, recorder: Any, decision: int, victims: list[str]) -> float:
    """Until the victims are gone: no ``completed`` ack, and ReplicaStatus says draining. Returns
    how long the status reported draining."""
    first_draining: float | None = None
    last_draining = 0.0
    deadline = time.monotonic() + 20
    while any(fake.pod(v) is not None for v in victims):
        assert time.monotonic() < deadline, "the drained pods never went away"
        assert "completed" not in recorder.acks_for(decision), "completed while pods still terminate"
        for st in recorder.status:
            comps = st.components
            if any(c.draining > 0 for c in comps.values()):
                first_draining = first_draining or st.at_s
                last_draining = max(last_draining, st.at_s)
        await asyncio.sleep(0.05)
    assert first_draining is not None, "ReplicaStatus never reported draining"
    await recorder.wait_ack(decision, "completed", timeout_s=10)
    return last_draining - first_draining


async def test_deployment_scale_down_drains_the_least_loaded_pod(
    fake_kube: Any, recorder: Any, k8s_settings: Any, run_k8s: Any
) -> None:
    fake_kube.termination_grace_s = GRACE_S
    fake_kube.add_workload("deployments", "pf", 3)
    pods = fake_kube.pods_of("pf")
    assert len(pods) == 3
    # engines named after their pods (worker_id == pod name); the middle one is the idlest
    for p in pods:
        kv = await register(recorder, "prefill", p, f"http://{fake_kube.pod(p).ip}:8000/metrics")
    loads = {pods[0]: 6, pods[1]: 0, pods[2]: 9}
    settings = k8s_settings(target="scale", scale_targets=["prefill=Deployment/pf"])
    async with snapshots(recorder, "prefill", loads), run_k8s(settings):
        await asyncio.sleep(0.5)  # a snapshot or two arrive
        d = await recorder.decide({"prefill": 2})
        await recorder.wait_ack(d, "accepted")
        # the idlest pod was annotated (and only it), then the one removed
        assert await terminating(fake_kube, "pf") == [pods[1]]
        assert int(fake_kube.pod(pods[1]).annotations[COST]) < 0
        assert all(COST not in fake_kube.pod(p).annotations for p in (pods[0], pods[2]))
        info = await kv_get(kv, recorder.subjects.engine_key("prefill", pods[1]), EngineInfo)
        assert info is not None and info.draining
        for p in (pods[0], pods[2]):
            other = await kv_get(kv, recorder.subjects.engine_key("prefill", p), EngineInfo)
            assert other is not None and not other.draining
        seconds = await follow_drain(fake_kube, recorder, d, [pods[1]])
        assert seconds >= GRACE_S - 0.8  # not one poll: for as long as the pod terminated
        assert fake_kube.pods_of("pf") == [pods[0], pods[2]]
        st = await recorder.wait_status(lambda s: s.components["prefill"].ready == 2)
        assert st.components["prefill"].draining == 0
    # the pod calls made: list by the Deployment's selector, patch the one pod
    pod_calls = [(m, p) for m, p in fake_kube.requests if "/pods" in p]
    assert ("PATCH", f"/api/v1/namespaces/llm/pods/{pods[1]}") in pod_calls
    assert {p for m, p in pod_calls if m == "PATCH"} == {f"/api/v1/namespaces/llm/pods/{pods[1]}"}


async def test_dgd_scale_down_drains_by_engine_address(
    fake_kube: Any, recorder: Any, k8s_settings: Any, run_k8s: Any
) -> None:
    """A DGD service's pods (the operator's labels), engines registered under their own worker ids
    and matched to pods by their metrics URL's host (the pod IP); two of three go."""
    fake_kube.termination_grace_s = GRACE_S
    fake_kube.add_dgd(
        "llm-disagg",
        {
            "Frontend": {"componentType": "frontend", "replicas": 1},
            "dc": {"componentType": "worker", "subComponentType": "decode", "replicas": 3},
        },
    )
    pods = fake_kube.pods_of("llm-disagg", "dc")
    assert len(pods) == 3
    loads: dict[str, int] = {}
    for i, p in enumerate(pods):
        await register(recorder, "decode", f"engine-{i}", f"http://{fake_kube.pod(p).ip}:9090/metrics")
        loads[f"engine-{i}"] = [4, 12, 0][i]
    async with snapshots(recorder, "decode", loads), run_k8s(k8s_settings()):
        await asyncio.sleep(0.5)
        d = await recorder.decide({"decode": 1})
        await recorder.wait_ack(d, "accepted")
        going = [pods[2], pods[0]]  # loads 0 and 4; the busiest (12) stays
        assert sorted(await terminating(fake_kube, "llm-disagg", "dc")) == sorted(going)
        st = await recorder.wait_status(lambda s: s.components["decode"].draining == 2)
        assert st.components["decode"].desired == 1
        await follow_drain(fake_kube, recorder, d, going)
        assert fake_kube.pods_of("llm-disagg", "dc") == [pods[1]]
    assert fake_kube.patches[-1]["spec"] == {"services": {"dc": {"replicas": 1}}}


async def test_the_marks_of_a_drain_given_up_are_taken_back(
    fake_kube: Any, recorder: Any, k8s_settings: Any, run_k8s: Any
) -> None:
    """The scale-down's replica write is refused for good (422) after the idlest pod was marked and
    its engine flagged draining: the decision fails, and the pod gets its marks back (annotations
    removed, engine not draining), so routers send it requests again."""
    fake_kube.add_workload("deployments", "pf", 2)
    pods = fake_kube.pods_of("pf")
    kv = None
    for p in pods:
        kv = await register(recorder, "prefill", p, f"http://{fake_kube.pod(p).ip}:8000/metrics")
    assert kv is not None
    key = recorder.subjects.engine_key("prefill", pods[0])
    settings = k8s_settings(target="scale", scale_targets=["prefill=Deployment/pf"])
    async with snapshots(recorder, "prefill", {pods[0]: 0, pods[1]: 5}), run_k8s(settings):
        await asyncio.sleep(0.5)
        fake_kube.fail_next("PATCH", 422, path_part="/scale")
        d = await recorder.decide({"prefill": 1})
        assert "422" in (await recorder.wait_ack(d, "failed")).message
        deadline = time.monotonic() + 10
        while (
            "planner/draining" in fake_kube.pod(pods[0]).annotations
            or COST in fake_kube.pod(pods[0]).annotations
        ):
            assert time.monotonic() < deadline, "the given-up drain's marks were never taken back"
            await asyncio.sleep(0.05)
        while True:
            back = await kv_get(kv, key, EngineInfo)
            assert back is not None
            if not back.draining:
                break
            assert time.monotonic() < deadline, "the engine stayed marked draining"
            await asyncio.sleep(0.05)
    assert fake_kube.pods_of("pf") == pods  # nothing was scaled
    # the idlest pod was marked (one PATCH), then unmarked (another)
    assert fake_kube.count("PATCH", f"/pods/{pods[0]}") == 2
    assert fake_kube.count("PATCH", f"/pods/{pods[1]}") == 0
