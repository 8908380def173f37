"""An HTTP fake of exactly the Kubernetes API paths the k8s actuator uses, on 127.0.0.1.

- ``GET|PATCH /apis/{group}/{version}/namespaces/{ns}/dynamographdeployments/{name}``
- ``GET /apis/apps/v1/namespaces/{ns}/{deployments|statefulsets}/{name}``
- ``GET|PATCH /apis/apps/v1/namespaces/{ns}/{deployments|statefulsets}/{name}/scale``

PATCH must be a JSON merge patch (``application/merge-patch+json``, else 415). A ``resourceVersion``
in the patch that is not the current one gets 409 Conflict with a ``Status`` body, as the API server
does; every write increments the resourceVersion; a negative or non-integer replica count gets 422.
Ready counts follow the spec after ``ready_delay_s``. Tests can inject a status for the next
requests (``fail_next``) or a concurrent writer (``race_next_patch``), and read the request log.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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

    def add_workload(self, plural: str, name: str, replicas: int) -> None:
        with self.lock:
            obj = Obj(plural, name, self._next_rv())
            obj.replicas[""] = Replicas(spec=replicas, ready_before=replicas)
            self.objects[(plural, name)] = obj

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
            ready = r.ready(now, self.ready_delay_s)
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
        ready = r.ready(time.monotonic(), self.ready_delay_s)
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
        with self.lock:
            self.requests.append((method, path))
            for i, (m, code, part) in enumerate(self._faults):
                if m == method and part in path:
                    del self._faults[i]
                    return code, status_body(code, f"injected {code}")
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
            if ctype.split(";")[0].strip() != "application/merge-patch+json":
                return 415, status_body(415, f"unsupported patch type {ctype}")
            try:
                patch = json.loads(raw or b"{}")
            except ValueError:
                return 400, status_body(400, "invalid JSON")
            self.patches.append(patch)
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
        return 200, self._render(obj, group, version, sub)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                path = self.path.split("?")[0]
                code, body = fake.handle(method, path, self.headers.get("Content-Type", ""), raw)
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
