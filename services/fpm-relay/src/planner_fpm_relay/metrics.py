"""Prometheus metrics of the relay (on the service's registry, base units)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class RelayMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["component", "worker"]
        self.relayed = Counter(
            "planner_fpm_relayed", "FPM messages republished to NATS", labels, registry=registry
        )
        self.relayed_bytes = Counter(
            "planner_fpm_relayed_bytes", "FPM payload bytes republished to NATS", labels, registry=registry
        )
        self.dropped = Counter(
            "planner_fpm_dropped",
            "FPM messages lost, by reason: gap (missing from the engine's sequence: lost before or in"
            " ZMQ), overload (read but shed whole because the publisher was behind)",
            [*labels, "reason"],
            registry=registry,
        )
        self.restarts = Counter(
            "planner_fpm_sequence_restarts",
            "Times an engine's sequence went back (engine restarted)",
            labels,
            registry=registry,
        )
        self.lease_drops = Counter(
            "planner_fpm_lease_dropped",
            "Messages not published because this relay's claim on the engine had lapsed",
            labels,
            registry=registry,
        )
        self.publish_drops = Counter(
            "planner_fpm_publish_dropped",
            "Messages NATS did not take (outgoing buffer full while reconnecting, connection closed,"
            " over the payload limit), by error",
            ["reason"],
            registry=registry,
        )
        self.publish_errors = Counter(
            "planner_fpm_publish_errors",
            "Batches the publisher failed on unexpectedly (logged; the publisher goes on)",
            registry=registry,
        )
        self.last_seen = Gauge(
            "planner_fpm_last_seen_timestamp_seconds",
            "Wall time of the last message from an engine",
            labels,
            registry=registry,
        )
        self.subscribed = Gauge(
            "planner_fpm_engines_subscribed", "Engines whose ZMQ stream this relay serves", registry=registry
        )
        self.scraped = Gauge(
            "planner_fpm_engines_scraped",
            "Engines this relay reads through a scrape adapter",
            registry=registry,
        )
        self.socket_errors = Counter(
            "planner_fpm_socket_errors",
            "ZMQ socket failures (the socket is reopened)",
            labels,
            registry=registry,
        )
        self.members = Gauge("planner_fpm_relay_members", "Live relay replicas seen", registry=registry)
        self.config_mismatch = Gauge(
            "planner_fpm_relay_config_mismatch",
            "Live relay replicas whose static engines or pod discovery differ from this one's",
            registry=registry,
        )
        self.claims = Gauge("planner_fpm_relay_claims", "Engine claims this relay holds", registry=registry)
        self.scrapes = Counter(
            "planner_fpm_scrapes",
            "Scrapes of engines without FPM, by result",
            ["component", "worker", "result"],
            registry=registry,
        )
        self.scrape_missing = Counter(
            "planner_scrape_missing",
            "Scrapes whose exposition lacked a quantity the engine kind's adapter reads (left at 0)",
            ["kind", "quantity"],
            registry=registry,
        )
        self.bad_engines = Counter(
            "planner_fpm_bad_engine_entries",
            "Registry entries the relay cannot serve",
            ["reason"],
            registry=registry,
        )
