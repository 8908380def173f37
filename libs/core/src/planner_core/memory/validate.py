"""Predicted vs reported start-up memory, row by row, with nothing allowed to stop the run.

Every row is either checked or skipped with its reason: an unreadable config, a config lacking a
field, settings out of range. A partial summary (layers and KV layout, no widths) cannot give
weights, so its row is checked on what it can: KV tokens and concurrency from the reported KV GiB,
which tests the per-token KV layout (MLA latent, GQA split). Errors are signed percentages,
(predicted - reported) / reported; the summary is median / p90 / max of their absolute values per
component.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planner_core.memory.breakdown import predict_memory, predict_stage
from planner_core.memory.failure import predict_failure
from planner_core.memory.params import DEFAULT_PARAMS, MemoryParams
from planner_core.memory.reports import MemoryReport, SkippedRow
from planner_core.memory.settings import SettingsError
from planner_core.memory.weights import GIB, model_dtype, stage_layers
from planner_core.modelcfg import ModelConfig, ModelConfigError

COMPONENTS = ("weights_gib", "non_kv_gib", "kv_cache_gib", "kv_cache_tokens", "max_concurrency")


@dataclass(frozen=True)
class RowCheck:
    report: MemoryReport
    predicted: dict[str, float]
    errors_pct: dict[str, float]  # component -> signed % error, where both sides are known
    note: str = ""
    failure: str | None = None  # vLLM's start-up error, when we predict one


@dataclass(frozen=True)
class ComponentStats:
    n: int
    median_abs_pct: float
    p90_abs_pct: float
    max_abs_pct: float


@dataclass(frozen=True)
class ValidationResult:
    checked: tuple[RowCheck, ...]
    skipped: tuple[SkippedRow, ...]

    @property
    def total(self) -> int:
        return len(self.checked) + len(self.skipped)

    def stats(self) -> dict[str, ComponentStats]:
        out: dict[str, ComponentStats] = {}
        for comp in COMPONENTS:
            vals = sorted(abs(c.errors_pct[comp]) for c in self.checked if comp in c.errors_pct)
            if vals:
                out[comp] = ComponentStats(len(vals), statistics.median(vals), _p90(vals), vals[-1])
        return out

    def coverage_line(self) -> str:
        line = f"evaluated {len(self.checked)}/{self.total}; skipped: {len(self.skipped)}"
        if self.skipped:
            reasons = Counter(_reason_kind(s.reason) for s in self.skipped)
            line += " (" + "; ".join(f"{n} {r}" for r, n in reasons.most_common()) + ")"
        return line


def _p90(sorted_vals: list[float]) -> float:
    if len(sorted_vals) == 1:
        return sorted_vals[0]
    return statistics.quantiles(sorted_vals, n=10, method="inclusive")[8]


def _reason_kind(reason: str) -> str:
    """A short group name for the coverage line (the full reason stays on the row)."""
    for key in ("unknown GPU", "status", "is not a number", "missing", "no reported KV", "model config"):
        if key in reason:
            return key
    return reason[:60]


def _pct(pred: float, ref: float | None) -> float | None:
    return None if ref is None or ref == 0 else (pred - ref) / ref * 100.0


def _concurrency(model: ModelConfig, r: MemoryReport, blocks: int, stage: int = 0) -> float:
    """Requests of the reported per-request length (else max_model_len) that ``blocks`` of PP stage
    ``stage`` hold."""
    s = r.settings
    kv_dtype = model_dtype(model, s) if s.kv_cache_dtype == "auto" else s.kv_cache_dtype
    share = len(stage_layers(model.num_layers, s.pp, stage)) / model.num_layers
    per_token = model.kv_bytes_per_token(kv_dtype, s.tp) * share
    tokens = r.max_concurrency_tokens_per_req or s.max_model_len
    per_req = model.kv_bytes_per_request(tokens, kv_dtype, s.tp) * share
    return blocks * s.block_size * per_token / per_req if per_req > 0 else 0.0


def check_row(r: MemoryReport, model: ModelConfig, params: MemoryParams = DEFAULT_PARAMS) -> RowCheck:
    """One report row against the model (rank 0 of stage 0: the rank the reports carry)."""
    s = r.settings
    reported = {
        "weights_gib": r.weights_gib, "non_kv_gib": r.non_kv_gib, "kv_cache_gib": r.kv_cache_gib,
        "kv_cache_tokens": None if r.kv_cache_tokens is None else float(r.kv_cache_tokens),
        "max_concurrency": r.max_concurrency,
    }  # fmt: skip
    pred: dict[str, float] = {}
    note = ""
    failure: str | None = None
    if model.missing:
        if r.kv_cache_gib is None:
            raise ModelConfigError(f"{model.source}: partial summary and no reported kv_cache_gib to check")
        s.validate()
        kv_dtype = model_dtype(model, s) if s.kv_cache_dtype == "auto" else s.kv_cache_dtype
        share = len(stage_layers(model.num_layers, s.pp, 0)) / model.num_layers
        per_token = model.kv_bytes_per_token(kv_dtype, s.tp) * share
        blocks = int(r.kv_cache_gib * GIB // (s.block_size * per_token))
        pred["kv_cache_tokens"] = float(blocks * s.block_size)
        pred["max_concurrency"] = _concurrency(model, r, blocks)
        note = (
            f"partial config (lacks {', '.join(model.missing)}): KV tokens/concurrency from reported KV GiB"
        )
    else:
        b = predict_stage(model, r.gpu_total_gib, s, params, stage=0)
        # GiB figures are rank 0's; KV tokens are the fewest over the PP stages (vLLM sizes every
        # stage's cache to it), and concurrency follows those tokens
        tightest = predict_memory(model, r.gpu_total_gib, s, params)
        pred = {
            "weights_gib": b.weights_gib,
            "non_kv_gib": b.budget_gib - b.kv_cache_gib,
            "kv_cache_gib": b.kv_cache_gib,
            "kv_cache_tokens": float(tightest.kv_cache_tokens),
            "max_concurrency": _concurrency(model, r, tightest.num_gpu_blocks, tightest.stage),
        }
        failure = predict_failure(b, s)
    errors: dict[str, float] = {}
    for comp, value in pred.items():
        e = _pct(value, reported[comp])
        if e is not None:
            errors[comp] = e
    return RowCheck(r, pred, errors, note, failure)


def validate_reports(
    reports: Sequence[MemoryReport],
    skipped: Sequence[SkippedRow],
    loader: Callable[[str], ModelConfig],
    params: MemoryParams = DEFAULT_PARAMS,
) -> ValidationResult:
    """Check every usable row; a row that fails for any modelled reason joins ``skipped``."""
    checked: list[RowCheck] = []
    skips = list(skipped)
    for r in reports:
        try:
            checked.append(check_row(r, loader(r.model_config_file), params))
        except (ModelConfigError, SettingsError, ValueError, KeyError, ZeroDivisionError) as exc:
            msg = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
            skips.append(SkippedRow(r.row_id, msg))
    return ValidationResult(tuple(checked), tuple(skips))
