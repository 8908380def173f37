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

import msgspec

from planner_core.forecast.demand import DemandState
from planner_core.forecast.horizon import SeriesState
from planner_runtime.saved_state import Outcome, check_saved, first_bad_number

STATE_VERSION = 1

__all__ = ["STATE_VERSION", "Outcome", "SavedDemandState", "encode_state", "restore_state"]


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


def restore_state(
    raw: bytes | None, namespace: str, now_s: float, max_age_s: float
) -> tuple[DemandState | None, Outcome, str]:
    """(state or None, outcome, detail) for a saved entry (``raw`` None: no entry). Trends and the
    forecast records (errors, pending forecasts) may be negative; levels, counts and lengths not."""
    saved, outcome, detail = check_saved(
        raw, _DECODER, version=STATE_VERSION, namespace=namespace, now_s=now_s, max_age_s=max_age_s,
        reader="predictor",
    )  # fmt: skip
    if saved is None:
        return None, outcome, detail
    bad = first_bad_number(saved.demand, "demand", lambda name: name.endswith("trend"))
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
    return saved.demand, outcome, detail
