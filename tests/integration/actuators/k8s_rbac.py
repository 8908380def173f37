"""RBAC for the Kubernetes API fake (k8s_fake.py): bearer tokens name service accounts, and the
Roles / RoleBindings of rendered manifests decide what each may do, as the API server's RBAC
authorizer does for namespaced resources.

A request's attributes come from its path: ``/apis/{group}/{version}/namespaces/{ns}/{resource}``
``[/{name}[/{subresource}]]`` or ``/api/v1/namespaces/{ns}/...`` (the core group ""); its verb from
the method (GET with a name: get, without: list, or watch with ``watch=true``; PATCH: patch; PUT:
update; POST: create; DELETE: delete, or deletecollection without a name). A RoleBinding in namespace
N grants its Role's rules in N to its ServiceAccount subjects. A rule matches when its apiGroups,
resources (``resource/subresource`` for a subresource), verbs and resourceNames (empty: any) all
do. No token or an unknown one: 401 Unauthorized; otherwise not allowed: 403 Forbidden with the
API server's message and ``Status`` body.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

_PATH = re.compile(
    r"^/(?:apis/(?P<group>[^/]+)/[^/]+|api/v1)/namespaces/(?P<ns>[^/]+)/(?P<res>[^/]+)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


@dataclass(frozen=True)
class Attributes:
    verb: str
    group: str
    namespace: str
    resource: str
    subresource: str
    name: str


def attributes(method: str, raw_path: str) -> Attributes | None:
    """The RBAC attributes of a request to a namespaced resource (None: not such a path)."""
    parts = urlsplit(raw_path)
    m = _PATH.match(parts.path)
    if m is None:
        return None
    name = m["name"] or ""
    query = parse_qs(parts.query)
    if method == "GET":
        verb = "get" if name else ("watch" if query.get("watch") == ["true"] else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"PATCH": "patch", "PUT": "update", "POST": "create"}.get(method, method.lower())
    return Attributes(verb, m["group"] or "", m["ns"], m["res"], m["sub"] or "", name)


def _allows(rule: dict[str, Any], a: Attributes) -> bool:
    resource = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
    names = rule.get("resourceNames") or []
    return (
        bool({a.group, "*"} & set(rule.get("apiGroups") or []))
        and bool({resource, "*"} & set(rule.get("resources") or []))
        and bool({a.verb, "*"} & set(rule.get("verbs") or []))
        and (not names or a.name in names)
    )


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


@dataclass
class Rbac:
    """The rules of ``docs`` (rendered manifests: Roles and RoleBindings; other kinds ignored) for
    the service accounts of ``tokens`` (bearer token -> ``(namespace, name)`` of the account)."""

    docs: list[dict[str, Any]]
    tokens: dict[str, tuple[str, str]]
    denied: list[tuple[str, Attributes]] = field(default_factory=list)
    """(user, attributes) of every request refused with 403."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def rules_for(self, sa_ns: str, sa_name: str, namespace: str) -> list[dict[str, Any]]:
        roles = {
            d["metadata"]["name"]: d
            for d in self.docs
            if d.get("kind") == "Role" and d["metadata"].get("namespace") == namespace
        }
        out: list[dict[str, Any]] = []
        for b in self.docs:
            if b.get("kind") != "RoleBinding" or b["metadata"].get("namespace") != namespace:
                continue
            ref = b.get("roleRef") or {}
            if ref.get("kind") != "Role" or ref.get("name") not in roles:
                continue  # ClusterRoles are not granted by this fake (the planner uses none)
            for s in b.get("subjects") or []:
                if s.get("kind") == "ServiceAccount" and (s.get("namespace"), s.get("name")) == (
                    sa_ns,
                    sa_name,
                ):
                    out += roles[ref["name"]].get("rules") or []
        return out

    def check(self, method: str, raw_path: str, authorization: str) -> tuple[int, dict[str, Any]] | None:
        """None when the request may go on; else the (code, Status body) to answer with."""
        token = authorization.removeprefix("Bearer ").strip() if authorization.startswith("Bearer ") else ""
        who = self.tokens.get(token)
        if who is None:
            return 401, status(401, "Unauthorized", "Unauthorized")
        a = attributes(method, raw_path)
        if a is None:
            return None  # discovery and other non-resource paths: not ours to judge
        if any(_allows(r, a) for r in self.rules_for(*who, a.namespace)):
            return None
        user = f"system:serviceaccount:{who[0]}:{who[1]}"
        resource = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
        qualified = f"{a.resource}.{a.group}" if a.group else a.resource
        subject = f'{qualified} "{a.name}"' if a.name else qualified
        message = (
            f'{subject} is forbidden: User "{user}" cannot {a.verb} resource "{resource}" '
            f'in API group "{a.group}" in the namespace "{a.namespace}"'
        )
        with self._lock:
            self.denied.append((user, a))
        details: dict[str, Any] = {"group": a.group, "kind": a.resource}
        if a.name:
            details["name"] = a.name
        return 403, status(403, "Forbidden", message, details)
