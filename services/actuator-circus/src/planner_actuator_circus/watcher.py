"""How one worker becomes one circusd watcher: the values its command template gets, and the
watcher options (GPUs, no circus respawn, SIGTERM with the drain timeout, log files)."""

from __future__ import annotations

import signal
from typing import Any

from planner_actuator_circus.settings import CircusActuatorSettings


def template_values(
    s: CircusActuatorSettings, name: str, component: str, index: int, gpus: list[int]
) -> dict[str, str]:
    return {
        "worker_id": name,
        "component": component,
        "namespace": s.namespace,
        "nats_url": s.nats_url,
        "index": str(index),
        "gpus": ",".join(map(str, gpus)),
    }


def watcher_options(
    s: CircusActuatorSettings, name: str, env: dict[str, str], gpus: list[int]
) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "env": {**env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))},
        "copy_env": s.worker_copy_env,
        "shell": False,
        # The actuator restarts exited workers itself; a circus respawn would also bring back
        # a worker that exited after its drain.
        "respawn": False,
        "stop_signal": int(signal.SIGTERM),
        "graceful_timeout": float(s.worker_drain_timeout_s),
    }
    if s.worker_log_dir:
        path = f"{s.worker_log_dir.rstrip('/')}/{name}.log"
        opts["stdout_stream"] = {"class": "FileStream", "filename": path}
        opts["stderr_stream"] = {"class": "FileStream", "filename": path}
    return opts


def cuda_devices(env: dict[str, str]) -> list[int]:
    """The GPUs in a watcher's ``CUDA_VISIBLE_DEVICES`` (an adopted watcher keeps its own)."""
    raw = env.get("CUDA_VISIBLE_DEVICES", "")
    return [int(x) for x in raw.split(",") if x.strip().isdigit()]
