"""Serving-model efficiencies per backend, fitted on measured engines. GENERATED: do not edit by
hand; `just fit-estimate` (benchmarks/bench_estimate_silicon.py --write-calibration) rewrites it.

Fitted 2026-11-26 by planner_core.profiling.silicon.fit on 1274 aggregated-engine rows of
AI Configurator's silicon dump (aiconfigurator_silicon_dev.csv, commit 095f58a5; rows per
system/backend: b200_sxm/trtllm 237, b200_sxm/vllm 469, b300_sxm/vllm 92, h200_sxm/sglang 70, h200_sxm/trtllm 134, h200_sxm/vllm 272)
and the 58 points of the H200 Llama-3.1-8B FP8 vLLM profile (Dynamo). A backend's
own terms are step_overhead_s, ttft_fixed_s, w_kv_wait (and kv_output_share, set); the rest is
shared. Only these coefficients are kept, no measured data.
"""

PARAMS: dict[str, dict[str, float]] = {
    "vllm": {
        "e_gemm": 0.6589,
        "n_half_ridge": 0.04511,
        "e_attn": 0.4253,
        "attn_half_keys": 404.0,
        "e_mem": 0.8645,
        "step_overhead_s": 0.000705,
        "layer_overhead_s": 4.476e-05,
        "seq_overhead_s": 2.642e-05,
        "w_mix": 0.3161,
        "w_queue": 0.06539,
        "w_ttft_steps": 3.274,
        "w_kv_wait": 0.8574,
        "ttft_fixed_s": 0.02095,
        "kv_output_share": 0.5,
        "moe_efficiency": 1.0,
        "moe_compute_efficiency": 0.1945,
        "comm_latency_s": 1.259e-05,
    },
    "sglang": {
        "e_gemm": 0.6589,
        "n_half_ridge": 0.04511,
        "e_attn": 0.4253,
        "attn_half_keys": 404.0,
        "e_mem": 0.8645,
        "step_overhead_s": 0.006091,
        "layer_overhead_s": 4.476e-05,
        "seq_overhead_s": 2.642e-05,
        "w_mix": 0.3161,
        "w_queue": 0.06539,
        "w_ttft_steps": 3.274,
        "w_kv_wait": 2.299,
        "ttft_fixed_s": 0.2669,
        "kv_output_share": 0.5,
        "moe_efficiency": 1.0,
        "moe_compute_efficiency": 0.1945,
        "comm_latency_s": 1.259e-05,
    },
    "trtllm": {
        "e_gemm": 0.6589,
        "n_half_ridge": 0.04511,
        "e_attn": 0.4253,
        "attn_half_keys": 404.0,
        "e_mem": 0.8645,
        "step_overhead_s": 0.0001,
        "layer_overhead_s": 4.476e-05,
        "seq_overhead_s": 2.642e-05,
        "w_mix": 0.3161,
        "w_queue": 0.06539,
        "w_ttft_steps": 3.274,
        "w_kv_wait": 0.7075,
        "ttft_fixed_s": 0.02617,
        "kv_output_share": 1.0,
        "moe_efficiency": 1.0,
        "moe_compute_efficiency": 0.1945,
        "comm_latency_s": 1.259e-05,
    },
}
