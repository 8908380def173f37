"""planner profile: engine performance profiles in the reference NPZ format.

``--estimate`` builds one with no engine, from a model's config.json and a GPU spec: the memory model
sizes the KV cache, the roofline timing model gives per-pass times, and the profile follows (see
planner_core.profiling). The output folder loads straight into the decider (``--profile-dir``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "profile"
HELP = "build an engine performance profile (reference NPZ format); --estimate needs no engine"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--estimate", action="store_true", help="estimate from --model and --gpu (no engine)")
    parser.add_argument("--model", type=Path, help="HF config.json of the model")
    parser.add_argument("--gpu", default="h200", help="GPU name (h200, h100, a100-80gb, b200, l40s, l4, ...)")
    parser.add_argument("--tp", type=int, default=1, help="tensor parallel size")
    parser.add_argument("--quant", default="", help="weight quantization flag, e.g. fp8 ('' = checkpoint's)")
    parser.add_argument("--kv-dtype", default="auto", help="KV cache dtype (auto, fp8)")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--ttft-ms", type=float, default=500.0)
    parser.add_argument("--itl-ms", type=float, default=50.0)
    parser.add_argument("--isl", type=float, default=1155.0, help="typical ISL for the recommendation")
    parser.add_argument("--osl", type=float, default=211.0, help="typical OSL for the recommendation")
    parser.add_argument("--out", type=Path, default=Path("out/profile"), help="folder for the NPZ files")
    parser.add_argument("--plot", action="store_true", help="also write profile.png")
    parser.add_argument("--json", action="store_true", help="machine-readable summary")


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    if not args.estimate:
        print(
            "planner profile: only --estimate is available in this version (the live sweep against an "
            "engine endpoint is not built yet)",
            file=sys.stderr,
        )
        return 2
    if args.model is None:
        print("planner profile: --estimate needs --model CONFIG.json", file=sys.stderr)
        return 2
    from planner_cli.estimate import EstimateError, estimate_profile

    try:
        summary, prefill, decode = estimate_profile(
            args.model,
            args.gpu,
            args.out,
            tp=args.tp,
            quant=args.quant,
            kv_dtype=args.kv_dtype,
            max_model_len=args.max_model_len,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_num_seqs=args.max_num_seqs,
            ttft_ms=args.ttft_ms,
            itl_ms=args.itl_ms,
            isl=args.isl,
            osl=args.osl,
        )
    except EstimateError as exc:
        print(f"planner profile: {exc}", file=sys.stderr)
        return exc.code
    if args.plot:
        _plot(prefill, decode, args.out / "profile.png", args.ttft_ms, args.itl_ms)
    if args.json:
        print(json.dumps(summary))
    else:
        from rich.console import Console
        from rich.table import Table

        t = Table(title=f"estimated profile: {args.model.name} on {args.gpu} TP{args.tp}")
        t.add_column("figure")
        t.add_column("value", justify="right")
        for k, v in summary.items():
            t.add_row(k, str(v))
        Console().print(t)
    return 0


def _plot(prefill: object, decode: object, path: Path, ttft_ms: float, itl_ms: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(prefill.isl_tokens, prefill.ttft_ms, "o-")  # type: ignore[attr-defined]
    a.axhline(ttft_ms, linestyle="--", color="grey")
    a.set(xlabel="ISL (tokens)", ylabel="TTFT (ms)", title="prefill")
    for ctx in np.unique(decode.context_length_tokens):  # type: ignore[attr-defined]
        m = decode.context_length_tokens == ctx  # type: ignore[attr-defined]
        b.plot(decode.kv_usage[m], decode.itl_ms[m], "o-", label=f"context {int(ctx)}")  # type: ignore[attr-defined]
    b.axhline(itl_ms, linestyle="--", color="grey")
    b.set(xlabel="KV usage", ylabel="ITL (ms)", title="decode")
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
