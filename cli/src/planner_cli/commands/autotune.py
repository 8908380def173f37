"""planner autotune: vLLM memory settings for a model, a GPU and a workload (spec 004)."""

from __future__ import annotations

import argparse
from typing import Any, Literal

NAME = "autotune"
HELP = (
    "recommend vLLM memory flags (utilisation, CUDA graphs, context, KV dtype, seqs, TP) from a config.json"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="local HF config.json (or .summary.json)")
    parser.add_argument("--gpu", default="h100", help="GPU name, e.g. h200, 'NVIDIA H100 80GB', l40s")
    parser.add_argument("--gpu-memory-gib", type=float, default=None, help="total GPU memory (any board)")
    parser.add_argument("--gpu-spec", default=None, help="YAML with memory_gib, hbm_gb_s, bf16_tflops, ...")
    parser.add_argument(
        "--tp", type=int, default=None, help="fix the tensor-parallel size (default: search 1,2,4,8)"
    )
    parser.add_argument("--workload", choices=["chatbot", "batch", "interactive"], default="chatbot")
    parser.add_argument(
        "--trace", help="CSV/JSONL trace with input/output lengths (and optionally timestamps)"
    )
    parser.add_argument(
        "--vllm-version",
        default="0.21",
        help="vLLM version to model, 0.8 to 0.21 (default 0.21: CUDA graphs inside the KV budget, "
        "utilisation 0.92; older versions leave graphs outside it); older versions are refused",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--plot", help="write the Pareto plot to this PNG")
    parser.add_argument("--validate", metavar="CSV", help="compare predictions with a reports CSV")
    parser.add_argument(
        "--configs-dir", help="folder of the model_config_file entries (default: beside the CSV)"
    )


def _breakdown_dict(b: Any) -> dict[str, Any]:
    return {
        "weights_gib": round(b.weights_gib, 3),
        "activation_gib": round(b.activation_gib, 3),
        "non_torch_gib": round(b.non_torch_gib, 3),
        "cuda_graph_gib": round(b.cuda_graph_gib, 3),
        "kv_cache_gib": round(b.kv_cache_gib, 3),
        "headroom_gib": round(b.headroom_gib, 3),
        "num_gpu_blocks": b.num_gpu_blocks,
        "kv_cache_tokens": b.kv_cache_tokens,
        "max_concurrency": round(b.max_concurrency, 2),
        "physical_kv_tokens": b.physical_kv_tokens,
        "physical_max_concurrency": round(b.physical_max_concurrency, 2),
        "kv_groups": b.kv_groups,
        "num_capture_sizes": len(b.capture_sizes),
    }


def _read_trace(path: str) -> tuple[list[int], list[int], list[float] | None]:
    import csv
    import json
    from pathlib import Path

    p = Path(path)
    rows: list[dict[str, Any]]
    if p.suffix in (".jsonl", ".json"):
        rows = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    else:
        with p.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    if not rows:
        raise ValueError(f"{path}: empty trace")
    keys = rows[0].keys()

    def pick(*names: str) -> str | None:
        return next((n for n in names if n in keys), None)

    ik = pick("input_length", "isl", "input_tokens", "prompt_tokens", "ContextTokens", "input_len")
    ok = pick("output_length", "osl", "output_tokens", "completion_tokens", "GeneratedTokens", "output_len")
    tk = pick("timestamp", "arrival_s", "time", "ts")
    if ik is None or ok is None:
        raise ValueError(f"{path}: needs input and output length columns (e.g. input_length, output_length)")
    isl = [int(float(r[ik])) for r in rows]
    osl = [int(float(r[ok])) for r in rows]
    times: list[float] | None = None
    if tk is not None:
        try:
            times = [float(r[tk]) for r in rows]
        except (TypeError, ValueError):
            times = None  # not numeric seconds (e.g. ISO dates): Little's law skipped
    return isl, osl, times


def _validate(args: argparse.Namespace) -> int:
    """Predicted vs reported memory for every row of a reports CSV; never stops on a row."""
    import dataclasses
    import json
    import sys
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from planner_core.memory.reports import ReportError, read_reports
    from planner_core.memory.validate import COMPONENTS, validate_reports
    from planner_core.modelcfg import load_model_config

    csv_path = Path(args.validate)
    try:
        reports, skipped = read_reports(csv_path)
    except ReportError as exc:
        print(f"planner autotune: {exc}", file=sys.stderr)
        return 2
    cfg_dir = Path(args.configs_dir) if args.configs_dir else csv_path.parent.parent / "model_configs"
    result = validate_reports(reports, skipped, lambda name: load_model_config(cfg_dir / name))
    stats = result.stats()
    if args.json:
        rows = [
            {"row_id": c.report.row_id, "model": c.report.model_config_file, "gpu": c.report.gpu,
             "tp": c.report.settings.tp, "pp": c.report.settings.pp,
             "predicted": {k: round(v, 4) for k, v in c.predicted.items()},
             "error_pct": {k: round(v, 4) for k, v in c.errors_pct.items()},
             "note": c.note, "predicted_failure": c.failure, "started": c.report.started}
            for c in result.checked
        ]  # fmt: skip
        payload = {
            "coverage": {"evaluated": len(result.checked), "total": result.total,
                         "line": result.coverage_line()},
            "outcome": dataclasses.asdict(result.outcomes()),
            "summary": {k: {"n": v.n, "median_abs_pct": round(v.median_abs_pct, 4),
                            "p90_abs_pct": round(v.p90_abs_pct, 4), "max_abs_pct": round(v.max_abs_pct, 4)}
                        for k, v in stats.items()},
            "rows": rows,
            "skipped": [{"row_id": s.row_id, "reason": s.reason} for s in result.skipped],
        }  # fmt: skip
        print(json.dumps(payload))
        return 0
    table = Table(title=f"predicted vs reported start-up memory ({csv_path.name})")
    for col in (
        "row",
        "model",
        "GPU",
        "TP",
        "KV GiB rep",
        "pred",
        "err %",
        "KV tok err %",
        "conc err %",
        "note",
    ):
        table.add_column(col, justify="left" if col in ("model", "GPU", "note") else "right")

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:+.2f}"

    for c in result.checked:
        r = c.report
        kv = c.predicted.get("kv_cache_gib")
        table.add_row(
            r.row_id, r.model_config_file[:40], r.gpu[:20], str(r.settings.tp),
            "-" if r.kv_cache_gib is None else f"{r.kv_cache_gib:.2f}", "-" if kv is None else f"{kv:.2f}",
            pct(c.errors_pct.get("kv_cache_gib")), pct(c.errors_pct.get("kv_cache_tokens")),
            pct(c.errors_pct.get("max_concurrency")), c.note or (c.failure or "")[:40],
        )  # fmt: skip
    for sk in result.skipped:
        table.add_row(sk.row_id, "", "", "", "", "", "", "", "", f"skipped: {sk.reason}"[:120])
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    console.print(table)
    summary = Table(title="|error| per component (%)")
    for col in ("component", "rows", "median", "p90", "max"):
        summary.add_column(col, justify="left" if col == "component" else "right")
    for comp in COMPONENTS:
        st = stats.get(comp)
        if st is not None:
            summary.add_row(comp, str(st.n), f"{st.median_abs_pct:.3f}", f"{st.p90_abs_pct:.3f}",
                            f"{st.max_abs_pct:.3f}")  # fmt: skip
    console.print(summary)
    console.print(result.coverage_line())
    console.print(result.outcome_line())
    return 0


def _plot(result: Any, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [c for c in result.candidates if c.feasible]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.scatter(
        [c.throughput_proxy for c in ok], [c.latency_proxy for c in ok], s=8, alpha=0.3, label="feasible"
    )
    front = result.pareto
    ax.plot(
        [c.throughput_proxy for c in front],
        [c.latency_proxy for c in front],
        "r-o",
        ms=4,
        label="Pareto front",
    )
    if result.best is not None:
        ax.scatter([result.best.throughput_proxy], [result.best.latency_proxy], marker="*", s=200, c="k",
                   label="recommended", zorder=5)  # fmt: skip
    ax.set_xlabel("throughput proxy (concurrent sequences per GPU)")
    ax.set_ylabel("latency proxy (graph coverage x (1 - padding))")
    ax.set_title(title)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    if args.validate:
        return _validate(args)
    if not args.model:
        print("planner autotune: --model CONFIG.json is required (or --validate FILE.csv)", file=sys.stderr)
        return 2

    from dataclasses import replace

    from rich.console import Console
    from rich.table import Table

    from planner_cli.estimate import resolve_gpu
    from planner_core.autotune import SearchSpace, from_lengths, search, synthetic, vllm_flags
    from planner_core.memory.failure import kv_cache_memory_flag
    from planner_core.memory.settings import (
        EngineSettings,
        SettingsError,
        default_gpu_memory_utilization,
        parse_version,
        version_problem,
        version_warning,
    )
    from planner_core.modelcfg import ModelConfigError, load_model_config
    from planner_core.profiling.model_estimate import EstimateError

    try:
        model = load_model_config(args.model)
        selection = resolve_gpu(args.gpu, args.gpu_memory_gib, args.gpu_spec)
        gpu = selection.spec
        if args.trace:
            isl, osl, times = _read_trace(args.trace)
            target: Literal["throughput", "latency"] = (
                "latency" if args.workload in ("chatbot", "interactive") else "throughput"
            )
            workload = from_lengths(isl, osl, times, target=target, name=f"trace:{args.trace}")
        else:
            workload = synthetic(args.workload)
    except (ModelConfigError, EstimateError, ValueError, OSError) as exc:
        print(f"planner autotune: {exc}", file=sys.stderr)
        return 2
    tps = (args.tp,) if args.tp else (selection.count,) if selection.count > 1 else (1, 2, 4, 8)
    try:
        version = parse_version(args.vllm_version)
    except SettingsError as exc:
        print(f"planner autotune: {exc}", file=sys.stderr)
        return 2
    problem = version_problem(version)
    if problem is not None:
        print(f"planner autotune: {problem}", file=sys.stderr)
        return 2
    caveat = version_warning(version)
    if caveat is not None:
        print(f"planner autotune: warning: {caveat}", file=sys.stderr)
    base = EngineSettings(
        vllm_version=version, gpu_memory_utilization=default_gpu_memory_utilization(version)
    )
    lens = tuple(sorted({2048, 4096, 8192, 16384, 32768, workload.context_p99_tokens}))
    space = replace(SearchSpace(), tp=tps, max_model_len=lens)
    try:
        result = search(model, gpu.memory_gib, gpu.has_fp8, workload, space, base)
    except ModelConfigError as exc:
        print(f"planner autotune: {exc}", file=sys.stderr)
        return 2
    if args.plot:
        _plot(result, args.plot, f"{model.architecture} on {gpu.name} ({workload.name})")
    best = result.best
    if args.json:
        payload: dict[str, Any] = {
            "model": args.model,
            "gpu": gpu.name,
            "workload": workload.name,
            "feasible": best is not None,
            "rejected": result.rejected_by_reason(),
            "evaluated": len(result.candidates),
        }
        if best is not None and best.breakdown is not None:
            payload["flags"] = [*vllm_flags(best.settings), kv_cache_memory_flag(best.breakdown)]
            payload["memory_gib"] = _breakdown_dict(best.breakdown)
            payload["score"] = round(best.score, 4)
            payload["tp"] = best.settings.tp
        payload["pareto"] = [
            {"flags": vllm_flags(c.settings), "throughput_proxy": round(c.throughput_proxy, 3),
             "latency_proxy": round(c.latency_proxy, 4)} for c in result.pareto
        ]  # fmt: skip
        print(json.dumps(payload))
        return 0 if best is not None else 1
    console = Console()
    if best is None or best.breakdown is None:
        console.print(f"[red]no feasible configuration[/red] for {model.architecture} on {gpu.name}")
        for reason, n in sorted(result.rejected_by_reason().items()):
            console.print(f"  {reason}: {n}")
        return 1
    console.print(
        f"[bold]{model.architecture}[/bold] on {gpu.name} x{best.settings.tp}, workload {workload.name}"
    )
    flags = [*vllm_flags(best.settings), kv_cache_memory_flag(best.breakdown)]
    console.print("vllm serve <model> " + " ".join(flags))
    table = Table(title="Predicted memory per GPU")
    table.add_column("component")
    table.add_column("GiB", justify="right")
    for name, gib in best.breakdown.rows():
        table.add_row(name, f"{gib:.2f}")
    table.add_row("total", f"{best.breakdown.gpu_total_gib:.2f}")
    console.print(table)
    b = best.breakdown
    console.print(
        f"as vLLM logs it: KV tokens {b.kv_cache_tokens:,}  blocks {b.num_gpu_blocks:,}  "
        f"max concurrency {b.max_concurrency:.2f}x for {best.settings.max_model_len:,} tokens per request"
    )
    if b.physical_max_concurrency > b.max_concurrency * 1.005 or b.physical_kv_tokens != b.kv_cache_tokens:
        console.print(
            f"physically: {b.physical_kv_tokens:,} tokens of every layer, "
            f"{b.physical_max_concurrency:.2f} requests of max_model_len (window layers keep their window)"
        )
    console.print(f"Pareto front: {len(result.pareto)} configs; rejected: {result.rejected_by_reason()}")
    return 0
