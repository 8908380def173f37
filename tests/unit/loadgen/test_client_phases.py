"""Closed-loop client phases: parsing, validation naming the setting, and the phase at a time."""

from __future__ import annotations

import pytest

from planner_loadgen.settings import LoadgenSettings, parse_client_phases
from planner_loadgen.workload import build_workload, phase_at
from planner_runtime.settings import SettingsError, load_settings


@pytest.mark.parametrize(
    ("text", "phases"),
    [
        ("1:10,6:25", [(1, 10.0), (6, 25.0)]),
        (" 2:0.5 , 0:3 ", [(2, 0.5), (0, 3.0)]),  # a phase of 0 clients is a pause
        ("4:1", [(4, 1.0)]),
    ],
)
def test_parse_phases(text: str, phases: list[tuple[int, float]]) -> None:
    assert parse_client_phases(text) == phases


@pytest.mark.parametrize("text", ["6", "x:1", "1:x", "-1:5", "2:0", "2:-1", "1:10,", "20000:1", "1:nan"])
def test_bad_phases_name_the_setting(text: str) -> None:
    with pytest.raises(SettingsError, match="clients"):
        load_settings(LoadgenSettings, flags={"clients": text}, env={})


@pytest.mark.parametrize(
    ("elapsed_s", "expected"),
    [
        # phases 1 client for 10 s, then 6 for 25 s: ends at 35 s
        (0.0, (1, 10.0)),
        (9.5, (1, 0.5)),
        (10.0, (6, 25.0)),
        (34.0, (6, 1.0)),
        (35.0, None),
    ],
)
def test_phase_at(elapsed_s: float, expected: tuple[int, float] | None) -> None:
    assert phase_at(((1, 10.0), (6, 25.0)), elapsed_s) == expected


def test_clients_are_a_third_exclusive_source() -> None:
    w = build_workload(LoadgenSettings(clients="1:10,6:25"))
    assert (w.requests, w.phases, w.source) == ([], ((1, 10.0), (6, 25.0)), "clients:1:10,6:25")
    with pytest.raises(SettingsError, match="exactly one of trace"):
        load_settings(LoadgenSettings, flags={"clients": "1:1", "shape": "constant"}, env={})


def test_openai_target_is_agg_only() -> None:
    s = load_settings(LoadgenSettings, flags={"clients": "1:1", "target": "openai"}, env={})
    assert s.target == "openai" and s.mode == "auto"
    with pytest.raises(SettingsError, match="mode must be auto or agg"):
        load_settings(LoadgenSettings, flags={"clients": "1:1", "target": "openai", "mode": "disagg"}, env={})
