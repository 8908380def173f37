from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

class OptimizeResult:
    x: NDArray[np.float64]
    cost: float
    fun: NDArray[np.float64]
    nfev: int
    status: int
    message: str
    success: bool

def least_squares(
    fun: Callable[..., ArrayLike],
    x0: ArrayLike,
    jac: Literal["2-point", "3-point", "cs"] | Callable[..., ArrayLike] = "2-point",
    bounds: tuple[ArrayLike, ArrayLike] = ...,
    method: Literal["trf", "dogbox", "lm"] = "trf",
    ftol: float | None = 1e-08,
    xtol: float | None = 1e-08,
    gtol: float | None = 1e-08,
    x_scale: ArrayLike | Literal["jac"] | None = None,
    loss: Literal["linear", "soft_l1", "huber", "cauchy", "arctan"] | Callable[..., ArrayLike] = "linear",
    f_scale: float = 1.0,
    diff_step: ArrayLike | None = None,
    max_nfev: int | None = None,
    verbose: Literal[0, 1, 2] = 0,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
) -> OptimizeResult: ...
def nnls(
    A: ArrayLike, b: ArrayLike, *, maxiter: int | None = None, atol: float | None = ...
) -> tuple[NDArray[np.float64], float]: ...
