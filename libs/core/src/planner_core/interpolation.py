"""Interpolation of the reference profile format (see :mod:`planner_core.profile`).

Prefill: TTFT(ISL) and throughput/GPU(ISL) by a 1-D cubic spline, ISL clamped to the profiled range.
Decode: ITL and throughput/GPU over (kv_usage, context) on a regular grid, filled once per profile by
2-D cubic interpolation of the scattered points, with nearest-neighbour values where the cubic is
undefined (outside the convex hull of the points). Queries snap to the nearest grid cell.

Decode throughput comes two ways. The reference interpolates the profiled throughput like the ITL;
between profile rows far apart in context (say 350 and 2997 tokens) that mixes the throughput of very
different concurrencies and comes out about 2x too low in between. Ours (the default) derives it from
the cell's own ITL: concurrency = kv_usage * max_kv_tokens / context, throughput = concurrency / ITL.

Where the profile has no point (beyond the highest load measured near a context) the cubic is
undefined and the reference's grid holds the nearest point's value: a short context borrows a longer
context's ITL at a load it never ran (at context 1286 of the H200 profile, 31.8 ms at kv 0.74-0.82,
after 40 ms at kv 0.70), and its scan for the best throughput under a target, from the highest load
down, lands there (19,340 tokens/s/GPU for a 35 ms target, where the measured cells give 8,000). Ours
extends each context's ITL beyond its highest measured load along the slope of its measured loads
(decode ITL grows about linearly with the batch at a given context), and takes the most throughput up
to the first load whose ITL passes the target, since ITL does not fall as load rises.

Everything here is computed when the interpolator is built; queries are cheap and never raise on
odd inputs (NaN in -> NaN out), so callers decide what an invalid answer means.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy.interpolate import CubicSpline, griddata

from planner_core.engine.timing import PROFILE_MAX_NUM_SEQS
from planner_core.profile import DecodeProfile, PrefillProfile

FloatArray = npt.NDArray[np.float64]

GRID_RESOLUTION = 100


def _unique_sorted(x: FloatArray, *ys: FloatArray) -> tuple[FloatArray, list[FloatArray]]:
    """Sort by x and average the y values of duplicate x (a spline needs strictly increasing x)."""
    xs, inverse = np.unique(x, return_inverse=True)
    counts = np.bincount(inverse).astype(np.float64)
    out = [np.bincount(inverse, weights=y) / counts for y in ys]
    return xs.astype(np.float64), out


class _Curve:
    """A 1-D curve: cubic spline with >= 4 distinct points, linear below that; x clamped to range."""

    def __init__(self, x: FloatArray, y: FloatArray) -> None:
        self.lo = float(x[0])
        self.hi = float(x[-1])
        self._spline: CubicSpline | None = CubicSpline(x, y) if x.size >= 4 else None
        self._x = x
        self._y = y

    def __call__(self, x: float) -> float:
        if not math.isfinite(x):
            return math.nan
        xc = min(max(x, self.lo), self.hi)
        if self._spline is not None:
            return float(self._spline(xc))
        return float(np.interp(xc, self._x, self._y))


class PrefillInterpolator:
    """TTFT [ms] and prefill throughput [tokens/s/GPU] as functions of ISL [tokens]."""

    def __init__(self, profile: PrefillProfile) -> None:
        isl, (ttft, thpt) = _unique_sorted(profile.isl_tokens, profile.ttft_ms, profile.thpt_per_gpu)
        self.isl_range_tokens = (float(isl[0]), float(isl[-1]))
        self._ttft = _Curve(isl, ttft)
        self._thpt = _Curve(isl, thpt)

    def ttft_ms(self, isl_tokens: float) -> float:
        return self._ttft(isl_tokens)

    def thpt_per_gpu(self, isl_tokens: float) -> float:
        return self._thpt(isl_tokens)


class DecodeInterpolator:
    """ITL [ms] and decode throughput [output tokens/s/GPU] over (kv_usage, context length)."""

    def __init__(
        self,
        profile: DecodeProfile,
        resolution: int = GRID_RESOLUTION,
        max_num_seqs: int | None = PROFILE_MAX_NUM_SEQS,
    ) -> None:
        """``max_num_seqs`` caps the concurrency of the derived throughput (the profiles were taken
        with vLLM v1's default; ``None`` = no cap)."""
        if resolution < 2:
            raise ValueError(f"resolution must be >= 2, got {resolution}")
        self.max_kv_tokens = profile.max_kv_tokens
        self.resolution = resolution
        x = profile.kv_usage
        y = profile.context_length_tokens
        self.kv_axis: FloatArray = np.linspace(float(x.min()), float(x.max()), resolution)
        self.context_axis: FloatArray = np.linspace(float(y.min()), float(y.max()), resolution)
        # grid[i, j] is at kv_axis[i], context_axis[j]
        kv_grid, ctx_grid = np.meshgrid(self.kv_axis, self.context_axis, indexing="ij")
        self.itl_grid_ms, self.measured = _fill_grid(x, y, profile.itl_ms, kv_grid, ctx_grid)
        """The reference's ITL; ``measured``: its cells inside the profile points' convex hull (the rest
        hold the nearest point)."""
        self.extended_itl_grid_ms = _extend_columns(self.kv_axis, self.itl_grid_ms, self.measured)
        """Ours: each context's ITL beyond its highest measured load along its measured slope."""
        self.thpt_grid, _ = _fill_grid(x, y, profile.thpt_per_gpu, kv_grid, ctx_grid)
        """The reference's throughput: the profiled values, interpolated."""
        self.derived_thpt_grid = _derived_thpt(
            kv_grid, ctx_grid, self.extended_itl_grid_ms, self.max_kv_tokens, max_num_seqs
        )
        """Ours: requests held / ITL at each cell (tokens/s/GPU)."""

    def _index(self, axis: FloatArray, value: float) -> int:
        lo, hi = float(axis[0]), float(axis[-1])
        if hi <= lo:
            return 0
        pos = (min(max(value, lo), hi) - lo) / (hi - lo) * (self.resolution - 1)
        return round(pos)

    def itl_ms(self, kv_usage: float, context_length_tokens: float, *, reference: bool = False) -> float:
        """``reference``: the reference's grid (nearest-point values beyond the measured loads)."""
        if not (math.isfinite(kv_usage) and math.isfinite(context_length_tokens)):
            return math.nan
        i = self._index(self.kv_axis, kv_usage)
        j = self._index(self.context_axis, context_length_tokens)
        return float((self.itl_grid_ms if reference else self.extended_itl_grid_ms)[i, j])

    def _thpt(self, from_itl: bool) -> FloatArray:
        return self.derived_thpt_grid if from_itl else self.thpt_grid

    def thpt_per_gpu(self, kv_usage: float, context_length_tokens: float, *, from_itl: bool = True) -> float:
        """``from_itl=False``: the reference's interpolated profile throughput."""
        if not (math.isfinite(kv_usage) and math.isfinite(context_length_tokens)):
            return math.nan
        i = self._index(self.kv_axis, kv_usage)
        j = self._index(self.context_axis, context_length_tokens)
        return float(self._thpt(from_itl)[i, j])

    def itl_at_concurrency_ms(
        self, concurrency: float, context_length_tokens: float, *, reference: bool = False
    ) -> float:
        """ITL when ``concurrency`` requests of ``context_length_tokens`` each share the KV cache."""
        kv_usage = concurrency * context_length_tokens / self.max_kv_tokens
        return self.itl_ms(kv_usage, context_length_tokens, reference=reference)

    def best_thpt_per_gpu(
        self, itl_target_ms: float, context_length_tokens: float, *, from_itl: bool = True
    ) -> float:
        """Throughput/GPU at the load that meets the ITL target, at this context length.

        ``from_itl=False`` is the reference: its throughput grid, at the highest-load cell with ITL
        <= target (a scan from high kv_usage down). Ours (``from_itl=True``): the derived throughput,
        at most over the cells up to the first one whose (extended) ITL passes the target. When no
        cell meets the target, the lowest-load cell is returned; callers that need to know use
        :meth:`meets_itl`.
        """
        if not (math.isfinite(itl_target_ms) and math.isfinite(context_length_tokens)):
            return math.nan
        j = self._index(self.context_axis, context_length_tokens)
        if not from_itl:
            ok = np.nonzero(self.itl_grid_ms[:, j] <= itl_target_ms)[0]
            return float(self.thpt_grid[int(ok[-1]) if ok.size else 0, j])
        return float(self.derived_thpt_grid[self._best_row(itl_target_ms, j), j])

    def best_batch(self, itl_target_ms: float, context_length_tokens: float) -> float:
        """Ours: the requests one engine runs at the load :meth:`best_thpt_per_gpu` sizes at
        (``from_itl=True``): the batch whose fluctuation the decode floor's spare absorbs."""
        if not (math.isfinite(itl_target_ms) and math.isfinite(context_length_tokens)):
            return math.nan
        j = self._index(self.context_axis, context_length_tokens)
        i = self._best_row(itl_target_ms, j)
        itl_s = float(self.extended_itl_grid_ms[i, j]) / 1000.0
        return float(self.derived_thpt_grid[i, j]) * itl_s if itl_s > 0 else 0.0

    def _best_row(self, itl_target_ms: float, j: int) -> int:
        """The load (row) of context column ``j`` with the most derived throughput over the loads up
        to the first whose (extended) ITL passes the target; the lowest load when none meets it."""
        within = np.maximum.accumulate(self.extended_itl_grid_ms[:, j]) <= itl_target_ms
        if not within.any():
            return 0
        rows = np.nonzero(within)[0]
        return int(rows[int(np.argmax(self.derived_thpt_grid[rows, j]))])

    def meets_itl(
        self, itl_target_ms: float, context_length_tokens: float, *, reference: bool = False
    ) -> bool:
        """True when some load level at this context meets the ITL target (``reference``: on the
        reference's grid, whose borrowed cells can meet a target the context's own loads do not)."""
        if not (math.isfinite(itl_target_ms) and math.isfinite(context_length_tokens)):
            return False
        j = self._index(self.context_axis, context_length_tokens)
        grid = self.itl_grid_ms if reference else self.extended_itl_grid_ms
        return bool(np.any(grid[:, j] <= itl_target_ms))


def _derived_thpt(
    kv_grid: FloatArray,
    ctx_grid: FloatArray,
    itl_ms: FloatArray,
    max_kv_tokens: int,
    max_num_seqs: int | None,
) -> FloatArray:
    """Output tokens/s/GPU = concurrency / ITL, concurrency = kv_usage * max_kv_tokens / context."""
    concurrency = kv_grid * float(max_kv_tokens) / np.maximum(ctx_grid, 1.0)
    if max_num_seqs is not None:
        concurrency = np.minimum(concurrency, float(max_num_seqs))
    itl_s = itl_ms / 1000.0
    ok = np.isfinite(itl_s) & (itl_s > 0)
    out: FloatArray = np.where(ok, concurrency / np.where(ok, itl_s, 1.0), 0.0)
    return out


def _extend_columns(kv_axis: FloatArray, itl: FloatArray, measured: npt.NDArray[np.bool_]) -> FloatArray:
    """``itl`` with each column's cells above its highest measured one replaced by a line from that
    cell's running maximum, at the least-squares slope (>= 0) of the column's measured cells."""
    out = itl.copy()
    for j in range(itl.shape[1]):
        rows = np.nonzero(measured[:, j])[0]
        if rows.size < 2 or rows[-1] == itl.shape[0] - 1:
            continue
        slope = max(float(np.polyfit(kv_axis[rows], itl[rows, j], 1)[0]), 0.0)
        top = int(rows[-1])
        start = float(np.max(itl[rows, j]))
        out[top + 1 :, j] = start + slope * (kv_axis[top + 1 :] - kv_axis[top])
    return out


def _fill_grid(
    x: FloatArray, y: FloatArray, z: FloatArray, gx: FloatArray, gy: FloatArray
) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """Cubic interpolation of scattered (x, y) -> z onto the grid, nearest where cubic is undefined.

    Returns the grid and where the cubic was defined (inside the points' convex hull; everywhere
    when the triangulation fails and nearest fills it all).

    Axes are rescaled to [0, 1] first: kv_usage and context length differ by four orders of
    magnitude, and the triangulation would otherwise be degenerate in practice.
    """
    sx = _scale(x, x)
    sy = _scale(y, y)
    pts = np.column_stack([sx, sy])
    qx = _scale(gx, x)
    qy = _scale(gy, y)
    nearest = np.asarray(griddata(pts, z, (qx, qy), method="nearest"), dtype=np.float64)
    try:
        cubic = np.asarray(griddata(pts, z, (qx, qy), method="cubic"), dtype=np.float64)
    except (ValueError, RuntimeError):  # Qhull failure (QhullError is a RuntimeError): degenerate points
        return nearest, np.ones(nearest.shape, dtype=np.bool_)
    inside = np.isfinite(cubic)
    return np.where(inside, cubic, nearest), inside


def _scale(v: FloatArray, ref: FloatArray) -> FloatArray:
    lo, hi = float(ref.min()), float(ref.max())
    if hi <= lo:
        return np.zeros_like(v, dtype=np.float64)
    return (v - lo) / (hi - lo)
