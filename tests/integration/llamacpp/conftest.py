"""Fixtures for tests that run a real llama-server (llama.cpp) on the tiny generated model.

The binary comes from ``PLANNER_LLAMA_SERVER``, else the copy ``scripts/ensure-llama-server.sh``
caches (``just test`` runs it first), else PATH. Without one these tests skip with a message saying
how to get it; under ``CI=true`` a missing binary fails them instead (CI must not pass by skipping).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner_runtime.llamacpp.binary import ENV_VAR, cache_root, find_llama_server
from planner_runtime.llamacpp.server import LlamaServer
from planner_runtime.llamacpp.tinymodel import ensure_tiny_llama

HOW = (
    "run `scripts/ensure-llama-server.sh` (builds once into ~/.cache/planner, ~6-10 min; `just test` does it)"
)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    """``PLANNER_LLAMA_SERVER``, else the cached build, else ``llama-server`` on PATH."""
    problem = ""
    try:
        found = find_llama_server()
    except FileNotFoundError as exc:  # PLANNER_LLAMA_SERVER set but not runnable
        found, problem = None, str(exc)
    if found is None:
        problem = problem or f"{ENV_VAR} unset, nothing cached under {cache_root()}, none on PATH"
        if _in_ci():
            pytest.fail(f"llama-server needed under CI: {problem}; {HOW}")
        pytest.skip(f"no llama-server: {problem}; {HOW}")
    return found


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
