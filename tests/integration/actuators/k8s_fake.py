"""An HTTP fake of exactly the Kubernetes API paths the k8s actuator uses, on 127.0.0.1.

- ``GET|PATCH /apis/{group}/{version}/namespaces/{ns}/dynamographdeployments/{name}``
- ``GET /apis/apps/v1/namespaces/{ns}/{deployments|statefulsets}/{name}``
- ``GET|PATCH /apis/apps/v1/namespaces/{ns}/{deployments|statefulsets}/{name}/scale``
- ``GET /api/v1/namespaces/{ns}/pods?labelSelector=...`` (a PodList; equality ``k=v``/``k==v``,
  ``k!=v``, ``k`` and ``!k`` requirements, comma-separated) and ``GET|PATCH
  /api/v1/namespaces/{ns}/pods/{name}`` (merge patch of labels and annotations).

Pods follow the replica counts as their controllers would make them: a Deployment's (and a DGD
service's, which the Dynamo operator renders as a Deployment) are ``{name}-{hash}-{suffix}`` and on a
scale-down the ReplicaSet's ranking picks the ones to delete (not ready first, then the lowest
``controller.kubernetes.io/pod-deletion-cost``, default 0, then the newest); a StatefulSet's are
``{name}-{ordinal}`` and the highest ordinals go (it ignores the deletion cost). A deleted pod gets
``metadata.deletionTimestamp`` and stays (terminating, not counted as ready) for
``termination_grace_s`` before it vanishes; ready counts are the pods that are Ready and not
terminating. DGD pods carry the operator's labels ``nvidia.com/dynamo-graph-deployment-name`` and
``nvidia.com/dynamo-component``; workload pods the template's ``app={name}``.

PATCH must be a JSON merge patch (``application/merge-patch+json``, else 415). A ``resourceVersion``
in the patch that is not the current one gets 409 Conflict with a ``Status`` body, as the API server
does; every write increments the resourceVersion; a negative or non-integer replica count gets 422.
Ready counts follow the spec after ``ready_delay_s``. Tests can inject a status for the next
requests (``fail_next``) or a concurrent writer (``race_next_patch``), and read the request log.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}
_DGD = re.compile(r"^/apis/([^/]+)/([^/]+)/namespaces/([^/]+)/dynamographdeployments/([^/]+)$")
_APPS = re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/(deployments|statefulsets)/([^/]+?)(/scale)?$")
_PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?$")
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def status_body(code: int, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": REASONS.get(code, "Unknown"),
        "code": code,
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


@dataclass
class Replicas:
    """A replica count whose ready count catches up ``delay_s`` after each change."""

    spec: int
    ready_before: int
    changed_at: float = 0.0

    def ready(self, now: float, delay_s: float) -> int:
        return self.spec if now - self.changed_at >= delay_s else self.ready_before

    def set(self, n: int, now: float, delay_s: float) -> None:
        if n != self.spec:
            self.ready_before = self.ready(now, delay_s)
            self.spec = n
            self.changed_at = now


@dataclass
class Pod:
    """One pod of a workload (``owner``: the object's key and, for a DGD, the service)."""

    name: str
    owner: tuple[str, str, str]
    labels: dict[str, str]
    created: float
    """Wall time."""
    ready_at: float
    """Monotonic time it turns Ready."""
    ip: str
    ordinal: int = 0
    annotations: dict[str, str] = field(default_factory=dict)
    uid: str = ""
    rv: int = 0
    deleted_at: float | None = None
    """Wall time of the deletion (``deletionTimestamp``)."""
    gone_at: float = 0.0
    """Monotonic time it vanishes once deleted."""

    def ready(self, now: float) -> bool:
        return self.deleted_at is None and now >= self.ready_at

    def cost(self) -> int:
        try:
            return int(self.annotations.get(DELETION_COST, "0"))
        except ValueError:
            return 0


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_selector(text: str) -> list[tuple[str, str, str]] | None:
    """``k=v,k2!=v2,k3,!k4`` -> [(key, op, value)]; None when it is not one the fake understands."""
    out: list[tuple[str, str, str]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "!=" in part:
            k, v = part.split("!=", 1)
            out.append((k.strip(), "!=", v.strip()))
        elif "=" in part:
            k, v = part.split("==", 1) if "==" in part else part.split("=", 1)
            out.append((k.strip(), "=", v.strip()))
        elif part.startswith("!"):
            out.append((part[1:].strip(), "!", ""))
        elif " " in part or "(" in part:
            return None
        else:
            out.append((part, "exists", ""))
    return out


def matches(labels: dict[str, str], req: list[tuple[str, str, str]]) -> bool:
    for k, op, v in req:
        if op == "=" and labels.get(k) != v:
            return False
        if op == "!=" and labels.get(k) == v:
            return False
        if op == "exists" and k not in labels:
            return False
        if op == "!" and k in labels:
            return False
    return True


@dataclass
class Obj:
    kind: str
    name: str
    rv: int
    body: dict[str, Any] = field(default_factory=dict)
    replicas: dict[str, Replicas] = field(default_factory=dict)
    """DGD: per service; workloads: under the key ""."""


class FakeKube:
    def __init__(self, namespace: str = "llm", ready_delay_s: float = 0.5) -> None:
        self.namespace = namespace
        self.ready_delay_s = ready_delay_s
        self.lock = threading.Lock()
        self.rv = 100
        self.objects: dict[tuple[str, str], Obj] = {}
        self.requests: list[tuple[str, str]] = []
        self.patches: list[dict[str, Any]] = []
        self._faults: list[tuple[str, int, str]] = []
        self._races = 0
        self.rbac: Any = None
        """RBAC (k8s_rbac.Rbac: bearer token -> service account, rendered Roles): None lets every
        request through, as before."""
        self.pods: dict[str, Pod] = {}
        self.termination_grace_s = 0.0
        """How long a deleted pod stays terminating (its preStop hook and grace period)."""
        self.pod_ip: Any = None
        """Optional ``(pod name, index) -> IP``; default 10.0.x.y."""
        self._pod_seq = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # ---- setup --------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeKube:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def add_dgd(self, name: str, services: dict[str, dict[str, Any]]) -> None:
        with self.lock:
            obj = Obj("DynamoGraphDeployment", name, self._next_rv(), {"spec": {"services": services}})
            for svc, spec in services.items():
                n = int(spec.get("replicas", 1))
                obj.replicas[svc] = Replicas(spec=n, ready_before=n)
            self.objects[("dynamographdeployments", name)] = obj
            self._sync_pods(obj, ready=True)

    def add_workload(self, plural: str, name: str, replicas: int) -> None:
        with self.lock:
            obj = Obj(plural, name, self._next_rv())
            obj.replicas[""] = Replicas(spec=replicas, ready_before=replicas)
            self.objects[(plural, name)] = obj
            self._sync_pods(obj, ready=True)

    def fail_next(self, method: str, code: int, times: int = 1, path_part: str = "") -> None:
        with self.lock:
            self._faults += [(method, code, path_part)] * times

    def race_next_patch(self, times: int = 1) -> None:
        """Someone else writes the object just before the next PATCH lands (its rv goes stale)."""
        with self.lock:
            self._races += times

    def set_replicas(self, kind: str, name: str, n: int, svc: str = "") -> None:
        """An edit by someone else (kubectl scale / kubectl edit)."""
        with self.lock:
            obj = self.objects[(kind, name)]
            obj.replicas[svc].set(n, time.monotonic(), self.ready_delay_s)
            obj.rv = self._next_rv()
            self._sync_pods(obj)

    def count(self, method: str, part: str = "") -> int:
        return sum(1 for m, p in self.requests if m == method and part in p)

    # ---- rendering ----------------------------------------------------------------------------
    def _meta(self, obj: Obj) -> dict[str, Any]:
        return {
            "name": obj.name,
            "namespace": self.namespace,
            "resourceVersion": str(obj.rv),
            "generation": 1,
        }

    def _render_dgd(self, obj: Obj, group: str, version: str) -> dict[str, Any]:
        now = time.monotonic()
        services = json.loads(json.dumps(obj.body["spec"]["services"]))
        status: dict[str, Any] = {}
        for svc, r in obj.replicas.items():
            services[svc]["replicas"] = r.spec
            ready = self._ready_pods(obj, svc, now)
            status[svc] = {
                "componentKind": "Deployment",
                "componentName": f"{obj.name}-{svc.lower()}",
                "replicas": r.spec,
                "updatedReplicas": r.spec,
                "readyReplicas": ready,
                "availableReplicas": ready,
            }
        return {
            "apiVersion": f"{group}/{version}",
            "kind": "DynamoGraphDeployment",
            "metadata": self._meta(obj),
            "spec": {**obj.body["spec"], "services": services},
            "status": {"state": "successful", "services": status},
        }

    def _render_workload(self, obj: Obj) -> dict[str, Any]:
        r = obj.replicas[""]
        ready = self._ready_pods(obj, "", time.monotonic())
        labels = {"app": obj.name}
        spec: dict[str, Any] = {
            "replicas": r.spec,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "w", "image": "w"}]},
            },
        }
        if obj.kind == "statefulsets":
            spec["serviceName"] = obj.name
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment" if obj.kind == "deployments" else "StatefulSet",
            "metadata": self._meta(obj),
            "spec": spec,
            "status": {
                "replicas": r.spec,
                "updatedReplicas": r.spec,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "observedGeneration": 1,
            },
        }

    def _render_scale(self, obj: Obj) -> dict[str, Any]:
        r = obj.replicas[""]
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": self._meta(obj),
            "spec": {"replicas": r.spec},
            "status": {"replicas": r.spec, "selector": f"app={obj.name}"},
        }

    # ---- request handling -----------------------------------------------------------------------
    def handle(self, method: str, path: str, ctype: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        path, _, query = path.partition("?")
        with self.lock:
            self.requests.append((method, path))
            for i, (m, code, part) in enumerate(self._faults):
                if m == method and part in path:
                    del self._faults[i]
                    return code, status_body(code, f"injected {code}")
            if (mp := _PODS.match(path)) is not None:
                return self._handle_pods(method, mp.group(1), mp.group(2), query, ctype, raw)
            if (m := _DGD.match(path)) is not None:
                group, version, ns, name = m.groups()
                key, sub = ("dynamographdeployments", name), None
            elif (m2 := _APPS.match(path)) is not None:
                group, version = "apps", "v1"
                ns, plural, name, sub = m2.groups()
                key = (plural, name)
            else:
                return 404, status_body(404, f"the server could not find the requested resource {path}")
            obj = self.objects.get(key)
            if ns != self.namespace or obj is None:
                return 404, status_body(404, f'{key[0]} "{key[1]}" not found')
            if method == "GET":
                return 200, self._render(obj, group, version, sub)
            if method != "PATCH" or (key[0] != "dynamographdeployments" and sub is None):
                return 405, status_body(405, "method not allowed")
            patch, refused = self._merge_patch(ctype, raw)
            if refused is not None:
                return refused
            if self._races:
                self._races -= 1
                obj.rv = self._next_rv()
            want_rv = (patch.get("metadata") or {}).get("resourceVersion")
            if want_rv is not None and str(want_rv) != str(obj.rv):
                return 409, status_body(
                    409,
                    f'Operation cannot be fulfilled on {key[0]} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                )
            return self._apply(obj, patch, group, version, sub)

    def _merge_patch(self, ctype: str, raw: bytes) -> tuple[Any, tuple[int, dict[str, Any]] | None]:
        """The patch body (recorded in ``patches``), or the API server's refusal: 415 for another
        patch type, 400 for a body that is not JSON."""
        if ctype.split(";")[0].strip() != "application/merge-patch+json":
            return None, (415, status_body(415, f"unsupported patch type {ctype}"))
        try:
            patch = json.loads(raw or b"{}")
        except ValueError:
            return None, (400, status_body(400, "invalid JSON"))
        self.patches.append(patch)
        return patch, None

    def _render(self, obj: Obj, group: str, version: str, sub: str | None) -> dict[str, Any]:
        if obj.kind == "DynamoGraphDeployment":
            return self._render_dgd(obj, group, version)
        return self._render_scale(obj) if sub else self._render_workload(obj)

    def _apply(
        self, obj: Obj, patch: dict[str, Any], group: str, version: str, sub: str | None
    ) -> tuple[int, dict[str, Any]]:
        now = time.monotonic()
        if obj.kind == "DynamoGraphDeployment":
            new = merge_patch({"spec": obj.body["spec"]}, {"spec": patch.get("spec") or {}})
            services = new["spec"].get("services") or {}
            for svc, spec in services.items():
                n = spec.get("replicas", 1)
                if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                    return 422, status_body(422, f"spec.services.{svc}.replicas: Invalid value: {n!r}")
            for svc, spec in services.items():
                if svc in obj.replicas:
                    obj.replicas[svc].set(spec.get("replicas", 1), now, self.ready_delay_s)
                else:
                    obj.replicas[svc] = Replicas(spec=spec.get("replicas", 1), ready_before=0, changed_at=now)
            obj.body["spec"] = new["spec"]
        else:
            n = (patch.get("spec") or {}).get("replicas")
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                return 422, status_body(422, f"spec.replicas: Invalid value: {n!r}")
            obj.replicas[""].set(n, now, self.ready_delay_s)
        obj.rv = self._next_rv()
        self._sync_pods(obj)
        return 200, self._render(obj, group, version, sub)

    # ---- pods (what the controllers of the workloads would do) ----------------------------------
    def _pod_owner_labels(self, obj: Obj, svc: str) -> dict[str, str]:
        if obj.kind == "DynamoGraphDeployment":
            return {
                "nvidia.com/dynamo-graph-deployment-name": obj.name,
                "nvidia.com/dynamo-component": svc,
            }
        return {"app": obj.name}

    def _owned(self, obj: Obj, svc: str) -> list[Pod]:
        key = (obj.kind, obj.name, svc)
        return [p for p in self.pods.values() if p.owner == key]

    def _ready_pods(self, obj: Obj, svc: str, now: float) -> int:
        self._expire(now)
        return sum(1 for p in self._owned(obj, svc) if p.ready(now))

    def _expire(self, now: float) -> None:
        for name in [n for n, p in self.pods.items() if p.deleted_at is not None and now >= p.gone_at]:
            del self.pods[name]

    def _sync_pods(self, obj: Obj, ready: bool = False) -> None:
        """Create or delete pods until each replica count is met (called under the lock)."""
        now, wall = time.monotonic(), time.time()
        self._expire(now)
        for svc, r in obj.replicas.items():
            live = [p for p in self._owned(obj, svc) if p.deleted_at is None]
            if len(live) < r.spec:
                ordinals = {p.ordinal for p in self._owned(obj, svc)}
                for _ in range(r.spec - len(live)):
                    seq = next(self._pod_seq)
                    ordinal = next(k for k in itertools.count() if k not in ordinals)
                    ordinals.add(ordinal)
                    base = obj.name if not svc else f"{obj.name}-{svc.lower()}"
                    name = f"{base}-{ordinal}" if obj.kind == "statefulsets" else f"{base}-7d9f8-{seq:05x}"
                    ip = self.pod_ip(name, seq) if self.pod_ip else f"10.0.{seq // 250}.{seq % 250 + 1}"
                    self.pods[name] = Pod(
                        name=name,
                        owner=(obj.kind, obj.name, svc),
                        labels=self._pod_owner_labels(obj, svc),
                        created=wall + seq * 1e-6,
                        ready_at=now if ready else now + self.ready_delay_s,
                        ip=ip,
                        ordinal=ordinal,
                        uid=f"uid-{seq}",
                        rv=self._next_rv(),
                    )
            elif len(live) > r.spec:
                if obj.kind == "statefulsets":
                    order = sorted(live, key=lambda p: -p.ordinal)
                else:  # the ReplicaSet's ranking: not ready, lowest deletion cost, newest
                    order = sorted(live, key=lambda p: (p.ready(now), p.cost(), -p.created))
                for p in order[: len(live) - r.spec]:
                    p.deleted_at = wall
                    p.gone_at = now + self.termination_grace_s
                    p.rv = self._next_rv()
        self._expire(now)

    def _render_pod(self, p: Pod, now: float) -> dict[str, Any]:
        kind = {"deployments": "ReplicaSet", "statefulsets": "StatefulSet"}.get(p.owner[0], "ReplicaSet")
        meta: dict[str, Any] = {
            "name": p.name,
            "namespace": self.namespace,
            "uid": p.uid,
            "resourceVersion": str(p.rv),
            "creationTimestamp": _rfc3339(p.created),
            "labels": dict(p.labels),
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": kind, "name": p.owner[1], "controller": True}
            ],
        }
        if p.annotations:
            meta["annotations"] = dict(p.annotations)
        if p.deleted_at is not None:
            meta["deletionTimestamp"] = _rfc3339(p.deleted_at + self.termination_grace_s)
            meta["deletionGracePeriodSeconds"] = int(self.termination_grace_s)
        ready = p.ready(now)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {
                "nodeName": "node-1",
                "containers": [{"name": "engine", "image": "engine"}],
                "terminationGracePeriodSeconds": int(self.termination_grace_s),
            },
            "status": {
                "phase": "Running",
                "podIP": p.ip,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }

    def _handle_pods(
        self, method: str, ns: str, name: str | None, query: str, ctype: str, raw: bytes
    ) -> tuple[int, dict[str, Any]]:
        now = time.monotonic()
        self._expire(now)
        if name is None:
            if method != "GET":
                return 405, status_body(405, "method not allowed")
            sel = parse_selector((parse_qs(query).get("labelSelector") or [""])[0])
            if sel is None:
                return 400, status_body(400, "unable to parse requirement")
            items = [
                self._render_pod(p, now)
                for p in sorted(self.pods.values(), key=lambda p: p.name)
                if ns == self.namespace and matches(p.labels, sel)
            ]
            return 200, {
                "apiVersion": "v1",
                "kind": "PodList",
                "metadata": {"resourceVersion": str(self.rv)},
                "items": items,
            }
        pod = self.pods.get(name)
        if ns != self.namespace or pod is None:
            return 404, status_body(404, f'pods "{name}" not found')
        if method == "GET":
            return 200, self._render_pod(pod, now)
        if method != "PATCH":
            return 405, status_body(405, "method not allowed")
        patch, refused = self._merge_patch(ctype, raw)
        if refused is not None:
            return refused
        meta = patch.get("metadata") or {} if isinstance(patch, dict) else {}
        want_rv = meta.get("resourceVersion")
        if want_rv is not None and str(want_rv) != str(pod.rv):
            return 409, status_body(
                409, f'Operation cannot be fulfilled on pods "{name}": the object has been modified'
            )
        ann = merge_patch(pod.annotations, meta.get("annotations") or {})
        labels = merge_patch(pod.labels, meta.get("labels") or {})
        bad = [k for k, v in {**ann, **labels}.items() if not isinstance(v, str)]
        if bad:
            return 422, status_body(422, f"metadata: Invalid value: {bad!r} must be strings")
        pod.annotations, pod.labels = ann, labels
        pod.rv = self._next_rv()
        return 200, self._render_pod(pod, now)

    def pods_of(self, name: str, svc: str = "", terminating: bool | None = None) -> list[str]:
        """Names of the pods of object ``name`` (a DGD: of its service ``svc``); ``terminating``:
        only those, none of those, or all (None)."""
        with self.lock:
            self._expire(time.monotonic())
            return sorted(
                p.name
                for p in self.pods.values()
                if p.owner[1:] == (name, svc)
                and (terminating is None or (p.deleted_at is not None) == terminating)
            )

    def pod(self, name: str) -> Pod | None:
        with self.lock:
            self._expire(time.monotonic())
            return self.pods.get(name)

    def set_pod(self, name: str, ip: str | None = None, annotations: dict[str, str] | None = None) -> None:
        """Test setup: a pod's IP or annotations as its spec/template would give them."""
        with self.lock:
            p = self.pods[name]
            if ip is not None:
                p.ip = ip
            if annotations:
                p.annotations.update(annotations)
            p.rv = self._next_rv()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                refused = None
                if fake.rbac is not None:  # the RBAC authorizer runs before the request is served
                    refused = fake.rbac.check(method, self.path, self.headers.get("Authorization", ""))
                if refused is not None:
                    code, body = refused
                else:
                    code, body = fake.handle(method, self.path, self.headers.get("Content-Type", ""), raw)
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_PATCH(self) -> None:
                self._serve("PATCH")

            def do_PUT(self) -> None:
                self._serve("PUT")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_DELETE(self) -> None:
                self._serve("DELETE")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
