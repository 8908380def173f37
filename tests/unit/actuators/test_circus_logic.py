"""Pure parts of actuator-circus: command template, names, GPU placement, victims, decision choice."""

from __future__ import annotations

import pytest

from planner_actuator_circus.command import TemplateError, WorkerCommand
from planner_actuator_circus.planning import allocate, budget_error, next_index, pick_victims
from planner_actuator_circus.settings import CircusActuatorSettings, parse_component_map
from planner_actuator_circus.state import Phase, WorkerRecord, name_pattern, parse_watcher_name, watcher_name
from planner_proto import Component, ScalingDecision
from planner_runtime.decisions import on_takeover, select
from planner_runtime.settings import SettingsError, load_settings

TEMPLATE = "/usr/bin/engine --worker-id {worker_id} --component={component} --url {nats_url} x{index}"
GOOD = {
    "worker_id": "ns_prefill_0",
    "component": "prefill",
    "namespace": "ns",
    "nats_url": "nats://127.0.0.1:4222",
    "index": "0",
    "gpus": "0,1",
}


def rec(
    name: str, comp: str = "prefill", idx: int = 0, gpus: list[int] | None = None, **kw: object
) -> WorkerRecord:
    return WorkerRecord(name=name, component=Component(comp), index=idx, gpus=gpus or [], **kw)  # type: ignore[arg-type]


def test_template_renders_one_argv_item_per_word() -> None:
    argv, env = WorkerCommand.parse(TEMPLATE, ["ROLE={component}"]).render(GOOD)
    assert argv == [
        "/usr/bin/engine",
        "--worker-id",
        "ns_prefill_0",
        "--component=prefill",
        "--url",
        "nats://127.0.0.1:4222",
        "x0",
    ]
    assert env == {"ROLE": "prefill"}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("worker_id", "a;rm -rf /"),
        ("worker_id", "a b"),
        ("worker_id", "$(circus.env.home)"),
        ("component", "prefill && reboot"),
        ("namespace", "x`id`"),
        ("nats_url", "nats://h:1 --evil"),
        ("nats_url", "nats://$(circus.wid)"),
        ("index", "1;2"),
        ("gpus", "0;1"),
    ],
)
def test_template_rejects_injection(key: str, value: str) -> None:
    with pytest.raises(TemplateError):
        WorkerCommand.parse(TEMPLATE).render({**GOOD, key: value})


@pytest.mark.parametrize(
    "template",
    [
        "",
        "{worker_id} --x",
        "engine {unknown}",
        "engine {worker_id!r}",
        "engine {index:>5}",
        "engine 'unclosed",
    ],
)
def test_bad_templates_are_refused_at_start(template: str) -> None:
    with pytest.raises(TemplateError):
        WorkerCommand.parse(template)


def test_settings_validation() -> None:
    s = load_settings(
        CircusActuatorSettings,
        flags={"gpu_pool": "0,1,2", "gpus_per_worker": "prefill=1,decode=2", "components": "prefill,decode"},
        env={},
    )
    assert s.gpu_pool == [0, 1, 2] and s.gpus_for("decode") == 2 and s.gpus_for("agg") == 1
    for bad in (
        {"gpu_pool": "0,0"},
        {"gpus_per_worker": "bogus=1"},
        {"worker_cmd": "x {evil}"},
        {"namespace": "a;b"},
        {"worker_env": "CUDA_VISIBLE_DEVICES=1"},
    ):
        with pytest.raises(SettingsError):
            load_settings(CircusActuatorSettings, flags=bad, env={})
    assert parse_component_map(["prefill=2"], "x") == {"prefill": 2}


def test_watcher_names_round_trip_and_reject_strangers() -> None:
    pat = name_pattern("My-NS")
    assert watcher_name("My-NS", "decode", 3) == "my-ns_decode_3"
    assert parse_watcher_name(pat, "my-ns_decode_3") == (Component.DECODE, 3)
    for other in ("my-ns_decode_x", "other_decode_1", "my-ns_decode_1;rm", "my-ns_router_1", "my-ns_decode_"):
        assert parse_watcher_name(pat, other) is None


def test_gpu_allocation_never_exceeds_pool() -> None:
    pool = [0, 1, 2, 3]
    held = [rec("a", gpus=[0]), rec("b", gpus=[2], phase=Phase.DRAINING)]
    assert allocate(pool, held, 2) == [1, 3]  # draining workers still hold their GPU
    assert allocate(pool, held, 3) is None
    assert allocate(pool, [], 0) == []


@pytest.mark.parametrize(
    ("targets", "others", "pool", "ok"),
    [
        ({"prefill": 2, "decode": 2}, [], 4, True),  # 2*1 + 2*1 = 4 <= 4
        ({"prefill": 3, "decode": 2}, [], 4, False),  # 5 > 4
        ({"decode": 2}, [rec("p", gpus=[0, 1])], 4, True),  # 2 + 2 = 4
        ({"decode": 3}, [rec("p", gpus=[0, 1])], 4, False),  # 3 + 2 = 5
        ({"decode": 3}, [rec("p", gpus=[0, 1], phase=Phase.DRAINING)], 4, True),  # draining ones leave
    ],
)
def test_budget(targets: dict[str, int], others: list[WorkerRecord], pool: int, ok: bool) -> None:
    err = budget_error(targets, {"prefill": 1, "decode": 1}, pool, others)
    assert (err == "") is ok


def test_next_index_reuses_gaps() -> None:
    assert next_index([]) == 0
    assert next_index([0, 1, 3]) == 2


def test_victims_prefer_unready_then_least_loaded_then_newest() -> None:
    a = rec("a", idx=0, started_at_s=1.0)
    b = rec("b", idx=1, started_at_s=2.0)
    c = rec("c", idx=2, started_at_s=3.0)
    ready = {"a", "b", "c"}
    assert [w.name for w in pick_victims([a, b, c], 1, ready, {})] == ["c"]  # no load data: newest
    assert [w.name for w in pick_victims([a, b, c], 1, ready, {"a": 0, "b": 4, "c": 9})] == ["a"]
    assert [w.name for w in pick_victims([a, b, c], 2, {"a", "c"}, {"a": 0, "c": 0})] == ["b", "c"]


def d(i: int, advisory: bool = False, ns: str = "t") -> ScalingDecision:
    return ScalingDecision(
        decision_id=i, issued_at_s=0.0, namespace=ns, targets={"prefill": i}, advisory=advisory
    )


@pytest.mark.parametrize(
    ("batch", "last", "apply", "superseded", "ignored"),
    [
        ([d(3)], 0, 3, [], []),
        ([d(3), d(5), d(4)], 2, 5, [3, 4], []),  # newest wins, the others are superseded
        ([d(1), d(2)], 2, None, [], [1, 2]),  # not newer than the last applied
        ([d(6, advisory=True)], 2, None, [], [6]),
        ([d(6, ns="other"), d(4)], 2, 4, [], [6]),
        ([d(5), d(5)], 2, 5, [], [5]),  # redelivery of the same decision
    ],
)
def test_select(
    batch: list[ScalingDecision], last: int, apply: int | None, superseded: list[int], ignored: list[int]
) -> None:
    sel = select(batch, last, "t")
    assert (sel.apply.decision_id if sel.apply else None) == apply
    assert [x.decision_id for x in sel.superseded] == superseded
    assert sorted(x.decision_id for x in sel.ignored) == ignored


@pytest.mark.parametrize(
    ("last", "applied", "completed", "accept", "resume"),
    [
        (None, 4, 0, None, None),
        (d(5), 4, 0, 5, None),  # nobody recorded it: accepted at once, not after the ack wait
        (d(5), 4, 4, 5, None),
        (d(4), 4, 0, None, 4),  # the predecessor's: carried on to its completed ack
        (d(4), 4, 3, None, 4),
        (d(4), 4, 4, None, None),  # already acked completed: not completed twice
        (d(3), 4, 0, None, None),  # older than what was applied (cannot happen with one stream)
        (d(5, advisory=True), 4, 0, None, None),
        (d(4, advisory=True), 4, 0, None, None),
        (d(5, ns="other"), 4, 0, None, None),
    ],
)
def test_on_takeover(
    last: ScalingDecision | None, applied: int, completed: int, accept: int | None, resume: int | None
) -> None:
    take = on_takeover(last, applied, "t", completed)
    assert (take.accept.decision_id if take.accept else None) == accept
    assert (take.resume.decision_id if take.resume else None) == resume
