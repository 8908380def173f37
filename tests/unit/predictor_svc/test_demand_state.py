"""The predictor's saved demand picture: what is restored, and every reason it is refused."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from planner_core.forecast.demand import DemandState
from planner_core.forecast.horizon import HorizonConfig, SeriesState, update_series
from planner_predictor.demand_state import STATE_VERSION, encode_state, restore_state


def learned(samples: int = 40) -> DemandState:
    s = SeriesState()
    for i in range(samples):
        s = update_series(s, i, 100.0 + 10.0 * (i % 12), 5, HorizonConfig())
    return DemandState(last_sample_start_s=30.0 * samples, interval_s=30.0, prefill=s, decode=s,
                       isl_tokens=3000.0, osl_tokens=150.0)  # fmt: skip


def test_a_fresh_state_comes_back_equal() -> None:
    st = learned()
    raw = encode_state(st, "ns", now_s=1000.0)
    got, outcome, detail = restore_state(raw, "ns", now_s=1100.0, max_age_s=900.0)
    assert outcome == "restored" and got == st and "100 s" in detail
    assert got is not None and got.prefill.errors  # the forecast record survives, not only the levels
    assert got.prefill.step_mae[0][0][0] > 0 and got.prefill.step_pending  # and the per-step one


def _tamper(raw: bytes, **changes: object) -> bytes:
    doc = msgspec.json.decode(raw)
    for path, value in changes.items():
        node = doc
        *head, last = path.split("__")
        for key in head:
            node = node[key]
        node[last] = value
    return msgspec.json.encode(doc)


@pytest.mark.parametrize(
    ("raw", "now_s", "max_age_s", "outcome", "words"),
    [
        (None, 1000.0, 900.0, "absent", "no saved state"),
        (b"{not json", 1000.0, 900.0, "invalid", ""),
        (b'{"version": 1}', 1000.0, 900.0, "invalid", "saved_at_s"),
        ("good", 2000.0, 900.0, "stale", "1000 s ago"),
        ("good", 1000.0, 0.0, "disabled", "0"),
        ("v2", 1000.0, 900.0, "version", "version 2"),
        ("other-ns", 1000.0, 900.0, "namespace", "'other'"),
        ("negative-level", 1000.0, 900.0, "invalid", "demand.prefill.level"),
        ("negative-isl", 1000.0, 900.0, "invalid", "demand.isl_tokens"),
        ("short-history", 1000.0, 900.0, "invalid", "history values"),
        ("null-error", 1000.0, 900.0, "invalid", "errors"),
    ],
)
def test_a_bad_or_old_state_is_refused_with_its_reason(
    raw: bytes | str | None, now_s: float, max_age_s: float, outcome: str, words: str
) -> None:
    good = encode_state(learned(), "ns", now_s=1000.0)
    if isinstance(raw, str):
        prefill = msgspec.json.decode(good)["demand"]["prefill"]
        raw = {
            "good": good,
            "v2": _tamper(good, version=STATE_VERSION + 1, demand="a future layout"),
            "other-ns": encode_state(learned(), "other", now_s=1000.0),
            "negative-level": _tamper(good, demand__prefill__level=-5.0),
            "negative-isl": _tamper(good, demand__isl_tokens=-1.0),
            "short-history": _tamper(good, demand__prefill__samples=3),
            "null-error": _tamper(good, demand__prefill__errors=[None, *prefill["errors"]]),
        }[raw]
    got, why, detail = restore_state(raw, "ns", now_s=now_s, max_age_s=max_age_s)
    assert got is None
    assert why == outcome
    assert words in detail


def test_a_trend_may_be_negative() -> None:
    st = learned()
    falling = dataclasses.replace(st, prefill=dataclasses.replace(st.prefill, trend=-3.0, fast_trend=-4.0))
    got, outcome, _ = restore_state(encode_state(falling, "ns", 0.0), "ns", now_s=10.0, max_age_s=900.0)
    assert outcome == "restored" and got == falling
