"""The serving model as the product uses it: fitted efficiencies per backend, and the timing model
``planner profile --estimate`` builds from a model config, a GPU and the engine's flags.

The efficiencies live in :mod:`planner_core.profiling.calibration_table`, a generated constant table
(fitted by :func:`planner_core.profiling.silicon.fit` on measured serving rows; ``just fit-estimate``
regenerates it, and the table's docstring says from what). No data file is read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from planner_core.gpu_table import GpuSpec
from planner_core.modelcfg import ModelConfig, QuantConfig
from planner_core.profiling.calibration_table import PARAMS
from planner_core.profiling.serving import ServingParams, ServingTiming

BACKENDS = ("vllm", "sglang", "trtllm")

# the fitted fields, in the table's flat form (the all-reduce latency as comm_latency_s)
FITTED_FIELDS = (
    "e_gemm", "n_half_ridge", "e_attn", "attn_half_keys", "e_mem", "step_overhead_s", "layer_overhead_s", "seq_overhead_s",
    "w_mix", "w_queue", "w_ttft_steps", "w_kv_wait", "ttft_fixed_s", "kv_output_share", "moe_efficiency", "moe_compute_efficiency",
    "comm_latency_s",
)  # fmt: skip


class UnknownBackendError(ValueError):
    pass


def flat_values(p: ServingParams) -> dict[str, float]:
    """The fitted fields of ``p``, flat (what the table stores)."""
    return {n: p.comm.latency_s if n == "comm_latency_s" else float(getattr(p, n)) for n in FITTED_FIELDS}


def params_from_values(values: Mapping[str, float]) -> ServingParams:
    """:class:`ServingParams` from a flat table entry; a field the entry lacks keeps its default."""
    unknown = set(values) - set(FITTED_FIELDS)
    if unknown:
        raise ValueError(
            f"calibration entry: unknown fields {sorted(unknown)} (known: {', '.join(FITTED_FIELDS)})"
        )
    p = ServingParams()
    for n, v in values.items():
        if n == "comm_latency_s":
            p = replace(p, comm=replace(p.comm, latency_s=float(v)))
        else:
            p = replace(p, **{n: float(v)})  # type: ignore[arg-type]
    return p


def calibrated_params(backend: str = "vllm") -> ServingParams:
    """The fitted :class:`ServingParams` of ``backend`` (vllm, sglang, trtllm)."""
    key = backend.lower().replace("-", "").replace("_", "")
    if key not in PARAMS:
        raise UnknownBackendError(f"unknown backend '{backend}' (calibrated: {', '.join(sorted(PARAMS))})")
    return params_from_values(PARAMS[key])


def weight_format(quant: QuantConfig | None) -> str:
    """The serving model's weight format for a quantization: what the tensor cores run and how many
    bytes a weight streams. 8-bit formats (FP8, W8A8 INT8) run at the FP8 rate; FP4 formats (mxfp4,
    nvfp4) at the FP4 rate where the GPU has one; other 4-bit weights (AWQ, GPTQ, bitsandbytes) are
    dequantised to BF16 maths."""
    if quant is None or quant.weight_bits >= 12:
        return "bf16"
    if quant.weight_bits >= 6:
        return "fp8"
    return "fp4" if "fp4" in quant.method.lower() else "int4"


def kv_element_bytes(model: ModelConfig, kv_dtype: str = "auto") -> float:
    """Bytes per KV element for ``--kv-cache-dtype``."""
    auto = model.kv_bytes_per_token("auto", 1)
    if auto <= 0:
        return model.dtype_bytes
    return model.dtype_bytes * model.kv_bytes_per_token(kv_dtype, 1) / auto


def product_timing(
    model: ModelConfig, gpu: GpuSpec, quant: QuantConfig | None = None, kv_dtype: str = "auto", tp: int = 1,
    backend: str = "vllm", ep: int = 1,
) -> ServingTiming:  # fmt: skip
    """The calibrated timing model of one engine: ``quant`` overrides the checkpoint's own; ``ep`` = ``tp``
    for experts spread whole over the GPUs (expert parallelism)."""
    q = quant if quant is not None else model.quant
    return ServingTiming.build(
        model, gpu, tp=tp, weight_format=weight_format(q), kv_bytes=kv_element_bytes(model, kv_dtype),
        params=calibrated_params(backend), ep=ep,
    )  # fmt: skip
