"""One decider tick as a pure function: inputs + bookkeeping + policy state -> what to publish."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner_core.policy import (
    CapacityModel,
    DecisionResult,
    LatencyEstimator,
    PolicyConfig,
    PolicyState,
    decide,
)
from planner_decider.book import IssueBook, Plan, adopt_external_change, expire, plan_issue
from planner_decider.inputs import LatestInputs, decision_inputs


@dataclass(frozen=True, kw_only=True)
class TickOptions:
    components: Sequence[str] = ()
    ack_timeout_s: float = 1800.0
    snapshot_max_age_s: float = 30.0
    replicas_max_age_s: float = 60.0
    capacity: CapacityModel | None = None
    estimator: LatencyEstimator | None = None


@dataclass(frozen=True, kw_only=True)
class TickOutcome:
    result: DecisionResult | None
    """None when there was nothing to decide against (no fresh ReplicaStatus)."""
    plan: Plan | None
    """Publish when not None and ``plan.changed``."""
    timed_out: list[str]

    @property
    def publish(self) -> bool:
        return self.plan is not None and bool(self.plan.changed)


def tick(
    book: IssueBook,
    state: PolicyState,
    latest: LatestInputs,
    cfg: PolicyConfig,
    opts: TickOptions,
    now_s: float,
) -> tuple[IssueBook, PolicyState, TickOutcome]:
    book, timed_out = expire(book, now_s, opts.ack_timeout_s)
    book, state = adopt_external_change(book, state, latest.fresh_replicas(now_s, opts.replicas_max_age_s))
    inputs = decision_inputs(
        latest,
        now_s,
        components=opts.components,
        snapshot_max_age_s=opts.snapshot_max_age_s,
        replicas_max_age_s=opts.replicas_max_age_s,
        in_progress=book.in_progress,
        capacity=opts.capacity,
        estimator=opts.estimator,
    )
    if inputs is None:
        return book, state, TickOutcome(result=None, plan=None, timed_out=timed_out)
    result, state = decide(inputs, state, cfg, now_s)
    return book, state, TickOutcome(result=result, plan=plan_issue(book, result), timed_out=timed_out)
