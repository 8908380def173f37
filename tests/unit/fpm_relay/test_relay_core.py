"""Pure parts of the relay: static engine specs, settings checks, sequence accounting, rendezvous
hashing and the open/close plan."""

from __future__ import annotations

import collections

import pytest

from planner_fpm_relay.sequence import advance
from planner_fpm_relay.settings import FpmRelaySettings
from planner_fpm_relay.sharding import owned, owner, plan
from planner_fpm_relay.targets import EngineTarget, TargetError, parse_static_engine, target_from_info
from planner_proto import Component, EngineInfo
from planner_runtime.settings import SettingsError, load_settings


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("prefill:w0=tcp://127.0.0.1:20380",
         EngineTarget(component="prefill", worker_id="w0", zmq_endpoint="tcp://127.0.0.1:20380")),
        ("decode:v-1=vllm+http://10.0.0.2:8000/metrics",
         EngineTarget(component="decode", worker_id="v-1", metrics_url="http://10.0.0.2:8000/metrics",
                      engine_kind="vllm")),
        ("agg:l_0=llamacpp+https://h/metrics",
         EngineTarget(component="agg", worker_id="l_0", metrics_url="https://h/metrics", engine_kind="llamacpp")),
    ],
)  # fmt: skip
def test_parse_static_engine(spec: str, want: EngineTarget) -> None:
    assert parse_static_engine(spec) == want


@pytest.mark.parametrize(
    "spec",
    ["prefill:w0", "w0=tcp://h:1", "gpu:w0=tcp://h:1", "prefill:w.0=tcp://h:1", "prefill:w0=http://h/metrics",
     "prefill:w0=tgi+http://h/metrics"],
)  # fmt: skip
def test_parse_static_engine_rejects(spec: str) -> None:
    with pytest.raises(ValueError):
        parse_static_engine(spec)


def test_settings_errors_name_the_field() -> None:
    with pytest.raises(SettingsError, match="relay_heartbeat_s"):
        load_settings(FpmRelaySettings, flags={"relay_ttl_s": 3.0, "relay_heartbeat_s": 2.0}, env={})
    with pytest.raises(SettingsError, match="listed twice"):
        load_settings(FpmRelaySettings, flags={"static_engines": "agg:a=tcp://h:1,agg:a=tcp://h:2"}, env={})
    s = load_settings(FpmRelaySettings, env={"PLANNER_STATIC_ENGINES": "agg:a=tcp://h:1, decode:b=tcp://h:2"})
    assert s.static_engines == ["agg:a=tcp://h:1", "decode:b=tcp://h:2"] and s.validate and s.sharding


def test_target_from_info() -> None:
    fpm = EngineInfo(namespace="t", component=Component.DECODE, worker_id="w", zmq_endpoint="tcp://h:1")
    assert target_from_info(fpm).is_fpm
    scrape = EngineInfo(namespace="t", component=Component.AGG, worker_id="s", metrics_url="http://h/m",
                        engine_kind="sglang")  # fmt: skip
    assert target_from_info(scrape).is_scrape
    with pytest.raises(TargetError):  # engine-sim without a ZMQ endpoint: nothing to relay
        target_from_info(
            EngineInfo(namespace="t", component=Component.AGG, worker_id="x", metrics_url="http://h")
        )
    with pytest.raises(TargetError):
        target_from_info(
            EngineInfo(namespace="t", component=Component.AGG, worker_id="a.b", zmq_endpoint="tcp://h:1")
        )


@pytest.mark.parametrize(
    ("last", "seq", "want"),
    [
        (None, 17, (0, False)),  # first message after joining: never a gap
        (4, 5, (0, False)),
        (4, 8, (3, False)),  # 5, 6, 7 lost
        (4, 4, (0, True)),  # repeated: the engine restarted its counter
        (900, 1, (0, True)),
        (2**64 - 2, 2**64 - 1, (0, False)),
    ],
)
def test_advance(last: int | None, seq: int, want: tuple[int, bool]) -> None:
    assert advance(last, seq) == want


def test_rendezvous_is_balanced_and_stable() -> None:
    keys = [f"decode.w{i}" for i in range(600)]
    members = ["r1", "r2", "r3"]
    before = {k: owner(k, members) for k in keys}
    counts = collections.Counter(before.values())
    assert all(150 <= n <= 250 for n in counts.values()), counts  # ~200 each
    after = {k: owner(k, ["r1", "r3"]) for k in keys}  # r2 leaves: only its keys move
    moved = {k for k in keys if before[k] != after[k]}
    assert moved == {k for k in keys if before[k] == "r2"}
    assert owner("x", []) is None
    assert owned(keys, ["r1", "r3"], "r2") == {k for k in keys if owner(k, ["r1", "r2", "r3"]) == "r2"}


def test_plan() -> None:
    a = EngineTarget(component="agg", worker_id="a", zmq_endpoint="tcp://h:1")
    b = EngineTarget(component="agg", worker_id="b", zmq_endpoint="tcp://h:2")
    b2 = EngineTarget(component="agg", worker_id="b", zmq_endpoint="tcp://h:9")
    c = EngineTarget(component="agg", worker_id="c", zmq_endpoint="tcp://h:3")
    p = plan({"agg.a": a, "agg.b": b2}, {"agg.b": b, "agg.c": c})
    assert (p.open, p.close, p.reopen) == (("agg.a",), ("agg.c",), ("agg.b",))
    assert plan({"agg.a": a}, {"agg.a": a}) == plan({}, {})
