"""Which engine gets the next request: least outstanding requests among routable engines (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner_proto import EngineInfo


def http_base_url(info: EngineInfo) -> str:
    """Where an engine serves OpenAI-compatible HTTP: a stock engine (llama-server, vLLM, SGLang) serves
    it on the port of its ``/metrics``; "" for an engine registered without one."""
    url = info.metrics_url
    return url.removesuffix("/metrics") if url.endswith("/metrics") else ""


@dataclass(slots=True)
class EngineEntry:
    info: EngineInfo
    seen_s: float
    """When the registry last showed this key (monotonic seconds)."""
    outstanding: int = 0
    last_pick: int = 0
    """Pick counter at its last selection: ties go to the engine picked least recently."""


class EngineTable:
    """The engines of one namespace as seen in ``planner_engines``, with this router's load on them.
    ``target`` says how requests reach an engine (its NATS subject, or its HTTP address): an engine
    without one is not routable."""

    def __init__(self, ttl_s: float, target: Literal["nats", "openai"] = "nats") -> None:
        self.ttl_s = ttl_s
        self.target = target
        self.entries: dict[str, EngineEntry] = {}
        self._picks = 0

    def upsert(self, key: str, info: EngineInfo, now_s: float) -> None:
        entry = self.entries.get(key)
        if entry is None:
            self.entries[key] = EngineEntry(info, now_s)
        else:
            entry.info = info
            entry.seen_s = now_s

    def remove(self, key: str) -> None:
        self.entries.pop(key, None)

    def prune(self, now_s: float) -> list[str]:
        """Forget keys not refreshed within the bucket TTL (expiry sends no delete to watchers)."""
        gone = [k for k, e in self.entries.items() if now_s - e.seen_s > self.ttl_s]
        for k in gone:
            del self.entries[k]
        return gone

    def routable(self, component: str) -> list[tuple[str, EngineEntry]]:
        return [
            (k, e)
            for k, e in self.entries.items()
            if e.info.component == component and not e.info.draining and self._reachable(e.info)
        ]

    def _reachable(self, info: EngineInfo) -> bool:
        return bool(info.request_subject if self.target == "nats" else http_base_url(info))

    def count(self, component: str) -> int:
        return len(self.routable(component))

    def choose(self, component: str, exclude: frozenset[str] | set[str] = frozenset()) -> str | None:
        """Key of the routable ``component`` engine with the fewest outstanding requests, skipping
        ``exclude`` unless nothing else is left; None when there is none."""
        cands = self.routable(component)
        if not cands:
            return None
        preferred = [c for c in cands if c[0] not in exclude] or cands
        key, entry = min(preferred, key=lambda c: (c[1].outstanding, c[1].last_pick, c[0]))
        self._picks += 1
        entry.last_pick = self._picks
        return key

    def acquire(self, key: str) -> None:
        entry = self.entries.get(key)
        if entry is not None:
            entry.outstanding += 1

    def release(self, key: str) -> None:
        entry = self.entries.get(key)
        if entry is not None and entry.outstanding > 0:
            entry.outstanding -= 1

    def subject(self, key: str) -> str:
        return self.entries[key].info.request_subject

    def base_url(self, key: str) -> str:
        return http_base_url(self.entries[key].info)

    def worker_key(self, worker_id: str) -> str | None:
        for k, e in self.entries.items():
            if e.info.worker_id == worker_id:
                return k
        return None


def pick_mode(mode: str, table: EngineTable) -> str:
    """``agg`` or ``disagg`` for the next request."""
    if mode != "auto":
        return mode
    return "disagg" if table.count("prefill") and table.count("decode") else "agg"
