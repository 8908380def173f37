"""vLLM's logged KV tokens and max concurrency (per version, per attention layout) and the physical
figures beside them; the start-up check that uses the same per-request arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner_core.memory import EngineSettings, predict_memory
from planner_core.memory.failure import predict_failure
from planner_core.memory.kvlayout import LayerSpec, estimated_max_model_len, kv_layout
from planner_core.modelcfg import load_model_config, parse_hf_config

H100 = 79.19


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def test_all_sliding_model_matches_vllms_own_log() -> None:
    """bigcode/starcoder2-3b (30 layers, window 4096, 2 KV heads x 128) at max_model_len 16384, as
    logged in vLLM PR 19029: 2,198,512 tokens, 134.19x before the fix (0.9.0), 178.68x after (0.9.1)."""
    specs = [LayerSpec("sliding", 4096, 2 * 2 * 128 * 2.0)] * 30
    page = 16 * sum(s.bytes_per_token for s in specs)
    kv = 2_198_512 // 16 * page + page / 2  # the budget that gives vLLM's block count
    kw = {"block_size": 16, "max_model_len": 16384, "max_num_batched_tokens": 8192}
    old = kv_layout(specs, kv, version=(0, 9, 0), **kw)
    new = kv_layout(specs, kv, version=(0, 9, 1), **kw)
    assert old.reported_tokens == new.reported_tokens == 2_198_512
    assert round(old.reported_concurrency, 2) == 134.19
    assert round(new.reported_concurrency, 2) == 178.68
    # physically a request keeps its 4096-token window: 2,198,512 / 4096 requests
    assert new.physical_concurrency == pytest.approx(2_198_512 / 4096)


def test_full_attention_concurrency_is_tokens_over_len() -> None:
    specs = [LayerSpec("full", None, 4096.0)] * 32
    lay = kv_layout(
        specs, 40 * 2**30, block_size=16, max_model_len=8192, max_num_batched_tokens=8192, version=(0, 19)
    )
    blocks = 40 * 2**30 // (16 * 4096 * 32)
    assert lay.num_blocks == blocks and lay.reported_tokens == blocks * 16 and lay.groups == 1
    assert lay.reported_concurrency == pytest.approx(blocks * 16 / 8192)
    assert lay.physical_concurrency == pytest.approx(lay.reported_concurrency)


@pytest.mark.parametrize(
    ("window", "mml", "batched"), [(128, 8192, 8192), (4096, 8192, 2048), (4096, 32768, 8192)]
)
def test_hybrid_groups_and_window_per_request(window: int, mml: int, batched: int) -> None:
    """Half sliding, half full (gpt-oss, Gemma-2): two groups of the same size; a request needs all
    its full-attention blocks and min(window - 1 + one step, max_model_len) tokens of window blocks."""
    per_layer = 2 * 8 * 64 * 2.0
    specs = [LayerSpec("sliding", window, per_layer), LayerSpec("full", None, per_layer)] * 12
    kv = 30 * 2**30
    lay = kv_layout(
        specs, kv, block_size=16, max_model_len=mml, max_num_batched_tokens=batched, version=(0, 19)
    )
    page = 16 * per_layer
    blocks = int(kv // (page * 12))
    per_request = _cdiv(mml, 16) + _cdiv(min(window - 1 + batched, mml), 16) + 1
    assert lay.hybrid and lay.groups == 2 and lay.group_size == 12
    assert lay.num_blocks == blocks and lay.reported_tokens == blocks // 2 * 16
    assert lay.reported_concurrency == pytest.approx(blocks / per_request)
    # physically the window layers keep their window only
    kept = 12 * per_layer * mml + 12 * per_layer * min(window, mml)
    assert lay.physical_concurrency == pytest.approx(lay.physical_tokens * 24 * per_layer / kept)
    assert lay.needed_bytes == per_request * page * 12


def test_hybrid_padding_five_to_one() -> None:
    """52 sliding + 10 full layers (a Gemma-3-27B-like 5:1 pattern): groups of 10 layers, the sliding
    type padded to 6 groups; vLLM logs blocks // 7 groups x block tokens, fewer than the bytes hold."""
    per_layer = 2 * 16 * 128 * 2.0
    specs = [LayerSpec("full" if (i + 1) % 6 == 0 else "sliding", 1024, per_layer) for i in range(62)]
    specs = [LayerSpec("full", None, s.bytes_per_token) if s.kind == "full" else s for s in specs]
    assert sum(s.kind == "full" for s in specs) == 10
    kv = 20 * 2**30
    lay = kv_layout(
        specs, kv, block_size=16, max_model_len=8192, max_num_batched_tokens=8192, version=(0, 19)
    )
    blocks = int(kv // (16 * per_layer * 10))
    assert (lay.groups, lay.group_size, lay.num_blocks) == (7, 10, blocks)
    assert lay.reported_tokens == blocks // 7 * 16
    assert lay.physical_tokens == int(kv // (16 * per_layer * 62)) * 16 > lay.reported_tokens


def test_hybrid_manager_off_before_0_10_chunked_or_disabled() -> None:
    per_layer = 4096.0
    mixed = [LayerSpec("sliding", 128, per_layer), LayerSpec("full", None, per_layer)] * 12
    chunked = [LayerSpec("chunked", 8192, per_layer)] * 3 + [LayerSpec("full", None, per_layer)]
    kw = {"block_size": 16, "max_model_len": 32768, "max_num_batched_tokens": 8192}
    kv = 30 * 2**30
    for specs, version, off in ((mixed, (0, 9, 2), False), (chunked, (0, 19), False), (mixed, (0, 19), True)):
        lay = kv_layout(specs, kv, version=version, disable_hybrid=off, **kw)
        blocks = int(kv // (16 * per_layer * len(specs)))
        assert not lay.hybrid and lay.num_blocks == blocks
        # every layer is allocated as full attention: tokens / max_model_len in whole blocks
        assert lay.reported_concurrency == pytest.approx(blocks / _cdiv(32768, 16))
        assert lay.physical_concurrency > lay.reported_concurrency


def test_window_models_report_vllms_concurrency(shared_data: Path) -> None:
    """gpt-oss-20b (window 128) and Gemma-2-9B (window 4096) at max_model_len 8192 on an H100: with a
    whole 8192-token step per request, vLLM's logged concurrency is about tokens / max_model_len,
    while the bytes hold 2x (gpt-oss) and 4/3 (Gemma-2) as many long requests."""
    s = EngineSettings(gpu_memory_utilization=0.9, max_model_len=8192, vllm_version=(0, 19))
    for name, share in (("openai--gpt-oss-20b.json", 128), ("google--gemma-2-9b-it.json", 4096)):
        m = load_model_config(shared_data / "model_configs" / name)
        b = predict_memory(m, H100, s)
        assert b.kv_groups == 2
        blocks = b.num_gpu_blocks
        assert b.kv_cache_tokens == blocks // 2 * 16
        assert b.max_concurrency == pytest.approx(blocks / (512 + 513))
        # half the layers keep only their window
        assert b.physical_max_concurrency == pytest.approx(b.physical_kv_tokens * 2 / (8192 + share))
        assert b.physical_max_concurrency / b.max_concurrency == pytest.approx(
            2 * 8192 / (8192 + share), rel=0.01
        )


def test_start_up_check_counts_windows_as_vllm_does() -> None:
    """One request must fit: a window layer counts window - 1 + one scheduler step (+1 block), so a
    budget that holds one physical request can still be refused; vLLM's suggested length fits."""
    per_layer = 2 * 8 * 128 * 2.0
    specs = [LayerSpec("sliding", 1024, per_layer), LayerSpec("full", None, per_layer)] * 4
    mml, batched = 65536, 8192
    physical = 4 * per_layer * mml + 4 * per_layer * 1024
    kw = {"block_size": 16, "max_model_len": mml, "max_num_batched_tokens": batched, "version": (0, 19)}
    lay = kv_layout(specs, physical * 1.01, **kw)
    assert lay.physical_concurrency >= 1.0 and lay.needed_bytes > physical * 1.01
    longest = estimated_max_model_len(specs, physical * 1.01, **kw)
    fits = kv_layout(specs, physical * 1.01, **{**kw, "max_model_len": longest})
    over = kv_layout(specs, physical * 1.01, **{**kw, "max_model_len": longest + 16})
    assert fits.needed_bytes <= physical * 1.01 < over.needed_bytes


def test_predicted_refusal_quotes_the_estimated_length() -> None:
    cfg = {
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 2304,
        "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
        "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000, "sliding_window": 4096,
        "max_position_embeddings": 2_097_152, "torch_dtype": "bfloat16",
    }  # fmt: skip
    m = parse_hf_config(cfg, "gemma2-2b-like")
    s = EngineSettings(gpu_memory_utilization=0.3, max_model_len=1_048_576, max_num_seqs=16)
    b = predict_memory(m, 23.99, s)
    msg = predict_failure(b, s)
    assert b.kv_cache_gib > 0 and b.needed_kv_gib > b.kv_cache_gib
    assert msg is not None and f"estimated maximum model length is {b.estimated_max_model_len}" in msg
    shorter = EngineSettings(
        gpu_memory_utilization=0.3, max_model_len=b.estimated_max_model_len, max_num_seqs=16
    )
    assert predict_failure(predict_memory(m, 23.99, shorter), shorter) is None


def test_near_equal_types_pad_to_the_larger() -> None:
    """12 sliding + 13 full layers (gpt-oss-20b plus a one-layer drafter): vLLM pads to two groups of
    13 rather than splitting into 12-layer groups (13 < 1.5 x 12)."""
    per_layer = 2048.0
    specs = [LayerSpec("sliding", 128, per_layer)] * 12 + [LayerSpec("full", None, per_layer)] * 13
    kv = 10 * 2**30
    lay = kv_layout(
        specs, kv, block_size=16, max_model_len=4096, max_num_batched_tokens=8192, version=(0, 19)
    )
    assert (lay.groups, lay.group_size) == (2, 13)
    assert lay.num_blocks == int(kv // (16 * per_layer * 13))
    assert lay.reported_tokens == lay.num_blocks // 2 * 16
