"""The calibrated serving model as the product uses it: the shipped table, the timing model that
`planner profile --estimate` builds, and its figures against measured engines."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from planner_cli.estimate import write_profile
from planner_cli.main import main
from planner_core.engine.timing import decode_points
from planner_core.hardware import gpu_spec
from planner_core.interpolation import DecodeInterpolator, PrefillInterpolator
from planner_core.modelcfg import QuantConfig, load_model_config
from planner_core.profile import load_decode, load_prefill
from planner_core.profiling import silicon
from planner_core.profiling.calibration import (
    BACKENDS,
    FITTED_FIELDS,
    UnknownBackendError,
    calibrated_params,
    flat_values,
    params_from_values,
    weight_format,
)
from planner_core.profiling.calibration_table import PARAMS
from planner_core.profiling.model_estimate import EstimateError, estimate_model
from planner_core.profiling.serving import ServingParams, ServingTiming, serve

LLAMA70B = "model_configs/meta-llama--Llama-3.1-70B.json"
LLAMA8B = "model_configs/meta-llama--Llama-3.1-8B.json"
# measured with the shipped table (2026-11-25): H200 profile TTFT 18.6 %, ITL 5.7 %; the 90 vLLM
# Llama-3.1-70B FP8 rows at TP 2/4/8 TTFT 19.6 %, TPOT 11.5 % (a refit that loses more fails here)
TTFT_PROFILE_MAX, ITL_PROFILE_MAX = 22.0, 8.0
TTFT_ROWS_MAX, TPOT_ROWS_MAX = 23.0, 14.0
BOUNDS = {n: (lo, hi) for n, lo, hi in (*silicon._SHARED, *silicon._PER_BACKEND)}


def test_table_covers_every_backend_with_every_fitted_field() -> None:
    assert set(PARAMS) == set(BACKENDS)
    for backend, values in PARAMS.items():
        assert set(values) == set(FITTED_FIELDS), backend
        p = calibrated_params(backend)
        for name, v in flat_values(p).items():
            if name in BOUNDS:  # a fitted value sits inside the bounds the fit was given
                lo, hi = BOUNDS[name]
                assert lo <= v <= hi, (backend, name, v)
    # the table was fitted: not the start values; TRT-LLM reserves the whole output up front
    assert calibrated_params("vllm") != ServingParams()
    assert calibrated_params("trtllm").kv_output_share == 1.0
    assert calibrated_params("TRT-LLM") == calibrated_params("trtllm")


def test_values_round_trip_and_unknowns_are_refused() -> None:
    p = calibrated_params("sglang")
    assert params_from_values(flat_values(p)) == p
    with pytest.raises(UnknownBackendError, match="unknown backend 'llamacpp'"):
        calibrated_params("llamacpp")
    with pytest.raises(ValueError, match="unknown fields"):
        params_from_values({"e_gem": 0.5})


@pytest.mark.parametrize(
    ("quant", "fmt"),
    [
        (None, "bf16"),
        (QuantConfig("fp8", 8.0), "fp8"),
        (QuantConfig("compressed-tensors:w8a8-int8", 8.0), "fp8"),  # INT8 tensor cores at the FP8 rate
        (QuantConfig("mxfp4", 4.25, 32), "fp4"),
        (QuantConfig("nvfp4", 4.5, 16), "fp4"),
        (QuantConfig("awq", 4.16, 128), "int4"),  # weight-only: BF16 maths
        (QuantConfig("bitsandbytes-4bit", 4.5, 64), "int4"),
    ],
)
def test_weight_format(quant: QuantConfig | None, fmt: str) -> None:
    assert weight_format(quant) == fmt


def test_lone_ttft_is_the_steady_state_of_one_request(shared_data: Path) -> None:
    m = load_model_config(shared_data / LLAMA70B)
    t = ServingTiming.build(m, gpu_spec("h200"), tp=4, weight_format="fp8", params=calibrated_params("vllm"))
    # serve() at concurrency 1 with no output: TTFT = fixed + prefill (no running batch to wait for)
    est = serve(t, 2048, 0, 1, 1e9)
    assert est.ttft_ms == pytest.approx(t.lone_ttft_s(2048) * 1e3)
    # a decode pass of the profile = the serving model's decode step plus the host cost per request
    step = t.pass_time_s(0, 0, 32, 32 * 3000)
    assert step == pytest.approx(t.raw_pass_s(32, 32 * 3000, 32 * 3000) + 32 * t.params.seq_overhead_s)
    assert t.pass_time_s(0, 0, 0, 0) == 0.0


def test_cli_backend_and_plain_roofline(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(shared_data / LLAMA70B)
    base = ["profile", "--estimate", "--model", cfg, "--gpu", "4x H200", "--quant", "fp8", "--json"]
    out = {}
    for extra in ([], ["--backend", "trtllm"], ["--plain-roofline"]):
        assert main([*base, "--out", str(tmp_path / "x"), *extra]) == 0
        out[" ".join(extra)] = json.loads(capsys.readouterr().out)
    assert out[""]["timing"] == "calibrated (vllm)" and out[""]["tp"] == 4
    assert out["--backend trtllm"]["timing"] == "calibrated (trtllm)"
    assert out["--backend trtllm"]["serving_ttft_ms"] != out[""]["serving_ttft_ms"]
    assert out["--plain-roofline"]["timing"] == "roofline (uncalibrated)"
    assert "serving_ttft_ms" not in out["--plain-roofline"]
    with pytest.raises(SystemExit):
        main([*base, "--backend", "llamacpp"])


def test_cli_expert_parallel(shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--expert-parallel spreads a MoE model's experts over the --tp GPUs: at a small batch the busiest
    GPU reads more expert weights per step than a sharded expert costs; a dense model refuses it."""
    moe = str(shared_data / "model_configs" / "Qwen--Qwen3-30B-A3B.json")
    base = [
        "profile",
        "--estimate",
        "--model",
        moe,
        "--gpu",
        "h200",
        "--tp",
        "4",
        "--json",
        "--concurrency",
        "2",
    ]
    out = {}
    for extra in ([], ["--expert-parallel"]):
        assert main([*base, "--out", str(tmp_path / "x"), *extra]) == 0
        out[" ".join(extra)] = json.loads(capsys.readouterr().out)
    assert out["--expert-parallel"]["expert_parallel"] is True and out[""]["expert_parallel"] is False
    assert out["--expert-parallel"]["serving_tpot_ms"] > out[""]["serving_tpot_ms"]
    dense = ["profile", "--estimate", "--model", str(shared_data / LLAMA8B), "--gpu", "h200", "--tp", "2"]
    assert main([*dense, "--out", str(tmp_path / "y"), "--expert-parallel"]) == 2
    assert "has no MoE layers" in capsys.readouterr().err


def test_product_matches_the_h200_profile(shared_data: Path, tmp_path: Path) -> None:
    """The estimate as the decider reads it (NPZ through its interpolators) against the measured
    H200 Llama-3.1-8B FP8 vLLM profile (the table was fitted with it: an in-sample check)."""
    pre = load_prefill(shared_data / "dynamo/h200_llama31_8b_fp8_tp1_prefill_raw_data.npz")
    dec = load_decode(shared_data / "dynamo/h200_llama31_8b_fp8_tp1_decode_raw_data.npz")
    estimate = estimate_model(
        load_model_config(shared_data / LLAMA8B), "h200", quant="fp8", max_model_len=16384, max_num_seqs=1024
    )
    write_profile(estimate, tmp_path)
    pi = PrefillInterpolator(load_prefill(tmp_path / "prefill_raw_data.npz"))
    di = DecodeInterpolator(load_decode(tmp_path / "decode_raw_data.npz"))
    ttft = np.array([pi.ttft_ms(x) for x in pre.isl_tokens])
    n, _ = decode_points(dec)
    itl = np.array(
        [di.itl_at_concurrency_ms(c, x) for c, x in zip(n, dec.context_length_tokens, strict=True)]
    )
    ttft_mape = float(np.mean(np.abs(ttft / pre.ttft_ms - 1))) * 100
    itl_mape = float(np.mean(np.abs(itl / dec.itl_ms - 1))) * 100
    assert ttft_mape < TTFT_PROFILE_MAX and itl_mape < ITL_PROFILE_MAX, (ttft_mape, itl_mape)


def test_product_on_measured_tp_rows(shared_data: Path) -> None:
    """`planner profile --estimate` at the model, GPU, TP, precision, ISL/OSL and concurrency of every
    measured vLLM Llama-3.1-70B FP8 row at TP 2, 4 and 8 (H200 and B200): MAPE of its steady-state
    TTFT and TPOT."""
    model = load_model_config(shared_data / LLAMA70B)
    model = replace(model, quant=QuantConfig("fp8", 8.0))
    rows = []
    for raw in silicon.read_rows(shared_data / "perf/aiconfigurator_silicon_dev.csv"):
        r = silicon.usable(raw, lambda name: name == "meta-llama/Llama-3.1-70B")
        if isinstance(r, str) or r.backend != "vllm" or r.point.tp < 2 or r.point.weight_format != "fp8":
            continue
        rows.append(r)
    assert len(rows) >= 60
    errs: dict[str, list[float]] = {"ttft": [], "tpot": []}
    for r in rows:
        pt = r.point
        try:
            s, _, _ = estimate_model(
                model, gpu_spec(r.system), tp=pt.tp, kv_dtype="fp8", max_model_len=pt.isl + pt.osl,
                max_num_seqs=max(256, pt.concurrency), isl=pt.isl, osl=pt.osl, concurrency=pt.concurrency,
            )  # fmt: skip
        except EstimateError:
            continue
        errs["ttft"].append(abs(s["serving_ttft_ms"] / r.ttft_ms - 1) * 100)
        errs["tpot"].append(abs(s["serving_tpot_ms"] / r.tpot_ms - 1) * 100)
    ttft, tpot = statistics.fmean(errs["ttft"]), statistics.fmean(errs["tpot"])
    assert ttft < TTFT_ROWS_MAX and tpot < TPOT_ROWS_MAX, (len(errs["ttft"]), ttft, tpot)
