from typing import Any

from numpy.typing import ArrayLike

class SARIMAX:
    def __init__(
        self,
        endog: ArrayLike,
        exog: ArrayLike | None = None,
        order: tuple[int, int, int] = (1, 0, 0),
        seasonal_order: tuple[int, int, int, int] = (0, 0, 0, 0),
        trend: str | None = None,
        **kwargs: Any,
    ) -> None: ...
    def fit(
        self,
        start_params: ArrayLike | None = None,
        transformed: bool = True,
        includes_fixed: bool = False,
        cov_type: str | None = None,
        cov_kwds: dict[str, Any] | None = None,
        method: str = "lbfgs",
        maxiter: int = 50,
        full_output: int = 1,
        disp: int = 5,
        **kwargs: Any,
    ) -> Any: ...
