"""The Prometheus source against a real Prometheus scraping a test exporter (prometheus_client) that
exposes ``dynamo_frontend_*`` histograms and counters: the predictor's PromQL readings (counts and
averages, with label filters) match what the exporter saw; "no series" is unknown, an increase of 0 is
zero traffic; a predictor service on the Prometheus source publishes TrafficSample and LoadForecast."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from planner_core.policy.calibration import share_within
from planner_predictor.prometheus import PrometheusTraffic, PromQueryError
from planner_predictor.service import PredictorService
from planner_predictor.settings import PredictorSettings
from planner_proto import LoadForecast, Subjects, TrafficSample
from planner_runtime.bus import Bus
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port
from planner_runtime.settings import BaseSettings

pytestmark = pytest.mark.integration

P = "dynamo_frontend"
LABELS = ("model", "dynamo_namespace")


@dataclass
class Exporter:
    port: int
    requests: Counter
    hists: dict[str, Histogram]

    def request(self, model: str, ttft_s: float, itl_s: float, isl: int, osl: int, dur_s: float) -> None:
        labels = (model, "dyn")
        self.requests.labels(*labels).inc()
        for key, value in (("ttft", ttft_s), ("itl", itl_s), ("isl", isl), ("osl", osl), ("dur", dur_s)):
            self.hists[key].labels(*labels).observe(value)


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    reg = CollectorRegistry()
    names = {
        "ttft": "time_to_first_token_seconds",
        "itl": "inter_token_latency_seconds",
        "isl": "input_sequence_tokens",
        "osl": "output_sequence_tokens",
        "dur": "request_duration_seconds",
    }
    hists = {k: Histogram(f"{P}_{n}", n, LABELS, registry=reg) for k, n in names.items()}
    requests = Counter(f"{P}_requests", "requests", LABELS, registry=reg)
    for model in ("m1", "m2", "idle"):  # series exist (at 0) before the first scrape
        requests.labels(model, "dyn")
        for h in hists.values():
            h.labels(model, "dyn")
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=reg)
    try:
        yield Exporter(port, requests, hists)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=2) as r:
        return msgspec.json.decode(r.read())  # type: ignore[no-any-return]


@pytest.fixture
def prometheus(exporter: Exporter) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        msg = "prometheus binary not found (Debian package 'prometheus'; `just prometheus`, which `just test` runs, installs it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    with tempfile.TemporaryDirectory(prefix="planner-prom-") as tmp:
        cfg = Path(tmp) / "prometheus.yml"
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: frontend\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{exporter.port}']\n"
        )
        port = free_port()
        log_path = Path(tmp) / "prometheus.log"
        with log_path.open("wb") as log_fh:
            proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={tmp}/data",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log_fh,
            )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:  # ready, and two scrapes of the exporter stored
                try:
                    body = _get_json(f"{url}/api/v1/query?query=count_over_time(up%5B1m%5D)")
                    result = body["data"]["result"]  # type: ignore[index]
                    if result and float(result[0]["value"][1]) >= 2:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    log = log_path.read_text()[-1500:]
                    raise RuntimeError(f"prometheus did not come up with data: {log}")
                time.sleep(0.2)
            yield url
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


async def max_extrapolation(http: httpx.AsyncClient, url: str, now: float, window_s: float) -> float:
    """The largest factor by which increase() can scale up the true increase of a counter that starts
    at 0 inside the window: (sampled span + at most 1.1 average scrape gaps to the window's end) /
    sampled span, from the stored scrape timestamps."""
    q = f'{P}_requests_total{{model="m1"}}[{int(window_s)}s]'
    body = (await http.get(f"{url}/api/v1/query", params={"query": q, "time": f"{now:.3f}"})).json()
    ts = [float(t) for t, _ in body["data"]["result"][0]["values"]]
    span = ts[-1] - ts[0]
    return (span + 1.1 * span / (len(ts) - 1)) / span


async def test_promql_readings_match_the_exporter(
    exporter: Exporter, prometheus: str, nats_server: NatsServer
) -> None:
    # m1: 40 requests, alternating two shapes -> known means; m2: 10 other requests; idle: none
    for i in range(40):
        a = i % 2
        exporter.request("m1", 0.1 + 0.2 * a, 0.01 + 0.02 * a, 1000 + 2000 * a, 100 + 200 * a, 2.0 + 2.0 * a)
    for _ in range(10):
        exporter.request("m2", 1.0, 0.1, 10, 10, 9.0)
    await asyncio.sleep(3.2)  # three scrapes after the increments
    now = time.time()
    async with httpx.AsyncClient() as http:

        def reader(**labels: str) -> PrometheusTraffic:
            return PrometheusTraffic(http, prometheus, P, labels, timeout_s=5)

        m1 = await reader(model="m1", dynamo_namespace="dyn").read(now, 30.0)
        assert m1.errors == ()
        # increase() extrapolates from the last scrape to the window's end: at most `over` above
        # the true count (the counter starts at 0 in the window, so nothing is added at the start)
        over = await max_extrapolation(http, prometheus, now, 30.0)
        assert m1.num_requests is not None and 40 <= m1.num_requests <= 40 * over
        # averages are ratios of increases over the same scrapes: exact
        assert m1.means["ttft"] == pytest.approx(0.2, rel=1e-6)
        assert m1.means["itl"] == pytest.approx(0.02, rel=1e-6)
        assert m1.means["isl"] == pytest.approx(2000, rel=1e-6)
        assert m1.means["osl"] == pytest.approx(200, rel=1e-6)
        assert m1.means["duration"] == pytest.approx(3.0, rel=1e-6)
        # the TTFT histogram whole: half the requests at 0.1 s, half at 0.3 s
        h = m1.histograms["ttft"]
        assert h is not None and h.total == pytest.approx(m1.num_requests, rel=1e-6)
        assert share_within(h, 100.0) == pytest.approx(0.5, rel=1e-6)
        assert share_within(h, 250.0) == pytest.approx(0.5, rel=1e-6)
        assert share_within(h, 500.0) == pytest.approx(1.0, rel=1e-6)

        both = await reader().read(now, 30.0)
        assert both.num_requests is not None and 50 <= both.num_requests <= 50 * over
        assert both.means["isl"] == pytest.approx((40 * 2000 + 10 * 10) / 50, rel=1e-6)

        idle = await reader(model="idle").read(now, 30.0)  # series present, no increase: zero traffic
        assert idle.num_requests == 0.0 and all(v is None for v in idle.means.values())
        assert idle.histograms == {"ttft": None}  # no request in the window: no histogram
        absent = await reader(model="nope").read(now, 30.0)  # no series at all: unknown
        assert absent.num_requests is None and all(v is None for v in absent.means.values())
        with pytest.raises(PromQueryError) as exc:
            await reader().query("sum(", now)
        assert exc.value.kind == "error_status"

    # the service on the Prometheus source: a TrafficSample and a LoadForecast on its first tick
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url), max_wait_s=5)
    subjects = Subjects(ns="p")
    samples: list[TrafficSample] = []
    forecasts: list[LoadForecast] = []

    async def on_sample(m: TrafficSample, s: str) -> None:
        samples.append(m)

    async def on_fc(m: LoadForecast, s: str) -> None:
        forecasts.append(m)

    await bus.subscribe(subjects.traffic(), TrafficSample, on_sample)
    await bus.subscribe(subjects.forecast(), LoadForecast, on_fc)
    settings = msgspec.convert(
        {
            "nats_url": nats_server.url,
            "namespace": "p",
            "source": "prometheus",
            "prometheus_url": prometheus,
            "prometheus_model": "m1",
            "interval_s": 30.0,
            "min_intervals": 1,
            "model": "constant",
        },
        PredictorSettings,
    )
    svc = PredictorService(settings)
    run = asyncio.create_task(svc.run())
    try:
        deadline = time.monotonic() + 10
        while not forecasts and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert samples and samples[0].source == "prometheus"
        async with httpx.AsyncClient() as http:
            over = await max_extrapolation(http, prometheus, samples[0].start_s + 30.0, 30.0)
        assert 40 <= samples[0].num_requests <= 40 * over
        assert samples[0].mean_ttft_ms == pytest.approx(200.0, rel=1e-6)
        assert samples[0].mean_request_duration_s == pytest.approx(3.0, rel=1e-6)
        assert samples[0].ttft_histogram is not None
        assert share_within(samples[0].ttft_histogram, 250.0) == pytest.approx(0.5, rel=1e-6)
        fc = forecasts[0]
        assert fc.reason == "" and fc.num_requests == pytest.approx(samples[0].num_requests)
        assert fc.mean_isl_tokens == pytest.approx(2000, rel=1e-6)
        assert svc.registry.get_sample_value("planner_forecast_requests") == pytest.approx(fc.num_requests)
    finally:
        svc.request_stop()
        assert await asyncio.wait_for(run, 15) == 0
        await bus.close()
