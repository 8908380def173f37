"""What a service learned, kept in KV ``planner_state`` across restarts and takeovers: the checks on
a saved entry that every such service makes the same way.

A saved entry carries its format ``version``, the ``namespace`` it was learned in and when it was
saved (``saved_at_s``). :func:`check_saved` decodes one and says why it is refused (an entry that does
not decode, another version or namespace, older than the service accepts): the service then starts
cold and logs the reason; a bad entry never stops it. :func:`first_bad_number` finds a non-finite
(or, where a number cannot be negative, negative) number in what the entry holds. The KV side is
the same for every such service too: :func:`read_saved` (bounded: a cluster just back answers the
lease seconds before the state bucket), :func:`read_until_answered` (the reads after a first that
got no answer) and :func:`put_saved` (a save counted by its result, never raising).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import fields, is_dataclass
from typing import Any, Literal, Protocol, TypeVar

import msgspec
import nats.errors
from nats.js.kv import KeyValue
from prometheus_client import Counter

from planner_runtime.bus import kv_raw

READ_TIMEOUT_S = 2.0
"""Longest wait for KV to answer the read of a saved entry."""
RETRY_S = 2.0
"""How often a read that got no answer is tried again."""

Outcome = Literal["restored", "kept_own", "absent", "stale", "invalid", "version", "namespace", "disabled"]
"""What became of a saved entry on activation (``unreachable``, KV not answering, is the caller's)."""


class Saved(Protocol):
    @property
    def version(self) -> int: ...
    @property
    def saved_at_s(self) -> float: ...
    @property
    def namespace(self) -> str: ...


S = TypeVar("S", bound=Saved)


def check_saved(
    raw: bytes | None,
    decoder: msgspec.json.Decoder[S],
    *,
    version: int,
    namespace: str,
    now_s: float,
    max_age_s: float,
    reader: str,
) -> tuple[S | None, Outcome, str]:
    """(entry or None, outcome, detail) for a saved entry (``raw`` None: there is none). ``reader``
    names the service in the version's refusal ("this decider reads 1")."""
    if max_age_s <= 0:
        return None, "disabled", "state_max_age_s is 0"
    if raw is None:
        return None, "absent", "no saved state"
    try:
        saved = decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        found = _peek_version(raw)
        if found is not None and found != version:
            return None, "version", f"saved state version {found}, this {reader} reads {version}"
        return None, "invalid", str(exc)
    if saved.version != version:
        return None, "version", f"saved state version {saved.version}, this {reader} reads {version}"
    if saved.namespace != namespace:
        return None, "namespace", f"saved for namespace {saved.namespace!r}, not {namespace!r}"
    age = now_s - saved.saved_at_s
    if not math.isfinite(age) or age > max_age_s:
        return None, "stale", f"saved {age:.0f} s ago (state_max_age_s {max_age_s:g})"
    return saved, "restored", f"saved {max(age, 0.0):.0f} s ago"


def first_bad_number(
    obj: Any, path: str, signed_field: Callable[[str], bool], signed: bool = False
) -> str | None:
    """The path of the first non-finite number in ``obj`` (dataclasses, dicts, sequences), or of a
    negative one where a number cannot be negative. A dataclass field may be negative when
    ``signed_field(name)``; a sequence's items may (records of errors, pairs); a dict's values may not."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return None
    if isinstance(obj, int | float):
        return path if not math.isfinite(obj) or (obj < 0 and not signed) else None
    items: Iterable[tuple[str, Any, bool]]
    if is_dataclass(obj):
        items = ((f".{f.name}", getattr(obj, f.name), signed_field(f.name)) for f in fields(obj))
    elif isinstance(obj, dict):
        items = ((f".{k}", v, False) for k, v in obj.items())
    else:
        items = ((f"[{i}]", v, True) for i, v in enumerate(obj))
    for suffix, v, may_be_negative in items:
        if (bad := first_bad_number(v, path + suffix, signed_field, may_be_negative)) is not None:
            return bad
    return None


def _peek_version(raw: bytes) -> int | None:
    try:
        head = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    v = head.get("version") if isinstance(head, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


async def read_saved(kv: KeyValue, key: str) -> bytes | None:
    """The saved entry at ``key`` (None: there is none). Raises ``nats.errors.Error`` or
    ``TimeoutError`` when KV does not answer within :data:`READ_TIMEOUT_S`."""
    return await asyncio.wait_for(kv_raw(kv, key), READ_TIMEOUT_S)


async def read_until_answered(load: Callable[[int], Awaitable[bool]]) -> None:
    """``load(attempt)`` for attempts 2, 3, ... every :data:`RETRY_S` until it returns True (KV
    answered); run as a task that the lease's loss cancels."""
    attempt = 1
    while True:
        await asyncio.sleep(RETRY_S)
        attempt += 1
        if await load(attempt):
            return


async def put_saved(kv: KeyValue, key: str, data: bytes, saves: Counter, log: Any, event: str) -> None:
    """Write ``data`` at ``key``, counted in ``saves`` by result (saved, failed); a failure is logged
    as ``event`` and the next save tries again."""
    try:
        await kv.put(key, data)
    except (nats.errors.Error, TimeoutError) as exc:
        saves.labels("failed").inc()
        log.warning(event, error=str(exc) or type(exc).__name__)
        return
    saves.labels("saved").inc()
