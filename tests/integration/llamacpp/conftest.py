"""Fixtures for tests that run a real llama-server (llama.cpp) on the tiny generated model.

The binary comes from ``PLANNER_LLAMA_SERVER`` (``.ci/run`` sets it from
``scripts/ensure-llama-server.sh``). Locally, without it, these tests skip with a message saying how
to get it; under ``CI=true`` a missing binary fails them instead (CI must not pass by skipping).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner_runtime.llamacpp.binary import ENV_VAR
from planner_runtime.llamacpp.server import LlamaServer
from planner_runtime.llamacpp.tinymodel import ensure_tiny_llama

HOW = (
    "run `scripts/ensure-llama-server.sh` (builds once, ~10 min) and export PLANNER_LLAMA_SERVER=<its output>"
)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    configured = os.environ.get(ENV_VAR, "")
    problem = ""
    if not configured:
        problem = f"{ENV_VAR} is not set"
    elif not (Path(configured).is_file() and os.access(configured, os.X_OK)):
        problem = f"{ENV_VAR}={configured} is not an executable file"
    if problem:
        if _in_ci():
            pytest.fail(f"llama-server needed under CI: {problem}; .ci/run must {HOW}")
        pytest.skip(f"no llama-server: {problem}; {HOW}")
    return Path(configured)


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    return ensure_tiny_llama()


@pytest.fixture
def llama_server(llama_server_bin: Path, tiny_model: Path, tmp_path: Path) -> Iterator[LlamaServer]:
    """One llama-server, 2 slots of 1024 tokens, 1 thread, on a free loopback port."""
    server = LlamaServer(binary=llama_server_bin, model=tiny_model, parallel=2, log_dir=tmp_path)
    server.start(timeout_s=60)
    try:
        yield server
    finally:
        server.close()
