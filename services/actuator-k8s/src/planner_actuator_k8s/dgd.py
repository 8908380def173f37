"""Pure reading of a DynamoGraphDeployment: which service is prefill/decode, and how many are ready."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LEGACY_NAMES: dict[str, tuple[str, ...]] = {
    "prefill": ("VllmPrefillWorker", "TRTLLMPrefillWorker", "prefill"),
    "decode": ("VllmDecodeWorker", "TRTLLMDecodeWorker", "decode"),
}


def find_services(services: Mapping[str, Any], overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """component -> service name: explicit overrides, then ``subComponentType``, then legacy names.

    Two services claiming the same subComponentType is ambiguous: neither is picked (the operator
    must say which with an override) rather than scaling the wrong one.
    """
    found: dict[str, str] = {}
    claims: dict[str, list[str]] = {}
    for svc, spec in services.items():
        if isinstance(spec, Mapping):
            sub = spec.get("subComponentType")
            if isinstance(sub, str) and sub:
                claims.setdefault(sub, []).append(svc)
    for comp, svcs in claims.items():
        if len(svcs) == 1:
            found[comp] = svcs[0]
    for comp, names in LEGACY_NAMES.items():
        if comp in found or comp in claims:
            continue
        for name in names:
            if name in services:
                found[comp] = name
                break
    for comp, svc in (overrides or {}).items():
        if svc in services:
            found[comp] = svc
    return found


def first_int(obj: Mapping[str, Any] | None, fields: list[str]) -> int | None:
    """The first of ``fields`` present in ``obj`` as an integer (status fields are often absent at 0)."""
    if not isinstance(obj, Mapping):
        return None
    for f in fields:
        v = obj.get(f)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def service_ready(obj: Mapping[str, Any], svc: str, fields: list[str]) -> int:
    status = obj.get("status") or {}
    services = status.get("services") or {} if isinstance(status, Mapping) else {}
    return first_int(services.get(svc) if isinstance(services, Mapping) else None, fields) or 0


def service_replicas(obj: Mapping[str, Any], svc: str) -> int | None:
    spec = ((obj.get("spec") or {}).get("services") or {}).get(svc) or {}
    v = spec.get("replicas") if isinstance(spec, Mapping) else None
    return v if isinstance(v, int) else None
