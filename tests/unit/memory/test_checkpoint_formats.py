"""Table tests: weight bytes per quantization format and parameters/KV per architecture family.

Weights: a Llama-3.1-8B-shaped config (32 layers, hidden 4096, 32/8 heads x 128, MLP 14336, vocab
128256, untied) has linear (quantizable) parameters per layer 4096 x (4096 + 2 x 1024) + 4096 x 4096
+ 3 x 4096 x 14336 = 218,103,808, x 32 = 6,979,321,856; embeddings + lm_head 2 x 128256 x 4096 =
1,050,673,152 and norms 65 x 4096 stay bf16. Expected bytes = linear x bits / 8 + rest x 2, with the
format's scales in ``bits``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner_core.memory import DEFAULT_PARAMS, EngineSettings
from planner_core.memory.weights import weight_bytes_rank
from planner_core.modelcfg import ModelConfigError, load_model_config, parse_hf_config, quant_from_flag

LINEAR = 32 * (4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336)
REST = 2 * 128256 * 4096 + 65 * 4096


def _llama(**extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 131072,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }  # fmt: skip
    cfg.update(extra)
    return cfg


def _ct(weights: dict[str, Any], acts: dict[str, Any] | None) -> dict[str, Any]:
    group: dict[str, Any] = {"targets": ["Linear"], "weights": weights}
    if acts is not None:
        group["input_activations"] = acts
    return {"quant_method": "compressed-tensors", "config_groups": {"group_0": group}, "ignore": ["lm_head"]}


FP8_W = {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True}
INT8_W = {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}
INT4_W = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}


@pytest.mark.parametrize(
    ("qcfg", "method", "bits"),
    [
        (None, None, 16.0),
        ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8", 8.0),
        # DeepSeek-style 128x128 blocks: one fp32 scale per 16384 weights
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8", 8.0 + 32 / 16384),
        (_ct(FP8_W, {"num_bits": 8, "type": "float", "dynamic": True}), "compressed-tensors:fp8-dynamic", 8.0),
        (_ct(FP8_W, {"num_bits": 8, "type": "float", "dynamic": False}), "compressed-tensors:fp8-static", 8.0),
        (_ct(INT8_W, {"num_bits": 8, "type": "int", "dynamic": True}), "compressed-tensors:w8a8-int8", 8.0),
        # W4A16: 4 bits + one bf16 scale per 128
        (_ct(INT4_W, None), "compressed-tensors:w4a16", 4.0 + 16 / 128),
        # AWQ: 4 bits + fp16 scale + 4-bit zero per 128
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, "awq", 4.0 + 20 / 128),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, "gptq", 4.0 + 20 / 128),
        ({"quant_method": "gptq", "bits": 8, "group_size": 64}, "gptq", 8.0 + 24 / 64),
        # bitsandbytes nf4: fp32 absmax per 64 (0.5 bit); a double-quantized checkpoint too, since
        # vLLM dequantizes the 8-bit absmax to fp32 while loading
        ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_use_double_quant": False},
         "bitsandbytes-4bit", 4.0 + 32 / 64),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_use_double_quant": True},
         "bitsandbytes-4bit", 4.0 + 32 / 64),
        ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "bitsandbytes-8bit", 8.0),
        ({"quant_method": "mxfp4"}, "mxfp4", 4.25),
    ],
)  # fmt: skip
def test_weight_bytes_per_format(qcfg: dict[str, Any] | None, method: str | None, bits: float) -> None:
    extra = {} if qcfg is None else {"quantization_config": qcfg}
    m = parse_hf_config(_llama(**extra), "llama-test")
    assert (m.quant.method if m.quant else None) == method
    expected = LINEAR * bits / 8 + REST * 2
    assert m.weight_bytes() == pytest.approx(expected, rel=0.01)


def test_attention_left_unquantized() -> None:
    q = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}
    m = parse_hf_config(_llama(quantization_config=q), "t")
    attn = 32 * (4096 * 6144 + 4096 * 4096)
    assert m.weight_bytes() == pytest.approx((LINEAR - attn) * 4.25 / 8 + (attn + REST) * 2, rel=0.001)


@pytest.mark.parametrize(
    ("qcfg", "fragment"),
    [
        ({"quant_method": "hqq"}, "unsupported quantization_config.quant_method 'hqq'"),
        ({"quant_method": "compressed-tensors"}, "'quantization_config.config_groups' is missing"),
        ({"quant_method": "awq", "bits": "four"}, "'quantization_config.bits' must be"),
        ("fp8", "'quantization_config' must be an object"),
    ],
)
def test_quant_errors_name_the_field(qcfg: object, fragment: str) -> None:
    with pytest.raises(ModelConfigError, match=fragment.replace("(", r"\(").replace(".", r"\.")):
        parse_hf_config(_llama(quantization_config=qcfg), "t")


DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    "vocab_size": 129280, "max_position_embeddings": 163840, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}  # fmt: skip

GEMMA3_27B_VLM = {
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 62,
        "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "vocab_size": 262208,
        "sliding_window": 1024, "sliding_window_pattern": 6, "max_position_embeddings": 131072,
    },
    "torch_dtype": "bfloat16", "tie_word_embeddings": True,
}  # fmt: skip


@pytest.mark.parametrize(
    # active = per-token matmul parameters: the lm_head counts, the embedding lookup does not (tied
    # models therefore have active == total when dense)
    ("name", "total_b", "active_b", "kv_bytes", "sliding"),
    [
        # dense GQA: 32 x 8 x 128 x 2 x 2
        ("meta-llama--Llama-3.1-8B.json", 8.03, 7.50, 131072, 0),
        # qkv bias family: 28 x 4 x 128 x 4
        ("Qwen--Qwen2.5-7B-Instruct.json", 7.62, 7.07, 57344, 0),
        # ungated MLP (phi): 32 layers MHA 32 x 80 dims: 32 x 32 x 80 x 4
        ("microsoft--phi-2.json", 2.78, 2.65, 327680, 0),
        # MoE: 8 experts top-2
        ("mistralai--Mixtral-8x7B-v0.1.json", 46.7, 12.75, 131072, 0),
        # sliding window (gemma-2): every other layer 4096 tokens; 42 x 8 x 256 x 4
        ("google--gemma-2-9b-it.json", 9.24, 9.24, 344064, 21),
        # hybrid sliding/full + MoE + mxfp4 (gpt-oss): 24 x 8 x 64 x 4
        ("openai--gpt-oss-20b.json", 20.9, 3.61, 49152, 12),
        # VLM wrapper + chunked attention + MoE with a shared expert: 48 x 8 x 128 x 4
        # (active: "17B" counts the 1.03B embedding lookup too; ours counts the lm_head matmul only)
        ("meta-llama--Llama-4-Scout-17B-16E-Instruct.json", 107.8, 16.14, 196608, 36),
        # MLA: 61 x (512 + 64) x 2, replicated on every TP rank
        (DEEPSEEK_V3, 671.0, 37.5, 70272, 0),
        # VLM text_config + gemma-3 5:1 sliding pattern: 62 x 16 x 128 x 4
        (GEMMA3_27B_VLM, 27.0, 27.0, 507904, 52),
    ],
)  # fmt: skip
def test_architecture_families(
    shared_data: Path,
    name: str | dict[str, Any],
    total_b: float,
    active_b: float,
    kv_bytes: int,
    sliding: int,
) -> None:
    if isinstance(name, str):
        m = load_model_config(shared_data / "model_configs" / name)
    else:
        m = parse_hf_config(json.loads(json.dumps(name)), "inline")
    assert m.total_params() / 1e9 == pytest.approx(total_b, rel=0.02)
    assert m.active_params_per_token() / 1e9 == pytest.approx(active_b, rel=0.03)
    assert m.kv_bytes_per_token() == kv_bytes
    assert m.num_sliding_layers == sliding
    if m.mla is not None:
        assert m.kv_bytes_per_token(tp=8) == kv_bytes


def test_missing_field_is_named() -> None:
    cfg = _llama()
    del cfg["vocab_size"]
    with pytest.raises(ModelConfigError, match="'vocab_size' is missing"):
        parse_hf_config(cfg, "t")
    mla = dict(DEEPSEEK_V3)
    del mla["qk_rope_head_dim"]
    with pytest.raises(ModelConfigError, match="'qk_rope_head_dim' is missing"):
        parse_hf_config(mla, "t")


def test_cli_unknown_quantization_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from planner_cli.commands import autotune, profile

    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(_llama(quantization_config={"quant_method": "hqq", "nbits": 4})))
    parser = argparse.ArgumentParser()
    autotune.add_arguments(parser)
    assert autotune.run(parser.parse_args(["--model", str(cfg), "--gpu", "h100", "--tp", "1"])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unsupported quantization_config.quant_method 'hqq'" in err
    cfg.write_text(json.dumps(_llama()))
    parser = argparse.ArgumentParser()
    profile.add_arguments(parser)
    args = parser.parse_args(["--estimate", "--model", str(cfg), "--gpu", "h100", "--quant", "int3",
                              "--out", str(tmp_path / "o")])  # fmt: skip
    assert profile.run(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--quantization: unsupported method 'int3'" in err


@pytest.mark.parametrize(
    ("flag", "method", "bits"),
    [("compressed-tensors w8a8", "compressed-tensors:w8a8", 8.0),
     ("compressed-tensors W4A16", "compressed-tensors:w4a16", 4.0 + 16 / 128),
     ("compressed_tensors", "compressed-tensors:fp8-dynamic", 8.0),
     ("bnb-4bit", "bitsandbytes-4bit", 4.5), ("bitsandbytes 8-bit", "bitsandbytes-8bit", 8.0),
     ("GPTQ int8", "gptq", 8.0 + 24 / 128), ("AWQ (4-bit)", "awq", 4.0 + 20 / 128), ("FP8", "fp8", 8.0),
     ("modelopt nvfp4", "modelopt-nvfp4", 4.5), ("none", None, 0.0)],
)  # fmt: skip
def test_quantization_spellings(flag: str, method: str | None, bits: float) -> None:
    q = quant_from_flag(flag)
    assert (q.method if q else None) == method
    if q is not None:
        assert q.weight_bits == pytest.approx(bits)


def test_unknown_quantization_spelling_names_the_known_ones() -> None:
    with pytest.raises(ModelConfigError, match=r"unsupported method 'squeezellm'.*known: .*fp8"):
        quant_from_flag("squeezellm")


def test_resaved_bitsandbytes_config_is_not_trusted() -> None:
    """A bitsandbytes entry beside torch_dtype float32 (a training-time re-save) is dropped: the
    weights are 16-bit as served; a 16-bit checkpoint's bitsandbytes entry is kept."""
    bnb8 = {"quant_method": "bitsandbytes", "load_in_8bit": True}
    resaved = parse_hf_config(_llama(quantization_config=bnb8, torch_dtype="float32"), "resaved")
    served = parse_hf_config(_llama(quantization_config=bnb8), "served")
    plain = parse_hf_config(_llama(), "plain")
    assert resaved.quant is None and "ignored" in resaved.notes[0]
    assert served.quant is not None and served.quant.method == "bitsandbytes-8bit"
    s = EngineSettings(dtype="float16")
    assert weight_bytes_rank(resaved, s, DEFAULT_PARAMS) == weight_bytes_rank(plain, s, DEFAULT_PARAMS)
    assert weight_bytes_rank(served, s, DEFAULT_PARAMS) < 0.6 * weight_bytes_rank(plain, s, DEFAULT_PARAMS)
    # a report that names bitsandbytes still gets it
    flagged = EngineSettings(dtype="float16", quantization="bitsandbytes")
    assert weight_bytes_rank(resaved, flagged, DEFAULT_PARAMS) < 0.45 * weight_bytes_rank(
        plain, s, DEFAULT_PARAMS
    )
