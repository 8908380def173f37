"""planner profile: engine performance profiles in the reference NPZ/JSON format.

Live sweep (the reference pre-deployment profiler): TTFT over ISLs one request at a time, ITL over
concurrency and context up to the KV capacity, for each ``--tp`` value; picks the TP that meets the SLA
with the best throughput per GPU, writes the profiles, plots and planner settings. Endpoints:

- engine-sim over NATS:  ``--nats-url URL --namespace NS --worker-id W[,W2,..]`` (one per --tp value)
- spawned engine-sim:    ``--spawn-engine-sim [--timing calibrated|roofline --model-config CFG --gpu G]``
- OpenAI-compatible:     ``--openai-url http://host:port/v1[,URL2,..] --model NAME --max-kv-tokens N``

``--estimate`` builds one with no engine, from a model's config.json (``--model``) and a GPU spec: the
memory model sizes the KV cache, the serving model calibrated on measured engines (``--backend vllm``,
``sglang`` or ``trtllm``; ``--plain-roofline`` for the uncalibrated roofline) gives per-pass times, and
the profile follows (see planner_core.profiling); the summary adds the steady-state TTFT and TPOT at
``--concurrency``. The output folder loads straight into the decider (``--profile-dir``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "profile"
HELP = "profile an engine (live sweep: engine-sim or OpenAI-compatible) or --estimate one (no engine)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--estimate", action="store_true", help="estimate from --model and --gpu (no engine)")
    parser.add_argument(
        "--model", help="--estimate: HF config.json of the model; --openai-url: the served model name"
    )
    parser.add_argument("--gpu", default="h200", help="GPU name (h200, h100, a100-80gb, b200, l40s, l4, ...)")
    parser.add_argument("--gpu-memory-gib", type=float, default=None, help="total GPU memory (any board)")
    parser.add_argument("--gpu-spec", default=None, help="YAML with memory_gib, hbm_gb_s, bf16_tflops, ...")
    parser.add_argument(
        "--tp", default="1", help="tensor parallel size; live sweep: comma list, one engine per value (1,2,4)"
    )
    live = parser.add_argument_group("live sweep")
    live.add_argument(
        "--endpoint",
        choices=["engine-sim", "openai"],
        help="endpoint kind (inferred from the flags below when left out)",
    )
    live.add_argument("--nats-url", default="nats://127.0.0.1:4222", help="engine-sim: NATS server")
    live.add_argument("--namespace", default="default", help="engine-sim: planner namespace")
    live.add_argument("--worker-id", default="", help="engine-sim: worker id(s), one per --tp value")
    live.add_argument(
        "--time-compression",
        type=float,
        default=0.0,
        help="engine-sim time compression (0 = estimate on the warm-up; --spawn-engine-sim default 20)",
    )
    live.add_argument(
        "--prefill-time-compression",
        type=float,
        default=2.0,
        help="--spawn-engine-sim: compression of the engine that runs the prefill points",
    )
    live.add_argument(
        "--spawn-engine-sim",
        action="store_true",
        help="start an embedded nats-server and one engine-sim per --tp value (stopped at the end)",
    )
    live.add_argument("--timing", choices=["calibrated", "roofline"], default="calibrated")
    live.add_argument("--model-config", type=Path, help="HF config.json for --timing roofline")
    live.add_argument("--profile-dir", default="", help="calibrated timing: folder of the reference profile")
    live.add_argument("--num-gpu-blocks", type=int, default=0, help="spawned engine KV blocks (0 = derived)")
    live.add_argument("--openai-url", default="", help="OpenAI-compatible base URL(s) (.../v1), one per --tp")
    live.add_argument("--api-key", default="", help="bearer token for --openai-url")
    live.add_argument(
        "--no-ignore-eos",
        action="store_true",
        help="do not send ignore_eos/min_tokens (servers that reject them; OSL then may fall short)",
    )
    live.add_argument("--prompt-format", choices=["tokens", "text"], default="tokens")
    live.add_argument(
        "--max-kv-tokens", type=int, default=0, help="KV capacity (default: engine's EngineInfo)"
    )
    live.add_argument(
        "--context-length", type=int, default=0, help="max context (default: engine's, or 16384)"
    )
    live.add_argument("--prefill-points", type=int, default=12, help="ISL values of the prefill sweep")
    live.add_argument("--repetitions", type=int, default=3, help="requests per ISL (median TTFT kept)")
    live.add_argument("--decode-contexts", type=int, default=5, help="ISL values of the decode sweep")
    live.add_argument("--concurrency-points", type=int, default=6, help="concurrency levels per ISL")
    live.add_argument("--decode-osl", type=int, default=500, help="output tokens of each decode request")
    live.add_argument("--max-concurrency", type=int, default=0, help="cap on decode concurrency (0 = KV)")
    live.add_argument("--no-plot", action="store_true", help="live sweep: skip the PNG plots")
    live.add_argument("--no-progress", action="store_true", help="live sweep: no progress bar")
    parser.add_argument("--quant", default="", help="weight quantization flag, e.g. fp8 ('' = checkpoint's)")
    parser.add_argument("--kv-dtype", default="auto", help="KV cache dtype (auto, fp8)")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument(
        "--max-num-seqs", type=int, default=256, help="engine batch limit (and spawned engines')"
    )
    est = parser.add_argument_group("estimate")
    est.add_argument(
        "--backend",
        choices=["vllm", "sglang", "trtllm"],
        default="vllm",
        help="--estimate: engine whose measured efficiencies calibrate the timing model",
    )
    est.add_argument(
        "--plain-roofline", action="store_true", help="--estimate: the uncalibrated roofline timing model"
    )
    est.add_argument(
        "--expert-parallel",
        action="store_true",
        help="--estimate: MoE experts spread whole over the --tp GPUs (vLLM --enable-expert-parallel), "
        "not sharded; the busiest GPU sets the pace",
    )
    est.add_argument(
        "--concurrency",
        type=int,
        default=0,
        help="--estimate: concurrency of the TTFT/TPOT summary (0 = the largest meeting --itl-ms)",
    )
    parser.add_argument("--ttft-ms", type=float, default=500.0)
    parser.add_argument("--itl-ms", type=float, default=50.0)
    parser.add_argument("--isl", type=float, default=1155.0, help="typical ISL for the recommendation")
    parser.add_argument("--osl", type=float, default=211.0, help="typical OSL for the recommendation")
    parser.add_argument("--out", type=Path, default=Path("out/profile"), help="folder for the NPZ files")
    parser.add_argument(
        "--plot",
        action="store_true",
        help="--estimate: also write the plots (prefill_ttft.png, decode_itl.png, throughput_per_gpu.png)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable summary")


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    try:
        tps = [int(x) for x in str(args.tp).split(",") if x.strip()]
    except ValueError:
        print(f"planner profile: --tp {args.tp!r}: give integers, e.g. 1 or 1,2,4", file=sys.stderr)
        return 2
    if not args.estimate:
        return _run_live(args, tps)
    if args.model is None:
        print("planner profile: --estimate needs --model CONFIG.json", file=sys.stderr)
        return 2
    if len(tps) != 1:
        print("planner profile: --estimate takes one --tp value", file=sys.stderr)
        return 2
    from planner_cli.estimate import load_model, resolve_gpu, write_profile
    from planner_core.profiling.model_estimate import EstimateError, estimate_model

    try:
        gpu = resolve_gpu(args.gpu, args.gpu_memory_gib, args.gpu_spec)
        if gpu.count > 1 and str(args.tp) == "1":
            tps = [gpu.count]  # "4x H100": one engine over the four GPUs
        estimate = estimate_model(
            load_model(Path(args.model)),
            gpu.spec,
            tp=tps[0],
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
            backend=args.backend,
            plain_roofline=args.plain_roofline,
            concurrency=max(0, args.concurrency),
            expert_parallel=args.expert_parallel,
        )
        summary = write_profile(estimate, args.out)
    except EstimateError as exc:
        print(f"planner profile: {exc}", file=sys.stderr)
        return exc.code
    if args.plot:
        from dataclasses import dataclass

        from planner_cli.profiler.output import plot_all
        from planner_core.profile import DecodeProfile, PrefillProfile

        @dataclass(frozen=True)
        class Estimated:
            tp: int
            prefill: PrefillProfile
            decode: DecodeProfile

        sla = {"ttft_ms": args.ttft_ms, "itl_ms": args.itl_ms, "isl": args.isl}
        plot_all(args.out, [Estimated(tps[0], estimate.prefill, estimate.decode)], sla)
    if args.json:
        print(json.dumps(summary))
    else:
        from rich.console import Console
        from rich.table import Table

        t = Table(title=f"estimated profile: {Path(args.model).name} on {args.gpu} TP{tps[0]}")
        t.add_column("figure")
        t.add_column("value", justify="right")
        for k, v in summary.items():
            t.add_row(k, str(v))
        Console().print(t)
    return 0


def _run_live(args: argparse.Namespace, tps: list[int]) -> int:
    import json
    import sys

    from planner_cli.profiler.live import LiveConfig, LiveError, run_live
    from planner_core.profiling import SweepConfig

    urls = [u.strip() for u in args.openai_url.split(",") if u.strip()]
    workers = [w.strip() for w in args.worker_id.split(",") if w.strip()]
    if args.endpoint == "openai" and not urls:
        print("planner profile: --endpoint openai needs --openai-url", file=sys.stderr)
        return 2
    if args.endpoint == "engine-sim" and not (workers or args.spawn_engine_sim):
        print(
            "planner profile: --endpoint engine-sim needs --worker-id or --spawn-engine-sim", file=sys.stderr
        )
        return 2
    try:
        sweep = SweepConfig(
            prefill_points=args.prefill_points,
            repetitions=args.repetitions,
            decode_contexts=args.decode_contexts,
            concurrency_points=args.concurrency_points,
            osl=args.decode_osl,
            max_concurrency=args.max_concurrency,
        )
    except ValueError as exc:
        print(f"planner profile: {exc}", file=sys.stderr)
        return 2
    cfg = LiveConfig(
        tps=tps,
        sweep=sweep,
        out=args.out,
        ttft_ms=args.ttft_ms,
        itl_ms=args.itl_ms,
        isl=args.isl,
        osl=args.osl,
        nats_url=args.nats_url,
        namespace=args.namespace,
        worker_ids=workers,
        time_compression=args.time_compression,
        prefill_compression=args.prefill_time_compression,
        spawn=args.spawn_engine_sim,
        timing=args.timing,
        model_config=args.model_config,
        gpu=args.gpu,
        profile_dir=args.profile_dir,
        context_length_tokens=args.context_length or 16384,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_gpu_blocks=args.num_gpu_blocks,
        openai_urls=urls,
        model=args.model or "",
        api_key=args.api_key,
        ignore_eos=not args.no_ignore_eos,
        prompt_format=args.prompt_format,
        max_kv_tokens=args.max_kv_tokens,
        plots=not args.no_plot,
        show_progress=not (args.no_progress or args.json),
    )
    try:
        data, _ = run_live(cfg)
    except LiveError as exc:
        print(f"planner profile: {exc}", file=sys.stderr)
        return exc.code
    if args.json:
        print(json.dumps(data))
    else:
        from rich.console import Console

        con = Console()
        for line in data["recommendations"]:
            con.print(line)
        con.print(f"profiles, plots and summary in {cfg.out}")
    return 0
