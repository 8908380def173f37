"""Memory model vs real vLLM start-up reports (reports_dev.csv), beside the seed spec's formula.

For every row: predicted vs reported KV cache, weights, activation and CUDA-graph GiB. Three
figures for KV: in-sample (parameters fitted on all rows, the shipped defaults), leave-one-row-out
(refit without the row), and leave-one-model-out (refit without any row of that model: the honest
one, since many rows repeat the same model and settings).

    uv run python benchmarks/bench_memory.py [--csv PATH] [--configs DIR] [--json] [--peer-python PY]

``--peer-python`` names the interpreter of a venv holding llm-d-planner and transformers: both tools
then run on the rows both can estimate (KV GiB, KV tokens, max concurrency; |error| % median / p90 /
max), see ``benchmarks/memory_peer_llmd.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from planner_core.memory.calibrate import fit_params, leave_one_out, predict_report
from planner_core.memory.params import DEFAULT_PARAMS
from planner_core.memory.reports import read_reports
from planner_core.memory.seed import seed_breakdown
from planner_core.memory.validate import validate_reports
from planner_core.modelcfg import ModelConfig, ModelConfigError, load_model_config

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _pct(pred: float, ref: float | None) -> float | None:
    return None if not ref else (pred - ref) / ref * 100.0


def _stats(errs: list[float | None]) -> dict[str, float | None]:
    vals = [abs(e) for e in errs if e is not None]
    if not vals:
        return {"median_abs_pct": None, "max_abs_pct": None}
    return {"median_abs_pct": round(statistics.median(vals), 3), "max_abs_pct": round(max(vals), 3)}


def _p90(vals: list[float]) -> float:
    v = sorted(vals)
    return v[0] if len(v) == 1 else statistics.quantiles(v, n=10, method="inclusive")[8]


def _versus_peer(python: str, reports: list[Any], validation: Any, load: Any) -> dict[str, Any]:
    """Ours and llm-d-planner's |error| % on the rows both can estimate (started, full config)."""
    ours = {
        c.report.row_id: c for c in validation.checked if c.report.started and "kv_cache_gib" in c.predicted
    }
    rows = []
    for r in reports:
        if r.row_id not in ours:
            continue
        m = load(r.model_config_file)
        label = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}.get(m.dtype, "BF16")
        s = r.settings
        rows.append({"row_id": r.row_id, "config": m.source, "params": {label: m.total_params()},
                     "gpu_gib": r.gpu_total_gib, "util": s.gpu_memory_utilization, "tp": s.tp, "pp": s.pp,
                     "mml": s.max_model_len, "block": s.block_size,
                     "seqs": s.resolved_max_num_seqs(r.gpu_total_gib)})  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".json") as fh:
        json.dump(rows, fh)
        fh.flush()
        script = Path(__file__).with_name("memory_peer_llmd.py")
        done = subprocess.run([python, str(script), fh.name], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["peer failed"])[-1]}
    peer = {p["row_id"]: p for p in json.loads(done.stdout)}
    both = [rid for rid in ours if rid in peer and "error" not in peer[rid]]
    rep = {r.row_id: r for r in reports}
    out: dict[str, Any] = {"rows": f"{len(both)} of {len(reports)} evaluable rows"}
    for comp in ("kv_cache_gib", "kv_cache_tokens", "max_concurrency"):
        o: list[float] = []
        q: list[float] = []
        for rid in both:
            ref = getattr(rep[rid], comp)
            if not ref:
                continue
            o.append(abs(ours[rid].predicted[comp] - ref) / ref * 100)
            q.append(abs(peer[rid][comp] - ref) / ref * 100)
        if o:
            out[comp] = (
                f"n={len(o)} ours {statistics.median(o):.2f} / {_p90(o):.2f} / {max(o):.2f}; "
                f"llm-d-planner {statistics.median(q):.2f} / {_p90(q):.2f} / {max(q):.2f}"
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--csv", default=str(DATA / "vllm_memory" / "reports_dev.csv"))
    ap.add_argument("--configs", default=str(DATA / "model_configs"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--peer-python", help="python of a venv with llm-d-planner: compare on the same rows")
    args = ap.parse_args()

    reports, skipped = read_reports(args.csv)

    def load(name: str) -> ModelConfig:
        return load_model_config(Path(args.configs) / name)

    rows = []  # rows with a full config: the ones the fit and the leave-out figures use
    for r in reports:
        try:
            m = load(r.model_config_file)
        except ModelConfigError:
            continue
        if not m.missing:
            rows.append((r, m))
    params = fit_params(rows)
    validation = validate_reports(reports, skipped, load, params)
    loo = leave_one_out(rows, base=DEFAULT_PARAMS)
    # Held-out groups fall back to a prior, not to the shipped defaults (those saw every row): the
    # prior knows no version effect, so a model seen only on old vLLM is predicted as a new one.
    prior = replace(
        DEFAULT_PARAMS,
        sampler_fp32_copies_legacy=DEFAULT_PARAMS.sampler_fp32_copies,
        non_torch_base_legacy_gib=DEFAULT_PARAMS.non_torch_base_gib,
    )
    lomo = leave_one_out(rows, group=lambda r: r.model_config_file, base=prior)

    out: list[dict[str, Any]] = []
    for (r, m), b_loo, b_lomo in zip(rows, loo, lomo, strict=True):
        b = predict_report(r, m, params)
        seed = seed_breakdown(m, r.gpu_total_gib, r.settings.gpu_memory_utilization, b.weights_gib)
        out.append({
            "row_id": r.row_id,
            "model": r.model_config_file,
            "tp": r.settings.tp, "pp": r.settings.pp, "dtype": r.settings.dtype,
            "kv_cache_dtype": r.settings.kv_cache_dtype, "vllm": ".".join(map(str, r.settings.vllm_version)),
            "kv_reported_gib": r.kv_cache_gib,
            "kv_pred_gib": round(b.kv_cache_gib, 3),
            "kv_err_pct": _pct(b.kv_cache_gib, r.kv_cache_gib),
            "kv_loo_err_pct": _pct(b_loo.kv_cache_gib, r.kv_cache_gib),
            "kv_lomo_err_pct": _pct(b_lomo.kv_cache_gib, r.kv_cache_gib),
            "kv_seed_gib": round(seed.kv_cache_gib, 2),
            "kv_seed_err_pct": _pct(seed.kv_cache_gib, r.kv_cache_gib),
            "weights_err_pct": _pct(b.weights_gib, r.weights_gib),
            "activation_err_pct": _pct(b.activation_gib, r.activation_gib),
            "graph_pred_gib": round(b.cuda_graph_gib, 3),
            "graph_reported_gib": r.cuda_graph_gib,
            "graph_err_pct": _pct(b.cuda_graph_gib, r.cuda_graph_gib),
            "graph_seed_gib": round(seed.cuda_graph_gib, 1),
            "blocks_pred": b.num_gpu_blocks, "blocks_reported": r.num_gpu_blocks,
        })  # fmt: skip
    summary = {
        "rows": len(out),
        "kv_in_sample": _stats([o["kv_err_pct"] for o in out]),
        "kv_leave_one_row_out": _stats([o["kv_loo_err_pct"] for o in out]),
        "kv_leave_one_model_out": _stats([o["kv_lomo_err_pct"] for o in out]),
        "kv_seed_formula": _stats([o["kv_seed_err_pct"] for o in out]),
        "weights": _stats([o["weights_err_pct"] for o in out]),
        "activation": _stats([o["activation_err_pct"] for o in out]),
        "cuda_graph": _stats([o["graph_err_pct"] for o in out]),
        "target": {"kv_median_abs_pct": 2.0, "kv_max_abs_pct": 8.0, "kv_lomo_max_abs_pct": 10.0},
        "coverage": validation.coverage_line(),
        "outcome": validation.outcome_line(),
        "components_in_sample": {
            k: f"n={v.n} median {v.median_abs_pct:.3f} p90 {v.p90_abs_pct:.3f} max {v.max_abs_pct:.3f}"
            for k, v in validation.stats().items()
        },
        "skipped": [f"{sk.row_id}: {sk.reason}" for sk in validation.skipped],
    }
    if args.peer_python:
        summary["versus_llm_d_planner"] = _versus_peer(args.peer_python, reports, validation, load)
    if args.json:
        print(json.dumps({"summary": summary, "rows": out}, indent=1))
        return 0
    hdr = f"{'row':>4} {'model':34} {'tp':>2} {'pp':>2} {'KV rep':>7} {'pred':>7} {'err%':>6} {'LOO%':>6} {'LOMO%':>6} {'seed KV':>9} {'graph':>5}/{'rep':<5}"
    print(hdr)
    for o in out:

        def f(x: float | None) -> str:
            return "-" if x is None else f"{x:+.2f}"

        print(
            f"{o['row_id']:>4} {o['model'][:34]:34} {o['tp']:>2} {o['pp']:>2} {o['kv_reported_gib']:>7} "
            f"{o['kv_pred_gib']:>7.2f} {f(o['kv_err_pct']):>6} {f(o['kv_loo_err_pct']):>6} "
            f"{f(o['kv_lomo_err_pct']):>6} {o['kv_seed_gib']:>9.1f} {o['graph_pred_gib']:>5.2f}/{o['graph_reported_gib']}"
        )
    for k, v in summary.items():
        print(f"{k:24} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
