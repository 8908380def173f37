"""Bad traces get a clear error naming the file and line; --jitter-s spreads quantised arrivals."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from planner_sim.traces import (
    TraceError,
    TraceRequest,
    jitter_arrivals,
    read_azure_csv,
    read_mooncake_jsonl,
    scale_trace,
)

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


def _poisson(rate_per_s: float, duration_s: float, seed: int, isl: int = 100) -> list[TraceRequest]:
    t = np.cumsum(
        np.random.default_rng(seed).exponential(1.0 / rate_per_s, int(rate_per_s * duration_s * 1.2))
    )
    return [TraceRequest(float(x), isl, 10) for x in t[t < duration_s]]


def _dispersion(reqs: list[TraceRequest], window_s: float) -> float:
    counts = np.bincount((np.array([r.arrival_s for r in reqs]) // window_s).astype(int))[
        :-1
    ]  # last: partial
    return float(counts.var() / counts.mean())


def test_scaling_a_trace_up_adds_users_not_bursts() -> None:
    """12x the rate of a Poisson trace: counts per second keep a variance about their mean (each
    shifted copy is Poisson and the copies are independent within the spread). Repeating each request
    within its own gap would make it 12x burstier (12 requests of one length at a time)."""
    base = _poisson(2.0, 2000.0, seed=3)
    out = scale_trace(base, rate_scale=12.0, seed=5)
    assert abs(len(out) / len(base) - 12.0) < 0.01
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(out))
    assert set(base) <= set(out)  # every original request kept as it was
    assert _dispersion(out, 1.0) < 1.3 and _dispersion(out, 10.0) < 2.0
    assert scale_trace(base, rate_scale=12.0, seed=5) == out  # seeded


def test_scaling_up_follows_the_traces_rate_over_time_and_its_lengths() -> None:
    """A quiet half at 1 req/s (prompts of 100) and a busy half at 4 req/s (prompts of 900): the copies,
    shifted by at most the spread, keep the 1:4 ratio and each half's lengths."""
    quiet = _poisson(1.0, 1000.0, seed=1, isl=100)
    busy = [TraceRequest(r.arrival_s + 1000.0, 900, 10) for r in _poisson(4.0, 1000.0, seed=2)]
    out = scale_trace(quiet + busy, rate_scale=3.5, seed=0, spread_s=60.0)
    t = np.array([r.arrival_s for r in out])
    isl = np.array([r.input_tokens for r in out])
    assert abs(len(out) / (len(quiet) + len(busy)) - 3.5) < 0.05
    assert 3.6 < ((t >= 1060) & (t < 1940)).sum() / ((t >= 60) & (t < 940)).sum() < 4.4
    # away from the boundary and the wrap at the ends, each half holds its own lengths
    assert (isl[(t >= 60) & (t < 940)] == 100).all() and (isl[(t >= 1060) & (t < 1940)] == 900).all()


def test_scaling_down_thins_and_time_scale_compresses() -> None:
    base = _poisson(10.0, 500.0, seed=4)
    thin = scale_trace(base, rate_scale=0.25, seed=0)
    assert abs(len(thin) / len(base) - 0.25) < 0.03 and set(thin) <= set(base)
    fast = scale_trace(base, time_scale=0.1)
    assert [r.arrival_s for r in fast] == pytest.approx([r.arrival_s * 0.1 for r in base])
    assert scale_trace([], rate_scale=3.0) == []
    with pytest.raises(ValueError, match="must be > 0"):
        scale_trace(base, rate_scale=0.0)
    with pytest.raises(ValueError, match="spread_s"):
        scale_trace(base, rate_scale=2.0, spread_s=float("nan"))
