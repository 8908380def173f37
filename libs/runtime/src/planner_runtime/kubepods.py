"""A Kubernetes Pod as the services read it (pure, no client): actuator-k8s picks the pods a
scale-down removes from these, the relay's pod discovery scrapes the serving ones.

:func:`parse_pods` reads a ``PodList`` body (``GET /api/v1/namespaces/{ns}/pods?labelSelector=...``,
whichever client made the call), :func:`parse_pod` one Pod's JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
"""Honoured by the ReplicaSet controller (Deployments; a DGD rendered as Deployments): among pods
otherwise equal, the lowest cost is removed first. Values are int32."""
DRAIN_MARK = "planner/draining"
"""actuator-k8s's own annotation on a pod picked for removal (the wall time it was picked)."""
TERMINAL = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class PodView:
    name: str
    ip: str = ""
    node: str = ""
    phase: str = "Pending"
    ready: bool = False
    deleting: bool = False
    """``metadata.deletionTimestamp`` is set: the pod is terminating (its GPUs are still held)."""
    created: str = ""
    """``metadata.creationTimestamp`` (RFC 3339, UTC: ordered as text)."""
    cost: int = 0
    marked: bool = False
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        """Counts toward the workload: not finished (Succeeded/Failed pods linger until collected)."""
        return self.phase not in TERMINAL

    @property
    def serving(self) -> bool:
        """Takes requests: Running, Ready, not being deleted, with an IP."""
        return self.phase == "Running" and self.ready and not self.deleting and bool(self.ip)


def parse_pod(obj: Mapping[str, Any]) -> PodView:
    """A Pod's JSON (as the API returns it) -> what the services need of it."""
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    spec: Mapping[str, Any] = obj.get("spec") or {}
    status: Mapping[str, Any] = obj.get("status") or {}
    ann = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    try:
        cost = int(ann.get(DELETION_COST, "0"))
    except ValueError:
        cost = 0
    ready = any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return PodView(
        name=str(meta.get("name") or ""),
        ip=str(status.get("podIP") or ""),
        node=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        ready=ready,
        deleting=bool(meta.get("deletionTimestamp")),
        created=str(meta.get("creationTimestamp") or ""),
        cost=cost,
        marked=DRAIN_MARK in ann,
        annotations=ann,
    )


def parse_pods(body: Any) -> list[PodView]:
    """A ``PodList`` body -> its pods (anything that is not one: none)."""
    items = body.get("items") if isinstance(body, Mapping) else None
    return [parse_pod(p) for p in items or [] if isinstance(p, Mapping)]


def selector_string(match_labels: Mapping[str, Any]) -> str:
    """``{"app": "x", "tier": "w"}`` -> ``app=x,tier=w`` (a ``labelSelector`` query value)."""
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))
