"""Pure choices about the pods of a scaled workload: which pods a scale-down removes, what they are
annotated with, which engines run in them, and how many are still going away. No I/O. (A pod's JSON
is read by :mod:`planner_runtime.kubepods`, which the relay's pod discovery shares.)

**Pod <-> engine mapping.** An engine (an ``EngineInfo`` in ``planner_engines``, or a worker of a
ComponentSnapshot) belongs to a pod when its ``worker_id`` is the pod's name (what the relay's pod
discovery and a sidecar started with ``--worker-id $(POD_NAME)`` register), or else when the host of
its ``metrics_url`` or ``zmq_endpoint`` is the pod's IP (an engine registered by address). A pod's
load is the sum of its engines' in-flight requests (running + waiting, from the newest
ComponentSnapshot); a pod with no known engine counts as idle (0).

**Which pods go.** The order follows the ReplicaSet controller's own ranking so that the pods we
mark are the ones it removes: pods we marked before and that still run first (a re-sent drain
reuses them), then unscheduled, then Pending before Unknown before Running, not ready before ready,
then (where the controller looks at ``controller.kubernetes.io/pod-deletion-cost``) the least
loaded, then the newest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from planner_runtime.kubepods import PodView

COST_STEP = 1000
INT32_MIN = -(2**31)
_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def going_away(pods: Iterable[PodView], replicas: int) -> int:
    """Pods of the workload still holding their resources beyond the ``replicas`` asked for: the
    terminating ones, plus live ones above the count that the controller has not deleted yet (the
    moment between our write and its reaction)."""
    live = [p for p in pods if p.live or p.deleting]
    terminating = sum(1 for p in live if p.deleting)
    extra = max(0, sum(1 for p in live if not p.deleting) - replicas)
    return terminating + extra


def host_of(url: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


@dataclass(frozen=True)
class EngineRef:
    """The parts of an engine's registry entry that tie it to a pod."""

    worker_id: str
    metrics_url: str = ""
    zmq_endpoint: str = ""


def engines_by_pod(pods: Iterable[PodView], engines: Iterable[EngineRef]) -> dict[str, list[str]]:
    """pod name -> the worker ids of the engines running in it (see the module doc for the rule)."""
    by_name: dict[str, PodView] = {}
    by_ip: dict[str, str] = {}
    for p in pods:
        by_name[p.name] = p
        if p.ip:
            by_ip[p.ip] = p.name
    out: dict[str, list[str]] = {}
    for e in engines:
        pod = e.worker_id if e.worker_id in by_name else ""
        if not pod:
            for url in (e.metrics_url, e.zmq_endpoint):
                pod = by_ip.get(host_of(url), "")
                if pod:
                    break
        if pod:
            out.setdefault(pod, []).append(e.worker_id)
    return out


def pod_loads(
    pods: Iterable[PodView], engines: Mapping[str, Sequence[str]], worker_load: Mapping[str, int]
) -> dict[str, int]:
    """pod name -> in-flight requests: its engines' loads summed, else a worker named like the pod."""
    out: dict[str, int] = {}
    for p in pods:
        ids = engines.get(p.name) or [p.name]
        out[p.name] = sum(worker_load.get(w, 0) for w in ids)
    return out


def ordinal(name: str) -> int:
    """A StatefulSet pod's ordinal (``web-3`` -> 3; -1 when the name has none)."""
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def pick_pods(
    pods: Iterable[PodView], count: int, load: Mapping[str, int], by_ordinal: bool = False
) -> list[PodView]:
    """The ``count`` pods a scale-down should remove (order in the module doc). Terminating and
    finished pods are not candidates. ``by_ordinal``: a StatefulSet, which removes its highest
    ordinals whatever their cost: those are the ones going, so they are the ones drained."""
    candidates = [p for p in pods if p.live and not p.deleting]
    if by_ordinal:
        return sorted(candidates, key=lambda p: ordinal(p.name), reverse=True)[: max(0, count)]
    # newest first as the last tie-break, then a stable sort on the ranked keys
    candidates.sort(key=lambda p: (p.created, p.name), reverse=True)
    candidates.sort(
        key=lambda p: (
            not p.marked,
            bool(p.node),
            _PHASE_RANK.get(p.phase, 1),
            p.ready,
            load.get(p.name, 0),
        )
    )
    return candidates[: max(0, count)]


def victim_cost(others: Iterable[PodView]) -> int:
    """A deletion cost below every pod that stays (so the controller takes ours first), int32."""
    lowest = min((p.cost for p in others), default=0)
    return max(INT32_MIN, min(0, lowest) - COST_STEP)
