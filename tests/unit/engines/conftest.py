"""The real vLLM 0.32 capture (two expositions: idle after ~21 completions, then mid-load)."""

from __future__ import annotations

from pathlib import Path

import pytest

CAPTURE = "engines/vllm-0.32.0-cpu-metrics.txt"


def split_capture(text: str) -> tuple[str, str]:
    """Part A and Part B of the capture (each a complete exposition)."""
    head, sep, tail = text.partition("# Part B")
    assert sep, "the capture has no '# Part B' marker"
    return head, sep + tail


@pytest.fixture(scope="session")
def vllm_capture(shared_data: Path) -> tuple[str, str]:
    path = shared_data / CAPTURE
    if not path.is_file():
        pytest.skip(f"real vLLM capture {CAPTURE} not found under the shared data folder")
    return split_capture(path.read_text())
