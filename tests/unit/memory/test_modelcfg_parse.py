"""Config parser on every real config file, plus hand-checked parameter and KV arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner_core.hardware import UnknownGpuError, gpu_spec
from planner_core.modelcfg import ModelConfigError, load_model_config


def test_every_shared_config_parses(shared_data: Path) -> None:
    files = sorted((shared_data / "model_configs").glob("*.json"))
    assert len(files) >= 20
    for f in files:
        m = load_model_config(f)
        assert m.num_layers > 0 and m.kv_bytes_per_token() > 0, f.name
        if not m.missing:
            assert m.total_params() >= m.active_params_per_token() > 0, f.name
            assert m.weight_bytes() > 0, f.name
        else:
            with pytest.raises(ModelConfigError, match="missing"):
                m.total_params()


@pytest.mark.parametrize(
    ("name", "total_b", "active_b", "kv_bytes"),
    [
        # Llama-3.1-8B: 32 layers x 8 KV heads x 128 dims x 2 (K,V) x 2 bytes = 131072 B/token
        ("meta-llama--Llama-3.1-8B.json", 8.03, 7.50, 131072),
        # Qwen2.5-7B: 28 x 4 x 128 x 2 x 2 = 57344
        ("Qwen--Qwen2.5-7B-Instruct.json", 7.62, 7.07, 57344),
        # Mixtral 8x7B: 46.7B total, ~12.9B active (2 of 8 experts); 32 x 8 x 128 x 4 = 131072
        ("mistralai--Mixtral-8x7B-v0.1.json", 46.7, 12.75, 131072),
        # Qwen3-30B-A3B: 30.5B total, 3.3B active (8 of 128) less embeddings; 48 x 4 x 128 x 4 = 98304
        ("Qwen--Qwen3-30B-A3B.json", 30.53, 3.04, 98304),
        # DeepSeek-V2-Lite summary (MLA): 27 x (512 + 64) x 2 = 31104
        ("deepseek-ai--DeepSeek-V2-Lite-Chat.summary.json", None, None, 31104),
    ],
)
def test_params_and_kv(
    shared_data: Path, name: str, total_b: float | None, active_b: float | None, kv_bytes: int
) -> None:
    m = load_model_config(shared_data / "model_configs" / name)
    assert m.kv_bytes_per_token("auto") == pytest.approx(kv_bytes)
    assert m.kv_bytes_per_token("fp8") == pytest.approx(kv_bytes / 2)
    if total_b is not None and active_b is not None:
        assert m.total_params() / 1e9 == pytest.approx(total_b, rel=0.01)
        assert m.active_params_per_token() / 1e9 == pytest.approx(active_b, rel=0.01)


def test_structures(shared_data: Path) -> None:
    d = shared_data / "model_configs"
    fp8 = load_model_config(d / "Qwen--Qwen3-235B-A22B-FP8.json")
    assert fp8.quant is not None and fp8.quant.method == "fp8" and fp8.moe is not None
    scout = load_model_config(d / "meta-llama--Llama-4-Scout-17B-16E-Instruct.json")
    assert scout.multimodal and scout.moe is not None and scout.moe.num_shared_experts == 1
    # every 4th layer is global, the other 36 of 48 are chunked
    assert scout.num_sliding_layers == 36
    gemma2 = load_model_config(d / "google--gemma-2-9b-it.json")
    assert gemma2.num_sliding_layers == 21
    # 4096-token window: a 32k request keeps 21 full layers x 32768 + 21 sliding x 4096 tokens
    per_layer = 8 * 256 * 2 * 2
    assert gemma2.kv_bytes_per_request(32768) == pytest.approx(21 * per_layer * (32768 + 4096))
    oss = load_model_config(d / "openai--gpt-oss-20b.json")
    assert oss.quant is not None and oss.quant.method == "mxfp4" and not oss.quant.quantize_attention
    assert load_model_config(d / "Qwen--Qwen2.5-1.5B-Instruct.json").tie_word_embeddings


def test_gqa_kv_heads_replicate_over_tp(shared_data: Path) -> None:
    m = load_model_config(shared_data / "model_configs" / "Qwen--Qwen2.5-7B-Instruct.json")
    # 4 KV heads: TP4 -> 1 per rank; TP8 -> still 1 per rank (replicated), 28 x 1 x 128 x 2 x 2
    assert m.kv_bytes_per_token(tp=4) == m.kv_bytes_per_token(tp=8) == 28 * 128 * 2 * 2


def test_errors_name_file_and_field(tmp_path: Path) -> None:
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10}))
    with pytest.raises(ModelConfigError, match=r"bad\.json.*num_hidden_layers"):
        load_model_config(f)
    f.write_text(
        json.dumps({"num_hidden_layers": 2, "hidden_size": -1, "num_attention_heads": 4, "vocab_size": 1})
    )
    with pytest.raises(ModelConfigError, match="hidden_size"):
        load_model_config(f)


@pytest.mark.parametrize(
    ("name", "expected"),
    [("h200", "H200"), ("NVIDIA H100 80GB", "H100-SXM"), ("h200_sxm", "H200"), ("A100-SXM4-40GB", "A100-40GB"),
     ("NVIDIA L40S", "L40S"), ("a10g", "A10G"), ("H100 PCIe", "H100-PCIe"), ("b200", "B200"), ("L4", "L4")],
)  # fmt: skip
def test_gpu_lookup(name: str, expected: str) -> None:
    assert gpu_spec(name).name == expected


def test_unknown_gpu() -> None:
    with pytest.raises(UnknownGpuError, match="known"):
        gpu_spec("tpu-v5")


def test_partial_summaries_give_kv_per_token_from_the_fields_they_have() -> None:
    from planner_core.modelcfg import parse_summary

    base = {"_note": "partial", "num_hidden_layers": 27, "num_key_value_heads": 16, "head_dim": 128}
    # no recorded figure: from the heads, 27 x 16 x 128 x 2 x 2 bytes
    heads = parse_summary(dict(base), "heads")
    assert heads.kv_bytes_per_token("auto") == 27 * 16 * 128 * 2 * 2
    # MLA fields win over a recorded MHA-style figure: 27 x (512 + 64) x 2 bytes, on every TP rank
    mla = parse_summary(
        {**base, "per_token_kv_bytes_bf16": 221184, "kv_lora_rank": 512, "qk_rope_head_dim": 64}, "mla"
    )
    assert mla.kv_bytes_per_token("auto") == 27 * 576 * 2 == mla.kv_bytes_per_token("auto", tp=4)
    # a sliding window in the summary: the layers keep it (for the physical per-request figure)
    sw = parse_summary({**base, "sliding_window": 4096}, "sw")
    assert all(layer.window_tokens == 4096 for layer in sw.layers)
    assert sw.kv_bytes_per_request(8192) == pytest.approx(heads.kv_bytes_per_token("auto") * 4096)
    assert "hidden_size" in mla.missing and "hidden_size" in heads.missing
