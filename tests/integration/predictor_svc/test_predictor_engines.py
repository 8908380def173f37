"""Traffic from the engines alone: two fake vLLM servers serve the real vLLM 0.32 exposition with
their request, token and length-histogram counters advancing (one restarts: its counters drop); the
fpm-relay scrapes them from its static list (capabilities read from their metrics); the predictor on
``source: engines`` sums the per-engine increases into TrafficSamples on NATS and forecasts from them.
No loadgen, no frontend, no Prometheus."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from planner_core.policy.calibration import share_within
from planner_predictor.service import PredictorService
from planner_predictor.settings import PredictorSettings
from planner_proto import LoadForecast, Subjects, TrafficSample, WorkerLoadSample
from planner_runtime.natsd import NatsServer

from ..fpm_relay.relay_helpers import NS, FakeMetricsServer, connect, in_process_relay
from ..inbox import Inbox

pytestmark = pytest.mark.integration

CAPTURE = "engines/vllm-0.32.0-cpu-metrics.txt"
RATE, ISL, OSL = 20.0, 160.0, 64.0
"""Each engine finishes 20 requests/s of 160 prompt and 64 output tokens."""


ADVANCING = {
    r'vllm:request_success_total\{[^}]*finished_reason="length"[^}]*\}': 1.0,
    r"vllm:request_prompt_tokens_count\{[^}]*\}": 1.0,
    r"vllm:e2e_request_latency_seconds_count\{[^}]*\}": 1.0,
    r"vllm:request_generation_tokens_count\{[^}]*\}": 1.0,
    r"vllm:prompt_tokens_total\{[^}]*\}": ISL,
    r"vllm:request_prompt_tokens_sum\{[^}]*\}": ISL,
    r"vllm:generation_tokens_total\{[^}]*\}": OSL,
    r"vllm:request_generation_tokens_sum\{[^}]*\}": OSL,
}
"""Series that grow per request finished (count series by 1, token series by the request's tokens)."""
TTFT_S, TPOT_S = 0.03, 0.02
"""Every request's TTFT and mean time per output token: the histograms' buckets from there up grow."""
BUCKETS = {
    "vllm:time_to_first_token_seconds": TTFT_S,
    "vllm:request_time_per_output_token_seconds": TPOT_S,
}


class AdvancingVllm(FakeMetricsServer):
    """Serves a recorded vLLM exposition whose traffic counters grow with the time since start."""

    def __init__(self, template: str) -> None:
        super().__init__(template)
        self.started = time.monotonic()
        self.base = 1.0

    def restart(self) -> None:
        """A restarted engine: its counters start again from 0."""
        self.started, self.base = time.monotonic(), 0.0

    def text(self) -> str:
        done = RATE * (time.monotonic() - self.started)
        text = self.body
        for pattern, per_request in ADVANCING.items():
            text = re.sub(
                rf"^({pattern}) (\S+)$",
                lambda m, k=per_request: f"{m.group(1)} {self.base * float(m.group(2)) + done * k}",
                text,
                flags=re.MULTILINE,
            )
        for name, latency in BUCKETS.items():
            text = re.sub(
                rf'^({re.escape(name)}_bucket{{[^}}]*le="([^"]+)"[^}}]*}}) (\S+)$',
                lambda m, x=latency: (
                    f"{m.group(1)} "
                    f"{self.base * float(m.group(3)) + (done if float(m.group(2)) >= x else 0.0)}"
                ),
                text,
                flags=re.MULTILINE,
            )
        return text


def _settings(url: str, **kw: Any) -> PredictorSettings:
    fields = {"nats_url": url, "namespace": NS, "interval_s": 1.0, "model": "constant", "source": "engines"}
    return msgspec.convert({**fields, **kw}, PredictorSettings)


async def test_engine_counters_make_traffic_and_forecasts(
    nats_server: NatsServer, shared_data: Path, no_task_leak: None
) -> None:
    path = shared_data / CAPTURE
    if not path.is_file():
        pytest.skip(f"real vLLM capture {CAPTURE} not found under the shared data folder")
    idle = path.read_text().partition("# Part B")[0]
    subjects = Subjects(ns=NS)
    bus = await connect(nats_server.url)
    engines = [AdvancingVllm(idle), AdvancingVllm(idle)]
    traffic, forecasts, loads = Inbox[TrafficSample](), Inbox[LoadForecast](), Inbox[WorkerLoadSample]()
    await bus.subscribe(subjects.traffic(), TrafficSample, traffic.on)
    await bus.subscribe(subjects.forecast(), LoadForecast, forecasts.on)
    await bus.subscribe(subjects.load(), WorkerLoadSample, loads.on)
    svc = PredictorService(_settings(nats_server.url, min_intervals=2))
    run: asyncio.Task[int] | None = None
    try:
        urls = [await e.start() for e in engines]
        static = [f"decode:v{i}=vllm+{u}" for i, u in enumerate(urls)]
        async with in_process_relay(nats_server.url, static_engines=static, scrape_interval_s=0.2,
                                    scrape_timeout_s=0.2):  # fmt: skip
            run = asyncio.create_task(svc.run())
            # the relay read each engine's KV pool from vllm:cache_config_info (8192 blocks x 128)
            sample = await loads.wait(lambda s: s.requests_total is not None)
            assert sample.capabilities is not None and sample.capabilities.max_kv_tokens == 8192 * 128
            assert sample.isl_tokens_count is not None
            # 2 engines x 20 requests/s over a 1 s interval = 40 requests of 160 / 64 tokens
            got = await traffic.wait(lambda t: t.num_requests > 30, timeout_s=20)
            assert got.source == "engines" and got.num_requests == pytest.approx(2 * RATE, rel=0.25)
            assert got.mean_isl_tokens == pytest.approx(ISL, rel=0.02)
            assert got.mean_osl_tokens == pytest.approx(OSL, rel=0.02)
            # the latency histograms summed over the engines: every request at 30 ms TTFT, 20 ms TPOT
            ttft, tpot = got.ttft_histogram, got.itl_histogram
            assert ttft is not None and tpot is not None
            assert ttft.total == pytest.approx(got.num_requests, rel=0.02)
            assert share_within(ttft, 40.0) == pytest.approx(1.0) and share_within(ttft, 20.0) == 0.0
            assert share_within(tpot, 25.0) == pytest.approx(1.0) and share_within(tpot, 10.0) == 0.0
            fc = await forecasts.wait(lambda f: f.reason == "" and f.num_requests is not None, timeout_s=20)
            assert fc.num_requests == pytest.approx(2 * RATE, rel=0.3)
            assert fc.mean_isl_tokens == pytest.approx(ISL, rel=0.05)
            # an engine restarts (its counters drop to near 0): counted from 0, never negative
            engines[1].restart()
            resets = lambda: svc.registry.get_sample_value("planner_traffic_engine_resets_total") or 0.0  # noqa: E731
            deadline = time.monotonic() + 10
            while resets() < 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert resets() >= 1
            # the intervals after it: still both engines' requests, nothing lost or negative
            for _ in range(2):
                after = await traffic.wait(lambda t: True, timeout_s=10)
                assert after.num_requests == pytest.approx(2 * RATE, rel=0.3)
    finally:
        svc.request_stop()
        if run is not None:
            assert await asyncio.wait_for(run, 15) == 0
        await bus.close()
        for e in engines:
            await e.close()
