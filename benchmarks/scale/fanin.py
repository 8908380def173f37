"""Relay CPU per message against the number of engines: one fpm-relay process (shared-socket fan-in)
reading N synthetic engines (``engines.py``) registered in ``planner_engines``, onto an embedded
nats-server. Relay CPU comes from /proc over a measurement window after every engine is subscribed
and relaying; messages and sequence gaps from the relay's own /metrics over the same window.

The single-stream reference is one engine at the sweep's total rate (``--single-rate``, default
20000 FPM/s = 1000 x 20): the same messages per second, from one engine instead of many.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port
from scale.readings import proc_cpu_s, scrape, total

HERE = Path(__file__).resolve().parent
NS = "scale"


def _read_line(proc: subprocess.Popen[str], timeout_s: float) -> dict[str, Any]:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.strip().startswith("{"):
            out: dict[str, Any] = json.loads(line)
            if "warning" not in out:
                return out
        elif proc.poll() is not None:
            break
    raise RuntimeError("engines process did not answer")


def _scrape(port: int) -> Any:
    """The relay's /metrics, retried (a busy relay may answer late)."""
    for attempt in range(5):
        try:
            return scrape(port)
        except OSError:
            if attempt == 4:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def _stop(proc: subprocess.Popen[Any], timeout_s: float = 15.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def measure(
    engines: int, rate: float, window_s: float, relay_args: list[str] | None = None, engine_procs: int = 1
) -> dict[str, Any]:
    """Relay CPU per relayed message with ``engines`` engines at ``rate`` FPM/s each, sent by
    ``engine_procs`` processes (more senders starve nats-server and the relay on a 2-core machine)."""
    procs_n = max(1, engine_procs)
    with NatsServer() as nats:
        procs: list[subprocess.Popen[str]] = []
        port = free_port()
        relay: subprocess.Popen[bytes] | None = None
        try:
            per = -(-engines // procs_n)
            for first in range(0, engines, per):
                cfg = {
                    "first": first,
                    "count": min(per, engines - first),
                    "prefill_fraction": 0.25,
                    "idle_fraction": 0.0,
                    "sndhwm": 10_000,
                    "transport": "tcp",
                    "ipc_dir": "",
                    "rate": rate,
                    "namespace": NS,
                    "nats_url": nats.url,
                }
                procs.append(
                    subprocess.Popen(
                        [sys.executable, str(HERE / "engines.py"), json.dumps(cfg)],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                        text=True,
                    )
                )
            for eng in procs:
                _read_line(eng, 120)  # endpoints bound
            for eng in procs:
                assert eng.stdin is not None
                eng.stdin.write("register\n")
                eng.stdin.flush()
            for eng in procs:
                _read_line(eng, 120)
            args = [sys.executable, "-m", "planner_fpm_relay", "--nats-url", nats.url, "--namespace", NS]
            args += ["--http-port", str(port), "--log-level", "warning", "--no-sharding", *(relay_args or [])]
            relay = subprocess.Popen(
                args,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 120
            while True:
                time.sleep(0.5)
                if relay.poll() is not None:
                    raise RuntimeError("relay exited")
                try:
                    s = scrape(port)
                except OSError:
                    continue
                if (
                    total(s, "planner_fpm_engines_subscribed") >= engines
                    and total(s, "planner_fpm_relayed_total") > engines
                ):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("relay did not subscribe every engine")
            time.sleep(2.0)  # every engine's SUB joined, buffers settled
            s0, c0, t0 = _scrape(port), proc_cpu_s(relay.pid), time.monotonic()
            time.sleep(window_s)
            s1, c1, t1 = _scrape(port), proc_cpu_s(relay.pid), time.monotonic()
        finally:
            if relay is not None:
                _stop(relay)
            for eng in procs:
                if eng.stdin is not None and eng.poll() is None:
                    try:
                        eng.stdin.write("stop\n")
                        eng.stdin.flush()
                    except OSError:
                        pass
            for eng in procs:
                try:
                    eng.wait(15)
                except subprocess.TimeoutExpired:
                    _stop(eng)

    def d(name: str, **match: str) -> float:
        return total(s1, name, **match) - total(s0, name, **match)

    relayed = d("planner_fpm_relayed_total")
    cpu = c1 - c0
    return {
        "engines": engines,
        "rate": rate,
        "window_s": t1 - t0,
        "relayed_per_s": relayed / (t1 - t0),
        "offered_per_s": engines * rate,
        "cpu_pct": 100 * cpu / (t1 - t0),
        "cpu_us_per_msg": 1e6 * cpu / relayed if relayed else float("nan"),
        "gaps": d("planner_fpm_dropped_total", reason="gap"),
        "overload": d("planner_fpm_dropped_total", reason="overload"),
    }
