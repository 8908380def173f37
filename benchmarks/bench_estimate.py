"""`planner profile --estimate` against a real profile: MAPE of TTFT and ITL over every point of the
H200 Llama-3.1-8B FP8 TP1 vLLM profile (../shared/data/dynamo/h200_llama31_8b_fp8_tp1_*).

The estimate is built exactly as the CLI builds it (calibrated serving timing + memory model, and
with --plain-roofline the uncalibrated roofline; Llama-3.1-8B
config, H200, FP8 weights, context 16384 and max_num_seqs 1024 like the reference run) and queried
through the decider's interpolators:
TTFT at each real ISL; ITL at each real decode point's concurrency and context (concurrency =
kv_usage * max_kv_tokens / context, with the real profile's max_kv_tokens). For comparison, the same
figures straight from the timing models (no profile grid in between): roofline, and the calibrated
model (fitted on that very profile, so an in-sample figure).

    uv run python benchmarks/bench_estimate.py [--data ../shared/data] [--json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from planner_core.engine.roofline import RooflineTiming
from planner_core.engine.timing import fit_calibrated, mape_pct, profile_mape
from planner_core.hardware import gpu_spec
from planner_core.interpolation import DecodeInterpolator, PrefillInterpolator
from planner_core.modelcfg import load_model_config, quant_from_flag
from planner_core.profile import DecodeProfile, PrefillProfile, load_decode, load_prefill
from planner_core.profiling.model_estimate import estimate_model

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    dyn = args.data / "dynamo"
    cfg = args.data / "model_configs" / "meta-llama--Llama-3.1-8B.json"
    real_p = load_prefill(dyn / "h200_llama31_8b_fp8_tp1_prefill_raw_data.npz")
    real_d = load_decode(dyn / "h200_llama31_8b_fp8_tp1_decode_raw_data.npz")

    llama = load_model_config(cfg)
    summary, est_p, est_d = estimate_model(llama, "H200", quant="fp8", max_model_len=16384, max_num_seqs=1024)
    _, plain_p, plain_d = estimate_model(
        llama, "H200", quant="fp8", max_model_len=16384, max_num_seqs=1024, plain_roofline=True
    )
    conc = real_d.kv_usage * real_d.max_kv_tokens / real_d.context_length_tokens

    def through_decider(p: PrefillProfile, d: DecodeProfile) -> tuple[np.ndarray, np.ndarray]:
        pi, di = PrefillInterpolator(p), DecodeInterpolator(d)
        ttft = np.array([pi.ttft_ms(x) for x in real_p.isl_tokens])
        ctx = real_d.context_length_tokens
        return ttft, np.array([di.itl_at_concurrency_ms(c, x) for c, x in zip(conc, ctx, strict=True)])

    ttft, itl = through_decider(est_p, est_d)
    plain_ttft, plain_itl = through_decider(plain_p, plain_d)
    roof = RooflineTiming.build(llama, gpu_spec("H200"), quant=quant_from_flag("fp8"))
    calibrated = fit_calibrated(real_p, real_d)
    rows = {
        "estimate_profile": {
            "ttft_mape_pct": mape_pct(ttft, real_p.ttft_ms),
            "itl_mape_pct": mape_pct(itl, real_d.itl_ms),
        },
        "estimate_plain_roofline": {
            "ttft_mape_pct": mape_pct(plain_ttft, real_p.ttft_ms),
            "itl_mape_pct": mape_pct(plain_itl, real_d.itl_ms),
        },
    }
    for name, model in (("roofline_direct", roof), ("calibrated_direct", calibrated)):
        t, i = profile_mape(model, real_p, real_d)
        rows[name] = {"ttft_mape_pct": t, "itl_mape_pct": i}
    out = {
        "bench": "estimate",
        "profile": "H200 Llama-3.1-8B FP8 TP1 (vLLM)",
        "prefill_points": int(real_p.isl_tokens.size),
        "decode_points": int(real_d.itl_ms.size),
        "max_kv_tokens": {"real": real_d.max_kv_tokens, "estimate": int(summary["max_kv_tokens"])},
        "models": {k: {m: round(v, 2) for m, v in r.items()} for k, r in rows.items()},
        "points": {
            "isl": real_p.isl_tokens.tolist(),
            "ttft_real_ms": np.round(real_p.ttft_ms, 2).tolist(),
            "ttft_estimate_ms": np.round(ttft, 2).tolist(),
            "itl_real_ms": np.round(real_d.itl_ms, 2).tolist(),
            "itl_estimate_ms": np.round(itl, 2).tolist(),
        },
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{out['profile']}: {out['prefill_points']} prefill points, {out['decode_points']} decode points")
    print(f"max_kv_tokens: real {real_d.max_kv_tokens}, estimated {summary['max_kv_tokens']}")
    print(f"{'model':<24} {'TTFT MAPE':>10} {'ITL MAPE':>10}")
    for name, r in rows.items():
        print(f"{name:<24} {r['ttft_mape_pct']:>9.1f}% {r['itl_mape_pct']:>9.1f}%")
    print(
        "estimate_profile = the --estimate profile (calibrated, vLLM) through the decider's interpolators; "
        "estimate_plain_roofline = the same with --plain-roofline; *_direct = timing model"
    )


if __name__ == "__main__":
    main()
