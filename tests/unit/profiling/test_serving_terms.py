"""The serving model's terms one by one: GEMM efficiency, routed experts, summed rooflines, the
decode step that carries other requests' prompts, the per-request host cost, TP all-reduces, and the
fit leaving alone what no row exercises."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest

from planner_core.hardware import gpu_spec
from planner_core.modelcfg import load_model_config
from planner_core.profiling.serving import (
    ServingParams,
    ServingPoint,
    _experts_touched,
    _Shape,
    ep_imbalance,
    gemm_efficiency,
    pass_s,
    predict_serving,
    ridge_rows,
)
from planner_core.profiling.silicon import SiliconRow, fit
from planner_core.profiling.tp_comms import CommParams, pass_comm_s

H200 = gpu_spec("h200")  # 4800 GB/s, 1979 TFLOPS FP8, 989 TFLOPS BF16
BARE = replace(ServingParams(), step_overhead_s=0.0, layer_overhead_s=0.0, seq_overhead_s=0.0)


def _dense(**kw: float) -> _Shape:
    base: dict[str, float] = dict(
        lin_flops_token=2e9, expert_flops_token=0.0, dense_bytes=1e9, expert_bytes=0.0, moe_layers=0,
        experts=0, topk=0, kv_token_bytes=1e5, attn_flops_pair=1e6, layers=10, hidden=1024,
    )  # fmt: skip
    base.update(kw)
    return _Shape(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (0, 0.0),
        (256, 0.35),  # half the ridge rows at n_half_ridge 1: 0.7 x 256 / (256 + 256)
        (768, 0.525),  # 0.7 x 768 / 1024
        (1e9, 0.7),  # the curve tends to e_gemm
    ],
)
def test_gemm_efficiency(tokens: float, expected: float) -> None:
    p = replace(ServingParams(), e_gemm=0.7, n_half_ridge=1.0)
    assert gemm_efficiency(tokens, p, 256.0) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(
    ("gpu", "fmt", "rows"),
    [
        ("h200", "fp8", 1979e12 * 1.0 / (2 * 4800e9)),  # 206 rows
        ("h200", "bf16", 989e12 * 2.0 / (2 * 4800e9)),  # 206: half the FLOPs, twice the bytes
        ("b200", "fp8", 4500e12 * 1.0 / (2 * 8000e9)),  # 281
        ("b200", "fp4", 9000e12 * 4.5 / 8 / (2 * 8000e9)),  # 316: FP4 at twice FP8, 4.5 bits a weight
        ("h200", "fp4", 1979e12 * 4.5 / 8 / (2 * 4800e9)),  # Hopper runs FP4 weights at FP8 speed
    ],
)
def test_ridge_rows(gpu: str, fmt: str, rows: float) -> None:
    assert ridge_rows(gpu_spec(gpu), fmt) == pytest.approx(rows)


def test_gemm_efficiency_is_monotone_and_moves_with_the_ridge() -> None:
    p = ServingParams()
    effs = [gemm_efficiency(n, p, 206.0) for n in (1, 8, 64, 512, 4096, 32768)]
    assert all(a < b for a, b in pairwise(effs)) and effs[-1] < p.e_gemm
    # a GPU with more FLOPs per byte needs more rows to fill: B200 FP8 runs 256 rows less full
    assert gemm_efficiency(256, p, ridge_rows(gpu_spec("b200"), "fp8")) < gemm_efficiency(256, p, 206.0)


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (1, 8.0),  # one token routes to its top-8
        (2, 128 * (1 - (120 / 128) ** 2)),  # 15.5: the second token mostly picks other experts
        (10_000, 128.0),  # a long prefill touches them all
    ],
)
def test_experts_touched(tokens: float, expected: float) -> None:
    s = _dense(experts=128, topk=8, moe_layers=1, expert_bytes=1e6)
    assert _experts_touched(s, tokens) == pytest.approx(expected, rel=1e-6)


def test_rooflines_add_up() -> None:
    """Decode of one token: weights and KV are both memory bound and run one after the other."""
    s, p = _dense(lin_flops_token=2e8), BARE  # 0.2 FLOP per weight byte: far below the ridge
    bw = H200.hbm_gb_s * 1e9 * p.e_mem
    # 1e9 weight bytes + 1000 tokens x 1e5 KV bytes, each over the bandwidth
    assert pass_s(s, H200, "fp8", 1, 1, 1000.0, 1000.0, p) == pytest.approx(1e9 / bw + 1e8 / bw)
    # a long prefill is compute bound: 8192 x 2e8 FLOPs at 1979 TFLOPS x the efficiency at 8192 rows,
    # plus 8192^2 / 2 pairs x 1e6 FLOPs at the BF16 peak x e_attn
    n = 8192
    gemm = n * 2e8 / (H200.fp8_tflops * 1e12 * gemm_efficiency(n, p, ridge_rows(H200, "fp8")))
    attn = 0.5 * n * n * 1e6 / (H200.bf16_tflops * 1e12 * p.e_attn)
    assert pass_s(s, H200, "fp8", 1, n, 0.0, 0.5 * n * n, p) == pytest.approx(gemm + attn)
    # compute-bound GEMMs then a memory-bound attention over 1e6 KV tokens (1e11 bytes): the two add,
    # where one roofline over the whole pass would have hidden the GEMMs under the KV traffic
    kv = 1e11 / bw
    assert pass_s(s, H200, "fp8", 1, n, 1e6, 0.0, p) == pytest.approx(gemm + kv)
    assert gemm + kv > max(gemm, kv + 1e9 / bw) * 1.01


def test_attention_efficiency_grows_with_the_keys_per_query() -> None:
    """At attn_half_keys keys per query, attention runs at half of e_attn; long rows tend to e_attn."""
    s = _dense(lin_flops_token=0.0, dense_bytes=0.0, kv_token_bytes=0.0)
    p = replace(BARE, e_attn=0.5, attn_half_keys=2048.0)
    peak = H200.bf16_tflops * 1e12
    # a causal 4096-token chunk: 2048 keys per query on average, so 0.25 of the peak
    n = 4096
    assert pass_s(s, H200, "fp8", 1, n, 0.0, 0.5 * n * n, p) == pytest.approx(
        0.5 * n * n * 1e6 / (peak * 0.25)
    )
    # the same chunk after 1M cached tokens: ~1M keys per query, nearly e_attn
    pairs = n * 1e6 + 0.5 * n * n
    t = pass_s(s, H200, "fp8", 1, n, 1e6, pairs, p)
    assert t == pytest.approx(pairs * 1e6 / (peak * 0.5), rel=0.01)
    # 0 keeps one efficiency at every length
    flat = replace(p, attn_half_keys=0.0)
    assert pass_s(s, H200, "fp8", 1, n, 0.0, 0.5 * n * n, flat) == pytest.approx(
        0.5 * n * n * 1e6 / (peak * 0.5)
    )


def test_a_lone_request_waits_no_decode_steps(shared_data: Path) -> None:
    """w_ttft_steps are steps of the others' running batch: a request alone has none to wait for."""
    m = load_model_config(shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json")
    p = replace(ServingParams(), w_ttft_steps=5.0, w_queue=0.0)
    one = predict_serving(m, H200, ServingPoint(2048, 128, 1), p)
    assert one.ttft_ms == pytest.approx(p.ttft_fixed_s * 1e3 + one.prefill_ms)
    two = predict_serving(m, H200, ServingPoint(2048, 128, 2), p)
    assert two.ttft_ms == pytest.approx(p.ttft_fixed_s * 1e3 + two.prefill_ms + 5.0 * two.tpot_ms)


def test_routed_experts_run_at_their_own_rows() -> None:
    """1024 tokens over 128 experts x top-8: ~64 rows per expert GEMM, far below the pass's 1024, so
    the experts' FLOPs cost more than the same FLOPs in a dense layer."""
    p = BARE
    moe = _dense(lin_flops_token=0.0, expert_flops_token=2e9, experts=128, topk=8, moe_layers=10,
                 expert_bytes=1e5, dense_bytes=1e6)  # fmt: skip
    dense = _dense(lin_flops_token=2e9, dense_bytes=1e6)
    n = 1024
    rows = n * 8 / _experts_touched(moe, n)
    assert rows == pytest.approx(64.0, rel=1e-3)
    expected = n * 2e9 / (H200.fp8_tflops * 1e12 * gemm_efficiency(rows, p, ridge_rows(H200, "fp8")))
    assert pass_s(moe, H200, "fp8", 1, n, 0.0, 0.0, p) == pytest.approx(expected)
    assert pass_s(moe, H200, "fp8", 1, n, 0.0, 0.0, p) > 2 * pass_s(dense, H200, "fp8", 1, n, 0.0, 0.0, p)


def test_decode_step_carries_prompts_and_per_request_cost(shared_data: Path) -> None:
    m = load_model_config(shared_data / "model_configs" / "meta-llama--Llama-3.1-70B.json")
    pt = ServingPoint(2048, 128, 32, tp=4)
    alone = predict_serving(m, H200, pt, replace(ServingParams(), w_mix=0.0, seq_overhead_s=0.0))
    # without prompts in the steps and without host cost, TPOT is the bare decode pass
    assert alone.tpot_ms == pytest.approx(alone.decode_pass_ms)
    # 31 other requests x 2048 tokens every 128 steps: 496 prompt tokens ride in each step
    mixed = predict_serving(m, H200, pt, replace(ServingParams(), w_mix=1.0, seq_overhead_s=0.0))
    assert mixed.tpot_ms > 1.5 * alone.tpot_ms
    # the host cost: 32 running requests x 100 us = 3.2 ms per step
    host = predict_serving(m, H200, pt, replace(ServingParams(), w_mix=0.0, seq_overhead_s=1e-4))
    assert host.tpot_ms - alone.tpot_ms == pytest.approx(3.2)


@pytest.mark.parametrize("tokens", [1, 64, 8192])
def test_tp_comm_grows_with_tp(tokens: int) -> None:
    times = [pass_comm_s(tokens, 8192, 80, tp, H200, 2.0, CommParams()) for tp in (1, 2, 4, 8)]
    assert times[0] == 0.0 and times[1] < times[2] < times[3]


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tp_comm_grows_with_tokens(tp: int) -> None:
    times = [pass_comm_s(n, 8192, 80, tp, H200, 2.0, CommParams()) for n in (1, 64, 1024, 8192)]
    assert all(a < b for a, b in pairwise(times))
    # 160 all-reduces: the latency floor alone is 160 x 8 us
    assert times[0] > 160 * 8e-6


def test_fit_keeps_moe_efficiency_without_moe_rows(shared_data: Path) -> None:
    model = load_model_config(shared_data / "model_configs" / "meta-llama--Llama-3.1-70B.json")
    truth = replace(ServingParams(), e_mem=0.7)
    rows = []
    for tp in (2, 8):
        for conc in (4, 32):
            pt = ServingPoint(1024, 1024, conc, tp=tp, weight_format="fp8", kv_bytes=1.0)
            est = predict_serving(model, H200, pt, truth)
            rows.append(SiliconRow(f"{tp}-{conc}", "m", "h200_sxm", "vllm", pt, est.ttft_ms, est.tpot_ms))
    start = replace(ServingParams(), moe_efficiency=0.37)
    fitted = fit(rows, lambda _: model, start)
    assert fitted["vllm"].moe_efficiency == 0.37


def _moe(ep: int = 1) -> _Shape:
    """128 experts, top-8, over 40 layers (the dense helper's other terms)."""
    moe: dict[str, float] = dict(expert_flops_token=2e9, expert_bytes=2e7, moe_layers=40, experts=128, topk=8)
    return _dense(lin_flops_token=1e9, ep=ep, **moe)


@pytest.mark.parametrize("tokens", [1, 8, 64, 512, 8192])
def test_expert_parallel_busiest_gpu(tokens: int) -> None:
    """Under EP the busiest of the GPUs sets the pace: more routed tokens and touched experts than the
    mean, the more so the fewer the tokens; never more than all of them on one GPU; none without EP."""
    assert ep_imbalance(_moe(1), tokens) == (1.0, 1.0)
    tok, exp = ep_imbalance(_moe(4), tokens)
    assert 1.0 <= exp <= 4.0 and tok >= 1.0
    if tokens <= 64:
        assert tok > 1.05
    more_tok, more_exp = ep_imbalance(_moe(4), tokens * 8)
    assert more_tok < tok and more_exp <= exp
    # one decode token's 8 experts over 4 GPUs: 2 on a GPU on average, the busiest ~1.6x that
    assert ep_imbalance(_moe(4), 1)[1] == pytest.approx(1.6, abs=0.1)


def test_expert_parallel_costs_at_small_batches_only() -> None:
    """EP pass over the same TP group: slower for a few tokens (the busiest GPU), the same for a long
    prefill (routing evens out); a dense model has no experts to spread."""
    tp, ep = _moe(1), _moe(4)
    small = pass_s(ep, H200, "fp8", 4, 4, 1e4, 4e4, BARE) / pass_s(tp, H200, "fp8", 4, 4, 1e4, 4e4, BARE)
    big = pass_s(ep, H200, "fp8", 4, 8192, 0, 0.5 * 8192**2, BARE) / pass_s(
        tp, H200, "fp8", 4, 8192, 0, 0.5 * 8192**2, BARE
    )
    assert small > 1.1 and big == pytest.approx(1.0, abs=0.02)
    dense = _dense()
    assert pass_s(replace(dense, ep=4), H200, "fp8", 4, 4, 1e4, 4e4, BARE) == pass_s(
        dense, H200, "fp8", 4, 4, 1e4, 4e4, BARE
    )


def test_expert_parallel_must_span_the_tp_group(shared_data: Path) -> None:
    m = load_model_config(shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json")
    with pytest.raises(ValueError, match="expert parallelism 2 with TP 4"):
        predict_serving(m, H200, ServingPoint(1024, 128, 8, tp=4, ep=2), BARE)
