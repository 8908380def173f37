"""The variants bench's table (a variant against the default, where its GPU-hours fall as the knob
rises) and its variant specs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the script imports policy_windows as its sibling
_spec = importlib.util.spec_from_file_location(
    "planner_tests_policy_variants", BENCHMARKS / "policy_variants.py"
)
assert _spec is not None and _spec.loader is not None
pv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pv)


def runs(path: Path, rows: list[tuple[str, float, str, float, float]]) -> Path:
    path.write_text(
        "".join(
            json.dumps(
                {"scenario": s, "knob": k, "variant": v, "settings": [], "sla_pct": a, "gpu_hours": g,
                 "clairvoyant_gpu_hours": 4.0}
            ) + "\n"
            for s, k, v, a, g in rows
        )
    )  # fmt: skip
    return path


def test_the_table_sets_the_variant_beside_the_default_and_finds_a_fall_in_cost(tmp_path: Path) -> None:
    f = runs(
        tmp_path / "r.jsonl",
        [
            ("flat", 0.8, "default", 90.0, 4.5),
            ("flat", 0.8, "v", 94.0, 4.4),
            ("flat", 0.9, "v", 95.0, 4.6),
            ("flat", 0.99, "default", 99.5, 5.4),
            ("flat", 0.99, "v", 99.6, 5.3),
            ("wave", 0.8, "v", 60.0, 11.3),
            ("wave", 0.9, "v", 80.0, 11.1),
            ("wave", 0.99, "v", 99.2, 11.5),
        ],
    )
    lines = pv.table("v", [f]).splitlines()
    assert lines[0].startswith("| trace | clairvoyant GPU-h | 0.99: default | 0.99: v |")
    flat, wave = lines[2], lines[3]
    assert "| 99.5 % / 5.40 | 99.6 % / 5.30 | 90.0 % / 4.50 | 94.0 % / 4.40 | 95.0 % / 4.60 |" in flat
    assert flat.endswith("| 0.8: +14.00, 0.9: +5.00, 0.99: +0.60 | yes (3 knobs) |")
    assert wave.endswith("| no: 0.8 11.30 > 0.9 11.10 (3 knobs) |")
    assert "| - | 99.2 % / 11.50 |" in wave  # no default run: a dash
    # the default set beside a variant as its baseline
    swapped = pv.table("default", [f], against="v").splitlines()
    assert swapped[0].startswith("| trace | clairvoyant GPU-h | 0.99: v | 0.99: default |")
    assert swapped[2].endswith("| 0.8: +10.00, 0.99: +0.50 | yes (2 knobs) |")


@pytest.mark.parametrize("bad", ["nocolon", "default:decode_staffing=1", "x:not_a_field=1", "x:policy=1"])
def test_a_bad_variant_is_refused_before_any_run(bad: str) -> None:
    with pytest.raises(SystemExit):
        pv._variants([bad])


def test_variants_start_with_the_default_unless_told() -> None:
    got = pv._variants(["s:decode_staffing=1;decode_variability=2"])
    assert got == [("default", ()), ("s", ("decode_staffing=1", "decode_variability=2"))]
    assert pv._variants(["s:decode_staffing=1"], default=False) == [("s", ("decode_staffing=1",))]


def test_no_default_and_no_variant_is_refused(shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--scenario", "flat", "--knob", "0.99", "--no-default", "--data", str(shared_data)]
    assert pv.main(args) == 2
    assert capsys.readouterr().err.strip() == "--no-default: give at least one --variant"


def test_unreadable_runs_get_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert pv.main(["--table", "v", str(bad)]) == 2
    assert pv.main(["--table", "v", str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("--table: cannot read the runs") for line in err)
