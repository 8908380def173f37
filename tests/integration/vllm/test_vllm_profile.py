"""``planner profile --endpoint openai`` against a real vLLM with no ``--max-kv-tokens``: the KV
capacity comes from the engine's own ``vllm:cache_config_info`` (32 blocks of 128 tokens) and the
context length from ``/v1/models``; the bounded sweep's NPZ files load into the decider's
interpolators."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner_core.interpolation import DecodeInterpolator, PrefillInterpolator
from planner_core.profile import load_decode, load_prefill

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


def test_profile_reads_the_kv_capacity_from_a_real_vllm(vllm_server: str, tmp_path: Path) -> None:
    out = tmp_path / "profile"
    planner = Path(sys.executable).parent / "planner"
    argv = [
        str(planner), "profile", "--endpoint", "openai", "--openai-url", vllm_server, "--model", "tiny",
        "--max-num-seqs", "8",  # a limit vLLM's /metrics do not show
        "--prompt-format", "text",  # the tiny vocabulary has 2,048 tokens
        "--prefill-points", "3", "--repetitions", "2",
        "--decode-contexts", "2", "--concurrency-points", "2", "--decode-osl", "16",
        "--ttft-ms", "2000", "--itl-ms", "200", "--isl", "256", "--osl", "16",
        "--out", str(out), "--no-plot", "--json",
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "KV capacity 4096 tokens (from metrics, models)" in proc.stderr, proc.stderr[-2000:]
    summary = json.loads((out / "profile_summary.json").read_text())
    tp1 = summary["tp"]["1"]
    assert tp1["max_kv_tokens"] == 32 * 128, tp1
    assert tp1["failed_requests"] == 0, tp1

    prefill = load_prefill(out / "prefill_raw_data.npz")
    decode = load_decode(out / "decode_raw_data.npz")
    assert len(prefill.isl_tokens) >= 2 and all(float(x) > 0 for x in prefill.ttft_ms)
    assert len(decode.itl_ms) > 0 and all(float(x) > 0 for x in decode.itl_ms)
    assert max(float(x) for x in decode.context_length_tokens) <= 2048  # /v1/models' max_model_len
    isl = float(prefill.isl_tokens[-1])
    assert PrefillInterpolator(prefill).ttft_ms(isl) == pytest.approx(float(prefill.ttft_ms[-1]), rel=1e-6)
    assert (
        DecodeInterpolator(decode).itl_ms(float(decode.kv_usage[0]), float(decode.context_length_tokens[0]))
        > 0
    )
