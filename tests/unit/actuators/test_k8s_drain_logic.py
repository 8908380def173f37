"""Pure parts of the actuator-k8s drain: which pods go, their cost, pod <-> engine mapping, what is
still going away, and the replica-slot ledger."""

from __future__ import annotations

from planner_actuator_k8s.backend import slots
from planner_actuator_k8s.pods import (
    INT32_MIN,
    EngineRef,
    engines_by_pod,
    going_away,
    pick_pods,
    pod_loads,
    victim_cost,
)
from planner_runtime.actuation import Phase, WorkerRecord
from planner_runtime.kubepods import (
    DELETION_COST,
    DRAIN_MARK,
    PodView,
    parse_pod,
    parse_pods,
    selector_string,
)


def pod(name: str, **kw: object) -> PodView:
    base: dict[str, object] = {
        "node": "n1",
        "phase": "Running",
        "ready": True,
        "created": "2025-01-01T00:00:00Z",
    }
    base.update(kw)
    return PodView(name=name, **base)  # type: ignore[arg-type]


def names(pods: list[PodView]) -> list[str]:
    return [p.name for p in pods]


def test_least_loaded_ready_pods_go_first() -> None:
    pods = [pod("a"), pod("b"), pod("c")]
    load = {"a": 5, "b": 0, "c": 9}
    assert names(pick_pods(pods, 1, load)) == ["b"]
    assert names(pick_pods(pods, 2, load)) == ["b", "a"]
    assert pick_pods(pods, 0, load) == []


def test_the_controllers_ranks_come_before_load() -> None:
    """Unscheduled, Pending, not ready: the ReplicaSet removes those first whatever their cost, so
    they are the ones picked (nothing to drain on them anyway)."""
    busy_unready = pod("u", ready=False)
    pending = pod("p", phase="Pending", ready=False)
    unscheduled = pod("s", node="", phase="Pending", ready=False)
    idle = pod("i")
    load = {"u": 50, "p": 50, "s": 50, "i": 0}
    assert names(pick_pods([idle, busy_unready, pending, unscheduled], 4, load)) == ["s", "p", "u", "i"]


def test_ties_go_to_the_newest_and_marked_pods_are_reused() -> None:
    old, new = pod("old", created="2025-01-01T00:00:00Z"), pod("new", created="2025-01-02T00:00:00Z")
    assert names(pick_pods([old, new], 1, {})) == ["new"]
    marked = pod("old2", marked=True)
    # a drain sent again reuses the pod picked the first time, even if another is idler now
    assert names(pick_pods([new, marked], 1, {"old2": 7})) == ["old2"]


def test_terminating_and_finished_pods_are_not_candidates() -> None:
    pods = [pod("t", deleting=True), pod("f", phase="Failed", ready=False), pod("r")]
    assert names(pick_pods(pods, 3, {})) == ["r"]


def test_statefulset_drains_its_highest_ordinals() -> None:
    pods = [pod("web-0"), pod("web-2"), pod("web-1")]
    assert names(pick_pods(pods, 2, {"web-2": 99}, by_ordinal=True)) == ["web-2", "web-1"]


def test_victim_cost_is_below_every_pod_that_stays() -> None:
    assert victim_cost([]) == -1000
    assert victim_cost([pod("a"), pod("b", cost=5)]) == -1000
    assert victim_cost([pod("a", cost=-50)]) == -1050
    assert victim_cost([pod("a", cost=INT32_MIN + 10)]) == INT32_MIN


def test_engines_map_to_pods_by_name_then_by_ip() -> None:
    pods = [pod("pf-abc", ip="10.0.0.5"), pod("pf-def", ip="10.0.0.6"), pod("pf-ghi", ip="10.0.0.7")]
    engines = [
        EngineRef(worker_id="pf-abc", metrics_url="http://10.0.0.6:8000/metrics"),  # the name wins
        EngineRef(worker_id="w-17", metrics_url="http://10.0.0.6:8000/metrics"),
        EngineRef(worker_id="w-18", zmq_endpoint="tcp://10.0.0.7:20380"),
        EngineRef(worker_id="elsewhere", metrics_url="http://10.9.9.9:8000/metrics"),
    ]
    owned = engines_by_pod(pods, engines)
    assert owned == {"pf-abc": ["pf-abc"], "pf-def": ["w-17"], "pf-ghi": ["w-18"]}
    loads = pod_loads(pods, owned, {"pf-abc": 3, "w-17": 1, "w-18": 4})
    assert loads == {"pf-abc": 3, "pf-def": 1, "pf-ghi": 4}
    # no engine known for a pod: a snapshot worker named like the pod, else idle
    assert pod_loads([pod("x"), pod("y")], {}, {"x": 2}) == {"x": 2, "y": 0}


def test_going_away_counts_terminating_and_not_yet_deleted_pods() -> None:
    three = [pod("a"), pod("b"), pod("c")]
    assert going_away(three, 3) == 0
    assert going_away(three, 2) == 1  # written, the controller has not deleted one yet
    assert going_away([pod("a"), pod("b"), pod("c", deleting=True)], 2) == 1
    assert going_away([pod("a"), pod("b"), pod("c", phase="Succeeded", ready=False)], 2) == 0
    assert going_away([pod("a", deleting=True), pod("b", deleting=True)], 0) == 2


def test_parse_pod_and_selector() -> None:
    p = parse_pod(
        {
            "metadata": {
                "name": "pf-1",
                "creationTimestamp": "2025-03-01T10:00:00Z",
                "deletionTimestamp": "2025-03-01T11:00:00Z",
                "annotations": {DELETION_COST: "-7", DRAIN_MARK: "1.0"},
            },
            "spec": {"nodeName": "n3"},
            "status": {
                "phase": "Running",
                "podIP": "10.1.2.3",
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    assert (p.name, p.ip, p.node, p.ready, p.deleting, p.cost, p.marked) == (
        "pf-1",
        "10.1.2.3",
        "n3",
        True,
        True,
        -7,
        True,
    )
    assert not p.serving  # terminating
    assert parse_pod({"metadata": {"name": "x", "annotations": {DELETION_COST: "lots"}}}).cost == 0
    assert [q.name for q in parse_pods({"items": [{"metadata": {"name": "a"}}, "junk"]})] == ["a"]
    assert parse_pods("not a PodList") == []
    assert selector_string({"tier": "w", "app": "x"}) == "app=x,tier=w"


def rec(name: str, index: int, phase: Phase = Phase.RUNNING) -> WorkerRecord:
    return WorkerRecord(name=name, component="decode", index=index, phase=phase, started_at_s=index + 1.0)


def test_slots_keep_draining_ones_while_pods_go_away() -> None:
    known = {r.name: r for r in (rec("decode-0", 0), rec("decode-1", 1), rec("decode-2", 2, Phase.DRAINING))}
    seen = slots("decode", 2, 2, 1, known)
    assert [(s.name, s.ready) for s in seen] == [("decode-0", True), ("decode-1", True), ("decode-2", False)]
    # the pod is gone: the draining slot leaves the listing
    assert [s.name for s in slots("decode", 2, 2, 0, known)] == ["decode-0", "decode-1"]


def test_new_slots_never_take_a_draining_slots_name() -> None:
    known = {r.name: r for r in (rec("decode-0", 0), rec("decode-1", 1, Phase.DRAINING))}
    seen = slots("decode", 2, 1, 1, known)
    assert [(s.name, s.ready) for s in seen] == [("decode-0", True), ("decode-2", False), ("decode-1", False)]
