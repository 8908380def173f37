from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

class ARIMAResults:
    aic: float
    def forecast(self, steps: int = 1) -> NDArray[np.float64]: ...
    def append(
        self, endog: ArrayLike, exog: ArrayLike | None = None, refit: bool = False
    ) -> ARIMAResults: ...

class ARIMA:
    def __init__(
        self,
        endog: ArrayLike,
        exog: ArrayLike | None = None,
        order: tuple[int, int, int] = (0, 0, 0),
        seasonal_order: tuple[int, int, int, int] = (0, 0, 0, 0),
        trend: str | None = None,
        enforce_stationarity: bool = True,
        enforce_invertibility: bool = True,
    ) -> None: ...
    def fit(
        self,
        start_params: ArrayLike | None = None,
        transformed: bool = True,
        includes_fixed: bool = False,
        method: str | None = None,
        method_kwargs: dict[str, Any] | None = None,
    ) -> ARIMAResults: ...
