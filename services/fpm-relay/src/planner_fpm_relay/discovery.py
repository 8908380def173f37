"""Engines found on Kubernetes without a static list: the pods of the scaled workloads, by label
selector, each one a scrape target (or an FPM source) on its pod IP.

``pod_discovery`` items are ``COMPONENT:KIND:SELECTOR``, e.g. ``decode:vllm:app=decode-worker`` or,
for a DGD service, ``prefill:vllm:nvidia.com/dynamo-graph-deployment-name=llm-disagg,
nvidia.com/dynamo-component=pf``. KIND is a scrape kind (vllm, sglang, trtllm, llamacpp; scraped at
``http://<pod IP>:<port><path>``) or ``fpm`` (an engine publishing ForwardPassMetrics on
``tcp://<pod IP>:<fpm port>``). The port and path come from the settings, or from the pod's
``prometheus.io/port`` and ``prometheus.io/path`` annotations when it has them.

Only pods that serve are targets (``PodView.serving``, :mod:`planner_runtime.kubepods` reads the pods
for actuator-k8s too): phase Running, condition Ready, no ``deletionTimestamp``, an IP. A
pod that is deleted, stops being ready or leaves the selector stops being scraped at the next list.
The worker id is the pod name (what actuator-k8s ties the pod's load to); a name that is not a subject
token (a dot in it) has its other characters replaced by ``-``.

The selection (:func:`parse_pod_sources`, :func:`targets_from_pods`) is pure; :class:`PodLister`
is the one API call (``GET /api/v1/namespaces/{ns}/pods?labelSelector=...``), with the in-cluster
service account by default, or an API URL (``kubectl proxy``) with an optional token and CA file.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from planner_fpm_relay.targets import SCRAPE_KINDS, EngineTarget
from planner_proto import Component
from planner_runtime.kubepods import PodView, parse_pods

FPM_KIND = "fpm"
PORT_ANNOTATION = "prometheus.io/port"
PATH_ANNOTATION = "prometheus.io/path"
IN_CLUSTER = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_NOT_TOKEN = re.compile(r"[^A-Za-z0-9_\-]")


@dataclass(frozen=True)
class PodSource:
    component: str
    kind: str
    selector: str


def parse_pod_sources(items: Iterable[str]) -> list[PodSource]:
    out: list[PodSource] = []
    for item in items:
        comp, kind, selector = [*item.split(":", 2), "", ""][:3]
        if comp not in {c.value for c in Component}:
            raise ValueError(f"pod_discovery {item!r}: component must be one of prefill, decode, agg")
        if kind not in (*SCRAPE_KINDS, FPM_KIND):
            raise ValueError(
                f"pod_discovery {item!r}: kind must be one of {', '.join((*SCRAPE_KINDS, FPM_KIND))}"
            )
        if not selector.strip():
            raise ValueError(f"pod_discovery {item!r}: expected COMPONENT:KIND:LABEL_SELECTOR")
        out.append(PodSource(comp, kind, selector.strip()))
    return out


def worker_id_of(pod_name: str) -> str:
    return _NOT_TOKEN.sub("-", pod_name)[:253]


def targets_from_pods(
    pods: Iterable[PodView], source: PodSource, metrics_port: int, metrics_path: str, fpm_port: int
) -> dict[str, EngineTarget]:
    """The engine targets of one source's pods, by target key (``component.worker_id``)."""
    out: dict[str, EngineTarget] = {}
    for pod in pods:
        if not pod.serving or not pod.name:
            continue
        host = f"[{pod.ip}]" if ":" in pod.ip else pod.ip
        ann = pod.annotations
        wid = worker_id_of(pod.name)
        if source.kind == FPM_KIND:
            target = EngineTarget(
                component=source.component, worker_id=wid, zmq_endpoint=f"tcp://{host}:{fpm_port}"
            )
        else:
            port_text = ann.get(PORT_ANNOTATION, "")
            port = int(port_text) if port_text.isdigit() and 0 < int(port_text) < 65536 else metrics_port
            path = ann.get(PATH_ANNOTATION) or metrics_path
            path = path if path.startswith("/") else f"/{path}"
            target = EngineTarget(
                component=source.component,
                worker_id=wid,
                metrics_url=f"http://{host}:{port}{path}",
                engine_kind=source.kind,
            )
        out[target.key] = target
    return out


class PodListError(Exception):
    pass


class PodLister:
    """``GET /api/v1/namespaces/{ns}/pods?labelSelector=...`` (blocking: call it in a thread)."""

    def __init__(
        self,
        namespace: str,
        api_url: str = "",
        token_file: str = "",
        ca_file: str = "",
        verify_ssl: bool = True,
        timeout_s: float = 10.0,
    ) -> None:
        if not api_url:  # in-cluster: the service account the pod runs as
            host, port = (
                os.environ.get("KUBERNETES_SERVICE_HOST", ""),
                os.environ.get("KUBERNETES_SERVICE_PORT", ""),
            )
            if not host:
                raise PodListError("not in a cluster (no KUBERNETES_SERVICE_HOST): set k8s_api_url")
            host = f"[{host}]" if ":" in host else host
            api_url = f"https://{host}:{port or 443}"
            token_file = token_file or str(IN_CLUSTER / "token")
            ca_file = ca_file or str(IN_CLUSTER / "ca.crt")
        self.base = api_url.rstrip("/")
        self.namespace = namespace
        self.token_file = token_file
        self.timeout_s = timeout_s
        self.ctx: ssl.SSLContext | None = None
        if self.base.startswith("https://"):
            self.ctx = ssl.create_default_context(cafile=ca_file or None)
            if not verify_ssl:
                self.ctx.check_hostname = False
                self.ctx.verify_mode = ssl.CERT_NONE

    def list(self, selector: str) -> list[PodView]:
        url = f"{self.base}/api/v1/namespaces/{quote(self.namespace)}/pods?labelSelector={quote(selector, safe='')}"
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self.token_file:
            # re-read each time: projected service-account tokens are rotated
            req.add_header("Authorization", f"Bearer {Path(self.token_file).read_text().strip()}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self.ctx) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise PodListError(f"{exc.code} listing pods ({selector}): {exc.read()[:200]!r}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise PodListError(f"listing pods ({selector}): {exc}") from None
        return parse_pods(body)
