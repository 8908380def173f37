"""``planner register`` as a sidecar, against a stand-in engine that serves a recorded real vLLM
exposition, ``/health`` and ``/v1/models`` (the real-vLLM wrapper path is tests/integration/vllm):
registered with the capabilities the engine shows, kept draining once an actuator marked it, removed
while the engine does not answer and put back when it does, deleted after a drain on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from planner_proto import EngineInfo
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S, Subjects
from planner_runtime.bus import Bus, kv_get, kv_put
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port
from planner_runtime.settings import BaseSettings

from .standin_vllm import StandinVllm

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

NS = "sc"


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


async def _wait(kv: object, key: str, pred: object, timeout_s: float) -> EngineInfo | None:
    deadline = time.monotonic() + timeout_s
    info = None
    while time.monotonic() < deadline:
        info = await kv_get(kv, key, EngineInfo)  # type: ignore[arg-type]
        if pred(info):  # type: ignore[operator]
            return info
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out; last entry {info}")


async def test_sidecar_registers_keeps_a_drain_mark_follows_the_engine_and_drains(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    engine = StandinVllm(free_port())
    engine.start()
    log = tmp_path / "register.log"
    argv = [
        sys.executable, "-m", "planner_cli.main", "register", "--nats-url", nats_server.url,
        "--namespace", NS, "--worker-id", "pod-0", "--component", "decode", "--no-log-json",
        "--engine-url", f"http://127.0.0.1:{engine.port}", "--unhealthy-after-s", "1",
        "--drain-grace-s", "0",
    ]  # fmt: skip
    proc = _spawn(argv, log)
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url, namespace=NS), max_wait_s=10)
    try:
        kv = await bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
        key = Subjects(ns=NS).engine_key("decode", "pod-0")
        info = await _wait(kv, key, lambda i: i is not None, 20)
        assert info is not None, log.read_text()
        assert info.engine_kind == "vllm" and info.metrics_url.endswith("/metrics")
        # the recorded server's pool (32 blocks of 128, --num-gpu-blocks-override), the length /v1/models reports
        caps = info.capabilities
        assert (caps.num_gpu_blocks, caps.block_size_tokens, caps.context_length_tokens) == (32, 128, 2048)

        # an actuator marks it draining: the sidecar's refreshes keep the mark
        await kv_put(kv, key, msgspec.structs.replace(info, draining=True))
        await asyncio.sleep(ENGINES_TTL_S / 3 + 1.5)
        still = await kv_get(kv, key, EngineInfo)
        assert still is not None and still.draining, log.read_text()

        # the engine stops answering: removed; it serves again: registered again (fresh, not draining)
        engine.stop()
        await _wait(kv, key, lambda i: i is None, 15)
        engine.start()
        back = await _wait(kv, key, lambda i: i is not None, 20)
        assert back is not None and not back.draining

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0, log.read_text()
        assert await kv_get(kv, key, EngineInfo) is None
        text = log.read_text()
        assert "drained in" in text and "Traceback" not in text, text
    finally:
        if proc.poll() is None:
            proc.kill()
        await bus.close()
        engine.stop()
