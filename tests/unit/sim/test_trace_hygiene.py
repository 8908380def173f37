"""Bad traces get a clear error naming the file and line; --jitter-s spreads quantised arrivals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner_sim.traces import TraceError, TraceRequest, jitter_arrivals, read_azure_csv, read_mooncake_jsonl

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
GOOD = ["2023-11-16 18:15:47.0000000,100,10", "2023-11-16 18:15:48.5000000,200,20"]


@pytest.mark.parametrize(
    ("bad_row", "words"),
    [
        ("2023-11-16 18:15:49.0000000,nan,10", "ContextTokens is not finite"),
        ("2023-11-16 18:15:49.0000000,100,-5", "GeneratedTokens must be > 0"),
        ("2023-11-16 18:15:49.0000000,12.5,10", "not a whole number"),
        ("2023-11-16 18:15:49.0000000,abc,10", "not a number"),
        ("nan,100,10", "does not match format"),
        ("2023-11-16 18:15:40.0000000,100,10", "unsorted"),
    ],
)
def test_azure_bad_line_names_the_line(tmp_path: Path, bad_row: str, words: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "\n".join([*GOOD, bad_row, GOOD[1].replace("48.5", "59.0")]) + "\n")
    with pytest.raises(TraceError) as err:
        read_azure_csv(path, on_error="raise")
    assert err.value.line == 4
    assert str(err.value).startswith(f"{path}:4: ")
    assert words in str(err.value)
    skipped = read_azure_csv(path)  # skip mode: the bad line is dropped and reported
    assert [e.line for e in skipped.errors] == [4]
    assert len(skipped.requests) == 3


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ({"timestamp": float("nan"), "input_length": 5, "output_length": 5}, "bad timestamp"),
        ({"timestamp": -1.0, "input_length": 5, "output_length": 5}, "bad timestamp"),
        ({"timestamp": 3000.0, "input_length": -5, "output_length": 5}, "input_length must be > 0"),
        (
            {"timestamp": 3000.0, "input_length": 5, "output_length": float("nan")},
            "output_length is not finite",
        ),
        ({"timestamp": 500.0, "input_length": 5, "output_length": 5}, "unsorted"),
        ({"timestamp": 3000.0, "output_length": 5}, "missing field"),
    ],
)
def test_mooncake_bad_line_names_the_line(tmp_path: Path, bad: dict[str, float], words: str) -> None:
    rows = [
        {"timestamp": 0.0, "input_length": 5, "output_length": 5},
        {"timestamp": 1000.0, "input_length": 5, "output_length": 5},
        bad,
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(TraceError) as err:
        read_mooncake_jsonl(path, on_error="raise")
    assert err.value.line == 3
    assert f"{path}:3: " in str(err.value) and words in str(err.value)


def test_jitter_spreads_arrivals_inside_their_step() -> None:
    reqs = [TraceRequest(float(t), 10, 5) for t in (0, 0, 0, 0, 2, 2, 2, 2) for _ in range(50)]
    out = jitter_arrivals(reqs, 2.0, seed=1)
    t = np.array([r.arrival_s for r in out])
    assert len(out) == len(reqs) and np.all(np.diff(t) >= 0)
    assert np.all((t >= 0) & (t < 4.0))
    assert ((t >= 0) & (t < 2)).sum() == 200  # each arrival stays inside its own 2 s step
    assert len(np.unique(t)) == len(t)  # no burst left
    assert abs(float(np.mean(t[t < 2])) - 1.0) < 0.15  # uniform: mean mid-step
    assert jitter_arrivals(reqs, 2.0, seed=1) == out  # seeded
    assert jitter_arrivals(reqs, 0.0) == reqs
    with pytest.raises(ValueError, match="jitter_s"):
        jitter_arrivals(reqs, -1.0)
