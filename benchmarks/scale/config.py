"""What one scale run is: the size of the fleet, its load, and the timeouts of its phases."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ScaleConfig:
    engines: int = 1000
    rate: float = 25.0
    """Forward passes per second of a busy engine (one FPM each)."""
    duration_s: float = 60.0
    """Measurement window (after warm-up)."""
    discovery: str = "kv"
    """kv: relays follow ``planner_engines`` and shard with claims; static: per-relay engine lists."""
    relays: int = 3
    engine_procs: int = 2
    idle_fraction: float = 0.1
    """Engines with no traffic: they send the 1 s all-zero heartbeat only."""
    prefill_fraction: float = 0.25
    transport: str = "tcp"
    sndhwm: int = 1000
    regression_tick_s: float = 1.0
    decider_interval_s: float = 2.0
    """The decider's load_interval_s (its tick); the service default is 5 s."""
    warmup_timeout_s: float = 90.0
    stop_timeout_s: float = 40.0
    """Per process group, after SIGTERM (the services' drain_timeout_s is 30 s)."""
    namespace: str = "scale"
    relay_args: list[str] = field(default_factory=list)
    """Extra fpm-relay flags, e.g. ``--relay-ttl-s 15 --relay-heartbeat-s 5``."""
    keep_logs: str = ""
    """Copy the processes' logs here (empty: temp dir, removed)."""
