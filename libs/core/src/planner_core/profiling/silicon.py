"""Measured serving rows (AI Configurator's silicon dump) and the fit of :class:`ServingParams`.

A row is one aggregated engine at a fixed concurrency: model, GPU system, backend, weight format,
TP, ISL/OSL and the measured mean TTFT and TPOT. Rows that the model cannot describe are left out by
:func:`usable` with a reason (disaggregated, attention-DP layouts, expert parallelism over more GPUs
than the TP group or mixed with expert TP, pipeline parallel, models without a config); expert
parallelism over the TP group (``moe_ep_size = tp_size``) is modelled (:attr:`ServingPoint.ep`). The fit minimises a robust (soft-L1) loss of the log errors of
TTFT and TPOT over the rows (and over the points of measured single-engine profiles, when given:
:class:`ProfilePoint`): one set of efficiencies shared by every backend and GPU, a step
overhead, an intake time and a KV-wait weight per backend. A term no training row exercises (a
backend without rows, MoE experts without MoE rows) keeps a value it could not have learnt from
the rows: the other backends' median, the start value.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from planner_core.gpu_table import GpuSpec
from planner_core.hardware import UnknownGpuError, gpu_spec
from planner_core.modelcfg import ModelConfig
from planner_core.profiling.serving import (
    FORMAT_BITS,
    ServingParams,
    ServingPoint,
    ServingTiming,
    predict_serving,
)
from planner_core.profiling.tp_comms import CommParams

BACKENDS = ("vllm", "sglang", "trtllm")


@dataclass(frozen=True)
class SiliconRow:
    row_id: str
    model_path: str
    system: str
    backend: str
    point: ServingPoint
    ttft_ms: float
    tpot_ms: float


def read_rows(path: str | Path) -> list[dict[str, str]]:
    with Path(path).open(newline="") as fh:
        return list(csv.DictReader(fh))


def usable(raw: dict[str, str], has_config: Callable[[str], bool]) -> SiliconRow | str:
    """The row as a :class:`SiliconRow`, or why it is left out."""
    if raw.get("mode") != "agg":
        return "disaggregated"
    if (raw.get("pp_size") or "1") != "1":
        return "pipeline parallel"
    if (raw.get("attention_dp_size") or "1") != "1":
        return "attention data parallel"
    tp = int(raw.get("tp_size") or 1)
    ep = int(raw.get("moe_ep_size") or 1)
    moe_tp = int(raw.get("moe_tp_size") or 1)
    # modelled: experts sharded over the TP group (ep 1) or whole experts spread over it (ep = tp)
    if ep > 1 and moe_tp > 1:
        return "expert parallel x expert TP"
    if ep not in (1, tp):
        return "expert parallel over more GPUs"
    if moe_tp > tp:
        # the MoE layers span more GPUs than the attention's TP group (vLLM's --data-parallel-size with
        # TP-sharded experts: "tp 1, moe_tp 2" is two attention replicas over one 2-GPU MoE), with
        # attention_dp_size left empty: an attention-DP layout, not the TP engine tp_size says
        return "attention data parallel"
    if not has_config(raw["model_path"]):
        return "no model config"
    fmt = (raw.get("precision") or "").lower()
    if fmt not in FORMAT_BITS:
        return f"precision '{fmt}'"
    try:
        gpu_spec(raw["system"])
    except UnknownGpuError:
        return "unknown GPU system"
    try:
        ttft, tpot = float(raw["silicon_ttft_ms"]), float(raw["silicon_tpot_ms"])
    except (KeyError, ValueError):
        return "no measurement"
    if not (ttft > 0 and tpot > 0):
        return "no measurement"
    point = ServingPoint(
        isl=int(raw["isl"]), osl=int(raw["osl"]), concurrency=int(raw["batch_size"]), tp=tp,
        weight_format=fmt, kv_bytes=1.0 if fmt in ("fp8", "fp4") else 2.0, ep=ep,
    )  # fmt: skip
    return SiliconRow(raw["id"], raw["model_path"], raw["system"], raw["backend"], point, ttft, tpot)


@dataclass(frozen=True)
class ProfilePoint:
    """A point of a measured single-engine profile (the decider's format): the TTFT of a lone request
    of ``tokens`` prompt tokens (``concurrency`` 0), or the ITL of a decode-only step of
    ``concurrency`` requests at context ``tokens``."""

    model_path: str
    system: str
    backend: str
    tp: int
    weight_format: str
    kv_bytes: float
    tokens: int
    concurrency: int
    measured_ms: float


def predict_profile_point(
    pt: ProfilePoint, models: Callable[[str], ModelConfig], params: dict[str, ServingParams]
) -> float:
    timing = ServingTiming.build(
        models(pt.model_path), gpu_spec(pt.system), pt.tp, pt.weight_format, pt.kv_bytes, params[pt.backend]
    )
    if pt.concurrency == 0:
        return timing.lone_ttft_s(pt.tokens) * 1e3
    return timing.pass_time_s(0, 0, pt.concurrency, pt.concurrency * pt.tokens) * 1e3


# -- parameter vector <-> ServingParams ---------------------------------------------------------------
# shared by every backend and GPU: (name, lower bound, upper bound)
_SHARED: tuple[tuple[str, float, float], ...] = (
    ("e_gemm", 0.1, 1.0),
    ("n_half_ridge", 0.005, 20.0),
    ("e_attn", 0.05, 1.0),
    ("attn_half_keys", 0.0, 65536.0),
    ("e_mem", 0.3, 1.0),
    ("layer_overhead_s", 0.0, 2e-4),
    ("w_mix", 0.0, 3.0),
    ("w_queue", 0.0, 1.0),
    ("w_ttft_steps", 0.0, 30.0),
    ("comm_latency_s", 1e-6, 1e-4),
    ("moe_efficiency", 0.1, 1.0),
    ("moe_compute_efficiency", 0.1, 1.0),
    ("seq_overhead_s", 0.0, 5e-4),
)
# one value per backend (host-side costs and scheduling differ between engines)
_PER_BACKEND: tuple[tuple[str, float, float], ...] = (
    ("step_overhead_s", 1e-4, 0.05),
    ("ttft_fixed_s", 0.0, 0.5),
    ("w_kv_wait", 0.0, 3.0),
)
_NAMES = tuple(n for n, _, _ in _SHARED)
_NB = len(BACKENDS)
_BLOCKS = len(_PER_BACKEND)
_NS = len(_SHARED)
_LO = np.array([lo for _, lo, _ in _SHARED] + [lo for _, lo, _ in _PER_BACKEND for _ in range(_NB)])
_HI = np.array([hi for _, _, hi in _SHARED] + [hi for _, _, hi in _PER_BACKEND for _ in range(_NB)])


def _to_params(x: np.ndarray) -> dict[str, ServingParams]:
    v = {n: float(x[i]) for i, n in enumerate(_NAMES)}
    base = ServingParams(
        e_gemm=v["e_gemm"], n_half_ridge=v["n_half_ridge"], e_attn=v["e_attn"],
        attn_half_keys=v["attn_half_keys"], e_mem=v["e_mem"],
        layer_overhead_s=v["layer_overhead_s"], w_mix=v["w_mix"], w_queue=v["w_queue"],
        w_ttft_steps=v["w_ttft_steps"],
        comm=CommParams(latency_s=v["comm_latency_s"]), moe_efficiency=v["moe_efficiency"],
        moe_compute_efficiency=v["moe_compute_efficiency"],
        seq_overhead_s=v["seq_overhead_s"],
    )  # fmt: skip
    out: dict[str, ServingParams] = {}
    for i, b in enumerate(BACKENDS):
        own = [float(x[_NS + k * _NB + i]) for k in range(_BLOCKS)]
        out[b] = replace(
            base, step_overhead_s=own[0], ttft_fixed_s=own[1], w_kv_wait=own[2],
            kv_output_share=1.0 if b == "trtllm" else 0.5,
        )  # fmt: skip
    return out


def _x0(p: ServingParams) -> np.ndarray:
    def value(name: str) -> float:
        return p.comm.latency_s if name == "comm_latency_s" else float(getattr(p, name))

    start = [value(n) for n in _NAMES] + [value(n) for n, _, _ in _PER_BACKEND for _ in range(_NB)]
    x: np.ndarray = np.clip(np.array(start), _LO, _HI)
    return x


def predict_row(
    row: SiliconRow, models: Callable[[str], ModelConfig], params: dict[str, ServingParams]
) -> tuple[float, float]:
    gpu: GpuSpec = gpu_spec(row.system)
    est = predict_serving(models(row.model_path), gpu, row.point, params[row.backend])
    return est.ttft_ms, est.tpot_ms


# where the fit starts: grouped expert GEMMs well below a dense GEMM's efficiency. Slow attention and
# slow experts both make long MoE prompts slow; from 1.0 a fit without the lone-prefill profile to pin
# attention down (leave H200 out) stops at slow attention and full-speed experts
_START = ServingParams(attn_half_keys=1024.0, moe_compute_efficiency=0.3)


def fit(
    rows: Sequence[SiliconRow], models: Callable[[str], ModelConfig],
    start: ServingParams = _START,
    profile: Sequence[ProfilePoint] = (), profile_weight: float = 5.0,
) -> dict[str, ServingParams]:  # fmt: skip
    """Robust least squares (soft L1 with a scale of 0.2 in log units, ~20 %: the few rows that wait
    minutes for KV space, and rows whose harness the model does not describe, do not dominate) on
    log(predicted / measured) of TTFT and TPOT, every row weighted alike, and of each ``profile``
    point (lone prefills pin down what serving rows at concurrency mix with queueing: attention at
    long prompts, the intake of a request alone), weighted ``profile_weight`` times: 58 points of one
    profile next to ~2,500 row residuals would otherwise leave the lone-request terms to the rows'
    queueing, and the profile is what ``planner profile --estimate`` produces)."""
    rows = list(rows)

    def resid(x: np.ndarray) -> np.ndarray:
        params = _to_params(x)
        out = []
        for r in rows:
            ttft, tpot = predict_row(r, models, params)
            out.append(math.log(ttft / r.ttft_ms))
            out.append(math.log(tpot / r.tpot_ms))
        for pt in profile:
            out.append(profile_weight * math.log(predict_profile_point(pt, models, params) / pt.measured_ms))
        return np.array(out)

    present = [i for i, b in enumerate(BACKENDS) if any(r.backend == b for r in rows)]
    absent = [i for i in range(_NB) if i not in present]
    # a backend with no rows keeps no parameters of its own: it takes the median of the others
    own = {_NS + k * _NB + a for a in absent for k in range(_BLOCKS)}
    # a term no row exercises keeps its start value: without MoE rows the fit cannot see the experts'
    # efficiency (left free, it drifts wherever the optimiser's steps take it)
    if not any(models(r.model_path).moe is not None for r in rows):
        own.add(_NAMES.index("moe_efficiency"))
        own.add(_NAMES.index("moe_compute_efficiency"))
    free = [i for i in range(len(_LO)) if i not in own]
    x_full = _x0(start)

    def expand(xf: np.ndarray) -> np.ndarray:
        x = x_full.copy()
        x[free] = xf
        for a in absent:
            for k in range(_BLOCKS):
                x[_NS + k * _NB + a] = float(np.median([x[_NS + k * _NB + i] for i in present]))
        return x

    sol = least_squares(
        lambda xf: resid(expand(xf)), x_full[free], bounds=(_LO[free], _HI[free]), x_scale="jac",
        loss="soft_l1", f_scale=0.2, max_nfev=40,
    )  # fmt: skip
    return _to_params(expand(sol.x))


def ape_pct(pred: float, ref: float) -> float:
    return abs(pred - ref) / ref * 100.0


def mape(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else float("nan")
