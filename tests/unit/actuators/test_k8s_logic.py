"""Pure parts of actuator-k8s: DGD service discovery, ready counts, error kinds, settings."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from planner_actuator_k8s.dgd import find_services, service_ready, service_replicas
from planner_actuator_k8s.kube import ErrorKind, classify
from planner_actuator_k8s.settings import K8sActuatorSettings, parse_scale_targets
from planner_runtime.settings import SettingsError, load_settings


@pytest.mark.parametrize(
    ("services", "overrides", "expected"),
    [
        (
            {"Frontend": {}, "pf": {"subComponentType": "prefill"}, "dc": {"subComponentType": "decode"}},
            {},
            {"prefill": "pf", "decode": "dc"},
        ),
        (
            {"VllmPrefillWorker": {}, "VllmDecodeWorker": {}},
            {},
            {"prefill": "VllmPrefillWorker", "decode": "VllmDecodeWorker"},
        ),
        (
            {"TRTLLMPrefillWorker": {}, "TRTLLMDecodeWorker": {}},
            {},
            {"prefill": "TRTLLMPrefillWorker", "decode": "TRTLLMDecodeWorker"},
        ),
        ({"prefill": {}, "decode": {}}, {}, {"prefill": "prefill", "decode": "decode"}),
        # subComponentType beats a legacy name
        ({"prefill": {}, "p2": {"subComponentType": "prefill"}}, {}, {"prefill": "p2"}),
        # two services claim prefill: ambiguous, neither is scaled unless an override says which
        ({"a": {"subComponentType": "prefill"}, "b": {"subComponentType": "prefill"}}, {}, {}),
        (
            {"a": {"subComponentType": "prefill"}, "b": {"subComponentType": "prefill"}},
            {"prefill": "b"},
            {"prefill": "b"},
        ),
        ({"Frontend": {}}, {}, {}),
    ],
)
def test_find_services(services: dict[str, Any], overrides: dict[str, str], expected: dict[str, str]) -> None:
    assert find_services(services, overrides) == expected


def test_ready_and_replicas_from_dgd() -> None:
    obj = {
        "spec": {"services": {"pf": {"replicas": 3}}},
        "status": {"services": {"pf": {"readyReplicas": 2, "availableReplicas": 1}}},
    }
    assert service_replicas(obj, "pf") == 3
    assert service_ready(obj, "pf", ["availableReplicas", "readyReplicas"]) == 1
    assert service_ready(obj, "pf", ["readyReplicas"]) == 2
    assert service_ready({"spec": {}}, "pf", ["readyReplicas"]) == 0  # no status yet
    assert service_replicas({"spec": {}}, "pf") is None


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (409, ErrorKind.CONFLICT),
        (429, ErrorKind.TRANSIENT),
        (500, ErrorKind.TRANSIENT),
        (503, ErrorKind.TRANSIENT),
        (403, ErrorKind.PERMANENT),
        (404, ErrorKind.PERMANENT),
        (422, ErrorKind.PERMANENT),
    ],
)
def test_error_kinds(status: int, kind: ErrorKind) -> None:
    assert classify(ApiException(status=status, reason="x")).kind == kind


def test_connection_errors_are_transient() -> None:
    assert classify(ConnectionRefusedError()).kind == ErrorKind.TRANSIENT


def test_settings() -> None:
    s = load_settings(
        K8sActuatorSettings,
        flags={"target": "scale", "scale_targets": "prefill=Deployment/pf,decode=StatefulSet/dc"},
        env={},
    )
    assert parse_scale_targets(s.scale_targets)["decode"].kind == "StatefulSet"
    for bad in (
        {"target": "dgd"},  # no dgd_name
        {"target": "scale"},  # no scale_targets
        {"target": "scale", "scale_targets": "prefill=Pod/x"},
        {"target": "dgd", "dgd_name": "x", "k8s_namespace": "Bad_NS"},
        {"target": "dgd", "dgd_name": "x", "dgd_services": "router=x"},
    ):
        with pytest.raises(SettingsError):
            load_settings(K8sActuatorSettings, flags=bad, env={})
