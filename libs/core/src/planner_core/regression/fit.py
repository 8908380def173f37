"""Linear fits of forward-pass wall time: plain OLS (the reference) and our robust variant.

The robust fit is iteratively reweighted least squares with two weights per sample:

- ``1 / yhat**2`` from the previous iterate: pass-time noise grows with the pass time (a constant
  coefficient of variation), so relative errors are the right thing to equalise; it also makes the
  light-load end of the range count as much as the heavy end, which is what latency estimates at low
  load need;
- a Huber weight on the scaled relative residual (scale = MAD), so a pass that stalled on a GC pause
  or a preemption storm pulls the line only as hard as a bounded constant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
FitMethod = Literal["robust", "ols"]

_MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class LinearFit:
    """``y = intercept + coefs . x``; ``reason`` is empty when the fit can be used."""

    intercept: float
    coefs: tuple[float, ...]
    r2: float | None
    num_samples: int
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.reason == ""

    def predict(self, x: npt.ArrayLike) -> float:
        row = np.asarray(x, dtype=np.float64).reshape(len(self.coefs))
        return float(self.intercept + float(np.dot(self.coefs, row)))


def _design(x: FloatArray) -> FloatArray:
    return np.column_stack([np.ones(len(x)), x])


def _solve(a: FloatArray, y: FloatArray, w: FloatArray) -> FloatArray | None:
    sw = np.sqrt(w)
    beta, _res, rank, _sv = np.linalg.lstsq(a * sw[:, None], y * sw, rcond=None)
    if rank < a.shape[1]:
        return None
    return np.asarray(beta, dtype=np.float64)


def _r2(y: FloatArray, yhat: FloatArray) -> float | None:
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    if ss_tot <= 0.0:
        return None
    return 1.0 - float(np.sum((y - yhat) ** 2)) / ss_tot


def fit_linear(
    x: FloatArray,
    y: FloatArray,
    method: FitMethod = "robust",
    *,
    huber_k: float = 1.345,
    max_iter: int = 12,
) -> LinearFit:
    """Fit with intercept; the result carries ``reason='degenerate_inputs'`` when the inputs do not
    span enough directions to identify every coefficient."""
    n, dims = x.shape
    a = _design(x)
    beta: FloatArray | None = _solve(a, y, np.ones(n))
    if beta is None:
        return LinearFit(0.0, (0.0,) * dims, None, n, "degenerate_inputs")
    if method == "robust":
        floor = max(float(np.median(np.abs(y))) * 1e-3, 1e-12)
        for _ in range(max_iter):
            yhat: FloatArray = np.maximum(np.abs(a @ beta), floor).astype(np.float64)
            rel = (y - yhat) / yhat
            scale = _MAD_TO_SIGMA * float(np.median(np.abs(rel - np.median(rel))))
            scale = max(scale, 1e-9)
            u = np.abs(rel) / (huber_k * scale)
            huber = np.where(u <= 1.0, 1.0, 1.0 / np.maximum(u, 1e-12))
            nxt = _solve(a, y, huber / yhat**2)
            if nxt is None:
                break
            done = bool(np.allclose(nxt, beta, rtol=1e-7, atol=1e-12))
            beta = nxt
            if done:
                break
    return LinearFit(float(beta[0]), tuple(float(b) for b in beta[1:]), _r2(y, a @ beta), n)
