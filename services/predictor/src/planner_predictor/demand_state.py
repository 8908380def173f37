"""What the demand forecaster has learned of the traffic, kept across restarts and takeovers.

The demand forecast needs history: about ``min_errors`` scored forecasts before its scenarios are
its own, and one and a half seasons before it sees a daily or hourly pattern. A predictor that
starts cold pays for that again (the decider over-provisions while it relearns, or misses the first
ramp). So the active predictor saves its :class:`~planner_core.forecast.demand.DemandState` (demand
series, forecast errors, season, smoothed request lengths) to KV ``planner_state`` under
``{ns}.predictor.demand_state`` every ``state_save_interval_s`` (and when it stops), and a newly
active one (restart or standby takeover) starts from it when it is at most ``state_max_age_s`` old.

A saved state that does not decode, has another version or namespace, or holds non-finite or
negative numbers is refused with its reason and the predictor starts cold: a bad entry never stops
it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import fields, is_dataclass
from typing import Any, Literal

import msgspec

from planner_core.forecast.demand import DemandState
from planner_core.forecast.horizon import SeriesState

STATE_VERSION = 1

Outcome = Literal["restored", "kept_own", "absent", "stale", "invalid", "version", "namespace", "disabled"]


class SavedDemandState(msgspec.Struct, frozen=True, kw_only=True):
    version: int
    saved_at_s: float
    namespace: str
    demand: DemandState


_DECODER = msgspec.json.Decoder(SavedDemandState)
_ENCODER = msgspec.json.Encoder()


def encode_state(demand: DemandState, namespace: str, now_s: float) -> bytes:
    return _ENCODER.encode(
        SavedDemandState(version=STATE_VERSION, saved_at_s=now_s, namespace=namespace, demand=demand)
    )


def _bad_number(obj: Any, path: str, signed: bool = False) -> str | None:
    """The path of the first non-finite number in ``obj``, or negative one where a number cannot be
    negative: trends and the forecast records (errors, pending forecasts) are signed; levels, counts
    and lengths are not."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return None
    if isinstance(obj, int | float):
        return path if not math.isfinite(obj) or (obj < 0 and not signed) else None
    items: Iterable[tuple[str, Any, bool]]
    if is_dataclass(obj):
        items = ((f".{f.name}", getattr(obj, f.name), f.name.endswith("trend")) for f in fields(obj))
    elif isinstance(obj, dict):
        items = ((f".{k}", v, False) for k, v in obj.items())
    else:
        items = ((f"[{i}]", v, True) for i, v in enumerate(obj))
    for suffix, v, may_be_negative in items:
        if (bad := _bad_number(v, path + suffix, may_be_negative)) is not None:
            return bad
    return None


def restore_state(
    raw: bytes | None, namespace: str, now_s: float, max_age_s: float
) -> tuple[DemandState | None, Outcome, str]:
    """(state or None, outcome, detail) for a saved entry (``raw`` None: no entry)."""
    if max_age_s <= 0:
        return None, "disabled", "state_max_age_s is 0"
    if raw is None:
        return None, "absent", "no saved state"
    try:
        saved = _DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        version = _peek_version(raw)
        if version is not None and version != STATE_VERSION:
            return None, "version", f"saved state version {version}, this predictor reads {STATE_VERSION}"
        return None, "invalid", str(exc)
    if saved.version != STATE_VERSION:
        return None, "version", f"saved state version {saved.version}, this predictor reads {STATE_VERSION}"
    if saved.namespace != namespace:
        return None, "namespace", f"saved for namespace {saved.namespace!r}, not {namespace!r}"
    age = now_s - saved.saved_at_s
    if not math.isfinite(age) or age > max_age_s:
        return None, "stale", f"saved {age:.0f} s ago (state_max_age_s {max_age_s:g})"
    bad = _bad_number(saved.demand, "demand")
    if bad is not None:
        return None, "invalid", f"{bad}: not a finite non-negative number"
    for name in ("prefill", "decode"):
        series: SeriesState = getattr(saved.demand, name)
        if len(series.history) > series.samples:
            return (
                None,
                "invalid",
                f"demand.{name}: {len(series.history)} history values, {series.samples} samples",
            )
    return saved.demand, "restored", f"saved {max(age, 0.0):.0f} s ago"


def _peek_version(raw: bytes) -> int | None:
    try:
        head = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    v = head.get("version") if isinstance(head, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None
