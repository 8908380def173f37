"""What the live profiler writes is what the decider reads: NPZ and JSON both, through
load_prefill/load_decode into the interpolators, give back the measured points."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner_cli.profiler.output import write_profiles
from planner_cli.profiler.runner import TpResult
from planner_core.interpolation import DecodeInterpolator, PrefillInterpolator
from planner_core.profile import DecodeProfile, PrefillProfile, load_decode, load_prefill
from planner_core.profiling import DecodePoint, EngineLimits, decode_profile, prefill_profile


def measured() -> tuple[PrefillProfile, DecodeProfile]:
    isl = [100.0, 2000.0, 4000.0, 6000.0, 8000.0]
    ttft = [20.0 + 0.02 * x + 1e-6 * x * x for x in isl]
    pts = [DecodePoint(i, 200, c, 60_000) for i in (300, 2000, 4000) for c in (1, 4, 8, 12)]
    itl = [4.0 + 0.1 * p.concurrency + 2e-4 * p.concurrency * p.context_tokens for p in pts]
    return prefill_profile(isl, ttft, gpus=1), decode_profile(pts, itl, gpus=1, max_kv_tokens=60_000)


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_profile_round_trips_into_the_interpolators(tmp_path: Path, suffix: str) -> None:
    prefill, decode = measured()
    limits = EngineLimits(60_000, 8192)
    write_profiles(tmp_path, [TpResult(1, limits, prefill, decode)], 1, 1)
    pi = PrefillInterpolator(load_prefill(tmp_path / f"prefill_raw_data{suffix}"))
    for x, y, t in zip(prefill.isl_tokens, prefill.ttft_ms, prefill.thpt_per_gpu, strict=True):
        assert pi.ttft_ms(x) == pytest.approx(y, rel=1e-9)
        assert pi.thpt_per_gpu(x) == pytest.approx(t, rel=1e-9)
    loaded = load_decode(tmp_path / f"decode_raw_data{suffix}")
    assert loaded.max_kv_tokens == 60_000
    di = DecodeInterpolator(loaded)
    for kv, ctx, itl in zip(decode.kv_usage, decode.context_length_tokens, decode.itl_ms, strict=True):
        # the grid snaps to the nearest of 100x100 cells: within a few percent of the measured point
        assert di.itl_ms(kv, ctx) == pytest.approx(itl, rel=0.05)
        conc = kv * decode.max_kv_tokens / ctx
        assert di.itl_at_concurrency_ms(conc, ctx) == pytest.approx(itl, rel=0.05)
    assert (tmp_path / "tp1" / f"decode_raw_data{suffix}").is_file()
