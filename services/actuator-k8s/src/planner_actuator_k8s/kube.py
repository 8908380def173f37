"""The Kubernetes API calls the actuator makes (and no others), with errors that carry a kind.

Two targets: a DynamoGraphDeployment (get + merge-patch of ``spec.services.<svc>.replicas``) and the
``scale`` subresource of Deployments / StatefulSets (get/patch scale, get the workload for its ready
count). Every write carries the ``resourceVersion`` just read, so a concurrent writer makes it fail
with 409 instead of being overwritten; the caller re-reads and tries again.

For the drain, the pods of each target (:class:`PodApi`): list by label selector (the Scale's
``status.selector``; for a DGD service ``dgd_pod_selector``) and merge-patch a pod's annotations.
"""

from __future__ import annotations

import asyncio
import enum
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from planner_actuator_k8s.dgd import find_services, first_int, service_ready, service_replicas
from planner_actuator_k8s.settings import K8sActuatorSettings, ScaleRef, parse_pairs, parse_scale_targets
from planner_runtime.kubepods import PodView, parse_pods, selector_string

T = TypeVar("T")
MERGE_PATCH = "application/merge-patch+json"


class ErrorKind(enum.StrEnum):
    CONFLICT = "conflict"
    """409: the object changed since it was read; re-read and retry."""
    TRANSIENT = "transient"
    """429, 5xx, connection trouble: retried with exponential backoff."""
    PERMANENT = "permanent"
    """400/401/403/404/422, or a resource without the expected service: reported once, not retried."""


class KubeError(Exception):
    def __init__(self, kind: ErrorKind, status: int, message: str) -> None:
        super().__init__(f"{kind} ({status}): {message}")
        self.kind = kind
        self.status = status
        self.message = message


def classify(exc: BaseException) -> KubeError:
    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        reason = f"{exc.reason or ''} {str(exc.body or '')[:300]}".strip()
        if status == 409:
            return KubeError(ErrorKind.CONFLICT, status, reason)
        if status == 429 or status >= 500 or status == 0:
            return KubeError(ErrorKind.TRANSIENT, status, reason)
        return KubeError(ErrorKind.PERMANENT, status, reason)
    if isinstance(exc, (urllib3.exceptions.HTTPError, OSError, TimeoutError)):
        return KubeError(ErrorKind.TRANSIENT, 0, f"{type(exc).__name__}: {exc}")
    return KubeError(ErrorKind.PERMANENT, 0, f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class Observed:
    replicas: int | None
    """The replica count asked for in the spec (None when not set)."""
    ready: int


class Target(Protocol):
    def components(self) -> list[str]: ...
    def read(self) -> dict[str, Observed]: ...
    def scale(self, component: str, replicas: int) -> None: ...
    def selector(self, component: str) -> str:
        """The label selector of the component's pods ("" when unknown: no pod-level drain)."""
        ...

    def by_ordinal(self, component: str) -> bool:
        """The controller removes the highest ordinals (a StatefulSet), not the lowest deletion cost."""
        ...


def api_client(s: K8sActuatorSettings) -> k8s.ApiClient:
    if s.api_url:
        cfg = k8s.Configuration()
        cfg.host = s.api_url.rstrip("/")
        cfg.verify_ssl = s.api_verify_ssl
        if s.api_ca_file:
            cfg.ssl_ca_cert = s.api_ca_file
        if s.api_token_file:
            cfg.api_key = {"BearerToken": Path(s.api_token_file).read_text().strip()}
            cfg.api_key_prefix = {"BearerToken": "Bearer"}
    else:
        cfg = k8s.Configuration()
        if s.kubeconfig:
            _untyped(k8s_config.load_kube_config)(config_file=s.kubeconfig, client_configuration=cfg)
        else:
            _untyped(k8s_config.load_incluster_config)(client_configuration=cfg)
    cfg.retries = False  # our own backoff decides; urllib3 must not retry behind its back
    return k8s.ApiClient(cfg)


def _untyped(fn: Any) -> Callable[..., None]:
    """The kubernetes client's config loaders carry no annotations; they return nothing."""
    return cast(Callable[..., None], fn)


def _call(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except Exception as exc:
        raise classify(exc) from None


class DgdTarget:
    def __init__(self, api: k8s.ApiClient, s: K8sActuatorSettings) -> None:
        self.api = k8s.CustomObjectsApi(api)
        self.s = s
        self.overrides = parse_pairs(s.dgd_services, "dgd_services")
        self.pod_selectors = parse_pairs(s.pod_selectors, "pod_selectors")
        self._found: dict[str, str] = {}

    def _get(self) -> dict[str, Any]:
        s = self.s
        # a custom object comes back as its JSON body (the client types it as object)
        raw = _call(
            lambda: self.api.get_namespaced_custom_object(
                s.dgd_group,
                s.dgd_version,
                s.k8s_namespace,
                s.dgd_plural,
                s.dgd_name,
                _request_timeout=s.request_timeout_s,
            )
        )
        if not isinstance(raw, dict):
            raise KubeError(ErrorKind.PERMANENT, 0, f"{s.dgd_name}: not a JSON object")
        obj: dict[str, Any] = raw
        services = (obj.get("spec") or {}).get("services") or {}
        self._found = find_services(services, self.overrides)
        return obj

    def components(self) -> list[str]:
        return sorted(self._found)

    def selector(self, component: str) -> str:
        svc = self._found.get(component)
        if svc is None:
            return ""
        own = self.pod_selectors.get(component)
        return own or self.s.dgd_pod_selector.format(dgd=self.s.dgd_name, service=svc)

    def by_ordinal(self, component: str) -> bool:
        return False  # the operator renders a single-node service as a Deployment

    def read(self) -> dict[str, Observed]:
        obj = self._get()
        return {
            comp: Observed(service_replicas(obj, svc), service_ready(obj, svc, self.s.ready_fields))
            for comp, svc in self._found.items()
        }

    def scale(self, component: str, replicas: int) -> None:
        obj = self._get()
        svc = self._found.get(component)
        if svc is None:
            raise KubeError(ErrorKind.PERMANENT, 404, f"no service for {component} in {self.s.dgd_name}")
        body = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "spec": {"services": {svc: {"replicas": replicas}}},
        }
        s = self.s
        _call(
            lambda: self.api.patch_namespaced_custom_object(
                s.dgd_group,
                s.dgd_version,
                s.k8s_namespace,
                s.dgd_plural,
                s.dgd_name,
                body,
                _content_type=MERGE_PATCH,
                _request_timeout=s.request_timeout_s,
            )
        )


class ScaleTarget:
    def __init__(self, api: k8s.ApiClient, s: K8sActuatorSettings) -> None:
        self.client = api
        self.apps = k8s.AppsV1Api(api)
        self.s = s
        self.refs: dict[str, ScaleRef] = parse_scale_targets(s.scale_targets)
        self.pod_selectors = parse_pairs(s.pod_selectors, "pod_selectors")
        self._selectors: dict[str, str] = {}
        """The pod selector of each workload, as last read (the Scale's, else its matchLabels)."""

    def components(self) -> list[str]:
        return sorted(self.refs)

    def selector(self, component: str) -> str:
        return self.pod_selectors.get(component) or self._selectors.get(component, "")

    def by_ordinal(self, component: str) -> bool:
        ref = self.refs.get(component)
        return ref is not None and ref.kind == "StatefulSet"

    def _json(self, obj: Any) -> dict[str, Any]:
        # unannotated in the client; it turns model objects into plain JSON values
        to_json = cast(Callable[[Any], dict[str, Any]], self.client.sanitize_for_serialization)
        return to_json(obj)

    def _read_scale(self, ref: ScaleRef) -> dict[str, Any]:
        ns, t = self.s.k8s_namespace, self.s.request_timeout_s
        if ref.kind == "Deployment":
            obj = _call(lambda: self.apps.read_namespaced_deployment_scale(ref.name, ns, _request_timeout=t))
        else:
            obj = _call(
                lambda: self.apps.read_namespaced_stateful_set_scale(ref.name, ns, _request_timeout=t)
            )
        return self._json(obj)

    def _read_workload(self, ref: ScaleRef) -> dict[str, Any]:
        ns, t = self.s.k8s_namespace, self.s.request_timeout_s
        if ref.kind == "Deployment":
            return self._json(
                _call(lambda: self.apps.read_namespaced_deployment(ref.name, ns, _request_timeout=t))
            )
        return self._json(
            _call(lambda: self.apps.read_namespaced_stateful_set(ref.name, ns, _request_timeout=t))
        )

    def read(self) -> dict[str, Observed]:
        out: dict[str, Observed] = {}
        for comp, ref in self.refs.items():
            scale = self._read_scale(ref)
            workload = self._read_workload(ref)
            spec_replicas = (scale.get("spec") or {}).get("replicas")
            selector = (scale.get("status") or {}).get("selector")
            if not isinstance(selector, str) or not selector:
                labels = ((workload.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
                selector = selector_string(labels) if isinstance(labels, Mapping) else ""
            self._selectors[comp] = selector
            status: Mapping[str, Any] = workload.get("status") or {}
            ready = first_int(status, self.s.ready_fields) or 0
            out[comp] = Observed(spec_replicas if isinstance(spec_replicas, int) else None, ready)
        return out

    def scale(self, component: str, replicas: int) -> None:
        ref = self.refs.get(component)
        if ref is None:
            raise KubeError(ErrorKind.PERMANENT, 404, f"no scale target for {component}")
        rv = self._read_scale(ref)["metadata"]["resourceVersion"]
        body = {"metadata": {"resourceVersion": rv}, "spec": {"replicas": replicas}}
        ns, t = self.s.k8s_namespace, self.s.request_timeout_s
        if ref.kind == "Deployment":
            _call(
                lambda: self.apps.patch_namespaced_deployment_scale(
                    ref.name, ns, body, _content_type=MERGE_PATCH, _request_timeout=t
                )
            )
        else:
            _call(
                lambda: self.apps.patch_namespaced_stateful_set_scale(
                    ref.name, ns, body, _content_type=MERGE_PATCH, _request_timeout=t
                )
            )


class PodApi:
    """The two pod calls of the drain: list by label selector, merge-patch annotations."""

    def __init__(self, api: k8s.ApiClient, s: K8sActuatorSettings) -> None:
        self.core = k8s.CoreV1Api(api)
        self.s = s

    def list(self, selector: str) -> list[PodView]:
        ns, t = self.s.k8s_namespace, self.s.request_timeout_s
        # raw JSON (``_preload_content=False`` returns the urllib3 response, not a V1PodList)
        resp: Any = _call(
            lambda: self.core.list_namespaced_pod(
                ns, label_selector=selector, _request_timeout=t, _preload_content=False
            )
        )
        try:
            body = json.loads(resp.data)
        except (ValueError, AttributeError) as exc:
            raise KubeError(ErrorKind.TRANSIENT, 0, f"pod list: {exc}") from None
        return parse_pods(body)

    def annotate(self, name: str, annotations: Mapping[str, str | None]) -> None:
        """Merge-patch the pod's annotations (a None value removes the annotation)."""
        ns, t = self.s.k8s_namespace, self.s.request_timeout_s
        body = {"metadata": {"annotations": dict(annotations)}}
        _call(
            lambda: self.core.patch_namespaced_pod(
                name, ns, body, _content_type=MERGE_PATCH, _request_timeout=t, _preload_content=False
            )
        )


def make_target(api: k8s.ApiClient, s: K8sActuatorSettings) -> Target:
    return DgdTarget(api, s) if s.target == "dgd" else ScaleTarget(api, s)


async def with_retries(
    fn: Callable[[], T], s: K8sActuatorSettings, on_retry: Callable[[KubeError, float], None]
) -> T:
    """Run blocking ``fn`` in a thread; retry conflicts and transient errors with exponential
    backoff (full jitter) up to ``max_attempts``; permanent errors are raised at once."""
    for attempt in range(s.max_attempts):
        try:
            return await asyncio.to_thread(fn)
        except KubeError as exc:
            if exc.kind == ErrorKind.PERMANENT or attempt == s.max_attempts - 1:
                raise
            cap = min(s.backoff_max_s, s.backoff_base_s * (2**attempt))
            delay = cap * (0.5 + random.random() / 2)
            on_retry(exc, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")
