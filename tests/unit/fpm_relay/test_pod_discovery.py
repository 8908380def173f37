"""Pure parts of the relay's pod discovery: the settings items, which pods are targets, and where
each is scraped."""

from __future__ import annotations

from typing import Any

import pytest

from planner_fpm_relay.discovery import PodSource, parse_pod_sources, targets_from_pods, worker_id_of
from planner_runtime.kubepods import PodView, parse_pod


def pod(
    name: str, *, ip: str = "10.0.0.5", phase: str = "Running", ready: bool = True, **meta: Any
) -> PodView:
    return parse_pod(
        {
            "metadata": {"name": name, **meta},
            "status": {
                "phase": phase,
                "podIP": ip,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )


def test_parse_sources() -> None:
    got = parse_pod_sources(["decode:vllm:app=dc,tier=gpu", "prefill:fpm:nvidia.com/dynamo-component=pf"])
    assert got == [
        PodSource("decode", "vllm", "app=dc,tier=gpu"),
        PodSource("prefill", "fpm", "nvidia.com/dynamo-component=pf"),
    ]
    for bad in ("decode:vllm:", "router:vllm:app=x", "decode:tgi:app=x", "decode"):
        with pytest.raises(ValueError, match="pod_discovery"):
            parse_pod_sources([bad])


def test_only_serving_pods_are_targets() -> None:
    src = PodSource("decode", "vllm", "app=dc")
    pods = [
        pod("ok"),
        pod("unready", ready=False),
        pod("pending", phase="Pending"),
        pod("deleting", deletionTimestamp="2025-01-01T00:00:00Z"),
        pod("no-ip", ip=""),
    ]
    assert list(targets_from_pods(pods, src, 8000, "/metrics", 20380)) == ["decode.ok"]


def test_port_and_path_from_annotations_or_settings() -> None:
    src = PodSource("agg", "sglang", "app=x")
    pods = [
        pod("a", ip="10.0.0.1"),
        pod("b", ip="10.0.0.2", annotations={"prometheus.io/port": "9100", "prometheus.io/path": "stats"}),
        pod("c", ip="fd00::7", annotations={"prometheus.io/port": "junk"}),
    ]
    got = {
        k: (t.metrics_url, t.engine_kind)
        for k, t in targets_from_pods(pods, src, 8000, "/metrics", 1).items()
    }
    assert got == {
        "agg.a": ("http://10.0.0.1:8000/metrics", "sglang"),
        "agg.b": ("http://10.0.0.2:9100/stats", "sglang"),
        "agg.c": ("http://[fd00::7]:8000/metrics", "sglang"),
    }
    fpm = targets_from_pods([pod("e", ip="10.0.0.9")], PodSource("decode", "fpm", "app=e"), 8000, "/m", 20380)
    assert fpm["decode.e"].zmq_endpoint == "tcp://10.0.0.9:20380" and fpm["decode.e"].is_fpm


def test_worker_id_is_the_pod_name_as_a_token() -> None:
    assert worker_id_of("llm-disagg-dc-7d9f8-x2k4q") == "llm-disagg-dc-7d9f8-x2k4q"
    assert worker_id_of("web.0") == "web-0"
