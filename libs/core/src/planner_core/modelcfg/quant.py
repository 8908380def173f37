"""Weight quantization from a checkpoint's ``quantization_config`` or a ``--quantization`` flag.

Every format becomes effective bits per quantized weight, scales and zero points included, so weight
bytes are ``params x bits / 8``:

- fp8 (per-tensor or 128x128 blocks): 8 (+ one fp32 scale per block, 32/16384 bits);
- compressed-tensors: read from ``config_groups[*].weights``: ``num_bits``, ``strategy`` (tensor,
  channel, group, block) and ``group_size``; group scales are 16-bit, plus a zero point when not
  ``symmetric``. The scheme is named after vLLM's: FP8 dynamic/static (``input_activations.dynamic``),
  W8A8 int8, W4A16;
- AWQ/GPTQ: ``bits`` + one fp16 scale and one packed ``bits``-wide zero point per ``group_size``;
- bitsandbytes: 8-bit = int8 + one fp32 scale per row (counted as 8); 4-bit = 4 + one fp32 absmax
  per 64-block (0.5 bit), or with double quantization an 8-bit absmax per block plus one fp32 per 256
  blocks (0.127 bit);
- mxfp4: 4-bit values + one 8-bit shared exponent per 32 (4.25).

``modules_to_not_convert`` / ``ignore`` lists that name the attention blocks keep attention in the
model dtype. An unknown method is a :class:`ModelConfigError` naming it and the known ones.
"""

from __future__ import annotations

from planner_core.modelcfg.fields import int_field as _int
from planner_core.modelcfg.model import ModelConfigError, QuantConfig

KNOWN_METHODS = ("fp8", "fbgemm_fp8", "compressed-tensors", "awq", "awq_marlin", "gptq", "gptq_marlin",
                 "bitsandbytes", "mxfp4", "modelopt")  # fmt: skip
_ATTN_NAMES = ("self_attn", "attn", "attention", "q_proj", "qkv_proj")


def _skips_attention(names: object) -> bool:
    if not isinstance(names, list):
        return False
    for n in names:
        s = str(n).removeprefix("re:")
        if any(a in s for a in _ATTN_NAMES) and "lm_head" not in s:
            return True
    return False


def _bits(v: object, key: str, src: str, default: float) -> float:
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise ModelConfigError(
            f"{src}: field 'quantization_config.{key}' must be a positive number, got {v!r}"
        )
    return float(v)


def _compressed_tensors(q: dict[str, object], src: str) -> QuantConfig:
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ModelConfigError(
            f"{src}: compressed-tensors field 'quantization_config.config_groups' is missing"
        )
    group = next(iter(groups.values()))
    if not isinstance(group, dict) or not isinstance(group.get("weights"), dict):
        raise ModelConfigError(f"{src}: field 'quantization_config.config_groups.*.weights' is missing")
    w: dict[str, object] = group["weights"]
    bits = _bits(w.get("num_bits"), "config_groups.*.weights.num_bits", src, 8.0)
    kind = str(w.get("type", "int")).lower()
    strategy = str(w.get("strategy", "tensor")).lower()
    gs_raw = w.get("group_size")
    gs = int(gs_raw) if isinstance(gs_raw, int) and gs_raw > 0 else None
    symmetric = w.get("symmetric", True) is not False
    extra = 0.0
    if strategy == "group" and gs:
        extra = (16.0 + (0.0 if symmetric else bits)) / gs  # bf16 scale (+ zero point) per group
    elif strategy == "block":
        extra = 32.0 / (128 * 128)
    acts = group.get("input_activations")
    if kind == "float" and bits == 8:
        dyn = isinstance(acts, dict) and acts.get("dynamic") is True
        name = "compressed-tensors:fp8-dynamic" if dyn else "compressed-tensors:fp8-static"
    elif bits == 8 and isinstance(acts, dict):
        name = "compressed-tensors:w8a8-int8"
    elif isinstance(acts, dict):
        name = f"compressed-tensors:w{int(bits)}a{_int(acts, 'num_bits', src, 8)}"
    else:
        name = f"compressed-tensors:w{int(bits)}a16"
    skip_attn = _skips_attention(q.get("ignore"))
    return QuantConfig(name, bits + extra, gs, not skip_attn)


def _bitsandbytes(q: dict[str, object]) -> QuantConfig | None:
    if q.get("load_in_8bit") is True:
        return QuantConfig(
            "bitsandbytes-8bit", 8.0, None, not _skips_attention(q.get("llm_int8_skip_modules"))
        )
    if q.get("load_in_4bit") is not True and q.get("load_in_8bit") is not True:
        return None  # a re-saved config with both flags off: the weights are in the model dtype
    double = q.get("bnb_4bit_use_double_quant") is True
    extra = 8.0 / 64 + 32.0 / (64 * 256) if double else 32.0 / 64
    return QuantConfig(
        "bitsandbytes-4bit", 4.0 + extra, 64, not _skips_attention(q.get("llm_int8_skip_modules"))
    )


def parse_quant(q: object, src: str) -> QuantConfig | None:
    """Map an HF ``quantization_config`` to effective weight bits (scales included)."""
    if q is None:
        return None
    if not isinstance(q, dict):
        raise ModelConfigError(f"{src}: field 'quantization_config' must be an object")
    method = str(q.get("quant_method", "")).lower()
    skip_attn = _skips_attention(q.get("modules_to_not_convert"))
    group = q.get("group_size")
    group_size = int(group) if isinstance(group, int) and group > 0 else None
    if method in ("fp8", "fbgemm_fp8"):
        block = q.get("weight_block_size")
        extra = 32.0 / (block[0] * block[1]) if isinstance(block, list) and len(block) == 2 else 0.0
        return QuantConfig("fp8", 8.0 + extra, None, not skip_attn)
    if method == "modelopt":
        algo = str(q.get("quant_algo", "FP8")).upper()
        if "NVFP4" in algo or "FP4" in algo:
            return QuantConfig("modelopt-nvfp4", 4.5, 16, not skip_attn)  # fp8 scale per 16 values
        return QuantConfig("modelopt-fp8", 8.0, None, not skip_attn)
    if method == "mxfp4":
        return QuantConfig("mxfp4", 4.25, 32, not skip_attn)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        b = _bits(q.get("bits", q.get("w_bit")), "bits", src, 4.0)
        gs = group_size or _int(q, "q_group_size", src, 128)
        if gs <= 0:  # GPTQ group_size -1: one scale per output channel
            return QuantConfig(method, b, None, not skip_attn)
        return QuantConfig(method, b + (16.0 + b) / gs, gs, not skip_attn)
    if method == "bitsandbytes":
        return _bitsandbytes(q)
    if method == "compressed-tensors":
        return _compressed_tensors(q, src)
    raise ModelConfigError(
        f"{src}: unsupported quantization_config.quant_method '{method}' (known: {', '.join(KNOWN_METHODS)})"
    )


_FLAGS: dict[str, QuantConfig] = {
    "fp8": QuantConfig("fp8", 8.0),
    "fbgemm_fp8": QuantConfig("fp8", 8.0),
    "awq": QuantConfig("awq", 4.0 + 20.0 / 128, 128),
    "awq_marlin": QuantConfig("awq_marlin", 4.0 + 20.0 / 128, 128),
    "gptq": QuantConfig("gptq", 4.0 + 20.0 / 128, 128),
    "gptq_marlin": QuantConfig("gptq_marlin", 4.0 + 20.0 / 128, 128),
    "mxfp4": QuantConfig("mxfp4", 4.25, 32),
    "bitsandbytes": QuantConfig("bitsandbytes-4bit", 4.5, 64),
}


def quant_from_flag(name: str) -> QuantConfig | None:
    """A vLLM ``--quantization`` flag. On an unquantized checkpoint this is online quantization; on a
    quantized one it only names the kernel, so :func:`effective_quant` keeps the checkpoint's own."""
    key = name.lower().strip()
    if key in ("", "none", "auto"):
        return None
    if key in ("compressed-tensors", "compressed_tensors"):
        return QuantConfig("compressed-tensors:fp8-dynamic", 8.0)
    if key in _FLAGS:
        return _FLAGS[key]
    raise ModelConfigError(
        f"--quantization: unsupported method '{name}' (known: {', '.join(sorted(_FLAGS))})"
    )
