"""Real vLLM start-up memory reports (the ``reports_dev.csv`` column layout), as frozen rows."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from planner_core.hardware import UnknownGpuError, gpu_spec
from planner_core.memory.settings import EngineSettings, parse_version

REQUIRED_COLUMNS = (
    "row_id",
    "model_config_file",
    "gpu",
    "tp",
    "gpu_memory_utilization",
    "max_model_len",
    "kv_cache_gib",
)


class ReportError(ValueError):
    """A report file or row that cannot be used (names the file, the row and the column)."""


@dataclass(frozen=True)
class MemoryReport:
    row_id: str
    model_config_file: str
    gpu: str
    gpu_total_gib: float
    settings: EngineSettings
    weights_gib: float | None
    activation_gib: float | None
    non_torch_gib: float | None
    cuda_graph_gib: float | None
    kv_cache_gib: float | None
    num_gpu_blocks: int | None
    kv_cache_tokens: int | None
    status: str


def _opt_float(row: dict[str, str], key: str, where: str) -> float | None:
    text = (row.get(key) or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ReportError(f"{where}: column '{key}' is not a number: {text!r}") from None


def _opt_int(row: dict[str, str], key: str, where: str) -> int | None:
    v = _opt_float(row, key, where)
    return None if v is None else int(v)


def _dtype(text: str) -> str:
    t = text.strip()
    if t.startswith("auto(") and t.endswith(")"):
        return t[5:-1]
    return t or "auto"


def parse_report_row(row: dict[str, str], where: str) -> MemoryReport:
    for col in REQUIRED_COLUMNS:
        if col not in row:
            raise ReportError(f"{where}: missing column '{col}'")
    total = _opt_float(row, "gpu_mem_total_gib", where)
    if total is None:
        try:
            total = gpu_spec(row["gpu"]).memory_gib
        except UnknownGpuError as exc:
            raise ReportError(f"{where}: column 'gpu': {exc}") from None
    sizes_text = (row.get("cudagraph_capture_sizes") or "").strip()
    sizes = tuple(int(s) for s in sizes_text.strip("[]").split(",") if s.strip()) if sizes_text else None
    util = _opt_float(row, "gpu_memory_utilization", where)
    mml = _opt_int(row, "max_model_len", where)
    if util is None or mml is None:
        raise ReportError(f"{where}: gpu_memory_utilization and max_model_len are required")
    settings = EngineSettings(
        gpu_memory_utilization=util,
        max_model_len=mml,
        max_num_seqs=_opt_int(row, "max_num_seqs", where),
        max_num_batched_tokens=_opt_int(row, "max_num_batched_tokens", where),
        kv_cache_dtype=(row.get("kv_cache_dtype") or "auto").strip() or "auto",
        dtype=_dtype(row.get("dtype") or ""),
        quantization=(row.get("quantization") or "").strip(),
        tp=_opt_int(row, "tp", where) or 1,
        pp=_opt_int(row, "pp", where) or 1,
        block_size=_opt_int(row, "block_size", where) or 16,
        cudagraph_capture_sizes=sizes,
        enforce_eager=(row.get("enforce_eager") or "").strip().lower() == "true",
        vllm_version=parse_version(row.get("vllm_version") or ""),
    )
    return MemoryReport(
        row_id=row["row_id"],
        model_config_file=row["model_config_file"].strip(),
        gpu=row["gpu"],
        gpu_total_gib=total,
        settings=settings,
        weights_gib=_opt_float(row, "weights_gib", where),
        activation_gib=_opt_float(row, "activation_peak_gib", where),
        non_torch_gib=_opt_float(row, "non_torch_gib", where),
        cuda_graph_gib=_opt_float(row, "cuda_graph_gib", where),
        kv_cache_gib=_opt_float(row, "kv_cache_gib", where),
        num_gpu_blocks=_opt_int(row, "num_gpu_blocks", where),
        kv_cache_tokens=_opt_int(row, "kv_cache_tokens", where),
        status=(row.get("status") or "ok").strip(),
    )


def load_reports(path: str | Path) -> list[MemoryReport]:
    """Rows of a report CSV whose status is "ok"."""
    p = Path(path)
    try:
        with p.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise ReportError(f"{p}: cannot read: {exc}") from None
    out = [parse_report_row(r, f"{p}: row {i + 2}") for i, r in enumerate(rows)]
    return [r for r in out if r.status == "ok"]
