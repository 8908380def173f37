"""Timing-model accuracy: MAPE of TTFT and ITL against every point of the real H200 profile.

Models: ``calibrated`` (fitted on that very profile: an in-sample figure), ``roofline`` (Llama-3.1-8B
config + H200 spec + FP8 weights, no profile), and the reference mocker's default polynomials.
TTFT of a point = the sum of the lone request's chunked-prefill passes (8192-token chunks); ITL = one
decode pass at the point's concurrency (capped at vLLM's max_num_seqs 1024) and context.

    uv run python benchmarks/bench_timing.py [--data ../shared/data] [--json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from planner_core.engine.roofline import RooflineTiming
from planner_core.engine.timing import MockerTiming, TimingModel, fit_calibrated, profile_mape
from planner_core.hardware import gpu_spec
from planner_core.modelcfg import load_model_config, quant_from_flag
from planner_core.profile import load_decode, load_prefill

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    dyn = args.data / "dynamo"
    prefill = load_prefill(dyn / "h200_llama31_8b_fp8_tp1_prefill_raw_data.npz")
    decode = load_decode(dyn / "h200_llama31_8b_fp8_tp1_decode_raw_data.npz")
    model = load_model_config(args.data / "model_configs" / "meta-llama--Llama-3.1-8B.json")
    calibrated = fit_calibrated(prefill, decode)
    models: dict[str, TimingModel] = {
        "calibrated": calibrated,
        "roofline": RooflineTiming.build(model, gpu_spec("H200"), quant=quant_from_flag("fp8")),
        "mocker_default": MockerTiming(decode.max_kv_tokens),
    }
    rows = {}
    for name, m in models.items():
        ttft, itl = profile_mape(m, prefill, decode)
        rows[name] = {"ttft_mape_pct": ttft, "itl_mape_pct": itl}
    out = {
        "bench": "timing",
        "profile": "H200 Llama-3.1-8B FP8 TP1 (vLLM)",
        "prefill_points": int(prefill.isl_tokens.size),
        "decode_points": int(decode.itl_ms.size),
        "models": rows,
        "calibrated_coefficients_ms": {
            k: getattr(calibrated, k)
            for k in ("p_base_ms", "p_token_ms", "p_attn_ms", "d_base_ms", "d_request_ms", "d_kv_ms")
        },
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{out['profile']}: {out['prefill_points']} prefill points, {out['decode_points']} decode points")
    print(f"{'model':<16} {'TTFT MAPE':>10} {'ITL MAPE':>10}")
    for name, r in rows.items():
        print(f"{name:<16} {r['ttft_mape_pct']:>9.1f}% {r['itl_mape_pct']:>9.1f}%")
    print(
        "calibrated (ms): " + ", ".join(f"{k}={v:.4g}" for k, v in out["calibrated_coefficients_ms"].items())
    )


if __name__ == "__main__":
    main()
