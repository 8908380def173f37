"""The relay finds engines as Kubernetes pods (label selector, the API fake of the actuator tests)
and scrapes each on its IP and annotated port; a pod deleted by a scale-down stops being scraped at
once (terminating pods are not targets), a pod added by a scale-up is scraped once Ready."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from planner_proto import Subjects, WorkerLoadSample
from planner_runtime.natsd import NatsServer

from .relay_helpers import NS, FakeMetricsServer, connect, in_process_relay, wait_until
from .test_relay_scrape import FIXTURES

pytestmark = pytest.mark.integration


def load_fake() -> Any:
    name = "planner_tests_k8s_fake"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).parent.parent / "actuators" / "k8s_fake.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


async def test_relay_scrapes_discovered_pods_and_drops_deleted_ones(nats_server: NatsServer) -> None:
    fake = load_fake().FakeKube(namespace="llm", ready_delay_s=0.3).start()
    fake.termination_grace_s = 30.0  # terminating for the whole test: still listed, never scraped
    fake.pod_ip = lambda name, seq: "127.0.0.1"
    servers = [FakeMetricsServer((FIXTURES / "vllm.txt").read_text()) for _ in range(3)]
    ports = []
    for srv in servers:
        url = await srv.start()
        ports.append(url.rsplit(":", 1)[1].split("/")[0])
    subjects = Subjects(ns=NS)
    bus = await connect(nats_server.url)
    seen: dict[str, float] = {}

    async def on_load(msg: WorkerLoadSample, subject: str) -> None:
        seen[msg.worker_id] = time.monotonic()

    await bus.subscribe(subjects.load("decode"), WorkerLoadSample, on_load)
    try:
        fake.add_workload("deployments", "dc", 2)
        fake.add_workload("deployments", "other", 1)  # not selected
        pods = fake.pods_of("dc")
        for pod, port in zip(pods, ports, strict=False):
            fake.set_pod(pod, annotations={"prometheus.io/port": port})
        async with in_process_relay(
            nats_server.url,
            sharding=False,
            watch_engines=False,
            pod_discovery=["decode:vllm:app=dc"],
            k8s_namespace="llm",
            k8s_api_url=fake.url,
            pod_discovery_interval_s=0.3,
            pod_metrics_port=1,  # every pod here says its port in prometheus.io/port
        ) as relay:
            await wait_until(lambda: set(seen) == set(pods), 15, "samples from both pods")
            assert relay.scrapes.keys() == {f"decode.{p}" for p in pods}
            assert all(
                t.metrics_url == f"http://127.0.0.1:{ports[i]}/metrics"
                for i, t in enumerate(relay.scrapes.values())
            )
            # scale down: the controller deletes one pod, which terminates (still listed, not Ready)
            fake.set_replicas("deployments", "dc", 1)
            gone = fake.pods_of("dc", terminating=True)
            assert len(gone) == 1
            await wait_until(lambda: f"decode.{gone[0]}" not in relay.scrapes, 5, "the deleted pod dropped")
            hits = servers[pods.index(gone[0])].hits
            await asyncio.sleep(1.0)  # three scrape intervals
            assert servers[pods.index(gone[0])].hits == hits
            kept = next(p for p in pods if p != gone[0])
            assert time.monotonic() - seen[kept] < 1.0  # the other one is still scraped
            # scale up: a new pod is scraped once it is Ready (it gets the third server's port)
            fake.set_replicas("deployments", "dc", 2)
            new = next(p for p in fake.pods_of("dc", terminating=False) if p not in pods)
            fake.set_pod(new, annotations={"prometheus.io/port": ports[2]})
            await wait_until(lambda: new in seen, 10, "a sample from the new pod")
        requests = {p for m, p in fake.requests}
        assert requests == {"/api/v1/namespaces/llm/pods"}
    finally:
        await bus.close()
        for srv in servers:
            await srv.close()
        fake.stop()
