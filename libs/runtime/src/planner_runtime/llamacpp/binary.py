"""Where the llama-server executable is: ``PLANNER_LLAMA_SERVER``, else the copy that
``scripts/ensure-llama-server.sh`` caches under ``~/.cache/planner/llama-server/<version>/``, else
``llama-server`` on PATH."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ENV_VAR = "PLANNER_LLAMA_SERVER"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "planner" / "llama-server"


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_llama_server(*, env: bool = True, cache: bool = True, path: bool = True) -> Path | None:
    """The first runnable llama-server found, or None. A ``PLANNER_LLAMA_SERVER`` that is set but not
    runnable is an error (a misconfiguration should not silently fall back to another binary)."""
    if env and (configured := os.environ.get(ENV_VAR)):
        p = Path(configured)
        if not _runnable(p):
            raise FileNotFoundError(f"{ENV_VAR}={configured} is not an executable file")
        return p
    if cache and cache_root().is_dir():
        # Newest version first (versions are llama.cpp build numbers: compare numerically).
        def build(d: Path) -> tuple[int, ...]:
            return tuple(int(x) if x.isdigit() else -1 for x in d.name.split("."))

        for d in sorted(cache_root().iterdir(), key=build, reverse=True):
            if _runnable(d / "llama-server"):
                return d / "llama-server"
    if path and (found := shutil.which("llama-server")):
        return Path(found)
    return None
