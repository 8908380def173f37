"""The fitted efficiency of the routed experts' GEMMs: what it scales, and that the calibration
table carries it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner_core.hardware import gpu_spec
from planner_core.profiling.calibration import flat_values, params_from_values
from planner_core.profiling.serving import (
    ServingParams,
    _experts_touched,
    _Shape,
    gemm_efficiency,
    pass_s,
    ridge_rows,
)

H200 = gpu_spec("h200")
BARE = replace(ServingParams(), step_overhead_s=0.0, layer_overhead_s=0.0, seq_overhead_s=0.0)


def _shape(lin: float, expert: float) -> _Shape:
    return _Shape(
        lin_flops_token=lin, expert_flops_token=expert, dense_bytes=1e6, expert_bytes=1e5 if expert else 0.0,
        moe_layers=10 if expert else 0, experts=128 if expert else 0, topk=8 if expert else 0,
        kv_token_bytes=0.0, attn_flops_pair=0.0, layers=10, hidden=1024,
    )  # fmt: skip


@pytest.mark.parametrize("moe_eff", [1.0, 0.5, 0.2])
def test_expert_gemms_run_at_their_own_efficiency(moe_eff: float) -> None:
    # 4096 tokens over 128 experts x top-8: 256 rows per expert GEMM; compute-bound, so its time is
    # FLOPs / (peak x gemm_efficiency(256 rows) x moe_compute_efficiency)
    p = replace(BARE, moe_compute_efficiency=moe_eff)
    n = 4096
    rows = n * 8 / _experts_touched(_shape(0.0, 2e9), n)
    eff = gemm_efficiency(rows, p, ridge_rows(H200, "fp8")) * moe_eff
    expected = n * 2e9 / (H200.fp8_tflops * 1e12 * eff)
    assert pass_s(_shape(0.0, 2e9), H200, "fp8", 1, n, 0.0, 0.0, p) == pytest.approx(expected)
    # dense GEMMs do not change with it
    dense = pass_s(_shape(2e9, 0.0), H200, "fp8", 1, n, 0.0, 0.0, p)
    assert dense == pytest.approx(pass_s(_shape(2e9, 0.0), H200, "fp8", 1, n, 0.0, 0.0, BARE))


@pytest.mark.parametrize("moe_eff", [1.0, 0.2])
def test_the_table_carries_the_experts_efficiency(moe_eff: float) -> None:
    p = params_from_values({"moe_compute_efficiency": moe_eff})
    assert p.moe_compute_efficiency == moe_eff
    assert flat_values(p)["moe_compute_efficiency"] == moe_eff
