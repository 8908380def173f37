"""The decider re-syncs with the actuators' view, and adopts counts someone else set."""

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


def test_resync_when_the_actuator_lost_what_we_issued() -> None:
    # We issued decode=1 earlier; the actuator now reports desired 0 (it lost its workers) and nothing is
    # in flight. The policy still wants 1: publish it again instead of waiting forever.
    book = IssueBook(last_issued={"decode": 1}, last_decision_id=4)
    plan = plan_issue(book, _result({"decode": 1}, previous={"decode": 0}))
    assert plan.changed == frozenset({"decode"}) and plan.targets == {"decode": 1}


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
