"""Merging frontier JSON files: a re-run policy replaces its old frontier, only like with like."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "frontier_merge.py"
_spec = importlib.util.spec_from_file_location("planner_tests_frontier_merge", SCRIPT)
assert _spec is not None and _spec.loader is not None
fm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fm)


def doc(policies: dict[str, float], ttft_ms: float = 500.0, clairvoyant: float = 5.0) -> dict[str, Any]:
    return {
        "settings": {"traces": ["t"], "ttft_target_ms": ttft_ms, "policies": list(policies)},
        "traces": [
            {
                "trace": "t",
                "path": "t.csv",
                "requests": 100,
                "infeasible_requests": 0,
                "horizon_s": 60.0,
                "warmup_s": 0.0,
                "oracle": {"gpu_hours": 4.0},
                "clairvoyant": {"gpu_hours": clairvoyant, "startup_s": 120.0},
                "policies": [
                    {
                        "policy": name,
                        "gpu_hours_at_99_pct": gh,
                        "frontier": [{"knob": 1.0, "gpu_hours": gh, "sla_attainment_pct": 99.5}],
                    }
                    for name, gh in policies.items()
                ],
            }
        ],
    }


def test_a_rerun_policy_replaces_its_frontier_and_the_others_stay() -> None:
    merged = fm.merge([doc({"static": 7.0, "combined": 6.0}), doc({"combined": 5.5, "new": 9.0})])
    got = {p["policy"]: p["gpu_hours_at_99_pct"] for p in merged["traces"][0]["policies"]}
    assert got == {"static": 7.0, "combined": 5.5, "new": 9.0}
    assert merged["settings"]["policies"] == ["static", "combined", "new"]
    (plot,) = fm.plot_data(merged)
    assert plot.clairvoyant_gpu_hours == 5.0 and plot.policies["combined"][0].gpu_hours == 5.5


@pytest.mark.parametrize(
    ("other", "words"),
    [
        (doc({"combined": 5.5}, ttft_ms=300.0), "other settings than file 1 (ttft_target_ms)"),
        (doc({"combined": 5.5}, clairvoyant=4.0), "another clairvoyant limit"),
    ],
)
def test_runs_of_other_settings_are_refused(other: dict[str, Any], words: str, tmp_path: Path) -> None:
    with pytest.raises(fm.MergeError, match=words.replace("(", r"\(").replace(")", r"\)")):
        fm.merge([doc({"combined": 6.0}), other])
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(doc({"combined": 6.0})))
    b.write_text(json.dumps(other))
    run = subprocess.run([sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True, text=True)
    assert run.returncode == 2 and words in run.stderr and "Traceback" not in run.stderr
