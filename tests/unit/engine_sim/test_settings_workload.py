"""Settings validation, timing choice and workload building (trace errors with file:line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner_engine_sim.settings import EngineSimSettings
from planner_engine_sim.timing_select import choose_timing
from planner_loadgen.settings import LoadgenSettings
from planner_loadgen.workload import build_workload
from planner_runtime.settings import SettingsError, load_settings
from planner_sim.traces import TraceError

BAD_CSV = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.0,100,10\nnot a line\n2023-11-16 18:00:01.0,200,20\n"


def test_loadgen_needs_exactly_one_source() -> None:
    with pytest.raises(SettingsError, match="exactly one of trace"):
        load_settings(LoadgenSettings, env={})
    with pytest.raises(SettingsError, match="exactly one of trace"):
        load_settings(LoadgenSettings, flags={"trace": "x.csv", "shape": "step"}, env={})


def test_engine_settings_validation() -> None:
    with pytest.raises(SettingsError, match="model_config"):
        load_settings(EngineSimSettings, flags={"timing": "roofline"}, env={})
    with pytest.raises(SettingsError, match="time_compression"):
        load_settings(EngineSimSettings, flags={"time_compression": "0"}, env={})
    s = load_settings(EngineSimSettings, flags={"component": "decode", "zmq_port_base": "0"}, env={})
    assert s.component == "decode" and s.zmq_port_base == 0


def test_timing_choice_mocker_and_missing_profile(tmp_path: Path) -> None:
    mocker = choose_timing(EngineSimSettings(timing="mocker", num_gpu_blocks=100))
    assert mocker.kind == "mocker" and mocker.num_gpu_blocks == 100 and mocker.kv_bytes_per_token == 131072
    with pytest.raises(ValueError, match="no h200"):
        choose_timing(EngineSimSettings(profile_dir=str(tmp_path)))


def test_calibrated_timing_from_the_real_profile(shared_data: Path) -> None:
    c = choose_timing(EngineSimSettings(profile_dir=str(shared_data / "dynamo")))
    assert c.kind == "calibrated" and c.num_gpu_blocks == 945029 // 16
    assert 0.002 < c.model.pass_time_s(0, 0, 1, 1000) < 0.02  # one decode step on an H200: a few ms


def test_trace_errors_skip_or_stop(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(BAD_CSV)
    w = build_workload(LoadgenSettings(trace=str(path), time_scale=0.5))
    assert len(w.requests) == 2 and [r.arrival_s for r in w.requests] == [0.0, 0.5]
    assert [(e.path, e.line) for e in w.errors] == [(str(path), 3)]
    with pytest.raises(TraceError) as err:
        build_workload(LoadgenSettings(trace=str(path), on_trace_error="stop"))
    assert str(err.value).startswith(f"{path}:3:")


def test_synthetic_shape_is_cut_by_count_and_duration() -> None:
    w = build_workload(LoadgenSettings(shape="constant", rate_per_s=50, duration_s=10, max_requests=7))
    assert len(w.requests) == 7 and w.source == "synthetic:constant"
    w = build_workload(LoadgenSettings(shape="step", rate_per_s=10, duration_s=10, max_duration_s=2))
    assert w.requests and max(r.arrival_s for r in w.requests) < 2
