"""What the decider has issued and which components wait for an ack; pure (``now_s`` is an argument).

Protocol (docs/concepts/protocol.md): after a change for a component is issued, no further change for it goes
out until a ``completed`` ack with ``decision_id >=`` the issued id arrives, or ``ack_timeout_s``
passes (then the next change carries the reason ``ack_timeout``). A ``failed`` ack also ends the wait.
While waiting, decreases still go through: ``decide`` lets a load-mode scale-down pass only when the
consolidation check allows it, and a replica stuck pending must not pin the fleet (reference issue
14251). Increases are held at the last issued target.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from planner_core.policy import DecisionResult, PolicyState
from planner_proto import AckStatus, Reason, ReplicaStatus, ScalingAck

_MOVES = {1: Reason.SCALE_UP, -1: Reason.SCALE_DOWN, 0: Reason.NO_CHANGE}


@dataclass(frozen=True, kw_only=True)
class Waiting:
    decision_id: int
    since_s: float


@dataclass(frozen=True, kw_only=True)
class IssueBook:
    last_issued: Mapping[str, int] = field(default_factory=dict)
    """Targets of the newest decision this decider (or its predecessor) published."""
    waiting: Mapping[str, Waiting] = field(default_factory=dict)
    timed_out: Mapping[str, int] = field(default_factory=dict)
    """Components whose wait for this decision id timed out; their next change says ack_timeout."""
    last_decision_id: int = 0

    @property
    def in_progress(self) -> frozenset[str]:
        return frozenset(self.waiting)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """The targets to publish (absolute, every component) and why."""

    targets: dict[str, int]
    previous: dict[str, int]
    reasons: dict[str, Reason]
    changed: frozenset[str]
    held: frozenset[str]
    """Components whose wanted increase is held back until their earlier change is acknowledged."""
    policy_reasons: dict[str, Reason]
    """The policy's own reason where the published one differs (held, ack_timeout)."""


def expire(book: IssueBook, now_s: float, timeout_s: float) -> tuple[IssueBook, list[str]]:
    """End the waits older than ``timeout_s``; returns the components whose wait timed out."""
    late = sorted(c for c, w in book.waiting.items() if now_s - w.since_s >= timeout_s)
    if not late:
        return book, []
    waiting = {c: w for c, w in book.waiting.items() if c not in late}
    timed_out = {**book.timed_out, **{c: book.waiting[c].decision_id for c in late}}
    return dataclasses.replace(book, waiting=waiting, timed_out=timed_out), late


def on_ack(book: IssueBook, ack: ScalingAck) -> tuple[IssueBook, list[str]]:
    """Apply an ack; returns the components it released. Only completed and failed end a wait."""
    if ack.status not in (AckStatus.COMPLETED, AckStatus.FAILED):
        return book, []
    released = sorted(c for c, w in book.waiting.items() if w.decision_id <= ack.decision_id)
    waiting = {c: w for c, w in book.waiting.items() if c not in released}
    # a late answer to a timed-out decision: the next change is no longer "proceeding anyway"
    timed_out = {c: i for c, i in book.timed_out.items() if i > ack.decision_id}
    return dataclasses.replace(book, waiting=waiting, timed_out=timed_out), released


def plan_issue(book: IssueBook, result: DecisionResult) -> Plan:
    """Compare ``decide``'s targets with what was issued last, holding increases while waiting."""
    targets: dict[str, int] = {}
    previous: dict[str, int] = {}
    reasons: dict[str, Reason] = {}
    policy_reasons: dict[str, Reason] = {}
    changed: set[str] = set()
    held: set[str] = set()
    for c in sorted(result.targets):
        last = book.last_issued.get(c, result.previous[c])
        want = result.targets[c]
        reason = result.reasons.get(c, Reason.NO_CHANGE)
        if reason in _MOVES.values():
            # decide() states the direction against the actuators' view; ours is the last issued target
            reason = _MOVES[(want > last) - (want < last)]
        previous[c] = last
        if want > last and c in book.waiting:
            held.add(c)
            targets[c] = last
            policy_reasons[c] = reason
            reasons[c] = Reason.SCALING_IN_PROGRESS
            continue
        targets[c] = want
        reasons[c] = reason
        if want != last:
            changed.add(c)
            if c in book.timed_out:
                policy_reasons[c] = reason
                reasons[c] = Reason.ACK_TIMEOUT
    return Plan(
        targets=targets,
        previous=previous,
        reasons=reasons,
        changed=frozenset(changed),
        held=frozenset(held),
        policy_reasons=policy_reasons,
    )


def adopt_external_change(
    book: IssueBook, state: PolicyState, status: ReplicaStatus | None
) -> tuple[IssueBook, PolicyState]:
    """Someone else (an operator, kubectl, circusctl) changed the replica counts and the actuator
    adopted them: take them as our own baseline instead of fighting them (reference issue 4420).
    Components with a decision in flight keep waiting for its ack."""
    if status is None or not status.external_change:
        return book, state
    seen = {c: cr.desired for c, cr in status.components.items() if c not in book.waiting}
    if all(book.last_issued.get(c) == n and state.desired.get(c) == n for c, n in seen.items()):
        return book, state
    book = dataclasses.replace(book, last_issued={**book.last_issued, **seen})
    state = dataclasses.replace(state, desired={**state.desired, **seen})
    return book, state


def record(book: IssueBook, plan: Plan, decision_id: int, now_s: float, wait: bool) -> IssueBook:
    """The book after ``plan`` went out as ``decision_id`` (``wait=False`` in advisory mode)."""
    waiting = dict(book.waiting)
    if wait:
        for c in plan.changed:
            waiting[c] = Waiting(decision_id=decision_id, since_s=now_s)
    return IssueBook(
        last_issued={**book.last_issued, **plan.targets},
        waiting=waiting,
        timed_out={c: i for c, i in book.timed_out.items() if c not in plan.changed},
        last_decision_id=decision_id,
    )


def seeded(book: IssueBook, last_targets: Mapping[str, int], decision_id: int) -> IssueBook:
    """Carry on from the newest decision found on the stream at start (a restart or a takeover)."""
    return dataclasses.replace(
        book, last_issued=dict(last_targets), last_decision_id=max(book.last_decision_id, decision_id)
    )
