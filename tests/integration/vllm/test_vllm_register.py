"""A real vLLM registers itself through ``planner register`` (the wrapper an actuator starts) with the
capabilities it shows on its own endpoints, its expositions read by our adapters, a drain that waits
for the request in flight, and a killed engine leaving ``planner_engines``.

Two engines at once (the most these machines run): ``a`` is drained while a long request runs, ``b``
is killed with SIGKILL behind its wrapper's back.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from planner_core.engines.capabilities import capabilities_from_metrics
from planner_core.engines.inflight import in_flight
from planner_fpm_relay.scrape.adapters import read_load
from planner_proto import EngineInfo
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S, Subjects
from planner_runtime import vllm
from planner_runtime.bus import Bus, kv_get
from planner_runtime.natsd import NatsServer
from planner_runtime.settings import BaseSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]

NS = "vt"
RECORDED = Path(__file__).parents[2] / "unit" / "fpm_relay" / "recorded"


def _wrapper(nats: NatsServer, worker: str, python: Path, log: Path) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-m", "planner_cli.main", "register", "--nats-url", nats.url, "--namespace", NS,
        "--worker-id", worker, "--no-log-json", "--drain-timeout-s", "60", "--drain-grace-s", "0.5",
        "--start-timeout-s", "300", "--", *vllm.server_command(python),
    ]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **vllm.ENGINE_ENV}
        )


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


def _complete(base: str, max_tokens: int, out: dict[str, object]) -> None:
    body = json.dumps(
        {"model": vllm.SERVED_NAME, "prompt": "drain me", "max_tokens": max_tokens, "ignore_eos": True}
    ).encode()
    req = urllib.request.Request(
        f"{base}/v1/completions", data=body, headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=240) as r:
            out["status"] = r.status
            out["usage"] = json.loads(r.read())["usage"]
    except OSError as exc:
        out["error"] = repr(exc)


async def _entry(bus: Bus, worker: str, timeout_s: float, draining: bool = False) -> EngineInfo | None:
    """The worker's entry once there (and marked draining, with ``draining``); the last seen else."""
    kv = await bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
    key = Subjects(ns=NS).engine_key("agg", worker)
    deadline = time.monotonic() + timeout_s
    info = None
    while time.monotonic() < deadline:
        info = await kv_get(kv, key, EngineInfo)
        if info is not None and (info.draining or not draining):
            return info
        await asyncio.sleep(0.2)
    return info


async def _gone(bus: Bus, worker: str, timeout_s: float) -> bool:
    kv = await bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
    key = Subjects(ns=NS).engine_key("agg", worker)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await kv_get(kv, key, EngineInfo) is None:
            return True
        await asyncio.sleep(0.2)
    return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


async def test_real_vllm_registers_drains_and_leaves(
    vllm_python: Path, nats_server: NatsServer, tmp_path: Path
) -> None:
    logs = {w: tmp_path / f"{w}.log" for w in ("a", "b")}
    procs = {w: _wrapper(nats_server, w, vllm_python, logs[w]) for w in ("a", "b")}
    bus = await Bus.connect(BaseSettings(nats_url=nats_server.url, namespace=NS), max_wait_s=10)
    try:
        infos = {w: await _entry(bus, w, 300) for w in ("a", "b")}
        detail = {w: logs[w].read_text(errors="replace")[-2000:] for w in logs}
        for w, info in infos.items():
            assert info is not None, detail[w]
            # what the engine itself says: 32 blocks of 128 tokens, 2048 of context, 8 sequences
            assert info.engine_kind == "vllm", info
            caps = info.capabilities
            assert (caps.num_gpu_blocks, caps.block_size_tokens) == (32, 128), caps
            assert caps.context_length_tokens == 2048 and caps.max_num_seqs == 8, caps
            assert not info.draining
        a = infos["a"]
        assert a is not None
        base = a.metrics_url.removesuffix("/metrics")

        # the adapters on expositions recorded from this server, idle and under load
        idle = _get(a.metrics_url)
        results: list[dict[str, object]] = [{} for _ in range(24)]
        threads = [threading.Thread(target=_complete, args=(base, 400, r)) for r in results]
        for t in threads:
            t.start()
        # the fullest exposition seen while they run (on a loaded host they trickle in); 400 tokens each:
        # 8 running fit the 4,096 KV tokens, so none is preempted
        # (starting from the idle one: on a starved host every request can finish before the first look)
        busy, most, deadline = idle, 0.0, time.monotonic() + 120
        while time.monotonic() < deadline and most < 12 and any(t.is_alive() for t in threads):
            text = _get(a.metrics_url)
            held = in_flight("vllm", text) or 0
            if held > most:
                busy, most = text, held
            await asyncio.sleep(0.1)
        for t in threads:
            t.join(timeout=240)
        if os.environ.get("PLANNER_RECORD_EXPOSITIONS"):  # refresh the checked-in recordings
            RECORDED.mkdir(exist_ok=True)
            (RECORDED / "vllm-idle.txt").write_text(idle)
            (RECORDED / "vllm-busy.txt").write_text(busy)
        assert all(r.get("status") == 200 for r in results), results
        # the adapter's counters on the live server: exactly the requests and tokens sent, over and
        # above what the idle exposition already counted (the engine's stats may lag its last answer)
        before_r = read_load("vllm", idle)
        after_r, deadline = read_load("vllm", _get(a.metrics_url)), time.monotonic() + 15
        while after_r.running_requests + after_r.waiting_requests and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            after_r = read_load("vllm", _get(a.metrics_url))
        assert after_r.requests_total is not None and before_r.requests_total is not None
        assert after_r.requests_total - before_r.requests_total == len(results), (before_r, after_r)
        assert after_r.osl_tokens_sum is not None and before_r.osl_tokens_sum is not None
        assert after_r.osl_tokens_sum - before_r.osl_tokens_sum == 400 * len(results), (before_r, after_r)
        assert after_r.running_requests == after_r.waiting_requests == 0, after_r
        # and its gauges: what the engine held at the fullest moment seen, at most max_num_seqs running
        # and the rest waiting (how many were in flight at once depends on the host's load: all 24 on a
        # quiet one, a few when the API server is starved; a scrape can also land while the scheduler
        # is still admitting them, some passes after they arrived; the saturated case, 8 running and
        # 6 waiting, is pinned by the checked-in recording in tests/unit/fpm_relay)
        reading = read_load("vllm", busy)
        assert reading.running_requests + reading.waiting_requests == most, reading
        assert reading.running_requests <= min(8, most), reading
        assert most == 0 or reading.running_requests > 0, reading  # 0: all done before the first look
        assert not {"running_requests", "waiting_requests", "kv_usage"} & set(reading.missing), reading
        assert capabilities_from_metrics("vllm", idle) is not None
        assert read_load("vllm", idle).running_requests == 0

        # drain: a long request in flight when the wrapper gets SIGTERM finishes in full
        long: dict[str, object] = {}
        t = threading.Thread(target=_complete, args=(base, 1200, long))
        t.start()
        deadline = time.monotonic() + 30
        while (in_flight("vllm", _get(a.metrics_url)) or 0) < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        procs["a"].send_signal(signal.SIGTERM)
        marked = await _entry(bus, "a", 10, draining=True)
        assert marked is not None and marked.draining, marked
        assert await _gone(bus, "a", 120), logs["a"].read_text()[-2000:]
        t.join(timeout=120)
        assert long.get("status") == 200, long
        usage = long.get("usage")
        assert isinstance(usage, dict) and usage["completion_tokens"] == 1200, long
        assert procs["a"].wait(timeout=60) == 0, logs["a"].read_text()[-2000:]
        assert re.search(r"drained in [0-9.]+ s", logs["a"].read_text())

        # a killed engine leaves planner_engines (its wrapper deletes the entry and exits 1)
        pid = int(re.findall(r"\(pid (\d+)\)", logs["b"].read_text())[0])
        os.kill(pid, signal.SIGKILL)
        assert await _gone(bus, "b", 30), logs["b"].read_text()[-2000:]
        assert procs["b"].wait(timeout=60) == 1
    finally:
        await bus.close()
        for p in procs.values():
            await asyncio.to_thread(_stop, p)
