"""Real vLLM start-up memory reports (the ``reports_dev.csv`` column layout), as frozen rows.

:func:`read_reports` never raises on a row: a row it cannot use becomes a :class:`SkippedRow` with the
reason (unknown GPU, a required column empty or not a number, an engine or status it cannot use).
Numbers are read forgivingly: "58.11 GiB", "~58", "1,024", "116.21x" and annotated cells such as
"256 (default)" are numbers; "n/a" or free text is not. A start-up that failed is a row too
(:attr:`MemoryReport.started` False, with the reason the report gives): the model predicts whether
vLLM would start, so a failure is an outcome to check, not a row to drop.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path

from planner_core.hardware import UnknownGpuError, gpu_spec
from planner_core.memory.settings import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    EngineSettings,
    SettingsError,
    parse_version,
)

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
    non_kv_gib: float | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens_per_req: int | None = None
    started: bool = True  # False: the report is of a start-up that failed
    failure_reason: str = ""  # what the report says of the failure, when it says anything


_NUMBER = re.compile(
    r"^[~≈<>]?\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(?:gib|gb|x|%)?$", re.IGNORECASE
)


# a trailing annotation: "256 (default)", "8192 [set]", "0.9 # default"
_ANNOTATION = re.compile(r"\s*(?:\([^()]*\)|\[[^\[\]]*\]|#.*)\s*$")


def parse_number(text: str) -> float | None:
    """A number from a report cell ("58.11", "58.11 GiB", "~58", "1,024", "116.21x", "256 (default)");
    None if not one."""
    t = text.strip().replace(",", "")
    while True:
        stripped = _ANNOTATION.sub("", t)
        if stripped == t:
            break
        t = stripped
    m = _NUMBER.match(t)
    return float(m.group(1)) if m else None


# statuses of a start-up that did not come up (vLLM raised, or the process ran out of memory)
_FAILED = re.compile(
    r"fail|error|oom|out[ _-]of[ _-]memory|crash|not[ _-]start|refus|abort|insufficient", re.IGNORECASE
)
_OK = ("ok", "success", "succeeded", "started", "running", "pass", "passed")


def classify_status(status: str) -> bool | None:
    """True: the engine started; False: it did not; None: the status says neither."""
    t = status.strip().lower()
    if t in ("", *_OK):
        return True
    if _FAILED.search(t):
        return False
    return None


def _flags(text: str) -> dict[str, object]:
    """``other_flags``: a JSON object of engine arguments, or command-line flags ("--x --y=1")."""
    t = text.strip()
    if not t:
        return {}
    if t.startswith("{"):
        try:
            raw = json.loads(t)
        except ValueError:
            return {}
        return (
            {str(k).replace("-", "_").lstrip("_"): v for k, v in raw.items()} if isinstance(raw, dict) else {}
        )
    out: dict[str, object] = {}
    for part in t.split():
        if part.startswith("--"):
            key, _, val = part[2:].partition("=")
            out[key.replace("-", "_")] = val or True
    return out


def _opt_float(row: dict[str, str], key: str, where: str) -> float | None:
    text = (row.get(key) or "").strip()
    if not text:
        return None
    v = parse_number(text)
    if v is None:
        raise ReportError(f"{where}: column '{key}' is not a number: {text!r}")
    return v


def _ref(row: dict[str, str], key: str) -> float | None:
    """A reported figure: free text there only means that figure is not compared."""
    return parse_number(row.get(key) or "")


def _opt_int(row: dict[str, str], key: str, where: str) -> int | None:
    v = _opt_float(row, key, where)
    return None if v is None else int(v)


def _int_or_none(v: float | None) -> int | None:
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
        except UnknownGpuError:
            raise ReportError(
                f"{where}: unknown GPU {row['gpu']!r} and no gpu_mem_total_gib (add the total memory)"
            ) from None
    sizes_text = (row.get("cudagraph_capture_sizes") or "").strip()
    try:
        sizes = tuple(int(s) for s in sizes_text.strip("[]").split(",") if s.strip()) if sizes_text else None
    except ValueError:
        raise ReportError(f"{where}: column 'cudagraph_capture_sizes' is not a list of integers") from None
    # vLLM gives the big-GPU defaults (1024 seqs, 8192 tokens) only to >= 70 GiB boards that are not
    # an A100; an A100-80GB gets the small ones
    small = "a100" in row["gpu"].lower()
    small_seqs = DEFAULT_MAX_NUM_SEQS[1] if small else None
    small_tokens = DEFAULT_MAX_NUM_BATCHED_TOKENS[1] if small else None
    engine = (row.get("engine") or "").strip().upper()
    if engine.startswith("V0"):
        raise ReportError(
            f"{where}: engine V0 is not supported: the memory model follows the V1 engine's start-up"
        )
    try:
        version = parse_version(row.get("vllm_version") or "")
    except SettingsError as exc:
        raise ReportError(f"{where}: {exc}") from None
    flags = _flags(row.get("other_flags") or "")
    no_hybrid = flags.get("disable_hybrid_kv_cache_manager") not in (None, False, "false", "False")
    util = _opt_float(row, "gpu_memory_utilization", where)
    mml = _opt_int(row, "max_model_len", where)
    if util is None or mml is None:
        raise ReportError(f"{where}: gpu_memory_utilization and max_model_len are required")
    settings = EngineSettings(
        gpu_memory_utilization=util,
        max_model_len=mml,
        max_num_seqs=_opt_int(row, "max_num_seqs", where) or small_seqs,
        max_num_batched_tokens=_opt_int(row, "max_num_batched_tokens", where) or small_tokens,
        kv_cache_dtype=(row.get("kv_cache_dtype") or "auto").strip() or "auto",
        dtype=_dtype(row.get("dtype") or ""),
        quantization=(row.get("quantization") or "").strip(),
        tp=_opt_int(row, "tp", where) or 1,
        pp=_opt_int(row, "pp", where) or 1,
        block_size=_opt_int(row, "block_size", where) or 16,
        cudagraph_capture_sizes=sizes,
        enforce_eager=(row.get("enforce_eager") or "").strip().lower() == "true",
        vllm_version=version,
        disable_hybrid_kv_cache_manager=no_hybrid,
    )
    status = (row.get("status") or "ok").strip()
    started = classify_status(status)
    return MemoryReport(
        row_id=row["row_id"],
        model_config_file=row["model_config_file"].strip(),
        gpu=row["gpu"],
        gpu_total_gib=total,
        settings=settings,
        weights_gib=_ref(row, "weights_gib"),
        activation_gib=_ref(row, "activation_peak_gib"),
        non_torch_gib=_ref(row, "non_torch_gib"),
        cuda_graph_gib=_ref(row, "cuda_graph_gib"),
        kv_cache_gib=_ref(row, "kv_cache_gib"),
        num_gpu_blocks=_int_or_none(_ref(row, "num_gpu_blocks")),
        kv_cache_tokens=_int_or_none(_ref(row, "kv_cache_tokens")),
        status=status,
        non_kv_gib=_ref(row, "non_kv_total_gib"),
        max_concurrency=_ref(row, "max_concurrency_x"),
        max_concurrency_tokens_per_req=_int_or_none(_ref(row, "max_concurrency_tokens_per_req")),
        started=started is not False,
        failure_reason=_failure_reason(status, row.get("notes") or "") if started is False else "",
    )


def _failure_reason(status: str, notes: str) -> str:
    """The report's own words on why the start-up failed: the notes when they say more than the status."""
    n = " ".join(notes.split())
    return n if n else status


@dataclass(frozen=True)
class SkippedRow:
    row_id: str
    reason: str


def read_reports(path: str | Path) -> tuple[list[MemoryReport], list[SkippedRow]]:
    """Every row of a report CSV: usable rows, and the others with their reason. Raises
    :class:`ReportError` only when the file itself cannot be read or lacks the required columns."""
    p = Path(path)
    try:
        with p.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ReportError(f"{p}: cannot read: {exc}") from None
    if rows:
        absent = [c for c in REQUIRED_COLUMNS if c not in rows[0]]
        if absent:
            raise ReportError(f"{p}: missing column(s) {', '.join(absent)}")
    ok: list[MemoryReport] = []
    skipped: list[SkippedRow] = []
    for i, raw in enumerate(rows):
        row = {k: (v or "") for k, v in raw.items() if k is not None}
        row_id = (row.get("row_id") or "").strip() or f"line {i + 2}"
        try:
            r = parse_report_row(row, f"row {row_id}")
        except ReportError as exc:
            skipped.append(SkippedRow(row_id, str(exc).removeprefix(f"row {row_id}: ")))
            continue
        if classify_status(r.status) is None:
            skipped.append(SkippedRow(row_id, f"status '{r.status}' says neither started nor failed"))
            continue
        if not r.started:
            ok.append(r)  # a failed start-up: its outcome is checked
            continue
        if r.kv_cache_gib is None and r.kv_cache_tokens is None and r.num_gpu_blocks is None:
            skipped.append(
                SkippedRow(row_id, "no reported KV figure (kv_cache_gib, kv_cache_tokens, num_gpu_blocks)")
            )
            continue
        ok.append(r)
    return ok, skipped


def load_reports(path: str | Path) -> list[MemoryReport]:
    """Rows of a report CSV of engines that started (strict: the first unusable row raises)."""
    ok, skipped = read_reports(path)
    bad = [s for s in skipped if not s.reason.startswith("status")]
    if bad:
        raise ReportError(f"{path}: row {bad[0].row_id}: {bad[0].reason}")
    return [r for r in ok if r.started]
