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
  per 64-block (0.5 bit), also for double-quantized checkpoints: vLLM undoes the double
  quantization while loading;
- mxfp4: 4-bit values + one 8-bit shared exponent per 32 (4.25).

``modules_to_not_convert`` / ``ignore`` lists that name the attention blocks keep attention in the
model dtype. An unknown method is a :class:`ModelConfigError` naming it and the known ones.
"""

from __future__ import annotations

import re

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
    """bitsandbytes as vLLM holds it in GPU memory.

    8-bit: int8 weights plus one fp32 scale per output row (counted as 8 bits). 4-bit: two values per
    byte plus the absmax of every 64-value block in fp32, i.e. 4.5 bits, with or without double
    quantization in the checkpoint: vLLM's bitsandbytes loader dequantizes double-quantized absmax
    to fp32 while loading (``dequantize_dq``, trading memory for speed), and quantizes unquantized
    checkpoints with ``compress_statistics=True`` then dequantizes the same way.
    """
    if q.get("load_in_8bit") is True:
        return QuantConfig(
            "bitsandbytes-8bit", 8.0, None, not _skips_attention(q.get("llm_int8_skip_modules"))
        )
    if q.get("load_in_4bit") is not True:
        return None  # a re-saved config with both flags off: the weights are in the model dtype
    return QuantConfig(
        "bitsandbytes-4bit", BNB_4BIT_BITS, 64, not _skips_attention(q.get("llm_int8_skip_modules"))
    )


# 4-bit values + an fp32 absmax per 64-value block, as vLLM keeps them (double quantization undone)
BNB_4BIT_BITS = 4.0 + 32.0 / 64


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


_WA = re.compile(r"w(\d+)a(\d+)")


def _scheme_bits(text: str) -> tuple[float, str] | None:
    """Weight bits and a scheme name spelled in free text: "w8a8", "w4a16", "int4", "4-bit", "nf4",
    "fp8", "nvfp4", "mxfp4"."""
    if "mxfp4" in text:
        return 4.25, "mxfp4"
    if "nvfp4" in text or "fp4" in text:
        return 4.5, "nvfp4"
    m = _WA.search(text)
    if m:
        bits = int(m.group(1))
        if bits >= 8:
            return 8.0, f"w{bits}a{m.group(2)}"
        return bits + 16.0 / 128, f"w{bits}a{m.group(2)}"  # one bf16 scale per 128-group
    if "fp8" in text:
        return 8.0, "fp8"
    if "nf4" in text:
        return 4.0, "nf4"
    m = re.search(r"int(\d+)|(\d+)[- ]?bits?\b", text)
    if m:
        return float(m.group(1) or m.group(2)), f"{m.group(1) or m.group(2)}bit"
    return None


def normalise_method(name: str) -> tuple[str, str]:
    """(vLLM --quantization method, the rest of the spelling): "compressed-tensors w8a8" ->
    ("compressed-tensors", "w8a8"), "AWQ (4-bit)" -> ("awq", "(4-bit)"), "bnb-4bit" ->
    ("bitsandbytes", "4bit")."""
    t = " ".join(name.lower().replace("_", "-").split())
    for alias, method in _ALIASES:
        if t == alias or t.startswith(alias + " ") or t.startswith(alias + "-") or t.startswith(alias + "("):
            return method, t[len(alias) :].strip(" -")
    head, _, rest = t.partition(" ")
    return head, rest


_ALIASES = (
    ("compressed-tensors", "compressed-tensors"),
    ("compressedtensors", "compressed-tensors"),
    ("llm-compressor", "compressed-tensors"),
    ("bitsandbytes", "bitsandbytes"),
    ("bnb", "bitsandbytes"),
    ("awq-marlin", "awq_marlin"),
    ("gptq-marlin", "gptq_marlin"),
    ("fbgemm-fp8", "fbgemm_fp8"),
    ("modelopt", "modelopt"),
    ("awq", "awq"),
    ("gptq", "gptq"),
    ("mxfp4", "mxfp4"),
    ("fp8", "fp8"),
)


def quant_from_flag(name: str) -> QuantConfig | None:
    """A vLLM ``--quantization`` flag, as reports spell it ("fp8", "compressed-tensors w8a8",
    "bitsandbytes 4-bit", "GPTQ int8"). On an unquantized checkpoint this is online quantization; on a
    quantized one it only names the kernel, so :func:`effective_quant` keeps the checkpoint's own."""
    key = name.lower().strip()
    if key in ("", "none", "auto", "no", "-"):
        return None
    method, rest = normalise_method(key)
    scheme = _scheme_bits(rest) if rest else None
    if method == "compressed-tensors":
        if scheme is None:
            return QuantConfig("compressed-tensors:fp8-dynamic", 8.0)
        bits, label = scheme
        group = 128 if bits < 8 else None
        return QuantConfig(f"compressed-tensors:{label}", bits, group)
    if method == "bitsandbytes":
        if scheme is not None and scheme[0] >= 8:
            return QuantConfig("bitsandbytes-8bit", 8.0)
        return _FLAGS["bitsandbytes"]
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin") and scheme is not None:
        bits = scheme[0]
        return QuantConfig(method, bits + (16.0 + bits) / 128, 128)
    if method == "modelopt":
        if scheme is not None and scheme[0] < 8:
            return QuantConfig("modelopt-nvfp4", 4.5, 16)
        return QuantConfig("modelopt-fp8", 8.0)
    if method in _FLAGS:
        return _FLAGS[method]
    raise ModelConfigError(
        f"--quantization: unsupported method '{name}' (known: {', '.join(sorted(_FLAGS))}, "
        "compressed-tensors, modelopt)"
    )
