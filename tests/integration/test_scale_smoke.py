"""The scale harness (benchmarks/bench_scale.py) in small: 30 engines for ~10 s through 3 relays into
the regression and decider processes. Every engine must reach the snapshots, the snapshot cadence must
hold and the decider must tick."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from scale.config import ScaleConfig
from scale.pipeline import run

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_scale_smoke() -> None:
    cfg = ScaleConfig(
        engines=30,
        rate=20.0,
        duration_s=8.0,
        decider_interval_s=1.0,
        warmup_timeout_s=20.0,
        stop_timeout_s=8.0,
    )
    res = run(cfg, log=lambda _msg: None)

    assert res["discovery"]["all_in_snapshots_after_registration_s"] is not None, res["discovery"]
    snaps = res["regression"]["snapshots"]
    assert sum(s["workers_min"] for s in snaps.values()) == 30, snaps
    assert all(s["held"] for s in snaps.values()), snaps
    assert res["relay_total"]["engines_silent"] == 0
    assert res["relay_total"]["engines_on_two_relays"] == 0
    assert res["relay_total"]["relayed_per_s"] > 0.5 * res["offered_per_s"], res["relay_total"]
    assert res["decider"]["tick"]["count"] >= 5, res["decider"]
    assert not res["dead"], res["dead"]
