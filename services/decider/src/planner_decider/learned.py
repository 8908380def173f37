"""What the decider's policy has learned of the engines and the traffic, kept across restarts and
takeovers.

Three things in the policy's state are learned rather than configured, and take a while to learn:

- the correction factors (how fast the engines really are against the profile: an EMA over
  throughput intervals);
- prefill's queueing variability, calibrated on the requests' TTFT (``queue_memory_samples``
  traffic samples to move by half);
- the scale on the forecast spread each component's floors cover (when ``calibrate_spread``).

A decider that starts with none of them sizes from the profile and the stand-in variability again,
on the safe side but dearer, until it has relearned them. So the active decider saves them to KV
``planner_state`` under ``{ns}.decider.learned_state`` every ``state_save_interval_s`` (and when it
stops), and a newly active one (a restart, or a standby taking over: standbys do not tick, so they
learn nothing) starts from them when they are at most ``state_max_age_s`` old. Nothing else of the
policy's state is kept: the targets come back from the decision stream, the rest is timing that
belongs to the process that ran it.

An entry that does not decode, has another version or namespace, or holds non-finite numbers
(negative ones where a number cannot be) is refused with its reason, and the decider starts from the
configuration: a bad entry never stops it.
"""

from __future__ import annotations

import dataclasses

import msgspec

from planner_core.policy import PolicyState
from planner_core.policy.calibration import SpreadCalibration
from planner_core.policy.queue_calibration import QueueCalibration
from planner_runtime.saved_state import Outcome, check_saved, first_bad_number

STATE_VERSION = 1


class Learned(msgspec.Struct, frozen=True, kw_only=True):
    """The learned part of the policy's state."""

    prefill_correction: float = 1.0
    decode_correction: float = 1.0
    queue: QueueCalibration = msgspec.field(default_factory=QueueCalibration)
    spread: dict[str, SpreadCalibration] = msgspec.field(default_factory=dict)


class SavedLearned(msgspec.Struct, frozen=True, kw_only=True):
    version: int
    saved_at_s: float
    namespace: str
    learned: Learned


_DECODER = msgspec.json.Decoder(SavedLearned)
_ENCODER = msgspec.json.Encoder()


def learned_of(state: PolicyState) -> Learned:
    return Learned(
        prefill_correction=state.prefill_correction,
        decode_correction=state.decode_correction,
        queue=state.predictive.queue,
        spread=dict(state.predictive.calibration),
    )


def with_learned(state: PolicyState, learned: Learned) -> PolicyState:
    """``state`` carrying what ``learned`` holds (the rest of it unchanged)."""
    predictive = dataclasses.replace(state.predictive, queue=learned.queue, calibration=dict(learned.spread))
    return dataclasses.replace(
        state,
        prefill_correction=learned.prefill_correction,
        decode_correction=learned.decode_correction,
        predictive=predictive,
    )


def has_learned(state: PolicyState) -> bool:
    """Whether ``state`` has learned anything since it started from the configuration."""
    return learned_of(state) != Learned()


def encode_learned(learned: Learned, namespace: str, now_s: float) -> bytes:
    return _ENCODER.encode(
        SavedLearned(version=STATE_VERSION, saved_at_s=now_s, namespace=namespace, learned=learned)
    )


def restore_learned(
    raw: bytes | None, namespace: str, now_s: float, max_age_s: float
) -> tuple[Learned | None, Outcome, str]:
    """(learned or None, outcome, detail) for a saved entry (``raw`` None: no entry). Only the queue's
    log-scale and the pairs of floors not yet settled may be negative; the corrections must be > 0."""
    saved, outcome, detail = check_saved(
        raw, _DECODER, version=STATE_VERSION, namespace=namespace, now_s=now_s, max_age_s=max_age_s,
        reader="decider",
    )  # fmt: skip
    if saved is None:
        return None, outcome, detail
    learned = saved.learned
    bad = first_bad_number(learned.queue, "learned.queue", lambda name: name == "log_scale")
    for c, cal in learned.spread.items():
        bad = bad or first_bad_number(cal, f"learned.spread.{c}", lambda name: False)
    if bad is not None:
        return None, "invalid", f"{bad}: not a finite non-negative number"
    for name in ("prefill_correction", "decode_correction"):
        value = getattr(learned, name)
        if not (value > 0 and value < float("inf")):
            return None, "invalid", f"learned.{name}: {value} is not a finite positive number"
    return learned, outcome, detail
