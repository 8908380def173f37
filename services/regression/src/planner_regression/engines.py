"""The engine registry as the regression service sees it: a mirror of ``planner_engines`` kept by a
KV watch (capabilities, ``started_at_s`` for cold-start exclusion, ``draining``)."""

from __future__ import annotations

from planner_proto import DecodeError, EngineInfo, decode

DELETE_OPS = ("DEL", "PURGE")


class EngineRegistry:
    def __init__(self, namespace: str) -> None:
        self._prefix = f"{namespace}."
        self._by_key: dict[str, EngineInfo] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def apply(self, key: str, value: bytes | None, operation: str | None) -> None:
        """One watch update. Raises DecodeError for a value that is not an EngineInfo (the key is
        then forgotten: better no capabilities than stale ones)."""
        if not key.startswith(self._prefix):
            return
        if operation in DELETE_OPS or not value:
            self._by_key.pop(key, None)
            return
        try:
            self._by_key[key] = decode(value, EngineInfo)
        except DecodeError:
            self._by_key.pop(key, None)
            raise

    def get(self, key: str) -> EngineInfo | None:
        return self._by_key.get(key)
