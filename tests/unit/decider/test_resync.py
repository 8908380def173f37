"""The decider adopts replica counts someone else set (reference issue 4420) instead of fighting them;
this is also how it recovers when an actuator lost its workers (it reports them as an external change)."""

from __future__ import annotations

from planner_core.policy import DecisionResult, PolicyState
from planner_decider.book import IssueBook, Waiting, adopt_external_change, plan_issue
from planner_proto import ComponentReplicas, Reason, ReplicaStatus


def _result(
    targets: dict[str, int], previous: dict[str, int], reason: Reason = Reason.MIN_CAPPED
) -> DecisionResult:
    return DecisionResult(
        targets=targets,
        desired=dict(targets),
        previous=previous,
        reasons=dict.fromkeys(targets, reason),
        diagnostics={},
        advisory=False,
        policy="combined",
        evaluated=True,
    )


def test_no_resync_while_waiting_for_an_ack() -> None:
    # decode=1 is in flight (waiting for its ack): the actuator reporting 0 is just not done yet.
    book = IssueBook(last_issued={"decode": 1}, waiting={"decode": Waiting(decision_id=4, since_s=0.0)})
    plan = plan_issue(book, _result({"decode": 1}, previous={"decode": 0}))
    assert plan.changed == frozenset()


def test_no_resync_when_views_agree() -> None:
    book = IssueBook(last_issued={"decode": 2})
    plan = plan_issue(book, _result({"decode": 2}, previous={"decode": 2}, reason=Reason.NO_CHANGE))
    assert plan.changed == frozenset()


def _status(desired: int, external: bool) -> ReplicaStatus:
    return ReplicaStatus(
        namespace="t",
        actuator_id="a",
        at_s=0.0,
        external_change=external,
        components={"decode": ComponentReplicas(desired=desired, ready=desired)},
    )


def test_external_change_is_adopted_not_fought() -> None:
    # An operator scaled decode from 2 to 5 by hand; the actuator flags it. The decider takes 5 as both
    # its last issued target and the policy's baseline, so nothing is re-issued to undo it.
    book = IssueBook(last_issued={"decode": 2})
    state = PolicyState(desired={"decode": 2})
    book, state = adopt_external_change(book, state, _status(5, external=True))
    assert book.last_issued == {"decode": 5} and state.desired == {"decode": 5}
    plan = plan_issue(book, _result({"decode": 5}, previous={"decode": 5}, reason=Reason.NO_CHANGE))
    assert plan.changed == frozenset()


def test_status_without_external_change_changes_nothing() -> None:
    book = IssueBook(last_issued={"decode": 2})
    state = PolicyState(desired={"decode": 2})
    assert adopt_external_change(book, state, _status(5, external=False)) == (book, state)


def test_lost_workers_are_adopted_then_brought_back_to_the_minimum() -> None:
    # The actuator lost its workers and reports desired 0 as an external change; we last issued 1.
    # Adopt 0 as the baseline: the policy's min-capped 1 is then a real change and goes out again.
    book, _state = adopt_external_change(
        IssueBook(last_issued={"decode": 1}), PolicyState(), _status(0, True)
    )
    plan = plan_issue(book, _result({"decode": 1}, previous={"decode": 0}))
    assert plan.changed == frozenset({"decode"}) and plan.targets == {"decode": 1}
