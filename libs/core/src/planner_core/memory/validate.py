"""Predicted vs reported start-up memory, row by row, with nothing allowed to stop the run.

Every row is either checked or skipped with its reason: an unreadable config, a config lacking a
field, settings out of range, a vLLM version or engine outside the supported range. A partial
summary (layers and KV layout, no widths) cannot give weights, so its row is checked on what it can:
KV tokens and concurrency from the reported KV GiB, which tests the per-token KV layout (MLA latent,
GQA split). Errors are signed percentages, (predicted - reported) / reported; the summary is median /
p90 / max of their absolute values per component. KV tokens and concurrency are compared with what
vLLM logs (its arithmetic for the row's version); the physical concurrency is given beside them.

A report of a start-up that failed is checked too, on its outcome: whether the model predicts that
vLLM would not start. :meth:`ValidationResult.outcomes` counts both kinds of miss.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from planner_core.memory.breakdown import predict_memory, predict_stage
from planner_core.memory.failure import predict_failure
from planner_core.memory.kvlayout import layer_specs, settings_layout
from planner_core.memory.params import DEFAULT_PARAMS, MemoryParams
from planner_core.memory.reports import MemoryReport, SkippedRow
from planner_core.memory.settings import EngineSettings, SettingsError
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

    @property
    def outcome_ok(self) -> bool | None:
        """Whether the predicted outcome (starts / would not start) is the reported one; None for a
        partial config, which cannot say."""
        if "kv_cache_gib" not in self.predicted:
            return None  # a partial config: no budget, so no outcome
        return (self.failure is None) == self.report.started


@dataclass(frozen=True)
class Outcomes:
    """Start-up outcomes over the checked rows: reported failures and predicted ones."""

    rows: int
    reported_failed: int
    failed_predicted: int  # reported failures that the model also calls "would not start"
    false_failures: int  # reported start-ups that the model calls "would not start"


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

    def outcomes(self) -> Outcomes:
        judged = [c for c in self.checked if c.outcome_ok is not None]
        failed = [c for c in judged if not c.report.started]
        return Outcomes(
            rows=len(judged),
            reported_failed=len(failed),
            failed_predicted=sum(1 for c in failed if c.failure is not None),
            false_failures=sum(1 for c in judged if c.report.started and c.failure is not None),
        )

    def outcome_line(self) -> str:
        o = self.outcomes()
        return (
            f"start-up outcome: {o.failed_predicted}/{o.reported_failed} reported failures predicted "
            f"'would not start'; {o.false_failures} of {o.rows - o.reported_failed} start-ups wrongly "
            "predicted to fail"
        )

    def coverage_line(self) -> str:
        failed = sum(1 for c in self.checked if not c.report.started)
        line = f"evaluated {len(self.checked)}/{self.total}"
        if failed:
            line += f" ({failed} failed start-ups, judged on their outcome)"
        line += f"; skipped: {len(self.skipped)}"
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
    for key in (
        "not supported",
        "unknown GPU",
        "status",
        "is not a number",
        "missing",
        "no reported KV",
        "model config",
    ):
        if key in reason:
            return key
    return reason[:60]


def _pct(pred: float, ref: float | None) -> float | None:
    return None if ref is None or ref == 0 else (pred - ref) / ref * 100.0


def _per_request_settings(r: MemoryReport) -> EngineSettings:
    """The row's settings, with max_model_len set to the report's per-request length when it gives
    one (the length in vLLM's "Maximum concurrency for L tokens per request" line)."""
    s = r.settings
    if r.max_concurrency_tokens_per_req and r.max_concurrency_tokens_per_req != s.max_model_len:
        return replace(s, max_model_len=r.max_concurrency_tokens_per_req)
    return s


def check_row(r: MemoryReport, model: ModelConfig, params: MemoryParams = DEFAULT_PARAMS) -> RowCheck:
    """One report row against the model (rank 0 of stage 0: the rank the reports carry)."""
    s = _per_request_settings(r)
    s.validate()
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
        kv_dtype = model_dtype(model, s) if s.kv_cache_dtype == "auto" else s.kv_cache_dtype
        specs = layer_specs(model, kv_dtype, s.tp, stage_layers(model.num_layers, s.pp, 0))
        lay = settings_layout(specs, r.kv_cache_gib * GIB, s, r.gpu_total_gib)
        pred["kv_cache_tokens"] = float(lay.reported_tokens)
        pred["max_concurrency"] = lay.reported_concurrency
        pred["physical_max_concurrency"] = lay.physical_concurrency
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
            "max_concurrency": tightest.max_concurrency,
            "physical_max_concurrency": tightest.physical_max_concurrency,
        }
        failure = predict_failure(b, s)
    errors: dict[str, float] = {}
    if r.started:
        for comp in COMPONENTS:
            if comp in pred:
                e = _pct(pred[comp], reported[comp])
                if e is not None:
                    errors[comp] = e
    else:
        note = (
            f"reported: would not start ({r.failure_reason})"
            if r.failure_reason
            else "reported: would not start"
        )
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
