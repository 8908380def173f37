"""Fit :class:`MemoryParams` on real vLLM reports, and predict a report row.

Each group of constants is fitted only on the rows where it is observable (a TP1 row says nothing
about all-reduce buffers); a group with no such rows keeps the value of ``base``. This keeps a
leave-one-out refit well defined even when the held-out row was the only one of its kind.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np
from scipy.optimize import nnls

from planner_core.memory.breakdown import MemoryBreakdown, predict_stage
from planner_core.memory.components import _mlp_width_rank, body_activation_gib
from planner_core.memory.params import DEFAULT_PARAMS, MemoryParams
from planner_core.memory.reports import MemoryReport
from planner_core.memory.weights import GIB, model_dtype, stage_layers
from planner_core.modelcfg import ModelConfig, dtype_bytes


def predict_report(report: MemoryReport, model: ModelConfig, params: MemoryParams) -> MemoryBreakdown:
    """Rank 0 of stage 0: the rank whose numbers the reports carry."""
    return predict_stage(model, report.gpu_total_gib, report.settings, params, stage=0)


def _sampler_copies(
    rows: Sequence[tuple[MemoryReport, ModelConfig]], params: MemoryParams, new: bool
) -> float | None:
    vals: list[float] = []
    for r, m in rows:
        s = r.settings
        if r.activation_gib is None or s.pp != 1 or (s.vllm_version >= params.sampler_new_since) != new:
            continue
        tokens = s.resolved_max_num_batched_tokens(r.gpu_total_gib)
        if body_activation_gib(m, s, params, tokens) >= r.activation_gib:
            continue  # the forward pass, not the sampler, set this peak
        seqs = s.resolved_max_num_seqs(r.gpu_total_gib)
        elem = dtype_bytes(model_dtype(m, s), m.source)
        vals.append((r.activation_gib * GIB / (seqs * m.vocab_size) - elem) / 4.0)
    return statistics.median(vals) if vals else None


def _median(vals: list[float]) -> float | None:
    return statistics.median(vals) if vals else None


def fit_params(
    rows: Sequence[tuple[MemoryReport, ModelConfig]], base: MemoryParams = DEFAULT_PARAMS
) -> MemoryParams:
    p = base
    new = _sampler_copies(rows, p, new=True)
    old = _sampler_copies(rows, p, new=False)
    p = replace(
        p,
        sampler_fp32_copies=new if new is not None else p.sampler_fp32_copies,
        sampler_fp32_copies_legacy=old if old is not None else p.sampler_fp32_copies_legacy,
    )

    def nt(pred: Callable[[MemoryReport], bool]) -> float | None:
        return _median([r.non_torch_gib for r, _ in rows if r.non_torch_gib is not None and pred(r)])

    single = [lambda r: r.settings.tp == 1 and r.settings.pp == 1]
    base_new = nt(lambda r: single[0](r) and r.settings.vllm_version >= p.non_torch_new_since)
    base_old = nt(lambda r: single[0](r) and r.settings.vllm_version < p.non_torch_new_since)
    pp_only = nt(lambda r: r.settings.tp == 1 and r.settings.pp > 1)
    p = replace(
        p,
        non_torch_base_gib=base_new if base_new is not None else p.non_torch_base_gib,
        non_torch_base_legacy_gib=base_old if base_old is not None else p.non_torch_base_legacy_gib,
        non_torch_pp_gib=pp_only if pp_only is not None else p.non_torch_pp_gib,
    )
    tp_rows = [(r.settings.tp - 1, r.non_torch_gib - p.non_torch_base_gib) for r, _ in rows
               if r.settings.tp > 1 and r.non_torch_gib is not None]  # fmt: skip
    if len({x for x, _ in tp_rows}) >= 2:
        a = np.array([[1.0, x] for x, _ in tp_rows])
        coef, _ = nnls(a, np.array([y for _, y in tp_rows]))
        p = replace(p, allreduce_fixed_gib=float(coef[0]), allreduce_per_peer_gib=float(coef[1]))
    elif tp_rows:
        fixed = statistics.mean(y - p.allreduce_per_peer_gib * x for x, y in tp_rows)
        p = replace(p, allreduce_fixed_gib=fixed)
    return _fit_graphs(rows, p)


def _fit_graphs(rows: Sequence[tuple[MemoryReport, ModelConfig]], p: MemoryParams) -> MemoryParams:
    feats: list[list[float]] = []
    ys: list[float] = []
    for r, m in rows:
        if r.cuda_graph_gib is None:
            continue
        s = r.settings
        sizes = s.capture_sizes(r.gpu_total_gib)
        if not sizes:
            continue
        layers = len(stage_layers(m.num_layers, s.pp, 0))
        elem = dtype_bytes(model_dtype(m, s), m.source)
        per_tok = sum(sizes) * _mlp_width_rank(m, s.tp) * elem / GIB
        feats.append([1.0, float(len(sizes) * layers), per_tok])
        ys.append(r.cuda_graph_gib)
    if len(ys) < 3:
        return p
    coef, _ = nnls(np.array(feats), np.array(ys))
    return replace(
        p,
        graph_fixed_gib=float(coef[0]),
        graph_per_size_layer_gib=float(coef[1]),
        graph_per_token_factor=float(coef[2]),
    )


def leave_one_out(
    rows: Sequence[tuple[MemoryReport, ModelConfig]],
    group: Callable[[MemoryReport], str] | None = None,
    base: MemoryParams = DEFAULT_PARAMS,
) -> list[MemoryBreakdown]:
    """Predict each row with parameters fitted on the others (on the other groups if ``group``)."""
    key = group if group is not None else (lambda r: r.row_id)
    out: list[MemoryBreakdown] = []
    for r, m in rows:
        train = [(r2, m2) for r2, m2 in rows if key(r2) != key(r)]
        out.append(predict_report(r, m, fit_params(train, base)))
    return out


def load_models(
    reports: Sequence[MemoryReport], loader: Callable[[str], ModelConfig]
) -> Mapping[str, ModelConfig]:
    return {r.model_config_file: loader(r.model_config_file) for r in reports}
