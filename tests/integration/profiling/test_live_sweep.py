"""The live profiler against spawned engine-sim processes (embedded nats-server): a tiny grid at high
time compression; the measured profile agrees with the engine's timing model and round-trips into the
decider's interpolators."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from planner_cli.profiler.live import LiveConfig, run_live
from planner_core.engine.timing import fit_calibrated, lone_ttft_s
from planner_core.interpolation import DecodeInterpolator, PrefillInterpolator
from planner_core.profile import load_decode, load_prefill
from planner_core.profiling import SweepConfig

pytestmark = pytest.mark.integration


def test_live_sweep_spawned_engine_sim(shared_data: Path, tmp_path: Path) -> None:
    dyn = shared_data / "dynamo"
    cfg = LiveConfig(
        tps=[1],
        sweep=SweepConfig(prefill_points=3, repetitions=2, decode_contexts=2, concurrency_points=2, osl=120),
        out=tmp_path,
        ttft_ms=200.0,
        itl_ms=20.0,
        isl=1000,
        osl=100,
        spawn=True,
        timing="calibrated",
        profile_dir=str(dyn),
        time_compression=25.0,
        prefill_compression=4.0,
        context_length_tokens=4096,
        max_num_batched_tokens=4096,
        max_num_seqs=32,
        show_progress=False,
    )
    t0 = time.monotonic()
    data, results = run_live(cfg)
    assert time.monotonic() - t0 < 40.0
    assert data["prefill"]["tp"] == 1 and data["decode"]["tp"] == 1
    for name in ("prefill_raw_data", "decode_raw_data"):
        for suffix in (".npz", ".json"):
            assert (tmp_path / f"{name}{suffix}").is_file()
            assert (tmp_path / "tp1" / f"{name}{suffix}").is_file()
    for png in ("prefill_ttft.png", "decode_itl.png", "throughput_per_gpu.png"):
        assert (tmp_path / png).stat().st_size > 1000
    assert json.loads((tmp_path / "profile_summary.json").read_text())["tp"]["1"]["failed_requests"] == 0

    # the engine's own timing model: the measurements follow it
    timing = fit_calibrated(
        load_prefill(dyn / "h200_llama31_8b_fp8_tp1_prefill_raw_data.npz"),
        load_decode(dyn / "h200_llama31_8b_fp8_tp1_decode_raw_data.npz"),
    )
    r = results[0]
    assert r.decode.max_kv_tokens == r.limits.max_kv_tokens > 0
    expected_ttft = [lone_ttft_s(timing, int(isl), 4096) * 1000 for isl in r.prefill.isl_tokens]
    # TTFT and ITL are read off the engine's own clock (arrival and token stamps): they follow the
    # model (the first pass starts at the arrival), also on a loaded machine
    for isl, ttft, expected in zip(r.prefill.isl_tokens, r.prefill.ttft_ms, expected_ttft, strict=True):
        assert ttft == pytest.approx(expected, rel=0.02, abs=1.0), isl
    for kv, ctx, itl in zip(r.decode.kv_usage, r.decode.context_length_tokens, r.decode.itl_ms, strict=True):
        n = round(kv * r.decode.max_kv_tokens / ctx)
        expected = timing.pass_time_s(0, 0, n, int(n * ctx)) * 1000
        assert itl == pytest.approx(expected, rel=0.02), (n, ctx)

    # round trip: our files -> the decider's loaders and interpolators -> the measured points
    pi = PrefillInterpolator(load_prefill(tmp_path / "prefill_raw_data.npz"))
    for isl, ttft in zip(r.prefill.isl_tokens, r.prefill.ttft_ms, strict=True):
        assert pi.ttft_ms(isl) == pytest.approx(ttft, rel=1e-6)
    di = DecodeInterpolator(load_decode(tmp_path / "decode_raw_data.json"))
    for kv, ctx, itl in zip(r.decode.kv_usage, r.decode.context_length_tokens, r.decode.itl_ms, strict=True):
        assert di.itl_ms(kv, ctx) == pytest.approx(itl, rel=0.05)
