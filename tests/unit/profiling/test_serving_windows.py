"""Sliding-window layers in the serving model: a query there attends to, and reads the KV of, at
most the window (gpt-oss: 18 of its 36 layers see the last 128 tokens)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from planner_core.hardware import gpu_spec
from planner_core.modelcfg import load_model_config
from planner_core.profiling.serving import (
    ServingParams,
    ServingPoint,
    ServingTiming,
    _Shape,
    _shape,
    pass_s,
    prompt_pairs,
)

H200 = gpu_spec("h200")
BARE = replace(ServingParams(), step_overhead_s=0.0, layer_overhead_s=0.0, seq_overhead_s=0.0)
GPT_OSS = Path(__file__).resolve().parents[3] / "benchmarks" / "model_configs" / "openai--gpt-oss-120b.json"


@pytest.mark.parametrize(
    ("done", "n", "window", "expected"),
    [
        (0, 1000, 0, 500_000),  # no window: n^2 / 2
        (1000, 1000, 0, 1_500_000),  # n x done + n^2 / 2
        (0, 100, 128, 5_000),  # a prompt shorter than the window: as without one
        (0, 1000, 128, 8_192 + 128 * 872),  # 128^2 / 2 over the first 128, then 128 keys a query
        (4000, 1000, 128, 128_000),  # wholly past the window: n x window
    ],
)
def test_prompt_pairs(done: float, n: float, window: float, expected: float) -> None:
    assert prompt_pairs(done, n, window) == pytest.approx(expected)


def _half_windowed(**kw: float) -> _Shape:
    base: dict[str, float] = dict(
        lin_flops_token=0.0, expert_flops_token=0.0, dense_bytes=0.0, expert_bytes=0.0, moe_layers=0,
        experts=0, topk=0, kv_token_bytes=1e5, attn_flops_pair=1e6, layers=10, hidden=1024,
        window_tokens=128.0, window_flop_share=0.5, window_kv_share=0.5,
    )  # fmt: skip
    base.update(kw)
    return _Shape(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ctx", "kv_tokens"),
    [
        (100.0, 100.0),  # inside the window: every layer reads the whole context
        (10_000.0, 0.5 * 10_000 + 0.5 * 128),  # half the KV bytes are windowed layers reading 128 tokens
    ],
)
def test_decode_reads_at_most_the_window(ctx: float, kv_tokens: float) -> None:
    s = _half_windowed()
    bw = H200.hbm_gb_s * 1e9 * BARE.e_mem
    t = ServingTiming(s, H200, "fp8", 1, BARE)
    # a decode step of one request is bound by its KV read: 1e5 bytes a token
    assert t.pass_time_s(0, 0, 1, int(ctx)) == pytest.approx(1e5 * kv_tokens / bw)


def test_windowed_prefill_attention_grows_linearly() -> None:
    """Past the window a windowed layer's attention costs n x window pairs, not n^2 / 2."""
    s = _half_windowed(kv_token_bytes=0.0)
    full = replace(s, window_tokens=0.0, window_flop_share=0.0, window_kv_share=0.0)
    n = 8192.0
    ratio = pass_s(s, H200, "fp8", 1, n, 0.0, prompt_pairs(0, n), BARE, 0.0, prompt_pairs(0, n, 128)) / pass_s(
        full, H200, "fp8", 1, n, 0.0, prompt_pairs(0, n), BARE
    )  # fmt: skip
    # attention efficiency is flat at attn_half_keys 0: half the layers at 1/2 n^2, half at ~128 n
    flat = replace(BARE, attn_half_keys=0.0)
    ratio_flat = pass_s(s, H200, "fp8", 1, n, 0.0, prompt_pairs(0, n), flat, 0.0, prompt_pairs(0, n, 128)) / (
        pass_s(full, H200, "fp8", 1, n, 0.0, prompt_pairs(0, n), flat)
    )  # fmt: skip
    assert ratio_flat == pytest.approx(0.5 + 0.5 * prompt_pairs(0, n, 128) / prompt_pairs(0, n))
    assert ratio < 0.6


def test_gpt_oss_shape_has_half_its_layers_windowed() -> None:
    s = _shape(load_model_config(GPT_OSS), ServingPoint(1, 1, 1, tp=1, weight_format="fp4"))
    assert (s.window_tokens, s.window_flop_share, s.window_kv_share) == pytest.approx((128.0, 0.5, 0.5))


def test_full_attention_models_have_no_window(shared_data: Path) -> None:
    m = load_model_config(shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json")
    s = _shape(m, ServingPoint(1, 1, 1))
    assert (s.window_tokens, s.window_flop_share, s.window_kv_share) == (0.0, 0.0, 0.0)
