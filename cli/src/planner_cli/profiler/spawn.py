"""``--spawn-engine-sim``: an embedded nats-server and one engine-sim process per TP value.

engine-sim has no tensor-parallel knob in its timing models: ``--gpus`` only goes into the
capabilities it registers (so throughput is divided per GPU), and the roofline timing is built for one
GPU. What TP does change here is the KV capacity: with ``roofline`` timing and a model config, the
memory model sizes the KV cache for ``tp`` GPUs and the engine gets that ``--num-gpu-blocks``. So a
spawned TP sweep is a sweep of capacity, not of speed; a real TP sweep needs an engine per TP value
(``--worker-id`` or ``--openai-url`` lists, one per ``--tp`` value).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from planner_runtime.natsd import NatsServer

BLOCK_SIZE = 16


class SpawnError(RuntimeError):
    pass


def roofline_kv_blocks(
    model_config: Path, gpu: str, tp: int, max_model_len: int, max_num_seqs: int, max_num_batched_tokens: int
) -> int:
    """KV blocks (of BLOCK_SIZE tokens) the memory model predicts for ``tp`` GPUs."""
    from planner_core.hardware import gpu_spec
    from planner_core.memory.breakdown import predict_memory
    from planner_core.memory.settings import EngineSettings
    from planner_core.modelcfg import load_model_config

    model = load_model_config(model_config)
    settings = EngineSettings(
        max_model_len=max_model_len,
        gpu_memory_utilization=0.9,
        tp=tp,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    mem = predict_memory(model, gpu_spec(gpu).memory_gib, settings)
    return max(1, mem.kv_cache_tokens // BLOCK_SIZE)


class SpawnedEngineSim:
    """Starts and stops what ``--spawn-engine-sim`` needs; a context manager (stops all on exit)."""

    def __init__(
        self,
        *,
        namespace: str = "profile",
        timing: str = "calibrated",
        model_config: Path | None = None,
        gpu: str = "h200",
        profile_dir: str = "",
        time_compression: float = 20.0,
        prefill_compression: float = 2.0,
        context_length_tokens: int = 16384,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 8192,
        num_gpu_blocks: int = 0,
        log_dir: Path | None = None,
    ) -> None:
        if timing == "roofline" and model_config is None:
            raise SpawnError("--timing roofline needs --model-config CONFIG.json")
        self.namespace = namespace
        self.timing = timing
        self.model_config = model_config
        self.gpu = gpu
        self.profile_dir = profile_dir
        self.time_compression = time_compression
        self.prefill_compression = prefill_compression
        self.context_length_tokens = context_length_tokens
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.num_gpu_blocks = num_gpu_blocks
        self.log_dir = log_dir
        self.nats: NatsServer | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def nats_url(self) -> str:
        if self.nats is None:
            raise SpawnError("nats-server not started")
        return self.nats.url

    def __enter__(self) -> SpawnedEngineSim:
        self.nats = NatsServer().start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def command(self, worker_id: str, tp: int, compression: float = 0.0) -> list[str]:
        cmd = [sys.executable, "-m", "planner_engine_sim", "--nats-url", self.nats_url]
        cmd += ["--namespace", self.namespace, "--worker-id", worker_id, "--zmq-port-base", "0"]
        cmd += ["--time-compression", f"{compression or self.time_compression:g}", "--timing", self.timing]
        cmd += ["--gpus", str(tp), "--stream-interval-s", "0.01", "--log-level", "warning"]
        cmd += ["--context-length-tokens", str(self.context_length_tokens)]
        cmd += ["--max-num-seqs", str(self.max_num_seqs)]
        cmd += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        cmd += ["--block-size", str(BLOCK_SIZE), "--no-enable-prefix-caching"]
        blocks = self.num_gpu_blocks
        if self.timing == "roofline":
            assert self.model_config is not None
            cmd += ["--model-config", str(self.model_config), "--gpu", self.gpu]
            if not blocks:
                blocks = roofline_kv_blocks(
                    self.model_config,
                    self.gpu,
                    tp,
                    self.context_length_tokens,
                    self.max_num_seqs,
                    self.max_num_batched_tokens,
                )
        if self.profile_dir:
            cmd += ["--profile-dir", self.profile_dir]
        if blocks:
            cmd += ["--num-gpu-blocks", str(blocks)]
        return cmd

    def start_engine(self, tp: int, compression: float = 0.0, tag: str = "") -> str:
        """Start an engine for ``tp``; returns its worker id (registration is awaited by the client)."""
        worker_id = f"profile-tp{tp}{tag}"
        if worker_id in self._procs:
            return worker_id
        log: int | IO[bytes] = subprocess.DEVNULL
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = open(self.log_dir / f"{worker_id}.log", "wb")  # noqa: SIM115 - closed when stopped
        proc = subprocess.Popen(
            self.command(worker_id, tp, compression),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log if log is not subprocess.DEVNULL else subprocess.DEVNULL,
            env=dict(os.environ),
        )
        if not isinstance(log, int):
            log.close()  # the child holds its own descriptor
        self._procs[worker_id] = proc
        time.sleep(0.05)
        if proc.poll() is not None:
            raise SpawnError(f"engine-sim for TP{tp} exited at once (code {proc.returncode})")
        return worker_id

    def check(self, worker_id: str) -> None:
        proc = self._procs.get(worker_id)
        if proc is not None and proc.poll() is not None:
            hint = f" (see {self.log_dir / (worker_id + '.log')})" if self.log_dir else ""
            raise SpawnError(f"engine-sim {worker_id} exited with code {proc.returncode}{hint}")

    def stop_engine(self, worker_id: str, timeout_s: float = 15.0) -> None:
        proc = self._procs.pop(worker_id, None)
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def close(self) -> None:
        for worker_id in list(self._procs):
            self.stop_engine(worker_id)
        if self.nats is not None:
            self.nats.close()
            self.nats = None
