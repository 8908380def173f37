"""GPU-free serving estimate vs measured TTFT/TPOT (../shared/data/perf/aiconfigurator_silicon_dev.csv).

Rows the serving model can describe (aggregated engines, TP only, models with a config in
../shared/data/model_configs) are predicted four ways: with the default parameters (no fit), fitted
on every row (in-sample), leave-one-GPU-out (fitted on the other GPU systems, the honest figure
for a GPU without data), and through the product: `planner profile --estimate` (the same function,
with the calibration table shipped in planner_core) at the row's model, GPU, TP, precision, backend,
ISL/OSL and concurrency, its steady-state TTFT/TPOT summary. The product's table was fitted on these
rows, so its figure is in-sample too: LOGO is the honest one. MAPE of TTFT and TPOT per GPU system,
backend and TP size. Every fit also takes the points of the H200 Llama-3.1-8B FP8 vLLM profile
(../shared/data/dynamo; left out when H200 is the GPU left out).

    uv run python benchmarks/bench_estimate_silicon.py [--data ../shared/data] [--json]
    uv run python benchmarks/bench_estimate_silicon.py --product-only   # no fits (~1 min)
    uv run python benchmarks/bench_estimate_silicon.py --write-calibration   # refit the shipped table
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from planner_core.engine.timing import decode_points
from planner_core.hardware import gpu_spec
from planner_core.modelcfg import ModelConfig, QuantConfig, load_model_config
from planner_core.profile import load_decode, load_prefill
from planner_core.profiling.calibration import BACKENDS, flat_values, weight_format
from planner_core.profiling.model_estimate import EstimateError, estimate_model
from planner_core.profiling.serving import ServingParams, kv_capacity_for, predict_serving
from planner_core.profiling.silicon import (
    ProfilePoint,
    SiliconRow,
    ape_pct,
    fit,
    mape,
    predict_row,
    read_rows,
    usable,
)

REPO = Path(__file__).resolve().parent.parent
# checkpoints measured under another name than their architecture's config file
ALIASES = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama--Llama-3.1-8B.json",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama--Llama-3.1-8B.json",
}


TABLE = REPO / "libs" / "core" / "src" / "planner_core" / "profiling" / "calibration_table.py"
# the quantization a measured precision means when the checkpoint's own is another
QUANT_OF = {"fp8": QuantConfig("fp8", 8.0), "fp4": QuantConfig("nvfp4", 4.5, 16), "bf16": None}
LOCAL_CONFIGS = REPO / "benchmarks" / "model_configs"
"""Architecture configs of measured models the shared data has none for (see its README)."""


def model_loader(configs: Path) -> tuple[Callable[[str], bool], Callable[[str], ModelConfig]]:
    def path(name: str) -> Path:
        file = ALIASES.get(name, name.replace("/", "--") + ".json")
        shared = configs / file
        return shared if shared.is_file() or not (LOCAL_CONFIGS / file).is_file() else LOCAL_CONFIGS / file

    @cache
    def load(name: str) -> ModelConfig:
        return load_model_config(path(name))

    return (lambda name: path(name).is_file()), load


def profile_points(dyn: Path) -> list[ProfilePoint]:
    """The H200 Llama-3.1-8B FP8 TP1 vLLM profile (BF16 KV cache) as lone-TTFT and decode-ITL points."""
    pre = load_prefill(dyn / "h200_llama31_8b_fp8_tp1_prefill_raw_data.npz")
    dec = load_decode(dyn / "h200_llama31_8b_fp8_tp1_decode_raw_data.npz")
    base = ("nvidia/Llama-3.1-8B-Instruct-FP8", "h200_sxm", "vllm", 1, "fp8", 2.0)
    out = [ProfilePoint(*base, int(i), 0, float(t)) for i, t in zip(pre.isl_tokens, pre.ttft_ms, strict=True)]
    n, _ = decode_points(dec)
    for c, ctx, itl in zip(n, dec.context_length_tokens, dec.itl_ms, strict=True):
        out.append(ProfilePoint(*base, int(ctx), int(c), float(itl)))
    return out


def product_row(row: SiliconRow, model: ModelConfig) -> tuple[float, float]:
    """TTFT/TPOT of the row as `planner profile --estimate` gives them (nan when it cannot estimate)."""
    fmt = row.point.weight_format
    if weight_format(model.quant) != fmt:
        model = replace(model, quant=QUANT_OF.get(fmt))
    pt = row.point
    try:
        summary, _, _ = estimate_model(
            model, gpu_spec(row.system), tp=pt.tp, kv_dtype="fp8" if pt.kv_bytes == 1.0 else "auto",
            max_model_len=pt.isl + pt.osl, max_num_seqs=max(pt.concurrency, 256), isl=pt.isl, osl=pt.osl,
            backend=row.backend, concurrency=pt.concurrency,
        )  # fmt: skip
    except EstimateError:
        return math.nan, math.nan
    return float(summary["serving_ttft_ms"]), float(summary["serving_tpot_ms"])


def write_table(params: dict[str, ServingParams], rows: list[SiliconRow], n_profile: int, path: Path) -> None:
    counts = Counter(f"{r.system}/{r.backend}" for r in rows)
    lines = [
        '"""Serving-model efficiencies per backend, fitted on measured engines. GENERATED: do not edit by',
        "hand; `just fit-estimate` (benchmarks/bench_estimate_silicon.py --write-calibration) rewrites it.",
        "",
        f"Fitted {datetime.date.today().isoformat()} by planner_core.profiling.silicon.fit on {len(rows)} "
        "aggregated-engine rows of",
        "AI Configurator's silicon dump (aiconfigurator_silicon_dev.csv, commit 095f58a5; rows per",
        f"system/backend: {', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})",
        f"and the {n_profile} points of the H200 Llama-3.1-8B FP8 vLLM profile (Dynamo). A backend's",
        "own terms are step_overhead_s, ttft_fixed_s, w_kv_wait (and kv_output_share, set); the rest is",
        "shared. Only these coefficients are kept, no measured data.",
        '"""',
        "",
        "PARAMS: dict[str, dict[str, float]] = {",
    ]
    for b in BACKENDS:
        lines.append(f'    "{b}": {{')
        lines += [f'        "{k}": {float(f"{v:.4g}")!r},' for k, v in flat_values(params[b]).items()]
        lines.append("    },")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n")


def table(
    rows: list[SiliconRow], preds: dict[str, list[tuple[float, float]]], key: Callable[[SiliconRow], str]
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    groups: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[key(r)].append(i)
    for g, idx in sorted(groups.items()):
        entry: dict[str, float] = {"rows": len(idx)}
        for name, pr in preds.items():
            ok = [i for i in idx if not math.isnan(pr[i][0])]
            entry[f"{name}_ttft"] = round(mape([ape_pct(pr[i][0], rows[i].ttft_ms) for i in ok]), 1)
            entry[f"{name}_tpot"] = round(mape([ape_pct(pr[i][1], rows[i].tpot_ms) for i in ok]), 1)
        out[g] = entry
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--product-only", action="store_true", help="only the product path (no fits)")
    ap.add_argument(
        "--write-calibration", action="store_true", help=f"fit on every row and rewrite {TABLE.name}"
    )
    args = ap.parse_args()
    has, load = model_loader(args.data / "model_configs")
    raw = read_rows(args.data / "perf" / "aiconfigurator_silicon_dev.csv")
    rows: list[SiliconRow] = []
    left_out: Counter[str] = Counter()
    for r in raw:
        u = usable(r, has)
        if isinstance(u, str):
            left_out[u] += 1
        elif kv_capacity_for(load(u.model_path), gpu_spec(u.system), u.point) <= 0:
            # e.g. Qwen3-235B FP8 (235 GB) "tp 1" on a 141 GB H200: the row's layout is not what its
            # columns say, so the model cannot describe it
            left_out["weights exceed the GPUs of the stated TP"] += 1
        else:
            rows.append(u)
    profile = profile_points(args.data / "dynamo")
    t0 = time.perf_counter()
    if args.write_calibration:
        write_table(fit(rows, load, profile=profile), rows, len(profile), TABLE)
        print(f"wrote {TABLE} ({time.perf_counter() - t0:.0f} s); `just bench-estimate` measures it")
        return 0
    default = {b: ServingParams() for b in ("vllm", "sglang", "trtllm")}
    preds: dict[str, list[tuple[float, float]]] = {"default": [predict_row(r, load, default) for r in rows]}
    nan_rows: list[tuple[float, float]] = [(math.nan, math.nan)] * len(rows)
    fitted = default
    if args.product_only:
        preds["fit"] = preds["logo"] = nan_rows
    else:
        fitted = fit(rows, load, profile=profile)
        preds["fit"] = [predict_row(r, load, fitted) for r in rows]
        logo: list[tuple[float, float]] = list(nan_rows)
        for system in sorted({r.system for r in rows}):
            train = [r for r in rows if r.system != system]
            if not train:
                continue
            params = fit(train, load, profile=[p for p in profile if p.system != system])
            for i, row in enumerate(rows):
                if row.system == system:
                    logo[i] = predict_row(row, load, params)
        preds["logo"] = logo
    preds["product"] = [product_row(r, load(r.model_path)) for r in rows]
    no_product = sum(math.isnan(p[0]) for p in preds["product"])
    # rows where the (fitted) KV cache cannot hold the whole batch: requests wait for whole requests to
    # finish, and backends differ (TRT-LLM waits, vLLM preempts): the model's weak spot, shown apart
    gpus = {r.system: gpu_spec(r.system) for r in rows}
    kv_short = [
        predict_serving(load(r.model_path), gpus[r.system], r.point, fitted[r.backend]).running
        < r.point.concurrency
        for r in rows
    ]
    elapsed = time.perf_counter() - t0
    result: dict[str, Any] = {
        "rows_used": len(rows),
        "rows_left_out": dict(left_out.most_common()),
        "rows_product_cannot_estimate": no_product,
        "models": sorted({r.model_path for r in rows}),
        "by_system": table(rows, preds, lambda r: r.system),
        "by_system_backend": table(rows, preds, lambda r: f"{r.system}/{r.backend}"),
        "by_backend": table(rows, preds, lambda r: r.backend),
        "by_tp": table(rows, preds, lambda r: f"tp{r.point.tp}"),
        "by_system_backend_tp": table(rows, preds, lambda r: f"{r.system}/{r.backend}/tp{r.point.tp}"),
        "by_system_backend_format": table(
            rows, preds, lambda r: f"{r.system}/{r.backend}/{r.point.weight_format}"
        ),
        "by_parallelism": table(
            rows, preds, lambda r: "expert parallel" if r.point.ep > 1 else "tensor parallel"
        ),
        "all": table(rows, preds, lambda r: "all")["all"],
        "by_kv": table(rows, preds, lambda r: "kv-short" if kv_short[rows.index(r)] else "kv-holds-batch"),
        "fitted_vllm": {k: v for k, v in vars(fitted["vllm"]).items() if k != "comm"}
        | {"comm_latency_s": fitted["vllm"].comm.latency_s},
        "step_overhead_s": {b: round(p.step_overhead_s, 5) for b, p in fitted.items()},
        "ttft_fixed_s": {b: round(p.ttft_fixed_s, 4) for b, p in fitted.items()},
        "fit_seconds": round(elapsed, 1),
        "target_mape_pct": 15.0,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"rows used {len(rows)}; left out {dict(left_out.most_common())}")
    print(f"models: {', '.join(result['models'])}")
    print(f"the product (planner profile --estimate) cannot estimate {no_product} rows (weights do not fit)")
    cols = ("default", "fit", "logo", "product")
    hdr = f"{'group':34} {'rows':>4}  {'TTFT default/fit/LOGO/product %':>31}  {'TPOT default/fit/LOGO/product %':>31}"
    for name in (
        "by_system",
        "by_backend",
        "by_tp",
        "by_kv",
        "by_parallelism",
        "by_system_backend_format",
        "by_system_backend_tp",
    ):
        print(f"\n{name}\n{hdr}")
        for g, e in result[name].items():
            ttft = "/".join(f"{e[c + '_ttft']:.1f}" for c in cols)
            tpot = "/".join(f"{e[c + '_tpot']:.1f}" for c in cols)
            print(f"{g:34} {int(e['rows']):>4}  {ttft:>31}  {tpot:>31}")
    a = result["all"]
    print(f"\nall rows: TTFT MAPE default {a['default_ttft']} %, in-sample {a['fit_ttft']} %, "
          f"leave-one-GPU-out {a['logo_ttft']} %, product {a['product_ttft']} %; "
          f"TPOT {a['default_tpot']} / {a['fit_tpot']} / {a['logo_tpot']} / {a['product_tpot']} %")  # fmt: skip
    print(f"fitted (vllm): {result['fitted_vllm']}")
    print(f"step overhead per backend: {result['step_overhead_s']}; TTFT fixed: {result['ttft_fixed_s']}")
    print(f"fits took {result['fit_seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
