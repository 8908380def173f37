"""Capabilities from an engine's own exposition (pure)."""

from __future__ import annotations

import pytest

from planner_core.engines.capabilities import capabilities_from_metrics
from planner_core.engines.exposition import samples
from planner_proto.engine import EngineCapabilities

_INFO = 'vllm:cache_config_info{{block_size="{bs}",engine="{e}",model_name="m",num_gpu_blocks="{nb}"}} 1.0\n'


def test_real_vllm_capture_idle_and_loaded(vllm_capture: tuple[str, str]) -> None:
    idle, loaded = vllm_capture
    # Part A: VLLM_CPU_KVCACHE_SPACE=1 -> 8192 blocks x 128 = 1,048,576 tokens (kv_cache_size_tokens).
    a = capabilities_from_metrics("vllm", idle)
    assert a is not None
    assert (a.num_gpu_blocks, a.block_size_tokens, a.max_kv_tokens) == (8192, 128, 1_048_576)
    # Part B: --num-gpu-blocks-override 32 -> 32 x 128 = 4096 tokens.
    b = capabilities_from_metrics("vllm", loaded)
    assert b is not None and b.max_kv_tokens == 4096


@pytest.mark.parametrize(
    ("text", "kv_tokens"),
    [
        (_INFO.format(bs=16, e=0, nb=100), 1600),
        # two data-parallel cores behind one endpoint: 100 x 16 + 50 x 16
        (_INFO.format(bs=16, e=0, nb=100) + _INFO.format(bs=16, e=1, nb=50), 2400),
        # the same core listed twice (two label sets): counted once
        (_INFO.format(bs=16, e=0, nb=100) + _INFO.format(bs=16, e=0, nb=100), 1600),
        (_INFO.format(bs=16, e=0, nb=100) + _INFO.format(bs=32, e=1, nb=50), None),  # mixed sizes
        (_INFO.format(bs=16, e=0, nb="None"), None),  # not yet profiled
        ("vllm:num_requests_running 0.0\n", None),  # no info series
    ],
)
def test_vllm_table(text: str, kv_tokens: int | None) -> None:
    caps = capabilities_from_metrics("vllm", text)
    assert (caps.max_kv_tokens if caps else None) == kv_tokens


def test_base_fields_kept() -> None:
    base = EngineCapabilities(max_num_seqs=8, context_length_tokens=2048, gpus=2)
    caps = capabilities_from_metrics("vllm", _INFO.format(bs=16, e=0, nb=10), base)
    assert caps == EngineCapabilities(
        max_num_seqs=8, context_length_tokens=2048, gpus=2, num_gpu_blocks=10, block_size_tokens=16
    )


def test_sglang_pool_and_old_limits() -> None:
    text = (
        'sglang:max_total_num_tokens{model_name="m"} 161721.0\n'
        'sglang:max_running_requests{model_name="m"} 64.0\n'
        'sglang:context_len{model_name="m"} 8192.0\n'
    )
    caps = capabilities_from_metrics("sglang", text)
    assert caps is not None
    assert (caps.max_kv_tokens, caps.max_num_seqs, caps.context_length_tokens) == (161721, 64, 8192)
    assert capabilities_from_metrics("sglang", 'sglang:num_running_reqs{a="b"} 1\n') is None


@pytest.mark.parametrize("kind", ["llamacpp", "trtllm", "engine-sim", "unknown"])
def test_kinds_without_capacity_in_metrics(kind: str) -> None:
    assert capabilities_from_metrics(kind, _INFO.format(bs=16, e=0, nb=10)) is None


def test_exposition_reader_labels_and_prefix_names() -> None:
    text = (
        "# HELP x_total help\n"
        'x_total{a="1",b="with \\"quote\\", comma"} 3.0\n'
        "x_total_more 9\n"
        "x_total 4 1700000000\n"
        'x_total{a="2"} NaN\n'
        "x_total{broken 5\n"
    )
    got = samples(text, "x_total")
    assert [(s.labels, s.value) for s in got] == [
        ({"a": "1", "b": 'with "quote", comma'}, 3.0),
        ({}, 4.0),
    ]
