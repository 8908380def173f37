"""Settings of the fpm-relay service (one frozen struct, validated once at start)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from planner_fpm_relay.discovery import parse_pod_sources
from planner_fpm_relay.targets import parse_static_engines
from planner_runtime.settings import BaseSettings

Seconds = Annotated[float, Meta(gt=0.0, le=3600.0)]


class FpmRelaySettings(BaseSettings, frozen=True, kw_only=True):
    """FPM relay: engine ForwardPassMetrics from ZMQ onto NATS, and scrape adapters for the rest."""

    relay_id: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_\-]*$", max_length=128)] = ""
    """This replica's name in the membership bucket; empty picks ``<host>-<pid>``."""
    static_engines: list[str] = msgspec.field(default_factory=list)
    """Engines served without the registry: ``component:worker_id=tcp://host:port`` or
    ``component:worker_id=<kind>+http://host:port/metrics`` (kind vllm, sglang, trtllm, llamacpp)."""
    watch_engines: bool = True
    """Follow the ``planner_engines`` KV bucket."""
    engines_resync_s: Seconds = 2.0
    """Re-list the engine registry this often (catches keys that expired without a marker)."""
    validate: bool = True
    """Decode every payload and drop (and count) the invalid ones; off relays any 3-frame message."""
    sharding: bool = True
    """Split engines with other relays (membership + per-engine claims in ``relay_bucket``)."""
    relay_bucket: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_\-]+$")] = "planner_relays"
    relay_ttl_s: Annotated[float, Meta(ge=1.0, le=600.0)] = 6.0
    """TTL of membership keys and engine claims: a dead relay's engines move after at most this."""
    relay_heartbeat_s: Annotated[float, Meta(gt=0.0, le=300.0)] = 2.0
    """Refresh of the membership key and of the claims held."""
    relay_kv_concurrency: Annotated[int, Meta(ge=1, le=4096)] = 64
    """Claim renewals, claims and releases in flight at once (one KV round trip per engine each)."""
    reconcile_s: Seconds = 1.0
    """Re-check ownership at least this often (also on every engine or membership change)."""
    zmq_rcvhwm: Annotated[int, Meta(ge=0)] = 100_000
    """ZMQ receive high-water mark per engine (0 = unlimited); beyond it the engine's PUB drops."""
    max_batch: Annotated[int, Meta(ge=1, le=1_000_000)] = 1024
    """Messages drained from one socket per pass (a backlog goes on in the next pass)."""
    batch_window_s: Annotated[float, Meta(ge=0.0, le=0.1)] = 0.005
    """Read the sockets at most once per this window while messages keep coming (one wake-up per
    window, not per arrival); a message after a quiet window is relayed at once. Adds at most this
    much latency; 0 wakes on every arrival. Measured here at 330 engines x 10 FPM/s, relay CPU per
    message: 0 -> 264 us, 0.5 ms -> 100-131 us, 5 ms -> 98 us (the rest is per-socket ZMQ work).
    With shared sockets (``engines_per_socket``), 1000 engines x 20 FPM/s on a loaded machine:
    0.5 ms -> 22 us, 2 ms -> 18 us; 330 engines x 20 FPM/s: 2 ms -> 34 us, 5 ms -> 29 us (FPM feed a 1 s
    regression tick: 5 ms of latency costs nothing)."""
    engines_per_socket: Annotated[int, Meta(ge=1, le=100_000)] = 128
    """Engines connected to one shared ZMQ SUB socket (the engine of a message is the worker id in
    its payload). Fewer sockets, fewer wake-ups: 1000 engines are 8 sockets."""
    max_backlog: Annotated[int, Meta(ge=1, le=10_000_000)] = 50_000
    """Messages read and not yet published beyond which whole messages are shed, counted per engine
    in ``planner_fpm_dropped_total{reason="overload"}`` (the relay keeps reading; engines never block)."""
    queue_batches: Annotated[int, Meta(ge=1, le=1_000_000)] = 1024
    """Passes (each a list of per-engine batches) waiting between the socket hub and the publisher."""
    pod_discovery: list[str] = msgspec.field(default_factory=list)
    """Engines found as Kubernetes pods: ``COMPONENT:KIND:LABEL_SELECTOR`` items (KIND vllm, sglang,
    trtllm, llamacpp, or fpm), e.g. ``decode:vllm:app=decode-worker``. Running + Ready pods without
    a deletionTimestamp are scraped on their IP; the worker id is the pod name."""
    k8s_namespace: str = "default"
    """The namespace ``pod_discovery`` lists pods in."""
    k8s_api_url: str = ""
    """API server URL for ``pod_discovery``; empty: the in-cluster service account (outside a
    cluster, ``kubectl proxy`` and ``http://127.0.0.1:8001``)."""
    k8s_token_file: str = ""
    """Bearer token file for ``k8s_api_url`` (in-cluster: the service account's, re-read each list)."""
    k8s_ca_file: str = ""
    """CA bundle for an https ``k8s_api_url`` (in-cluster: the service account's ``ca.crt``)."""
    k8s_verify_ssl: bool = True
    pod_metrics_port: Annotated[int, Meta(ge=1, le=65535)] = 8000
    """Port of a discovered pod's /metrics unless its ``prometheus.io/port`` annotation says."""
    pod_metrics_path: str = "/metrics"
    """Path of a discovered pod's metrics unless its ``prometheus.io/path`` annotation says."""
    pod_fpm_port: Annotated[int, Meta(ge=1, le=65535)] = 20380
    """ZMQ port of discovered ``fpm`` engines (data-parallel rank 0)."""
    pod_discovery_interval_s: Seconds = 5.0
    """List the pods this often (a deleted pod is dropped at the next list)."""
    scrape_interval_s: Seconds = 2.0
    scrape_timeout_s: Seconds = 2.0
    scrape_max_bytes: Annotated[int, Meta(ge=1024, le=256 * 1024 * 1024)] = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        super().__post_init__()
        parse_static_engines(self.static_engines)
        parse_pod_sources(self.pod_discovery)
        if self.relay_heartbeat_s * 2 > self.relay_ttl_s:
            raise ValueError(
                f"relay_heartbeat_s ({self.relay_heartbeat_s}) must be at most half of relay_ttl_s"
                f" ({self.relay_ttl_s}) so that a live relay never lets its keys expire"
            )
        if self.scrape_timeout_s > self.scrape_interval_s:
            raise ValueError("scrape_timeout_s must not exceed scrape_interval_s")
