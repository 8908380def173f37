"""Scrape adapters end to end: a fake engine /metrics endpoint (vLLM text, then an error status) is
polled and published as WorkerLoadSample on the load subject; a current llama-server's exposition (no
KV usage) is published with the usage at 0 and counted in planner_scrape_missing_total."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner_proto import Component, EngineCapabilities, EngineInfo, Subjects, WorkerLoadSample, encode
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S
from planner_runtime.natsd import NatsServer

from .relay_helpers import NS, FakeMetricsServer, connect, in_process_relay, wait_until

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).parent.parent.parent / "unit" / "fpm_relay" / "fixtures"


async def test_scrape_adapters_publish_load_samples(nats_server: NatsServer) -> None:
    subjects = Subjects(ns=NS)
    bus = await connect(nats_server.url)
    vllm = FakeMetricsServer((FIXTURES / "vllm.txt").read_text())
    llama = FakeMetricsServer((FIXTURES / "llamacpp.txt").read_text())
    live = FakeMetricsServer((FIXTURES / "llamacpp_live.txt").read_text())
    try:
        vllm_url, llama_url, live_url = await vllm.start(), await llama.start(), await live.start()
        kv = await bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
        caps = EngineCapabilities(num_gpu_blocks=100, block_size_tokens=16)
        await kv.put(
            subjects.engine_key("agg", "l0"),
            encode(EngineInfo(namespace=NS, component=Component.AGG, worker_id="l0", metrics_url=llama_url,
                              engine_kind="llamacpp", capabilities=caps)),
        )  # fmt: skip
        await kv.put(
            subjects.engine_key("agg", "l1"),
            encode(EngineInfo(namespace=NS, component=Component.AGG, worker_id="l1", metrics_url=live_url,
                              engine_kind="llamacpp", capabilities=caps)),
        )  # fmt: skip
        got: dict[str, WorkerLoadSample] = {}

        async def on_load(msg: WorkerLoadSample, subject: str) -> None:
            got[subject] = msg

        await bus.subscribe(subjects.load(), WorkerLoadSample, on_load)
        async with in_process_relay(nats_server.url, static_engines=[f"decode:v0=vllm+{vllm_url}"]) as relay:
            await wait_until(lambda: len(got) == 3, 30, "a load sample from each engine")
            v = got[subjects.load("decode", "v0")]
            assert (v.engine_kind, v.running_requests, v.waiting_requests, v.kv_usage) == ("vllm", 5, 4, 0.42)
            assert (v.prompt_tokens_total, v.generation_tokens_total) == (1234.0, 506.0)
            lc = got[subjects.load("agg", "l0")]
            assert (lc.running_requests, lc.waiting_requests, lc.kv_usage, lc.max_kv_tokens) == (
                2,
                1,
                0.125,
                1600,
            )

            # current llama-server: no KV usage exported, none invented (the regression derives it
            # from the busy slots); the scrape is partial and the quantity counted missing
            lv = got[subjects.load("agg", "l1")]
            assert (lv.kv_usage, lv.generation_tokens_total, lv.max_kv_tokens) == (0.0, 384.0, 1600)
            missing = relay.registry.get_sample_value(
                "planner_scrape_missing_total", {"kind": "llamacpp", "quantity": "kv_usage"}
            )
            assert missing is not None and missing >= 1
            partial = relay.registry.get_sample_value(
                "planner_fpm_scrapes_total", {"component": "agg", "worker": "l1", "result": "partial"}
            )
            assert partial is not None and partial >= 1

            vllm.status = 500
            hits = vllm.hits
            await wait_until(lambda: vllm.hits > hits + 1, 30, "scrapes of the failing endpoint")
            failed = relay.registry.get_sample_value(
                "planner_fpm_scrapes_total", {"component": "decode", "worker": "v0", "result": "status"}
            )
            assert failed is not None and failed >= 1
            assert relay.scrapes.keys() == {"decode.v0", "agg.l0", "agg.l1"}
    finally:
        await vllm.close()
        await llama.close()
        await live.close()
        await bus.close()
