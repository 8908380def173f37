"""A request-level trace sampled from ServeGen's per-client, per-10-minute-window statistics.

ServeGen (Alibaba Bailian, arXiv 2505.09999) publishes, per client of a model, one CSV line per 600 s
window: ``window_start_s, rate_rps, cv_of_interarrival, iat_distribution, param1, param2`` (no header; an
empty distribution is a window without traffic). They are not requests: this module samples them.

- Each client's arrivals in a window are a renewal process with the window's rate and inter-arrival CV
  (gamma inter-arrival times of shape 1/CV^2 and mean 1/rate; the published Weibull fits are replaced by
  the gamma of the same CV, which keeps the two moments the bench is sensitive to), started at a random
  phase. Clients are independent; their arrivals are merged.
- Rates are whole-service rates (hundreds of requests/s): every rate is multiplied by one factor so that
  the selected days average ``mean_rps``.
- Windows where no client reports traffic are gaps in the data, not idle periods: they repeat the last
  window that has data.
- No lengths are published: each request takes the (ISL, OSL) of a request drawn at random (seeded) from
  another trace (``lengths``; the Azure conv trace by default).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner_sim.traces import TraceError, TraceRequest, read_trace

WINDOW_S = 600.0


@dataclass(frozen=True, slots=True)
class Window:
    start_s: float
    rate_rps: float
    cv: float


def read_client(path: Path) -> list[Window]:
    """One client's windows (a bad line raises TraceError naming it)."""
    out: list[Window] = []
    with open(path, newline="") as fh:
        for line, row in enumerate(csv.reader(fh), start=1):
            if not row:
                continue
            try:
                start, rate = float(row[0]), float(row[1])
                cv = float(row[2]) if len(row) > 2 and row[2].strip() else 1.0
            except (ValueError, IndexError):
                raise TraceError(str(path), line, f"not a ServeGen window line: {row!r}") from None
            if not (math.isfinite(start) and math.isfinite(rate) and rate >= 0 and start >= 0):
                raise TraceError(str(path), line, f"bad window start or rate: {row[:2]!r}")
            if not (math.isfinite(cv) and cv > 0):
                cv = 1.0
            out.append(Window(start, rate, cv))
    return out


def read_clients(directory: str | Path) -> list[list[Window]]:
    d = Path(directory)
    files = sorted(d.glob("chunk-*-trace.csv"))
    if not files:
        raise FileNotFoundError(f"{d}: no ServeGen chunk-*-trace.csv files")
    return [read_client(f) for f in files]


def _rates(clients: Sequence[Sequence[Window]], n_windows: int) -> tuple[np.ndarray, np.ndarray]:
    """(rate, cv) per client and window, gap windows filled with the last window that has data."""
    rate = np.zeros((len(clients), n_windows))
    cv = np.ones((len(clients), n_windows))
    for i, ws in enumerate(clients):
        for w in ws:
            k = int(w.start_s // WINDOW_S)
            if 0 <= k < n_windows:
                rate[i, k] = w.rate_rps
                cv[i, k] = w.cv
    total = rate.sum(axis=0)
    for k in range(1, n_windows):
        if total[k] <= 0 < total[k - 1]:
            rate[:, k] = rate[:, k - 1]
            cv[:, k] = cv[:, k - 1]
            total[k] = total[k - 1]
    return rate, cv


def _renewal(rng: np.random.Generator, rate: float, cv: float, length_s: float) -> np.ndarray:
    """Arrival offsets in ``[0, length_s)`` of a stationary gamma renewal process."""
    if rate <= 0:
        return np.zeros(0)
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate * shape)
    expected = rate * length_s
    out: list[np.ndarray] = []
    # stationary start: the window opens inside a gap drawn length-biased (a gamma of shape + 1), at a
    # uniform point of it (otherwise bursty clients, CV >> 1, would start on an arrival and overshoot)
    t = rng.random() * rng.gamma(shape + 1.0, scale)
    while t < length_s:
        gaps = rng.gamma(shape, scale, size=int(expected * 1.2) + 16)
        times = t + np.concatenate(([0.0], np.cumsum(gaps[:-1])))
        out.append(times[times < length_s])
        t = float(times[-1] + gaps[-1])
    return np.concatenate(out) if out else np.zeros(0)


def sample_servegen(
    directory: str | Path,
    *,
    mean_rps: float,
    days: float = 1.0,
    start_day: float = 0.0,
    lengths: Sequence[TraceRequest] | str | Path,
    seed: int = 0,
) -> list[TraceRequest]:
    """A request-level trace of ``days`` days from ``start_day`` on, averaging ``mean_rps``."""
    if not (mean_rps > 0 and days > 0 and start_day >= 0):
        raise ValueError("mean_rps and days must be > 0, start_day >= 0")
    pool = (
        read_trace(lengths, on_error="raise").requests if isinstance(lengths, (str, Path)) else list(lengths)
    )
    if not pool:
        raise ValueError("lengths: no requests to take lengths from")
    clients = read_clients(directory)
    first = int(start_day * 86400.0 // WINDOW_S)
    n = max(1, math.ceil(days * 86400.0 / WINDOW_S))
    rate, cv = _rates(clients, first + n)
    rate, cv = rate[:, first:], cv[:, first:]
    mean_total = float(rate.sum(axis=0).mean())
    if mean_total <= 0:
        raise ValueError(f"{directory}: no traffic in the selected days")
    factor = mean_rps / mean_total
    rng = np.random.default_rng(seed)
    times: list[np.ndarray] = []
    for k in range(n):
        for i in range(len(clients)):
            arr = _renewal(rng, rate[i, k] * factor, cv[i, k], WINDOW_S)
            if arr.size:
                times.append(arr + k * WINDOW_S)
    t = np.sort(np.concatenate(times)) if times else np.zeros(0)
    picks = rng.integers(0, len(pool), size=t.size)
    return [
        TraceRequest(float(a), pool[j].input_tokens, pool[j].output_tokens)
        for a, j in zip(t, picks, strict=True)
    ]
