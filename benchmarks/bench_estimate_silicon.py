"""GPU-free serving estimate vs measured TTFT/TPOT (../shared/data/perf/aiconfigurator_silicon_dev.csv).

Rows the serving model can describe (aggregated engines, TP only, models with a config in
../shared/data/model_configs) are predicted three ways: with the default parameters (no fit), fitted
on every row (in-sample), and leave-one-GPU-out (fitted on the other GPU systems, the honest figure
for a GPU without data). MAPE of TTFT and TPOT per GPU system, backend and TP size.

    uv run python benchmarks/bench_estimate_silicon.py [--data ../shared/data] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from planner_core.hardware import gpu_spec
from planner_core.modelcfg import ModelConfig, load_model_config
from planner_core.profiling.serving import ServingParams, kv_capacity_for, predict_serving
from planner_core.profiling.silicon import SiliconRow, ape_pct, fit, mape, predict_row, read_rows, usable

REPO = Path(__file__).resolve().parent.parent
# checkpoints measured under another name than their architecture's config file
ALIASES = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama--Llama-3.1-8B.json",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama--Llama-3.1-8B.json",
}


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
            entry[f"{name}_ttft"] = round(mape([ape_pct(pr[i][0], rows[i].ttft_ms) for i in idx]), 1)
            entry[f"{name}_tpot"] = round(mape([ape_pct(pr[i][1], rows[i].tpot_ms) for i in idx]), 1)
        out[g] = entry
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--json", action="store_true")
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
    t0 = time.perf_counter()
    default = {b: ServingParams() for b in ("vllm", "sglang", "trtllm")}
    preds: dict[str, list[tuple[float, float]]] = {"default": [predict_row(r, load, default) for r in rows]}
    fitted = fit(rows, load)
    preds["fit"] = [predict_row(r, load, fitted) for r in rows]
    logo: list[tuple[float, float]] = [(0.0, 0.0)] * len(rows)
    for system in sorted({r.system for r in rows}):
        train = [r for r in rows if r.system != system]
        if not train:
            continue
        params = fit(train, load)
        for i, row in enumerate(rows):
            if row.system == system:
                logo[i] = predict_row(row, load, params)
    preds["logo"] = logo
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
        "models": sorted({r.model_path for r in rows}),
        "by_system": table(rows, preds, lambda r: r.system),
        "by_system_backend": table(rows, preds, lambda r: f"{r.system}/{r.backend}"),
        "by_tp": table(rows, preds, lambda r: f"tp{r.point.tp}"),
        "by_system_backend_tp": table(rows, preds, lambda r: f"{r.system}/{r.backend}/tp{r.point.tp}"),
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
    hdr = f"{'group':34} {'rows':>4}  {'TTFT default/fit/LOGO %':>24}  {'TPOT default/fit/LOGO %':>24}"
    for name in ("by_system", "by_tp", "by_kv", "by_system_backend_tp"):
        print(f"\n{name}\n{hdr}")
        for g, e in result[name].items():
            ttft = f"{e['default_ttft']:.1f}/{e['fit_ttft']:.1f}/{e['logo_ttft']:.1f}"
            tpot = f"{e['default_tpot']:.1f}/{e['fit_tpot']:.1f}/{e['logo_tpot']:.1f}"
            print(f"{g:34} {int(e['rows']):>4}  {ttft:>24}  {tpot:>24}")
    a = result["all"]
    print(f"\nall rows: TTFT MAPE default {a['default_ttft']} %, in-sample {a['fit_ttft']} %, "
          f"leave-one-GPU-out {a['logo_ttft']} %; TPOT {a['default_tpot']} / {a['fit_tpot']} / {a['logo_tpot']} %")  # fmt: skip
    print(f"fitted (vllm): {result['fitted_vllm']}")
    print(f"step overhead per backend: {result['step_overhead_s']}; TTFT fixed: {result['ttft_fixed_s']}")
    print(f"fits took {result['fit_seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
