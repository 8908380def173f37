"""Grid search over vLLM memory settings for a workload, with reasons for every rejection.

Objectives (both maximised, both per GPU):

- ``throughput_proxy``: decode sequences a GPU can run at once = min(max_num_seqs, KV-limited
  concurrency at the workload's median context) / TP, times a small bonus for the share of decode steps
  that run as a CUDA graph (graphs remove launch overhead, worth most at small batches).
- ``latency_proxy``: share of decode steps covered by a captured graph, less the padding to the next
  capture size (a batch of 9 replays the graph of 16: 7 wasted rows).

The score mixes the two with the workload's target; the Pareto front over the two is returned too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from enum import StrEnum

from planner_core.autotune.workload import WorkloadProfile
from planner_core.memory.breakdown import MemoryBreakdown, predict_memory
from planner_core.memory.failure import predict_failure
from planner_core.memory.params import DEFAULT_PARAMS, MemoryParams
from planner_core.memory.settings import EngineSettings, default_capture_sizes
from planner_core.modelcfg import ModelConfig


class Reason(StrEnum):
    OK = "ok"
    WEIGHTS_EXCEED_BUDGET = "weights_activation_exceed_budget"
    KV_TOO_SMALL_FOR_ONE_REQUEST = "kv_too_small_for_one_request"
    GRAPHS_EXCEED_HEADROOM = "graphs_exceed_headroom"
    TP_DOES_NOT_DIVIDE_HEADS = "tp_does_not_divide_heads"
    CONTEXT_TOO_SHORT = "max_model_len_below_workload_p99"
    CONTEXT_ABOVE_MODEL_LIMIT = "max_model_len_above_model_limit"
    FP8_KV_UNSUPPORTED = "fp8_kv_unsupported_on_gpu"


@dataclass(frozen=True)
class ObjectiveWeights:
    # throughput target: mostly concurrency; latency target: mostly graph coverage (spec 004's weights)
    throughput_batch: float = 0.7
    throughput_graph: float = 0.3
    latency_graph: float = 0.8
    latency_batch: float = 0.2
    graph_speedup: float = 0.15  # decode-step gain of a replayed graph over eager launch, at small batch


@dataclass(frozen=True)
class SearchSpace:
    gpu_memory_utilization: tuple[float, ...] = (0.85, 0.9, 0.92, 0.95, 0.97)
    capture_max: tuple[int, ...] = (0, 8, 32, 128, 256, 512)  # 0 = enforce eager
    max_model_len: tuple[int, ...] = (2048, 4096, 8192, 16384, 32768)
    kv_cache_dtype: tuple[str, ...] = ("auto", "fp8")
    max_num_seqs: tuple[int, ...] = (64, 128, 256, 512, 1024)
    tp: tuple[int, ...] = (1,)


@dataclass(frozen=True)
class Candidate:
    settings: EngineSettings
    breakdown: MemoryBreakdown | None
    reason: Reason
    detail: str = ""
    effective_batch: float = 0.0
    graph_coverage: float = 0.0
    throughput_proxy: float = 0.0
    latency_proxy: float = 0.0
    score: float = 0.0

    @property
    def feasible(self) -> bool:
        return self.reason is Reason.OK


@dataclass(frozen=True)
class AutotuneResult:
    best: Candidate | None
    pareto: tuple[Candidate, ...]
    candidates: tuple[Candidate, ...] = field(repr=False)

    def rejected_by_reason(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.candidates:
            if not c.feasible:
                out[c.reason.value] = out.get(c.reason.value, 0) + 1
        return out


def graph_coverage(workload: WorkloadProfile, sizes: tuple[int, ...]) -> tuple[float, float]:
    """(share of decode steps that replay a graph, mean padding fraction of those steps)."""
    if not sizes:
        return 0.0, 0.0
    covered = pad = 0.0
    for batch, share in workload.batch_sizes:
        fit = next((s for s in sizes if s >= batch), None)
        if fit is not None:
            covered += share
            pad += share * (fit - batch) / fit
    return covered, (pad / covered if covered > 0 else 0.0)


def check(
    model: ModelConfig, gpu_total_gib: float, gpu_has_fp8: bool, s: EngineSettings, b: MemoryBreakdown,
    workload: WorkloadProfile, params: MemoryParams,
) -> tuple[Reason, str]:  # fmt: skip
    if model.num_attention_heads and model.num_attention_heads % s.tp:
        return Reason.TP_DOES_NOT_DIVIDE_HEADS, f"{model.num_attention_heads} heads % tp={s.tp} != 0"
    if s.max_model_len < workload.context_p99_tokens:
        return (
            Reason.CONTEXT_TOO_SHORT,
            f"max_model_len {s.max_model_len} < p99 {workload.context_p99_tokens}",
        )
    limit = model.derived_max_model_len or model.max_position_embeddings
    if limit and s.max_model_len > limit:
        return Reason.CONTEXT_ABOVE_MODEL_LIMIT, f"derived max_model_len={limit}"
    if s.kv_cache_dtype != "auto" and not gpu_has_fp8:
        return Reason.FP8_KV_UNSUPPORTED, "no FP8 tensor cores on this GPU"
    failure = predict_failure(b, s)  # vLLM's own wording
    if b.kv_cache_gib <= 0:
        return Reason.WEIGHTS_EXCEED_BUDGET, f"KV remainder {b.kv_cache_gib:.2f} GiB <= 0: {failure}"
    if failure is not None:
        return Reason.KV_TOO_SMALL_FOR_ONE_REQUEST, failure
    if b.headroom_gib < params.graph_headroom_slack_gib:
        return Reason.GRAPHS_EXCEED_HEADROOM, (
            f"graphs {b.cuda_graph_gib:.2f} GiB leave {b.headroom_gib:.2f} GiB outside the budget"
        )
    return Reason.OK, ""


def evaluate(
    model: ModelConfig,
    gpu_total_gib: float,
    gpu_has_fp8: bool,
    settings: EngineSettings,
    workload: WorkloadProfile,
    params: MemoryParams = DEFAULT_PARAMS,
    weights: ObjectiveWeights = ObjectiveWeights(),
) -> Candidate:
    b = predict_memory(model, gpu_total_gib, settings, params)
    reason, detail = check(model, gpu_total_gib, gpu_has_fp8, settings, b, workload, params)
    if reason is not Reason.OK:
        return Candidate(settings, b, reason, detail)
    per_req = b.kv_cache_tokens / max(1, workload.context_p50_tokens)
    batch = min(float(settings.resolved_max_num_seqs(gpu_total_gib)), per_req)
    cov, pad = graph_coverage(workload, b.capture_sizes)
    thr = batch / settings.tp * (1.0 + weights.graph_speedup * cov)
    lat = cov * (1.0 - pad)
    # the batch term saturates at the workload's largest decode batch: more is unused
    need = float(workload.batch_quantile(0.99))
    batch_norm = min(1.0, batch / need)
    if workload.target == "throughput":
        score = weights.throughput_batch * thr + weights.throughput_graph * lat * thr
    else:
        score = weights.latency_graph * lat + weights.latency_batch * batch_norm
    return Candidate(settings, b, Reason.OK, "", batch, cov, thr, lat, score)


def pareto_front(cands: list[Candidate]) -> tuple[Candidate, ...]:
    """Feasible candidates no other beats on both throughput and latency proxies."""
    ok = sorted((c for c in cands if c.feasible), key=lambda c: (-c.throughput_proxy, -c.latency_proxy))
    front: list[Candidate] = []
    best_lat = -1.0
    for c in ok:
        if c.latency_proxy > best_lat + 1e-12:
            front.append(c)
            best_lat = c.latency_proxy
    return tuple(front)


def search(
    model: ModelConfig,
    gpu_total_gib: float,
    gpu_has_fp8: bool,
    workload: WorkloadProfile,
    space: SearchSpace = SearchSpace(),
    base: EngineSettings = EngineSettings(),
    params: MemoryParams = DEFAULT_PARAMS,
    weights: ObjectiveWeights = ObjectiveWeights(),
) -> AutotuneResult:
    cands: list[Candidate] = []
    grid = itertools.product(
        space.tp, space.max_num_seqs, space.kv_cache_dtype, space.max_model_len,
        space.capture_max, space.gpu_memory_utilization,
    )  # fmt: skip
    for tp, seqs, kv, mml, cap, util in grid:
        sizes = default_capture_sizes(max(cap, 1), base.vllm_version)
        s = replace(
            base, tp=tp, max_num_seqs=seqs, kv_cache_dtype=kv, max_model_len=mml,
            gpu_memory_utilization=util, enforce_eager=cap == 0,
            cudagraph_capture_sizes=tuple(x for x in sizes if x <= min(cap, seqs)) if cap else None,
        )  # fmt: skip
        cands.append(evaluate(model, gpu_total_gib, gpu_has_fp8, s, workload, params, weights))
    ok = [c for c in cands if c.feasible]
    # ties (the score saturates once the workload's batches fit): prefer fewer GPUs, then more KV
    # tokens (burst room), then the shorter capture list (faster start-up)
    best = max(ok, key=_tie_key) if ok else None
    return AutotuneResult(best, pareto_front(cands), tuple(cands))


def _tie_key(c: Candidate) -> tuple[float, int, int, int]:
    tokens = c.breakdown.kv_cache_tokens if c.breakdown else 0
    sizes = len(c.breakdown.capture_sizes) if c.breakdown else 0
    return (round(c.score, 9), -c.settings.tp, tokens, -sizes)


def vllm_flags(s: EngineSettings) -> list[str]:
    """The ``vllm serve`` flags for a candidate's settings."""
    flags = [
        f"--gpu-memory-utilization {s.gpu_memory_utilization:g}",
        f"--max-model-len {s.max_model_len}",
        f"--kv-cache-dtype {s.kv_cache_dtype}",
    ]
    if s.max_num_seqs is not None:
        flags.append(f"--max-num-seqs {s.max_num_seqs}")
    if s.max_num_batched_tokens is not None:
        flags.append(f"--max-num-batched-tokens {s.max_num_batched_tokens}")
    if s.tp > 1:
        flags.append(f"--tensor-parallel-size {s.tp}")
    if s.enforce_eager:
        flags.append("--enforce-eager")
    elif s.cudagraph_capture_sizes is not None:
        sizes = ",".join(str(x) for x in s.cudagraph_capture_sizes)
        flags.append(f"--compilation-config '{{\"cudagraph_capture_sizes\": [{sizes}]}}'")
    if s.quantization:
        flags.append(f"--quantization {s.quantization}")
    return flags
