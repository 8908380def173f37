from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

class CubicSpline:
    def __init__(
        self,
        x: ArrayLike,
        y: ArrayLike,
        axis: int = 0,
        bc_type: Literal["not-a-knot", "periodic", "clamped", "natural"] = "not-a-knot",
        extrapolate: bool | Literal["periodic"] | None = None,
    ) -> None: ...
    def __call__(
        self, x: ArrayLike, nu: int = 0, extrapolate: bool | Literal["periodic"] | None = None
    ) -> NDArray[np.float64]: ...

def griddata(
    points: ArrayLike,
    values: ArrayLike,
    xi: ArrayLike | tuple[ArrayLike, ...],
    method: Literal["linear", "nearest", "cubic"] = "linear",
    fill_value: float = ...,
    rescale: bool = False,
) -> NDArray[np.float64]: ...
