"""The decider's learned state in KV: what the policy learned goes out and comes back whole, and the
rest of the policy's state is not touched; an entry that cannot be trusted is refused with its reason."""

from __future__ import annotations

import pytest

from planner_core.policy import PolicyState
from planner_core.policy.calibration import SpreadCalibration
from planner_core.policy.queue_calibration import QueueCalibration
from planner_core.policy.types import PredictiveState
from planner_decider.learned import (
    STATE_VERSION,
    Learned,
    encode_learned,
    has_learned,
    learned_of,
    restore_learned,
    with_learned,
)

NS = "t"

LEARNED = Learned(
    prefill_correction=1.37,
    decode_correction=0.68,
    queue=QueueCalibration(log_scale=-0.61, level=412.5, itl_miss=0.002, settled_s=5400.0, settled=88),
    spread={
        "prefill": SpreadCalibration(
            scale=0.72,
            level=9_100.0,
            pending=((5430.0, 12_000.0), (5460.0, 11_500.0)),
            recorded_for_s=5460.0,
            settled_s=5400.0,
            settled=80,
            served=51_000.0,
            demand=52_000.0,
        )
    },
)


def test_what_was_learned_comes_back_whole_and_nothing_else_moves() -> None:
    running = with_learned(
        PolicyState(
            desired={"prefill": 3}, last_throughput_s=99.0, predictive=PredictiveState(floor={"decode": 2})
        ),
        LEARNED,
    )
    raw = encode_learned(learned_of(running), NS, now_s=1000.0)
    back, outcome, detail = restore_learned(raw, NS, now_s=1030.0, max_age_s=900.0)
    assert (outcome, detail) == ("restored", "saved 30 s ago")
    assert back == LEARNED
    assert back is not None
    fresh = with_learned(PolicyState(), back)
    assert learned_of(fresh) == learned_of(running)
    # only the learned part: the targets, timers and floors of the process that ran are not carried
    assert fresh.desired == {} and fresh.last_throughput_s is None and fresh.predictive.floor == {}
    assert has_learned(fresh) and not has_learned(PolicyState())


def _with(text: str) -> bytes:
    return encode_learned(LEARNED, NS, 1000.0).replace(b'"prefill_correction":1.37', text.encode())


@pytest.mark.parametrize(
    ("raw", "outcome", "says"),
    [
        (None, "absent", "no saved state"),
        (b"not json", "invalid", "JSON"),
        (encode_learned(LEARNED, NS, 1000.0).replace(b'"version":1', b'"version":7'), "version", "version 7"),
        (b'{"version": 7, "saved_at_s": "x"}', "version", "this decider reads 1"),
        (encode_learned(LEARNED, "other", 1000.0), "namespace", "'other'"),
        (encode_learned(LEARNED, NS, 0.0), "stale", "saved 1030 s ago"),
        (_with('"prefill_correction":-1.0'), "invalid", "learned.prefill_correction"),
        (_with('"prefill_correction":0.0'), "invalid", "learned.prefill_correction"),
        (_with('"prefill_correction":1e999'), "invalid", "learned.prefill_correction"),
        (
            encode_learned(LEARNED, NS, 1000.0).replace(b'"level":412.5', b'"level":-3.0'),
            "invalid",
            "learned.queue.level",
        ),
        (
            encode_learned(LEARNED, NS, 1000.0).replace(b'"scale":0.72', b'"scale":-0.5'),
            "invalid",
            "learned.spread.prefill.scale",
        ),
    ],
    ids=[
        "absent", "not_json", "newer_version", "newer_version_unreadable", "other_namespace", "stale",
        "negative_correction", "zero_correction", "infinite_correction", "negative_level", "negative_scale",
    ],
)  # fmt: skip
def test_an_entry_that_cannot_be_trusted_is_refused_with_its_reason(
    raw: bytes | None, outcome: str, says: str
) -> None:
    back, got, detail = restore_learned(raw, NS, now_s=1030.0, max_age_s=900.0)
    assert back is None and got == outcome and says in detail


def test_a_negative_log_scale_is_learned_not_wrong_and_age_zero_disables() -> None:
    raw = encode_learned(LEARNED, NS, 1000.0)
    assert restore_learned(raw, NS, 1000.0, 900.0)[0] == LEARNED  # log_scale -0.61: hotter, allowed
    assert restore_learned(raw, NS, 1000.0, 0.0)[1] == "disabled"
    assert STATE_VERSION == 1
