"""Warm start: a trace file binned per interval, as the forecaster's history."""

from __future__ import annotations

from pathlib import Path

from planner_core.forecast import LoadForecaster
from planner_sim.traces import bin_requests, read_trace


def warm_start(forecaster: LoadForecaster, path: str | Path) -> int:
    """Feed the trace at ``path`` (Azure CSV or Mooncake JSONL); returns the intervals fed. Raises
    ValueError when the file has no usable request."""
    result = read_trace(path)
    if not result.requests:
        raise ValueError(f"{path}: no usable request ({len(result.errors)} bad lines)")
    binned = bin_requests(result.requests, forecaster.config.interval_s)
    return forecaster.warm_start(binned.num_requests, binned.mean_isl_tokens, binned.mean_osl_tokens)
