"""The decider's bookkeeping over time: ack waits, timeouts, held increases, gated re-issue.

``now_s`` is stepped as a number; ``tick`` is pure, and ``record`` stands in for a publish.
"""

from __future__ import annotations

from dataclasses import replace

from planner_core.policy import PolicyConfig, PolicyState
from planner_decider.book import IssueBook, on_ack, record
from planner_decider.inputs import LatestInputs
from planner_decider.tick import TickOptions, TickOutcome, tick
from planner_proto import AckStatus, Reason, ScalingAck

from .decider_helpers import CFG, capacity, forecast, status

CAP = capacity()
OPTS = TickOptions(ack_timeout_s=100.0, capacity=CAP)


class Run:
    """A decider without I/O: the latest inputs, the book, the policy state, ids from 1."""

    def __init__(self, cfg: PolicyConfig = CFG, opts: TickOptions = OPTS, advisory: bool = False) -> None:
        self.cfg, self.opts, self.advisory = cfg, opts, advisory
        self.latest = LatestInputs()
        self.book = IssueBook()
        self.state = PolicyState()
        self.next_id = 1

    def step(self, now_s: float) -> TickOutcome:
        self.book, self.state, out = tick(self.book, self.state, self.latest, self.cfg, self.opts, now_s)
        if out.publish:
            assert out.plan is not None
            self.book = record(self.book, out.plan, self.next_id, now_s, wait=not self.advisory)
            self.next_id += 1
        return out

    def ack(self, decision_id: int, st: AckStatus) -> list[str]:
        self.book, released = on_ack(
            self.book, ScalingAck(decision_id=decision_id, actuator_id="a", status=st)
        )
        return released


def test_no_replica_status_no_decision() -> None:
    run = Run()
    run.latest = run.latest.with_forecast(forecast(250), 0.0)
    out = run.step(0.0)
    assert out.result is None and not out.publish


def test_waits_for_completed_ack_then_issues_the_held_increase() -> None:
    run = Run()
    run.latest = run.latest.with_replicas(status(1, 1), 0.0).with_forecast(forecast(250), 0.0)
    # t=0: need 2.5 -> 3 for both
    out = run.step(0.0)
    assert out.publish and out.plan is not None
    assert out.plan.targets == {"decode": 3, "prefill": 3}
    assert out.plan.reasons == {"decode": Reason.SCALE_UP, "prefill": Reason.SCALE_UP}
    assert run.book.in_progress == {"prefill", "decode"}
    # t=1: forecast 450 -> need 5, but both wait for decision 1: held at 3, nothing published
    run.latest = run.latest.with_forecast(forecast(450), 1.0).with_replicas(status(1, 1), 1.0)
    out = run.step(1.0)
    assert not out.publish
    assert out.plan is not None and out.plan.held == {"prefill", "decode"}
    assert out.plan.reasons["prefill"] is Reason.SCALING_IN_PROGRESS
    # accepted and superseded do not end the wait
    assert run.ack(1, AckStatus.ACCEPTED) == []
    assert run.ack(1, AckStatus.SUPERSEDED) == []
    assert not run.step(2.0).publish
    # completed for decision 1 releases both; the held 5 goes out as decision 2
    assert run.ack(1, AckStatus.COMPLETED) == ["decode", "prefill"]
    out = run.step(3.0)
    assert out.publish and out.plan is not None
    assert out.plan.targets == {"decode": 5, "prefill": 5}
    assert out.plan.previous == {"decode": 3, "prefill": 3}
    assert run.book.waiting["prefill"].decision_id == 2


def test_unchanged_targets_are_not_reissued() -> None:
    run = Run()
    run.latest = run.latest.with_replicas(status(1, 1), 0.0).with_forecast(forecast(250), 0.0)
    assert run.step(0.0).publish
    run.ack(1, AckStatus.COMPLETED)
    for t in (1.0, 2.0, 3.0):
        run.latest = run.latest.with_replicas(status(3, 3, t), t)
        assert not run.step(t).publish


def test_ack_timeout_proceeds_with_reason_ack_timeout() -> None:
    run = Run()
    run.latest = run.latest.with_replicas(status(1, 1), 0.0).with_forecast(forecast(250), 0.0)
    assert run.step(0.0).publish
    run.latest = run.latest.with_forecast(forecast(450), 50.0).with_replicas(status(1, 1), 50.0)
    out = run.step(50.0)
    assert not out.publish and out.timed_out == []
    # t=100: 100 s after decision 1 (timeout 100 s) -> both waits end; the change goes out
    run.latest = run.latest.with_forecast(forecast(450), 100.0).with_replicas(status(1, 1), 100.0)
    out = run.step(100.0)
    assert out.timed_out == ["decode", "prefill"]
    assert out.publish and out.plan is not None
    assert out.plan.reasons == {"decode": Reason.ACK_TIMEOUT, "prefill": Reason.ACK_TIMEOUT}
    assert out.plan.policy_reasons == {"decode": Reason.SCALE_UP, "prefill": Reason.SCALE_UP}
    assert run.book.timed_out == {}


def test_late_completed_ack_clears_the_timeout_mark() -> None:
    run = Run()
    run.latest = run.latest.with_replicas(status(1, 1), 0.0).with_forecast(forecast(250), 0.0)
    run.step(0.0)
    run.latest = run.latest.with_replicas(status(1, 1), 100.0).with_forecast(forecast(250), 100.0)
    assert run.step(100.0).timed_out == ["decode", "prefill"]
    run.ack(1, AckStatus.COMPLETED)
    run.latest = run.latest.with_forecast(forecast(450), 101.0).with_replicas(status(3, 3), 101.0)
    out = run.step(101.0)
    assert out.plan is not None and out.plan.reasons["prefill"] is Reason.SCALE_UP


def test_failed_ack_releases_the_wait() -> None:
    run = Run()
    run.latest = run.latest.with_replicas(status(1, 1), 0.0).with_forecast(forecast(250), 0.0)
    run.step(0.0)
    assert run.ack(1, AckStatus.FAILED) == ["decode", "prefill"]
    assert run.book.in_progress == frozenset()


def test_older_ack_does_not_release_a_newer_wait() -> None:
    book = IssueBook()
    run = Run()
    run.latest = run.latest.with_replicas(status(1, 1), 0.0).with_forecast(forecast(250), 0.0)
    run.step(0.0)
    run.ack(1, AckStatus.COMPLETED)
    run.latest = run.latest.with_forecast(forecast(450), 1.0)
    run.step(1.0)  # decision 2
    assert run.ack(1, AckStatus.COMPLETED) == []
    assert run.ack(3, AckStatus.COMPLETED) == ["decode", "prefill"]  # newer ids cover older ones
    assert book.in_progress == frozenset()


def test_decrease_goes_through_while_waiting() -> None:
    # a replica stuck pending must not pin the fleet (reference issue 14251)
    run = Run()
    run.latest = run.latest.with_replicas(status(1, 1), 0.0).with_forecast(forecast(450), 0.0)
    assert run.step(0.0).publish  # 5, 5; never completes
    run.latest = run.latest.with_forecast(forecast(150), 1.0).with_replicas(status(1, 1), 1.0)
    out = run.step(1.0)
    assert out.publish and out.plan is not None
    assert out.plan.targets == {"decode": 2, "prefill": 2}
    assert out.plan.reasons["prefill"] is Reason.SCALE_DOWN
    assert run.book.waiting["prefill"].decision_id == 2


def test_gated_rebalance_is_reissued_until_it_matches_desired() -> None:
    # budget 4 GPUs: prefill 3 -> 1 and decode 1 -> 3. Decode may only grow once prefill's drained
    # replicas have released their GPUs.
    cfg = replace(CFG, max_gpu_budget=4)
    run = Run(cfg=cfg)
    fc = forecast(250).__class__(
        namespace="t",
        issued_at_s=0.0,
        for_start_s=0.0,
        interval_s=10.0,
        num_requests=250.0,
        mean_isl_tokens=560.0,  # prefill need 250*560/10/28000 = 0.5 -> 1
        # decode: 25 req/s x 1100 tok = 27500 tok/s; context 560 + 550 = 1110, best cell kv 1.0 ->
        # 480000 / 1110 = 432 requests at 40 ms = 10811 tok/s per GPU -> need 2.54 -> 3
        mean_osl_tokens=1100.0,
    )
    run.latest = run.latest.with_replicas(status(3, 1), 0.0).with_forecast(fc, 0.0)
    out = run.step(0.0)
    assert out.result is not None and out.result.desired == {"decode": 3, "prefill": 1}
    assert out.publish and out.plan is not None
    # held GPUs: 3 prefill + 1 decode = 4 = budget -> decode gated at 1 for now
    assert out.plan.targets == {"decode": 1, "prefill": 1}
    assert out.plan.changed == {"prefill"}
    assert out.result.reasons["decode"] is Reason.BUDGET_CAPPED
    # prefill drains: 1 ready + 2 draining still hold 3 GPUs -> nothing new
    run.latest = run.latest.with_replicas(status(1, 1, 1.0, p_draining=2), 1.0)
    assert not run.step(1.0).publish
    # one drained: 1 GPU free -> decode 2 goes out (decode is not waiting: it had no change yet)
    run.latest = run.latest.with_replicas(status(1, 1, 2.0, p_draining=1), 2.0)
    out = run.step(2.0)
    assert out.publish and out.plan is not None and out.plan.targets == {"decode": 2, "prefill": 1}
    # all drained, but decode waits for its ack of decision 2
    run.latest = run.latest.with_replicas(status(1, 1, 3.0), 3.0)
    assert not run.step(3.0).publish
    run.ack(2, AckStatus.COMPLETED)
    run.latest = run.latest.with_replicas(status(1, 2, 4.0), 4.0)
    out = run.step(4.0)
    assert out.publish and out.plan is not None and out.plan.targets == {"decode": 3, "prefill": 1}
    run.ack(3, AckStatus.COMPLETED)
    run.latest = run.latest.with_replicas(status(1, 3, 5.0), 5.0)
    assert not run.step(5.0).publish


def test_advisory_decisions_wait_for_no_ack() -> None:
    run = Run(advisory=True)
    run.latest = run.latest.with_replicas(status(1, 1), 0.0).with_forecast(forecast(250), 0.0)
    assert run.step(0.0).publish
    assert run.book.in_progress == frozenset()
    run.latest = run.latest.with_forecast(forecast(450), 1.0).with_replicas(status(1, 1), 1.0)
    out = run.step(1.0)
    assert out.publish and out.plan is not None and out.plan.targets == {"decode": 5, "prefill": 5}


def test_stale_inputs_are_ignored() -> None:
    run = Run()
    run.latest = run.latest.with_replicas(status(1, 1), 0.0).with_forecast(forecast(250), 0.0)
    # replicas older than replicas_max_age_s (60 s): no decision at all
    assert run.step(61.0).result is None
    # a forecast older than two of its intervals (20 s) is not used: no data, no change
    run.latest = run.latest.with_replicas(status(1, 1), 61.0)
    out = run.step(61.0)
    assert out.result is not None and not out.publish
    assert out.result.reasons["prefill"] is Reason.INSUFFICIENT_DATA


def test_configured_components_missing_from_status_count_as_zero() -> None:
    run = Run(opts=replace(OPTS, components=("prefill",)))
    run.latest = run.latest.with_replicas(status(1, 1), 0.0).with_forecast(forecast(250), 0.0)
    out = run.step(0.0)
    assert out.plan is not None and set(out.plan.targets) == {"prefill"}
