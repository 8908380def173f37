"""Model state as plain data, to persist in a KV store and restore after a restart.

Only plain numbers and strings: ``msgspec.json.encode(export_state(m))`` round-trips exactly.
"""

from __future__ import annotations

import math
from typing import Annotated

import msgspec
import numpy as np
from msgspec import Meta

from planner_core.regression.averages import PassShape
from planner_core.regression.model import OnlineRegression, RegressionConfig
from planner_proto.engine import Component

STATE_VERSION = 1


class RegressionState(msgspec.Struct, frozen=True, kw_only=True):
    version: int = STATE_VERSION
    component: Component
    method: str
    retention: str
    max_samples: Annotated[int, Meta(ge=2)]
    num_buckets: Annotated[int, Meta(ge=1)]
    min_samples: Annotated[int, Meta(ge=2)]
    cold_start_s: Annotated[float, Meta(ge=0.0)]
    avg_window: Annotated[int, Meta(ge=1)]
    huber_k: Annotated[float, Meta(gt=0.0)]
    sample_x: list[list[float]] = []
    sample_wall_s: list[float] = []
    sample_seq: list[int] = []
    range_lo: list[float] = []
    range_hi: list[float] = []
    next_seq: int = 0
    pass_shapes: list[tuple[float, float, float, float]] = []
    """Recent passes for the moving averages: prefill tokens, prefill requests, decode kv, decode reqs."""


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(RegressionState)


def export_state(model: OnlineRegression) -> RegressionState:
    c = model.config
    s = model.samples
    empty = len(s) == 0 and not np.all(np.isfinite(s.lo))
    return RegressionState(
        component=c.component,
        method=c.method,
        retention=c.retention,
        max_samples=c.max_samples,
        num_buckets=c.num_buckets,
        min_samples=c.min_samples,
        cold_start_s=c.cold_start_s,
        avg_window=c.avg_window,
        huber_k=c.huber_k,
        sample_x=[[float(v) for v in row] for row in s.x],
        sample_wall_s=[float(v) for v in s.y],
        sample_seq=[int(v) for v in s.seq],
        range_lo=[] if empty else [float(v) for v in s.lo],
        range_hi=[] if empty else [float(v) for v in s.hi],
        next_seq=s.next_seq,
        pass_shapes=model.averages.rows(),
    )


def import_state(state: RegressionState) -> OnlineRegression:
    """Rebuild a model; raises ValueError naming the field when the state is inconsistent."""
    if state.version != STATE_VERSION:
        raise ValueError(f"version: unsupported regression state version {state.version}")
    if state.method not in ("robust", "ols"):
        raise ValueError(f"method: unknown fit method {state.method!r}")
    if state.retention not in ("bucketed", "fifo"):
        raise ValueError(f"retention: unknown retention {state.retention!r}")
    config = RegressionConfig(
        component=state.component,
        max_samples=state.max_samples,
        num_buckets=state.num_buckets,
        min_samples=state.min_samples,
        cold_start_s=state.cold_start_s,
        method="robust" if state.method == "robust" else "ols",
        retention="bucketed" if state.retention == "bucketed" else "fifo",
        avg_window=state.avg_window,
        huber_k=state.huber_k,
    )
    model = OnlineRegression(config)
    dims = len(model.features)
    n = len(state.sample_wall_s)
    if len(state.sample_x) != n or len(state.sample_seq) != n:
        raise ValueError("sample_x/sample_wall_s/sample_seq: lengths differ")
    if any(len(row) != dims for row in state.sample_x):
        raise ValueError(f"sample_x: every row needs {dims} values")
    x = np.asarray(state.sample_x, dtype=np.float64).reshape(n, dims)
    y = np.asarray(state.sample_wall_s, dtype=np.float64)
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("sample_x/sample_wall_s: non-finite values")
    if n:
        if len(state.range_lo) != dims or len(state.range_hi) != dims:
            raise ValueError(f"range_lo/range_hi: need {dims} values")
        lo = np.minimum(np.asarray(state.range_lo, dtype=np.float64), x.min(axis=0))
        hi = np.maximum(np.asarray(state.range_hi, dtype=np.float64), x.max(axis=0))
    else:
        lo, hi = np.full(dims, np.inf), np.full(dims, -np.inf)
    seq = np.asarray(state.sample_seq, dtype=np.int64)
    model.samples.restore(x, y, seq, lo, hi, max(state.next_seq, int(seq.max()) + 1 if n else 0))
    for row in state.pass_shapes[-config.avg_window :]:
        if not all(math.isfinite(v) and v >= 0 for v in row):
            raise ValueError("pass_shapes: values must be finite and >= 0")
        shape: PassShape = (row[0], row[1], row[2], row[3])
        model.averages.add_row(shape)
    return model


def state_to_json(state: RegressionState) -> bytes:
    return _ENCODER.encode(state)


def state_from_json(data: bytes | str) -> RegressionState:
    """Raises ``msgspec.ValidationError`` / ``msgspec.DecodeError`` on bad input."""
    return _DECODER.decode(data)
