"""Frontend-style Prometheus metrics (the names a Dynamo frontend exports), plus the loadgen's own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from planner_loadgen.stats import RequestResult

TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
DURATION_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
TOKEN_BUCKETS = tuple(float(2**i) for i in range(4, 18))


class FrontendMetrics:
    def __init__(
        self, registry: CollectorRegistry, prefix: str, model: str, namespace: str, latency_scale: float
    ) -> None:
        labels = ["model", "dynamo_namespace"]
        self.scale = latency_scale
        self.ttft = Histogram(
            f"{prefix}_time_to_first_token_seconds",
            "Time to first token",
            labels,
            registry=registry,
            buckets=TTFT_BUCKETS,
        ).labels(model, namespace)
        self.itl = Histogram(
            f"{prefix}_inter_token_latency_seconds",
            "Mean inter-token latency of a request",
            labels,
            registry=registry,
            buckets=ITL_BUCKETS,
        ).labels(model, namespace)
        self.duration = Histogram(
            f"{prefix}_request_duration_seconds",
            "End-to-end request time",
            labels,
            registry=registry,
            buckets=DURATION_BUCKETS,
        ).labels(model, namespace)
        self.isl = Histogram(
            f"{prefix}_input_sequence_tokens",
            "Input sequence length",
            labels,
            registry=registry,
            buckets=TOKEN_BUCKETS,
        ).labels(model, namespace)
        self.osl = Histogram(
            f"{prefix}_output_sequence_tokens",
            "Output sequence length",
            labels,
            registry=registry,
            buckets=TOKEN_BUCKETS,
        ).labels(model, namespace)
        self.requests = Counter(f"{prefix}_requests", "Requests received", labels, registry=registry).labels(
            model, namespace
        )
        self.failed = Counter(
            "planner_loadgen_failed_requests",
            "Requests that failed, by reason",
            ["reason"],
            registry=registry,
        )
        self.retries = Counter(
            "planner_loadgen_retries", "Requests re-sent to another engine", registry=registry
        )
        self.in_flight = Gauge(
            "planner_loadgen_in_flight_requests", "Requests sent and not done", registry=registry
        )
        self.engines = Gauge(
            "planner_loadgen_engines", "Routable engines by component", ["component"], registry=registry
        )

    def arrival(self, isl: int) -> None:
        self.requests.inc()
        self.isl.observe(isl)

    def done(self, r: RequestResult) -> None:
        if not r.ok:
            self.failed.labels(r.error or "unknown").inc()
            return
        if r.ttft_s is not None:
            self.ttft.observe(r.ttft_s * self.scale)
        if r.itl_s is not None:
            self.itl.observe(r.itl_s * self.scale)
        if r.duration_s is not None:
            self.duration.observe(r.duration_s * self.scale)
        self.osl.observe(r.tokens)
