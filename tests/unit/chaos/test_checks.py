"""The chaos run's KV check: an empty bucket and one that never answered are both problems, told apart."""

from __future__ import annotations

import pytest

from planner_cli.chaos.checks import Evidence, kv_intact


def _evidence(kv_keys: dict[str, int]) -> Evidence:
    return Evidence(
        stream_decisions=[],
        bus_decisions=[],
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
