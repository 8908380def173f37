"""Trace readers: Azure LLM inference CSV, Mooncake JSONL, and synthetic shapes.

A trace is a list of :class:`TraceRequest` sorted by arrival time, with arrival times in seconds from
the first request. Readers report a malformed line (a NaN, negative or zero length, a bad or NaN
timestamp, a timestamp earlier than the line before: the file must be sorted) with its file and line
number, and either skip it (``on_error="skip"``, the bad lines are returned in
``TraceReadResult.errors``) or stop (``on_error="raise"``, what the bench uses: a trace it replays
must be clean).

:func:`jitter_arrivals` spreads arrivals inside quantised timestamps (traces stamped in 1-3 s steps
otherwise arrive as bursts).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

import numpy as np

OnError = Literal["skip", "raise"]


class TraceError(ValueError):
    def __init__(self, path: str, line: int, detail: str) -> None:
        super().__init__(f"{path}:{line}: {detail}")
        self.path = path
        self.line = line
        self.detail = detail


@dataclass(frozen=True, slots=True)
class TraceRequest:
    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class TraceReadResult:
    requests: list[TraceRequest]
    errors: list[TraceError] = field(default_factory=list)
    source: str = ""

    @property
    def duration_s(self) -> float:
        return self.requests[-1].arrival_s if self.requests else 0.0


def _positive_int(value: object, name: str) -> int:
    text = str(value).strip()
    try:
        x = float(text)
    except ValueError:
        raise ValueError(f"{name} is not a number: {text!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} is not finite: {text!r}")
    if x != int(x):
        raise ValueError(f"{name} is not a whole number: {text!r}")
    n = int(x)
    if n <= 0:
        raise ValueError(f"{name} must be > 0, got {n}")
    return n


def _parse_azure_time(text: str) -> float:
    text = text.strip()
    # Azure writes 7 fractional digits; datetime takes at most 6.
    head, dot, frac = text.partition(".")
    base = datetime.strptime(head, "%Y-%m-%d %H:%M:%S").timestamp()
    return base + (float("0." + frac) if dot and frac else 0.0)


class _Order:
    """Timestamps must not go backwards: a line earlier than the last accepted one is an error."""

    def __init__(self) -> None:
        self.last = -math.inf

    def check(self, t: float) -> None:
        if t < self.last:
            raise ValueError(
                f"timestamp {t:.6f} is earlier than the line before ({self.last:.6f}): unsorted trace"
            )
        self.last = t


def _finish(raw: list[tuple[float, TraceRequest]], errors: list[TraceError], path: str) -> TraceReadResult:
    if not raw:
        return TraceReadResult([], errors, path)
    t0 = raw[0][0]
    reqs = [TraceRequest(t - t0, r.input_tokens, r.output_tokens, r.hash_ids) for t, r in raw]
    return TraceReadResult(reqs, errors, path)


def read_azure_csv(path: str | Path, on_error: OnError = "skip") -> TraceReadResult:
    """Azure LLM inference trace: ``TIMESTAMP,ContextTokens,GeneratedTokens``."""
    p = str(path)
    raw: list[tuple[float, TraceRequest]] = []
    errors: list[TraceError] = []
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:3]] != [
            "TIMESTAMP",
            "ContextTokens",
            "GeneratedTokens",
        ]:
            raise TraceError(p, 1, f"not an Azure trace header: {header!r}")
        order = _Order()
        for row in reader:
            line = reader.line_num
            try:
                if len(row) < 3:
                    raise ValueError(f"expected 3 columns, got {len(row)}")
                t = _parse_azure_time(row[0])
                req = TraceRequest(
                    0.0, _positive_int(row[1], "ContextTokens"), _positive_int(row[2], "GeneratedTokens")
                )
                order.check(t)
                raw.append((t, req))
            except ValueError as exc:
                err = TraceError(p, line, str(exc))
                if on_error == "raise":
                    raise err from None
                errors.append(err)
    return _finish(raw, errors, p)


def read_mooncake_jsonl(path: str | Path, on_error: OnError = "skip") -> TraceReadResult:
    """Mooncake trace: one JSON object a line with ``timestamp`` (ms), ``input_length``,
    ``output_length`` and optional ``hash_ids``."""
    p = str(path)
    raw: list[tuple[float, TraceRequest]] = []
    errors: list[TraceError] = []
    order = _Order()
    with open(path) as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError("line is not a JSON object")
                ts = float(obj["timestamp"]) / 1000.0
                if not math.isfinite(ts) or ts < 0:
                    raise ValueError(f"bad timestamp {obj['timestamp']!r} (must be a finite number >= 0)")
                hashes = tuple(int(h) for h in obj.get("hash_ids", ()))
                req = TraceRequest(
                    0.0,
                    _positive_int(obj["input_length"], "input_length"),
                    _positive_int(obj["output_length"], "output_length"),
                    hashes,
                )
                order.check(ts)
                raw.append((ts, req))
            except (ValueError, KeyError, TypeError) as exc:
                detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
                err = TraceError(p, line_no, detail)
                if on_error == "raise":
                    raise err from None
                errors.append(err)
    return _finish(raw, errors, p)


def read_trace(path: str | Path, on_error: OnError = "skip") -> TraceReadResult:
    """Pick the reader by suffix: ``.csv`` Azure, ``.jsonl``/``.json`` Mooncake."""
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return read_azure_csv(path, on_error)
    if suffix in (".jsonl", ".json"):
        return read_mooncake_jsonl(path, on_error)
    raise ValueError(f"{path}: unknown trace format {suffix!r} (expected .csv or .jsonl)")


def jitter_arrivals(requests: Sequence[TraceRequest], jitter_s: float, seed: int = 0) -> list[TraceRequest]:
    """Spread each arrival uniformly over ``[t, t + jitter_s)`` (seeded) and re-sort: a trace whose
    timestamps are quantised to ``jitter_s`` steps gets arrivals spread inside each step instead of a
    burst at its start. ``jitter_s`` = 0 returns the trace unchanged."""
    if not (math.isfinite(jitter_s) and jitter_s >= 0):
        raise ValueError(f"jitter_s: must be a finite number >= 0, got {jitter_s}")
    if jitter_s == 0 or not requests:
        return list(requests)
    offsets = np.random.default_rng(seed).random(len(requests)) * jitter_s
    out = [
        TraceRequest(r.arrival_s + float(d), r.input_tokens, r.output_tokens, r.hash_ids)
        for r, d in zip(requests, offsets, strict=True)
    ]
    out.sort(key=lambda r: r.arrival_s)
    return out


SCALE_SPREAD_S = 60.0
"""How far (+-) each added copy of a trace is shifted as a whole when its rate is scaled up."""


def scale_trace(
    requests: Sequence[TraceRequest],
    time_scale: float = 1.0,
    rate_scale: float = 1.0,
    seed: int = 0,
    spread_s: float = SCALE_SPREAD_S,
) -> list[TraceRequest]:
    """``time_scale`` < 1 compresses time (0.1 plays an hour in 6 minutes, at 10x the rate).
    ``rate_scale`` keeps the timeline but multiplies the request rate (seeded, so runs repeat):

    - < 1 thins the requests at random;
    - > 1 keeps the trace and adds ``rate_scale - 1`` copies of it (the last one thinned to the
      fractional part), each shifted as a whole by its own uniform offset in ``[-spread_s, spread_s)``,
      wrapping around the trace's span. Each copy keeps the trace's own bursts and lengths, the copies
      are independent of each other within ``spread_s`` and follow the trace's rate beyond it: more
      users like these. (Repeating each request within the gap to the next would send ``rate_scale``
      requests of one length together: that many times burstier than the trace.)
    """
    if time_scale <= 0 or rate_scale <= 0:
        raise ValueError("time_scale and rate_scale must be > 0")
    if not (math.isfinite(spread_s) and spread_s >= 0):
        raise ValueError(f"spread_s: must be a finite number >= 0, got {spread_s}")
    rng = np.random.default_rng(seed)
    if not requests:
        return []
    if rate_scale < 1.0:
        kept = [r for r, u in zip(requests, rng.random(len(requests)), strict=True) if u < rate_scale]
    else:
        kept = list(requests)
        first, last = requests[0].arrival_s, requests[-1].arrival_s
        span = last - first + 1.0  # the last request's gap, as if one more came 1 s later
        whole, frac = divmod(rate_scale - 1.0, 1.0)
        copies = [1.0] * int(whole) + ([frac] if frac > 0 else [])
        for share in copies:
            shift = float(rng.uniform(-spread_s, spread_s))
            keep = rng.random(len(requests)) < share
            for r, k in zip(requests, keep.tolist(), strict=True):
                if k:
                    t = first + (r.arrival_s - first + shift) % span
                    kept.append(TraceRequest(t, r.input_tokens, r.output_tokens, r.hash_ids))
    out = [
        r
        if time_scale == 1.0
        else TraceRequest(r.arrival_s * time_scale, r.input_tokens, r.output_tokens, r.hash_ids)
        for r in kept
    ]
    out.sort(key=lambda r: r.arrival_s)
    return out


def synthetic(
    shape: Literal["constant", "step", "sinusoid", "burst"],
    duration_s: float,
    rate_per_s: float,
    isl_tokens: int = 1024,
    osl_tokens: int = 128,
    *,
    peak_rate_per_s: float | None = None,
    period_s: float = 600.0,
    step_at_s: float | None = None,
    burst_every_s: float = 300.0,
    burst_len_s: float = 30.0,
    length_jitter: float = 0.0,
    seed: int = 0,
) -> list[TraceRequest]:
    """Poisson arrivals whose rate follows a shape:

    - constant: ``rate_per_s`` throughout;
    - step: ``rate_per_s`` until ``step_at_s`` (default half-way), then ``peak_rate_per_s``;
    - sinusoid: between ``rate_per_s`` and ``peak_rate_per_s`` with period ``period_s``;
    - burst: ``rate_per_s`` with ``peak_rate_per_s`` bursts of ``burst_len_s`` every ``burst_every_s``.

    Lengths are fixed, or log-normal around the given means with ``length_jitter`` (sigma).
    """
    if duration_s <= 0 or rate_per_s < 0:
        raise ValueError("duration_s must be > 0 and rate_per_s >= 0")
    peak = rate_per_s * 2 if peak_rate_per_s is None else peak_rate_per_s
    step_at = duration_s / 2 if step_at_s is None else step_at_s

    def rate(t: float) -> float:
        if shape == "constant":
            return rate_per_s
        if shape == "step":
            return rate_per_s if t < step_at else peak
        if shape == "sinusoid":
            return rate_per_s + (peak - rate_per_s) * 0.5 * (1 - math.cos(2 * math.pi * t / period_s))
        if shape == "burst":
            return peak if (t % burst_every_s) < burst_len_s else rate_per_s
        raise ValueError(f"unknown shape {shape!r}")

    rng = np.random.default_rng(seed)
    lam_max = max(rate_per_s, peak, 1e-9)
    out: list[TraceRequest] = []
    t = 0.0
    while True:  # thinning (Lewis-Shedler) for a non-homogeneous Poisson process
        t += rng.exponential(1.0 / lam_max)
        if t >= duration_s:
            break
        if rng.random() * lam_max <= rate(t):
            isl, osl = isl_tokens, osl_tokens
            if length_jitter > 0:
                isl = max(1, int(rng.lognormal(math.log(isl_tokens), length_jitter)))
                osl = max(1, int(rng.lognormal(math.log(osl_tokens), length_jitter)))
            out.append(TraceRequest(t, isl, osl))
    return out


@dataclass(frozen=True)
class BinnedTraffic:
    """Per-interval request count and mean ISL/OSL (NaN means for empty intervals)."""

    interval_s: float
    start_s: np.ndarray
    num_requests: np.ndarray
    mean_isl_tokens: np.ndarray
    mean_osl_tokens: np.ndarray


def bin_requests(
    requests: Iterable[TraceRequest], interval_s: float, duration_s: float | None = None
) -> BinnedTraffic:
    reqs = list(requests)
    if interval_s <= 0:
        raise ValueError("interval_s must be > 0")
    end = duration_s if duration_s is not None else (reqs[-1].arrival_s if reqs else 0.0)
    n_bins = max(1, math.ceil((end + 1e-9) / interval_s))
    t = np.array([r.arrival_s for r in reqs], dtype=float)
    idx = np.minimum((t // interval_s).astype(int), n_bins - 1) if reqs else np.zeros(0, int)
    count = np.bincount(idx, minlength=n_bins).astype(float)
    isl = (
        np.bincount(idx, weights=[r.input_tokens for r in reqs], minlength=n_bins)
        if reqs
        else np.zeros(n_bins)
    )
    osl = (
        np.bincount(idx, weights=[r.output_tokens for r in reqs], minlength=n_bins)
        if reqs
        else np.zeros(n_bins)
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_isl = np.where(count > 0, isl / np.maximum(count, 1), np.nan)
        mean_osl = np.where(count > 0, osl / np.maximum(count, 1), np.nan)
    return BinnedTraffic(interval_s, np.arange(n_bins) * interval_s, count, mean_isl, mean_osl)
