"""A real llama-server: the llama.cpp scrape adapter reads its live /metrics after real requests.

Four concurrent completions on two slots: two run, two wait (deferred); afterwards the prompt and
generation counters moved by what was sent, generation seconds give a per-token time, and busy slots
per decode lie between 1 and 2. Every quantity the planner relies on must be present: if a llama.cpp
release renames one, this test fails (``RELIED``). ``PLANNER_RECORD_FIXTURES=1`` writes the real
exposition to tests/unit/fpm_relay/fixtures/llamacpp_live.txt (checked by the adapter unit tests).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import time
import urllib.request
from pathlib import Path

import pytest

from planner_fpm_relay.scrape.adapters import LoadReading, read_load
from planner_runtime.llamacpp.server import LlamaServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

FIXTURE = Path(__file__).resolve().parents[2] / "unit" / "fpm_relay" / "fixtures" / "llamacpp_live.txt"

RELIED = (
    "running_requests",
    "waiting_requests",
    "prompt_tokens_total",
    "generation_tokens_total",
    "itl_seconds_sum",
    "itl_seconds_count",
    "prefill_seconds_total",
    "engine_steps_total",
    "step_width_total",
)
"""Quantities the llama.cpp adapter must find in a current llama-server's exposition."""

NOT_EXPORTED = {"kv_usage"}
"""Current llama-server exports no KV usage (nor KV tokens): the relay counts it missing."""


def complete(url: str, prompt: str, max_tokens: int) -> dict[str, object]:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True,
            "cache_prompt": False}  # every prompt token is processed (and counted) # fmt: skip
    req = urllib.request.Request(
        f"{url}/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=50) as r:
        out: dict[str, object] = json.loads(r.read())
        return out


def reading(server: LlamaServer) -> LoadReading:
    return read_load("llamacpp", server.metrics())


def test_adapter_reads_live_llama_server_metrics(llama_server: LlamaServer) -> None:
    idle = reading(llama_server)
    assert (idle.running_requests, idle.waiting_requests) == (0, 0)
    assert idle.generation_tokens_total == 0.0

    n, max_tokens = 4, 96
    prompts = [f"request {i}: the quick brown fox jumps over the lazy dog" for i in range(n)]
    seen_running, seen_waiting = 0, 0
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(complete, llama_server.url, p, max_tokens) for p in prompts]
        while not all(f.done() for f in futures):
            r = reading(llama_server)
            seen_running = max(seen_running, r.running_requests)
            seen_waiting = max(seen_waiting, r.waiting_requests)
            time.sleep(0.02)
        results = [f.result() for f in futures]
    # 2 slots: two requests ran while the other two waited
    assert seen_running == 2, seen_running
    assert seen_waiting >= 1, seen_waiting

    usage = [r["usage"] for r in results]
    sent_prompt = sum(int(u["prompt_tokens"]) for u in usage)  # type: ignore[index]
    generated = sum(int(u["completion_tokens"]) for u in usage)  # type: ignore[index]
    assert generated == n * max_tokens

    text = llama_server.metrics()
    after = read_load("llamacpp", text)
    missing = set(after.missing)
    assert not missing & set(RELIED), f"llama-server no longer exports {sorted(missing & set(RELIED))}"
    assert missing <= NOT_EXPORTED, f"unexpected missing quantities {sorted(missing)}"
    assert (after.running_requests, after.waiting_requests) == (0, 0)
    assert after.generation_tokens_total == generated
    assert after.prompt_tokens_total == sent_prompt
    assert after.itl_seconds_count == generated
    itl_s = after.itl_seconds_sum / after.itl_seconds_count
    assert 0.0 < itl_s < 1.0, itl_s
    assert after.prefill_seconds_total > 0.0
    busy_per_decode = after.step_width_total / after.engine_steps_total
    assert 1.0 < busy_per_decode <= 2.0, busy_per_decode
    if os.environ.get("PLANNER_RECORD_FIXTURES") == "1":
        FIXTURE.write_text(text)
