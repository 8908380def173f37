"""Shared fixtures: the real data folder (skipped when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def shared_data_dir() -> Path | None:
    env = os.environ.get("PLANNER_SHARED_DATA")
    path = Path(env) if env else REPO.parent / "shared" / "data"
    return path if path.is_dir() else None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (or $PLANNER_SHARED_DATA); the test is skipped when it is absent."""
    path = shared_data_dir()
    if path is None:
        pytest.skip("real data folder ../shared/data not found (set PLANNER_SHARED_DATA to point at it)")
    return path
