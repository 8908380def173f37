from typing import Literal

from numpy.typing import ArrayLike

def kpss(
    x: ArrayLike,
    regression: Literal["c", "ct"] = "c",
    nlags: Literal["auto", "legacy"] | int = "auto",
    store: Literal[False] = False,
) -> tuple[float, float, int, dict[str, float]]:
    """(statistic, p-value, lags, critical values); ``store=True`` returns another shape (not declared)."""
