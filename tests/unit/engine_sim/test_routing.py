"""Least-outstanding routing over the engine registry."""

from __future__ import annotations

import pytest

from planner_loadgen.routing import EngineTable, pick_mode
from planner_proto import Component, EngineInfo


def info(worker: str, component: str = "agg", draining: bool = False) -> EngineInfo:
    return EngineInfo(
        namespace="t",
        component=Component(component),
        worker_id=worker,
        request_subject=f"planner.t.engine.{worker}.generate",
        draining=draining,
    )


def table(*infos: EngineInfo, now: float = 0.0) -> EngineTable:
    t = EngineTable(ttl_s=15.0)
    for i in infos:
        t.upsert(f"t.{i.component}.{i.worker_id}", i, now)
    return t


@pytest.mark.parametrize(
    ("loads", "expected"),
    [
        ({"a": 3, "b": 1, "c": 2}, "b"),  # fewest outstanding wins
        ({"a": 0, "b": 5, "c": 0}, "a"),  # tie between a and c: never picked -> name order
        ({"a": 2, "b": 2, "c": 1}, "c"),
    ],
)
def test_choose_least_outstanding(loads: dict[str, int], expected: str) -> None:
    t = table(*(info(w) for w in loads))
    for w, n in loads.items():
        for _ in range(n):
            t.acquire(f"t.agg.{w}")
    assert t.choose("agg") == f"t.agg.{expected}"


def test_ties_rotate_to_least_recently_picked() -> None:
    t = table(info("a"), info("b"), info("c"))
    picks = [t.choose("agg") for _ in range(6)]  # nobody acquires: pure tie, round robin
    assert picks == ["t.agg.a", "t.agg.b", "t.agg.c"] * 2


def test_draining_and_other_components_are_skipped() -> None:
    t = table(info("a", draining=True), info("p", "prefill"), info("b"))
    assert t.choose("agg") == "t.agg.b"
    assert t.choose("decode") is None
    assert t.count("agg") == 1


def test_exclude_prefers_others_but_falls_back() -> None:
    t = table(info("a"), info("b"))
    t.acquire("t.agg.b")
    assert t.choose("agg", exclude={"t.agg.a"}) == "t.agg.b"
    assert t.choose("agg", exclude={"t.agg.a", "t.agg.b"}) in {"t.agg.a", "t.agg.b"}


def test_release_never_goes_negative_and_prune_drops_expired() -> None:
    t = table(info("a"), now=0.0)
    t.release("t.agg.a")
    assert t.entries["t.agg.a"].outstanding == 0
    t.upsert("t.agg.b", info("b"), 10.0)
    assert t.prune(16.0) == ["t.agg.a"]  # last seen 16 s ago > 15 s TTL
    assert list(t.entries) == ["t.agg.b"]
    assert t.worker_key("b") == "t.agg.b"


def test_pick_mode() -> None:
    assert pick_mode("auto", table(info("a"))) == "agg"
    assert pick_mode("auto", table(info("p", "prefill"), info("d", "decode"))) == "disagg"
    assert pick_mode("auto", table(info("p", "prefill"))) == "agg"
    assert pick_mode("disagg", table(info("a"))) == "disagg"
