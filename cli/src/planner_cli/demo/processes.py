"""Process plumbing for the demo: circusd with the planner services as watchers, and helpers to
talk to it. Everything listens on loopback; every child dies with the demo."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from planner_cli.services import SERVICES
from planner_runtime.processes import ManagedProcess, free_port, wait_for_port

NOT_DEMO_WATCHERS = ("actuator-k8s", "engine-sim", "loadgen")
"""Services the demos do not run as circus watchers: no Kubernetes here (actuator-circus scales the
engines), the engines are started by the actuator, the loadgen by the demo itself."""
DEMO_SERVICES = tuple(name for name in SERVICES if name not in NOT_DEMO_WATCHERS)
"""The services every demo runs as circus watchers, in start order."""


@dataclass
class Circus:
    endpoint: str
    ini: Path
    proc: ManagedProcess

    def call(self, command: str, timeout_s: float = 10.0, **props: object) -> dict[str, object]:
        from circus.client import CircusClient

        deadline = time.monotonic() + timeout_s
        client = CircusClient(endpoint=self.endpoint, timeout=timeout_s)
        try:
            while True:
                answer: dict[str, object] = client.call({"command": command, "properties": props})
                if answer.get("status") == "ok":
                    return answer
                reason = str(answer.get("reason", answer))
                # circusd answers "busy" while an earlier command (a watcher starting) is running.
                if ("busy" in reason or "already running" in reason) and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                raise RuntimeError(f"circusd refused {command}: {reason}")
        finally:
            client.stop()

    def stop(self, timeout_s: float = 120.0) -> None:
        if self.proc.running:
            try:
                self.call("quit", timeout_s=5, waiting=False)
            except Exception:  # circusd busy or already gone: fall back to a signal
                self.proc.stop(timeout_s, kill_wait_s=10)
                return
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill(wait_s=10)


def bin_path(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def write_ini(
    path: Path, endpoint: str, pubsub: str, watchers: dict[str, list[str]], logs: Path, env: dict[str, str]
) -> None:
    lines = [
        "[circus]",
        f"endpoint = {endpoint}",
        f"pubsub_endpoint = {pubsub}",
        "statsd = false",
        "check_delay = 5",
        "warmup_delay = 0",
        "",
    ]
    for name, argv in watchers.items():
        lines += [
            f"[watcher:{name}]",
            f"cmd = {argv[0]}",
            f"args = {' '.join(argv[1:])}",
            "copy_env = true",
            "graceful_timeout = 60",
            "max_retry = 3",
            "stop_children = true",
            "stdout_stream.class = FileStream",
            f"stdout_stream.filename = {logs / (name + '.log')}",
            "stderr_stream.class = FileStream",
            f"stderr_stream.filename = {logs / (name + '.log')}",
            "",
        ]
        lines += [f"[env:{name}]"] + [f"{k} = {v}" for k, v in env.items()] + [""]
    path.write_text("\n".join(lines))


def start_circus(workdir: Path, watchers: dict[str, list[str]], env: dict[str, str]) -> Circus:
    port, pub = free_port(), free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    ini = workdir / "circus.ini"
    write_ini(ini, endpoint, f"tcp://127.0.0.1:{pub}", watchers, logs, env)
    out = (logs / "circusd.log").open("ab")
    proc = ManagedProcess.start([bin_path("circusd"), str(ini)], stdout=out, stderr=subprocess.STDOUT)
    if not wait_for_port("127.0.0.1", port, 30, proc):
        proc.kill()
        raise RuntimeError(f"circusd did not start; see {logs / 'circusd.log'}")
    return Circus(endpoint, ini, proc)


def healthz(port: int) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            data: dict[str, object] = json.loads(r.read())
            return data
    except (OSError, ValueError):
        return None


def wait_healthy(ports: dict[str, int], timeout_s: float) -> list[str]:
    """Names of the services that did not become healthy within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    pending = dict(ports)
    while pending and time.monotonic() < deadline:
        for name, port in list(pending.items()):
            h = healthz(port)
            if h is not None and h.get("status") == "ok":
                del pending[name]
        time.sleep(0.5)
    return sorted(pending)
