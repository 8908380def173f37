"""Settings of the Kubernetes actuator (one frozen struct, validated once at start)."""

from __future__ import annotations

import re
import typing
from typing import Annotated

import msgspec
from msgspec import Meta

from planner_proto import Component
from planner_runtime.actuation.settings import ActuatorSettings

Token = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_\-]+$", max_length=64)]
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_COMPONENTS = frozenset(c.value for c in Component)


def parse_pairs(items: list[str], what: str) -> dict[str, str]:
    """``["prefill=X", ...]`` -> ``{"prefill": "X"}`` with known component names."""
    out: dict[str, str] = {}
    for item in items:
        comp, sep, value = item.partition("=")
        if not sep or comp not in _COMPONENTS or not value:
            raise ValueError(f"{what}: {item!r} must be COMPONENT=VALUE, COMPONENT in {sorted(_COMPONENTS)}")
        out[comp] = value
    return out


class ScaleRef(msgspec.Struct, frozen=True):
    kind: typing.Literal["Deployment", "StatefulSet"]
    name: str


def parse_scale_targets(items: list[str]) -> dict[str, ScaleRef]:
    out: dict[str, ScaleRef] = {}
    for comp, ref in parse_pairs(items, "scale_targets").items():
        kind, sep, name = ref.partition("/")
        if not sep or kind not in ("Deployment", "StatefulSet") or not _DNS.match(name):
            raise ValueError(f"scale_targets: {comp}={ref!r} must be Deployment/NAME or StatefulSet/NAME")
        out[comp] = ScaleRef(typing.cast("typing.Literal['Deployment', 'StatefulSet']", kind), name)
    return out


class K8sActuatorSettings(ActuatorSettings, frozen=True, kw_only=True):
    """Kubernetes actuator: applies ScalingDecisions to a DynamoGraphDeployment or to scale subresources."""

    actuator_id: Token = "k8s"
    """Names this actuator in acks, its durable consumer, its state key and its lease: instances
    with the same id are one active actuator plus standbys."""
    k8s_namespace: str = "default"
    """The only Kubernetes namespace this actuator reads or writes."""
    target: typing.Literal["dgd", "scale"] = "dgd"
    dgd_name: str = ""
    dgd_group: str = "nvidia.com"
    dgd_version: str = "v1alpha1"
    dgd_plural: str = "dynamographdeployments"
    dgd_services: list[str] = msgspec.field(default_factory=list)
    """COMPONENT=SERVICE overrides; otherwise services are found by subComponentType, then by name."""
    ready_fields: list[str] = msgspec.field(default_factory=lambda: ["availableReplicas", "readyReplicas"])
    """Status fields read for the ready count, first present wins (DGD: status.services.<svc>.*;
    Deployment/StatefulSet: status.*)."""
    scale_targets: list[str] = msgspec.field(default_factory=list)
    """target=scale: COMPONENT=Deployment/NAME or COMPONENT=StatefulSet/NAME items."""
    api_url: str = ""
    """API server URL; empty: in-cluster service account, else ``kubeconfig``."""
    kubeconfig: str = ""
    api_token_file: str = ""
    api_ca_file: str = ""
    api_verify_ssl: bool = True
    request_timeout_s: Annotated[float, Meta(gt=0, le=300)] = 10.0
    max_attempts: Annotated[int, Meta(ge=1, le=20)] = 5
    """Attempts per write on 409 / 429 / 5xx / connection errors, with exponential backoff."""
    backoff_base_s: Annotated[float, Meta(gt=0, le=60)] = 0.5
    backoff_max_s: Annotated[float, Meta(gt=0, le=600)] = 8.0
    poll_interval_s: Annotated[float, Meta(gt=0, le=300)] = 2.0
    """Read the targets, publish ReplicaStatus and check completion this often."""
    drain_pods: bool = True
    """Before lowering replicas, pick the least-loaded pods, annotate them with
    ``controller.kubernetes.io/pod-deletion-cost`` and mark their engines draining; report them
    draining until they are gone (needs pods get/list/patch). Off: only the replica count changes."""
    dgd_pod_selector: str = (
        "nvidia.com/dynamo-graph-deployment-name={dgd},nvidia.com/dynamo-component={service}"
    )
    """target=dgd: label selector of a service's pods (``{dgd}``, ``{service}`` filled in); these
    are the labels the Dynamo operator puts on the pods it renders."""
    pod_selectors: list[str] = msgspec.field(default_factory=list)
    """COMPONENT=SELECTOR overrides of the pod label selector (``app=x,role=y``); otherwise the
    Scale's ``status.selector`` (target=scale) or ``dgd_pod_selector``."""
    load_max_age_s: Annotated[float, Meta(gt=0, le=3600)] = 30.0
    """ComponentSnapshots older than this are not used to pick the least-loaded pods."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not _DNS.match(self.k8s_namespace):
            raise ValueError(f"k8s_namespace {self.k8s_namespace!r} is not a valid namespace name")
        if self.target == "dgd":
            if not _DNS.match(self.dgd_name):
                raise ValueError("target=dgd needs dgd_name (a valid resource name)")
            parse_pairs(self.dgd_services, "dgd_services")
        elif not self.scale_targets:
            raise ValueError("target=scale needs scale_targets (COMPONENT=Deployment/NAME ...)")
        parse_scale_targets(self.scale_targets)
        parse_pairs(self.pod_selectors, "pod_selectors")
        try:
            self.dgd_pod_selector.format(dgd="d", service="s")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"dgd_pod_selector: only {{dgd}} and {{service}} may be used ({exc})") from None
        if not self.ready_fields:
            raise ValueError("ready_fields must name at least one status field")
