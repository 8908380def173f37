"""Oracle lower bound and the ``planner bench --json`` command on a tiny synthetic trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner_cli.main import main
from planner_sim.oracle import decode_rate_tok_per_s, oracle
from planner_sim.policies import BASE_POLICIES, reference_release
from planner_sim.traces import TraceRequest, synthetic
from tests.unit.sim.sim_helpers import TIMING, settings


def _write_jsonl(path: Path, reqs: list[TraceRequest]) -> None:
    lines = [
        json.dumps(
            {
                "timestamp": r.arrival_s * 1000.0,
                "input_length": r.input_tokens,
                "output_length": r.output_tokens,
            }
        )
        for r in reqs
    ]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def bench_json(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> dict[str, object]:
    reqs = synthetic("step", 120.0, 4.0, 1000, 100, peak_rate_per_s=12.0, length_jitter=0.4, seed=3)
    path = tmp_path_factory.mktemp("bench") / "step.jsonl"
    _write_jsonl(path, reqs)
    out = tmp_path_factory.mktemp("out") / "stdout.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(
            [
                "bench",
                "--trace", str(path),
                "--profile", str(shared_data / "dynamo"),
                "--peak-gpus", "0",
                "--startup-s", "30",
                "--forecasters", "kalman",
                "--json",
            ]
        )  # fmt: skip
    assert code == 0
    out.write_text(buf.getvalue())
    data: dict[str, object] = json.loads(buf.getvalue())
    return data


def test_bench_json_lists_every_policy(bench_json: dict[str, object]) -> None:
    traces = bench_json["traces"]
    assert isinstance(traces, list) and len(traces) == 1
    names = [p["policy"] for p in traces[0]["policies"]]
    assert names == [*BASE_POLICIES, "combined[kalman]"]
    for p in traces[0]["policies"]:
        assert p["finished"] == p["requests"] == traces[0]["requests"]
        assert 0.0 <= p["sla_attainment_pct"] <= 100.0


def test_bench_json_new_fields(bench_json: dict[str, object]) -> None:
    t = bench_json["traces"][0]  # type: ignore[index]
    clv = t["clairvoyant"]["gpu_hours"]
    assert clv >= t["oracle"]["gpu_hours"]
    assert t["infeasible_requests"] >= 0
    for p in t["policies"]:
        assert p["ratio_to_clairvoyant"] == pytest.approx(p["gpu_hours"] / clv, rel=0.01)
        reached = p["sla_attainment_pct"] >= 99.0
        assert (p["gpu_hours_at_99_pct"] is not None) == reached
        if reached:
            assert p["gpu_hours_at_99_pct"] == pytest.approx(p["gpu_hours"], abs=1e-3)
        assert p["max_attainment_pct"] == pytest.approx(p["sla_attainment_pct"], abs=0.01)
        assert p["reference"] == reference_release(p["policy"])


def test_oracle_is_below_every_policy_that_meets_the_sla(bench_json: dict[str, object]) -> None:
    """The oracle bounds fleets that meet the SLA (99 % of requests, its own target); a policy that
    under-provisions can hold fewer GPUs, and then it must have missed the SLA."""
    t = bench_json["traces"][0]  # type: ignore[index]
    orc = t["oracle"]["gpu_hours"]
    assert orc > 0
    for p in t["policies"]:
        assert orc <= p["gpu_hours"] + 1e-9 or p["sla_attainment_pct"] < 99.0, p
    assert orc <= t["policies"][0]["gpu_hours"]  # static-peak


def test_oracle_needs_more_at_higher_rate() -> None:
    st = settings()
    low = oracle(synthetic("constant", 120.0, 5.0, 1000, 100, seed=1), st, 50.0, ttft_target_ms=None)
    high = oracle(synthetic("constant", 120.0, 50.0, 1000, 100, seed=1), st, 50.0, ttft_target_ms=None)
    assert high.peak_gpu_need > 5 * low.peak_gpu_need
    assert high.gpu_hours >= low.gpu_hours


def test_decode_rate_meets_itl() -> None:
    # TIMING decode pass = 5 ms + 0.1 ms/request: at most 450 requests in 50 ms, capped by max_num_seqs 64
    rate = decode_rate_tok_per_s(settings(), 50.0, 1000.0)
    assert rate == pytest.approx(64 / (TIMING.decode_ms(64, 64000) / 1e3))


def test_bench_frontier_and_calibrated_peak(
    tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--frontier sweeps each knob, --peak-gpus lands the oracle's peak on N, --plot draws the chart."""
    reqs = synthetic("step", 90.0, 1.0, 800, 40, peak_rate_per_s=3.0, length_jitter=0.3, seed=5)
    path = tmp_path / "step.jsonl"
    _write_jsonl(path, reqs)
    png = tmp_path / "frontier.png"
    args = ["bench", "--trace", str(path), "--profile", str(shared_data / "dynamo"), "--startup-s", "30"]
    args += ["--policies", "static-average", "--frontier", "--peak-gpus", "3", "--json"]
    args += ["--ttft-ms-per-1k-isl", "20", "--jitter-s", "1", "--plot", str(png)]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    t = data["traces"][0]
    assert abs(t["oracle"]["peak_gpus"] - 3) <= 1
    assert t["rate_scale"] > 1.0
    rows = {p["policy"]: p for p in t["policies"]}
    assert set(rows) == {"static"}
    assert len(rows["static"]["frontier"]) == 9
    static = rows["static"]
    # more fleet, more GPU-hours; the biggest static fleet meets the SLA
    gh = [q["gpu_hours"] for q in static["frontier"]]
    assert gh == sorted(gh)
    assert static["max_attainment_pct"] >= 99.0 and static["gpu_hours_at_99_pct"] is not None
    assert static["gpu_hours_at_99_pct"] >= t["clairvoyant"]["gpu_hours"] * 0.9
    assert png.stat().st_size > 10_000


def test_bench_bad_trace_is_a_clear_error(
    tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 5}\n{"timestamp": "nan", "input_length": 5, "output_length": 5}\n'
    )
    profile = str(shared_data / "dynamo")
    assert main(["bench", "--trace", str(path), "--profile", profile, "--json"]) == 2
    assert f"{path}:2: bad timestamp" in capsys.readouterr().err


def test_bench_startup_sweep(tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reqs = synthetic("step", 120.0, 1.0, 800, 30, peak_rate_per_s=4.0, seed=6)
    path = tmp_path / "step.jsonl"
    _write_jsonl(path, reqs)
    args = ["bench", "--trace", str(path), "--profile", str(shared_data / "dynamo"), "--peak-gpus", "0"]
    assert main([*args, "--policies", "static-average", "--startup-sweep", "--json"]) == 0
    traces = json.loads(capsys.readouterr().out)["traces"]
    assert [t["trace"] for t in traces] == [f"step startup {s}s" for s in (0, 30, 60, 120, 180, 300)]
    assert [t["settings"]["startup_s"] for t in traces] == [0, 30, 60, 120, 180, 300]
    clv = [t["clairvoyant"]["gpu_hours"] for t in traces]
    assert clv == sorted(clv) and clv[0] == pytest.approx(traces[0]["oracle"]["gpu_hours"], abs=1e-3)


def test_bench_scenario(shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The sinusoid scenario brings its own trace, SLA (3 s / 35 ms) and rate (no rate scaling)."""
    args = ["bench", "--scenario", "sinusoid", "--duration-s", "60", "--profile", str(shared_data / "dynamo")]
    assert main([*args, "--policies", "static-peak", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["settings"]["ttft_target_ms"], data["settings"]["itl_target_ms"]) == (3000.0, 35.0)
    t = data["traces"][0]
    assert t["trace"] == "sinusoid" and t["rate_scale"] == 1.0
    assert 40 <= t["requests"] <= 160  # 1 req/s rising over the first minute


def test_bench_warmup(tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--warmup-s: the same run, scored from then on for every policy and both oracles."""
    reqs = synthetic("step", 120.0, 1.0, 800, 30, peak_rate_per_s=4.0, seed=6)
    path = tmp_path / "step.jsonl"
    _write_jsonl(path, reqs)
    args = ["bench", "--trace", str(path), "--profile", str(shared_data / "dynamo"), "--peak-gpus", "0"]
    args += ["--policies", "static-average", "--json"]
    assert main(args) == 0
    cold = json.loads(capsys.readouterr().out)["traces"][0]
    assert main([*args, "--warmup-s", "60"]) == 0
    warm = json.loads(capsys.readouterr().out)["traces"][0]
    assert (cold["warmup_s"], warm["warmup_s"]) == (0, 60)
    assert warm["requests"] == cold["requests"]  # the whole trace is run
    late = sum(1 for r in reqs if r.arrival_s >= 60.0)
    assert 0 < late < len(reqs)
    for kind in ("oracle", "clairvoyant"):
        assert 0 < warm[kind]["gpu_hours"] < cold[kind]["gpu_hours"]
    assert 0 < warm["policies"][0]["gpu_hours"] < cold["policies"][0]["gpu_hours"]
    assert main([*args, "--warmup-s", "500"]) == 2
    assert "warmup_s 500 leaves nothing" in capsys.readouterr().err
