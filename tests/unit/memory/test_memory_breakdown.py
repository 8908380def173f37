"""Memory breakdown arithmetic, calibration round-trip, and accuracy on the real reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner_core.memory import DEFAULT_PARAMS, EngineSettings, default_capture_sizes, predict_memory
from planner_core.memory.calibrate import fit_params, predict_report
from planner_core.memory.components import cuda_graph_gib, non_torch_gib
from planner_core.memory.reports import load_reports
from planner_core.memory.seed import seed_breakdown
from planner_core.modelcfg import load_model_config

GIB = 2**30


@pytest.fixture(scope="module")
def rows(shared_data: Path) -> list:  # type: ignore[type-arg]
    reps = load_reports(shared_data / "vllm_memory" / "reports_dev.csv")
    return [(r, load_model_config(shared_data / "model_configs" / r.model_config_file)) for r in reps]


def test_kv_is_the_remainder_and_blocks_follow(shared_data: Path) -> None:
    m = load_model_config(shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json")
    s = EngineSettings(
        gpu_memory_utilization=0.95, max_model_len=8192, max_num_seqs=1024, max_num_batched_tokens=8192
    )
    b = predict_memory(m, 79.19, s)
    # budget 0.95 x 79.19 = 75.23; KV = 75.23 - (weights + activation + non-torch)
    assert b.budget_gib == pytest.approx(75.2305)
    assert b.kv_cache_gib == pytest.approx(b.budget_gib - b.weights_gib - b.activation_gib - b.non_torch_gib)
    # weights 8.03e9 params x 2 B + RoPE cache 131072 x 128 x 2 B = 14.99 GiB (vLLM reports 14.99)
    assert b.weights_gib == pytest.approx(14.99, abs=0.01)
    # sampler: 1024 seqs x 128256 vocab x (4 x 3.36 + 2) B = 1.89 GiB (vLLM reports 1.89)
    assert b.activation_gib == pytest.approx(1.89, abs=0.01)
    # blocks = floor(KV bytes / (16 tokens x 131072 B)); vLLM reports 29751 for 58.11 GiB
    assert b.num_gpu_blocks == int(b.kv_cache_gib * GIB // (16 * 131072))
    assert b.num_gpu_blocks == pytest.approx(29751, abs=10)
    # concurrency = tokens / max_model_len = 29748 x 16 / 8192 = 58.1
    assert b.max_concurrency == pytest.approx(b.kv_cache_tokens / 8192, rel=1e-6)
    fp8 = predict_memory(m, 79.19, EngineSettings(0.95, 8192, 1024, 8192, kv_cache_dtype="fp8"))
    assert fp8.num_gpu_blocks == pytest.approx(2 * b.num_gpu_blocks, abs=2)


@pytest.mark.parametrize(
    ("tp", "pp", "expected"),
    [
        (1, 1, 0.25),  # CUDA context only
        (1, 2, 0.07),  # PP rank 0
        (2, 1, 0.25 + 1.78 + 0.03 * 1),  # + all-reduce buffers: fixed + one peer = 2.06
        (4, 1, 0.25 + 1.78 + 0.03 * 3),  # three peers = 2.12
    ],
)
def test_non_torch(tp: int, pp: int, expected: float) -> None:
    assert non_torch_gib(EngineSettings(tp=tp, pp=pp), DEFAULT_PARAMS) == pytest.approx(expected)


def test_graph_memory_is_small_and_grows_with_sizes(shared_data: Path) -> None:
    m = load_model_config(shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json")
    s = EngineSettings()
    sizes = default_capture_sizes(1024)
    assert len(sizes) == 51 and sizes[-1] == 512
    g = cuda_graph_gib(m, s, DEFAULT_PARAMS, sizes)
    # 0.31 + 0.00026 x 51 x 32 + 0.45 x sum(sizes)=10499 x 14336 x 2 B / 2^30 = 0.31 + 0.42 + 0.13 = 0.87
    assert g == pytest.approx(0.87, abs=0.03)
    assert cuda_graph_gib(m, s, DEFAULT_PARAMS, (1, 2, 4)) < g
    assert cuda_graph_gib(m, s, DEFAULT_PARAMS, ()) == 0.0
    # the seed's graph term: 67 sizes x 0.1 x 14.99 GiB x (1 + 0.02 size) -> hundreds of GiB
    seed = seed_breakdown(m, 79.19, 0.95, 14.99)
    assert seed.cuda_graph_gib > 300 and seed.kv_cache_gib < 0


def test_defaults_are_the_fit(rows: list) -> None:  # type: ignore[type-arg]
    p = fit_params(rows)
    assert p.sampler_fp32_copies == pytest.approx(DEFAULT_PARAMS.sampler_fp32_copies, abs=0.01)
    assert p.allreduce_fixed_gib == pytest.approx(DEFAULT_PARAMS.allreduce_fixed_gib, abs=0.01)
    assert p.graph_fixed_gib == pytest.approx(DEFAULT_PARAMS.graph_fixed_gib, abs=0.01)


def test_kv_accuracy_on_reports(rows: list) -> None:  # type: ignore[type-arg]
    errs = []
    for r, m in rows:
        b = predict_report(r, m, DEFAULT_PARAMS)
        errs.append(abs(b.kv_cache_gib - r.kv_cache_gib) / r.kv_cache_gib)
    errs.sort()
    assert errs[len(errs) // 2] <= 0.03 and errs[-1] <= 0.10


def test_moe_mla_sliding_quant_predict(shared_data: Path) -> None:
    d = shared_data / "model_configs"
    for name, gpu_gib, tp in [
        ("Qwen--Qwen3-30B-A3B.json", 139.8, 1),
        ("openai--gpt-oss-20b.json", 79.19, 1),
        ("google--gemma-2-9b-it.json", 79.19, 1),
        ("Qwen--Qwen3-235B-A22B-FP8.json", 139.8, 4),
        ("meta-llama--Llama-4-Scout-17B-16E-Instruct.json", 79.19, 4),
    ]:
        b = predict_memory(load_model_config(d / name), gpu_gib, EngineSettings(tp=tp))
        assert b.kv_cache_gib > 0 and b.num_gpu_blocks > 0, name
