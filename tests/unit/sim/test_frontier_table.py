"""The calibration table: ours at the default knob, the static fleet, achieved minus target per knob,
and where asking for more cost less, from the bench's frontier JSON."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "frontier_table.py"
_spec = importlib.util.spec_from_file_location("planner_tests_frontier_table", SCRIPT)
assert _spec is not None and _spec.loader is not None
ft = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ft)


def trace(reversals: list[dict[str, Any]]) -> dict[str, Any]:
    points = [(0.95, 97.0, 4.5), (0.99, 99.4, 5.5)]
    return {
        "trace": "flat",
        "clairvoyant": {"gpu_hours": 5.0},
        "policies": [
            {
                "policy": "combined",
                "knob": 0.99,
                "sla_attainment_pct": 99.4,
                "gpu_hours": 5.5,
                "frontier": [{"knob": k, "sla_attainment_pct": a, "gpu_hours": g} for k, a, g in points],
                "calibration": [
                    {"target": k, "achieved_minus_target_pts": round(a - 100 * k, 2)} for k, a, _ in points
                ],
                "knob_reversals": reversals,
            },
            {
                "policy": "static",
                "knob": 1.0,
                "sla_attainment_pct": 99.0,
                "gpu_hours": 6.0,
                "frontier": [{"knob": 1.0, "sla_attainment_pct": 98.0, "gpu_hours": 6.0}],
            },
        ],
    }


def test_calibration_row_reads_the_default_knob_the_static_fleet_and_each_knob() -> None:
    row = ft.calibration_row(trace([]))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == [
        "flat",
        "5.00",
        "99.4 % / 5.50 (1.10x)",
        "98.0 % / 6.00 (1.20x)",
        "0.95: +2.00, 0.99: +0.40",
        "yes",
    ]


def test_calibration_row_names_the_reversals() -> None:
    rev = [{"knob": 0.8, "gpu_hours": 7.0, "knob_asking_more": 0.9, "gpu_hours_asking_more": 6.0}]
    assert ft.calibration_row(trace(rev)).rstrip().endswith("| no: 0.8 7.00 > 0.9 6.00 |")
