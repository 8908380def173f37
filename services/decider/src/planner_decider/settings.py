"""Decider settings: the policy's knobs (``PolicyConfig``, embedded as it is) plus the service's own.

The knobs are declared once, in ``planner_core.policy.config``, with their defaults, ranges and
meaning. Flags, ``PLANNER_*`` env and YAML keys use the PolicyConfig field names unchanged
(``--ttft-target-ms``, ``PLANNER_TTFT_TARGET_MS``, ``ttft_target_ms:``), so one name means one thing
everywhere (``policy_config`` is a group of settings: see ``planner_runtime.settings``). The ranges
are checked as the settings are read, the checks that span fields by
``planner_core.policy.validate_config``; its message names the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
from msgspec import Meta

from planner_core.policy import PolicyConfig, PolicyKind, validate_config
from planner_runtime.settings import LeaseSettings

Pos = Annotated[float, Meta(gt=0.0)]


class DeciderSettings(LeaseSettings, frozen=True, kw_only=True):
    """Decider: runs the scaling policies on the latest inputs and publishes ScalingDecisions."""

    policy_config: PolicyConfig = msgspec.field(default_factory=PolicyConfig)
    """The policy's knobs, each a setting of its own (see ``PolicyConfig``)."""

    # --- the service ----------------------------------------------------------------------------
    profile_dir: str = ""
    """Folder of the profile (reference NPZ/JSON) for throughput mode, the only place a profile is
    loaded from; empty: none (the throughput part then has no capacity model and says so)."""
    components: list[str] = msgspec.field(default_factory=list)
    """Components to manage; empty = every component the actuators report in ReplicaStatus."""
    ack_timeout_s: Pos = 1800.0
    """How long to wait for a `completed` ack before issuing another change for the component."""
    ack_poll_s: Pos = 10.0
    """Upper bound of the tick period, so ack timeouts and gated re-issues are noticed in time."""
    snapshot_max_age_s: Pos = 30.0
    """A ComponentSnapshot received longer ago than this is ignored."""
    replicas_max_age_s: Pos = 60.0
    """Without a ReplicaStatus received within this time, no decision is made."""
    report_path: str = ""
    """HTML report of the run, rewritten every report_interval_s and at shutdown; empty = none."""
    report_interval_s: Pos = 60.0
    """How often the HTML report (``report_path``) is rewritten."""
    history_points: Annotated[int, Meta(ge=10, le=1_000_000)] = 20_000
    """Ticks kept for the report (older ones are dropped)."""
    state_save_interval_s: Annotated[float, Meta(gt=0.0, le=86_400.0)] = 30.0
    """How often the active decider saves what the policy learned (correction factors, prefill's
    queueing variability, the spread scales; KV planner_state, ``{ns}.decider.learned_state``)."""
    state_max_age_s: Annotated[float, Meta(ge=0.0)] = 900.0
    """A newly active decider starts from the saved learned state when it is at most this old (0:
    always start from the configuration)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        validate_config(self.policy_config)
        if self.profile_dir and not Path(self.profile_dir).is_dir():
            raise ValueError(f"profile_dir {self.profile_dir!r} is not a folder")
        bad = [c for c in self.components if c not in ("prefill", "decode", "agg")]
        if bad:
            raise ValueError(f"components: unknown component(s) {bad}; allowed: prefill, decode, agg")

    def tick_s(self) -> float:
        """The decider's loop period: the shortest policy interval in use, at most ack_poll_s."""
        cfg = self.policy_config
        intervals = [self.ack_poll_s]
        if cfg.policy in (PolicyKind.LOAD, PolicyKind.COMBINED):
            intervals.append(cfg.load_interval_s)
        if cfg.policy in (PolicyKind.THROUGHPUT, PolicyKind.COMBINED):
            intervals.append(cfg.throughput_interval_s)
        if cfg.policy is PolicyKind.THRESHOLD:
            intervals.append(cfg.threshold_interval_s)
        return min(intervals)
