"""The chaos run's checks: an empty KV bucket and one that never answered are both problems, told
apart; a decision re-sent on the bus is a redelivery, an id going back is not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner_cli.chaos import checks
from planner_cli.chaos.checks import Evidence, decision_ids, kv_intact
from planner_proto import ScalingDecision


def _decision(i: int) -> ScalingDecision:
    return ScalingDecision(decision_id=i, issued_at_s=float(i), namespace="ns", targets={"prefill": 1})


def _evidence(kv_keys: dict[str, int], stream: tuple[int, ...] = (), bus: tuple[int, ...] = ()) -> Evidence:
    return Evidence(
        stream_decisions=[_decision(i) for i in stream],
        bus_decisions=[_decision(i) for i in bus],
        bus_acks=[],
        log_acks=[],
        statuses=[],
        actuator_state=None,
        circus_workers=[],
        results=[],
        failures={},
        drained=set(),
        nats_outages=[],
        requests=0,
        gpu_budget=8,
        kv_keys=kv_keys,
    )


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        ({"planner_engines": 4, "planner_leases": 0}, "bucket planner_leases empty"),
        ({"planner_engines": 4, "planner_leases": -1}, "bucket planner_leases unreadable"),
    ],
)
def test_kv_intact_names_an_empty_and_an_unreadable_bucket(keys: dict[str, int], says: str) -> None:
    check = kv_intact(_evidence(keys))
    assert not check.ok
    assert says in check.detail
    assert "planner_engines" not in check.detail.split(";")[0]


@pytest.mark.parametrize(
    ("stream", "bus", "ok", "says"),
    [
        ((1, 2, 3), (1, 2, 2, 3), True, "3 decisions"),  # 2 re-sent: the plain bus saw it twice in a row
        ((1, 2, 3), (1, 3, 2), False, "bus [(3, 2)]"),  # an id going back
        ((1, 3, 2), (1, 2, 3), False, "stream [(3, 2)]"),
        ((1, 2, 2), (1, 2), False, "stream [(2, 2)]"),  # the stream keeps one copy: twice there is a fault
    ],
)
def test_decision_ids(stream: tuple[int, ...], bus: tuple[int, ...], ok: bool, says: str) -> None:
    check = decision_ids(_evidence({}, stream, bus))
    assert check.ok is ok and says in check.detail


def test_the_predictors_state_reads_come_from_its_log() -> None:
    log = [
        {"event": "demand_state_not_restored", "outcome": "absent"},
        {"event": "forecast_published"},
        {"event": "demand_state_restored", "samples": 40},
        {"event": "role_active"},
        {"event": "demand_state_not_read", "detail": "timeout"},
        {"event": "role_active"},
        {"event": "demand_state_not_restored", "outcome": "kept_own"},
    ]
    assert checks.demand_state_reads(log) == ["absent", "restored", "unreachable", "kept_own"]


def test_a_retried_read_counts_by_its_answer_within_the_activation() -> None:
    log = [
        {"event": "role_active"},
        {"event": "demand_state_not_restored", "outcome": "absent"},
        {"event": "role_active"},
        {"event": "demand_state_not_read", "detail": "timeout"},
        {"event": "demand_state_restored", "samples": 40, "attempt": 3},
        {"event": "role_active"},
        {"event": "demand_state_not_read", "detail": "timeout"},
    ]
    assert checks.demand_state_reads(log) == ["absent", "restored", "unreachable"]


@pytest.mark.parametrize(
    ("reads", "ok"),
    [
        ([], True),
        (["absent"], True),  # the first activation starts cold
        (["absent", "restored", "kept_own"], True),
        (["absent", "restored", "absent"], False),  # a restart lost what was learned
        (["absent", "stale"], False),
        (["absent", "unreachable"], False),
    ],
)
def test_every_reactivated_predictor_carries_on_from_what_was_learned(reads: list[str], ok: bool) -> None:
    ev = replace(_evidence({}), demand_state_reads=reads)
    got = checks.demand_kept(ev)
    assert got.ok is ok
    assert (str(len(reads) - 1) in got.detail) if len(reads) > 1 else "no re-activation" in got.detail
