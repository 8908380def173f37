"""Search feasibility with reasons, workload derivation, and the CLI's JSON output."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from planner_core.autotune import (
    Reason,
    SearchSpace,
    evaluate,
    from_lengths,
    graph_coverage,
    search,
    synthetic,
)
from planner_core.memory import EngineSettings
from planner_core.modelcfg import load_model_config


def test_70b_on_one_gpu_is_rejected_with_a_reason(shared_data: Path) -> None:
    m = load_model_config(shared_data / "model_configs" / "meta-llama--Llama-3.1-70B.json")
    # 70.6e9 params x 2 B = 131 GiB of weights > 0.9 x 79.19 = 71.3 GiB budget
    c = evaluate(
        m, 79.19, True, EngineSettings(gpu_memory_utilization=0.9, max_model_len=8192), synthetic("chatbot")
    )
    assert not c.feasible and c.reason is Reason.WEIGHTS_EXCEED_BUDGET and "GiB" in c.detail
    # at TP4 each GPU holds ~33 GiB: feasible
    ok = evaluate(m, 79.19, True, EngineSettings(0.9, 8192, tp=4), synthetic("chatbot"))
    assert ok.feasible


def test_other_rejections(shared_data: Path) -> None:
    m = load_model_config(shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json")
    w = synthetic("batch")  # p99 context 8192
    short = evaluate(m, 79.19, True, EngineSettings(max_model_len=4096), w)
    assert short.reason is Reason.CONTEXT_TOO_SHORT
    fp8 = evaluate(m, 39.39, False, EngineSettings(max_model_len=8192, kv_cache_dtype="fp8"), w)
    assert fp8.reason is Reason.FP8_KV_UNSUPPORTED
    # util 0.995 leaves 0.4 GiB outside the budget for ~0.9 GiB of graphs
    tight = evaluate(m, 79.19, True, EngineSettings(gpu_memory_utilization=0.995, max_model_len=8192), w)
    assert tight.reason is Reason.GRAPHS_EXCEED_HEADROOM
    tp3 = evaluate(m, 79.19, True, EngineSettings(max_model_len=8192, tp=3), w)
    assert tp3.reason is Reason.TP_DOES_NOT_DIVIDE_HEADS


def test_search_returns_best_and_pareto(shared_data: Path) -> None:
    m = load_model_config(shared_data / "model_configs" / "Qwen--Qwen2.5-7B-Instruct.json")
    space = SearchSpace(
        gpu_memory_utilization=(0.9, 0.95), max_model_len=(4096, 8192), max_num_seqs=(256, 1024)
    )
    r = search(m, 79.19, True, synthetic("batch"), space)
    assert r.best is not None and r.best.feasible and r.pareto
    assert r.best.settings.max_model_len == 8192
    assert r.rejected_by_reason()["max_model_len_below_workload_p99"] > 0
    tps = [c.throughput_proxy for c in r.pareto]
    assert tps == sorted(tps, reverse=True)


@pytest.mark.parametrize(
    ("sizes", "expected_cov", "expected_pad"),
    [
        # interactive: batches 1 (0.5), 2 (0.25), 4 (0.15), 8 (0.1)
        ((), 0.0, 0.0),
        ((1, 2, 4, 8), 1.0, 0.0),
        # batch 8 not covered; 4 -> 4; others exact: coverage 0.9
        ((1, 2, 4), 0.9, 0.0),
        # only size 8: every batch pads to 8: (0.5 x 7/8 + 0.25 x 6/8 + 0.15 x 4/8) / 1
        ((8,), 1.0, 0.5 * 7 / 8 + 0.25 * 6 / 8 + 0.15 * 4 / 8),
    ],
)
def test_graph_coverage(sizes: tuple[int, ...], expected_cov: float, expected_pad: float) -> None:
    cov, pad = graph_coverage(synthetic("interactive"), sizes)
    assert cov == pytest.approx(expected_cov) and pad == pytest.approx(expected_pad)


def test_workload_from_trace_lengths() -> None:
    isl = [100] * 99 + [5000]
    osl = [200] * 100
    # 10 req/s x 200 tokens x 0.03 s = 60 concurrent decodes on average
    w = from_lengths(isl, osl, [i * 0.1 for i in range(100)])
    assert w.context_p50_tokens == 300 and w.context_p99_tokens > 300
    assert sum(s for _, s in w.batch_sizes) == pytest.approx(1.0)
    assert w.batch_quantile(0.5) == 64


def test_cli_json(shared_data: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from planner_cli.commands import autotune

    parser = argparse.ArgumentParser()
    autotune.add_arguments(parser)
    cfg = shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json"
    png = tmp_path / "p.png"
    args = parser.parse_args(
        ["--model", str(cfg), "--gpu", "h100", "--tp", "1", "--json", "--plot", str(png)]
    )
    assert autotune.run(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["feasible"] and any(f.startswith("--gpu-memory-utilization") for f in out["flags"])
    assert out["memory_gib"]["kv_cache_gib"] > 0 and out["pareto"]
    assert png.stat().st_size > 0
    csv = shared_data / "vllm_memory" / "reports_dev.csv"
    args = parser.parse_args(["--validate", str(csv), "--json"])
    assert autotune.run(args) == 0
    val = json.loads(capsys.readouterr().out)
    assert val["coverage"]["evaluated"] == 27 and val["summary"]["kv_cache_gib"]["median_abs_pct"] < 3
