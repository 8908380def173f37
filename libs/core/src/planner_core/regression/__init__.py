"""Online regression of engine forward-pass time, and TTFT/ITL estimates from it."""

from planner_core.regression.averages import ShapeAverages
from planner_core.regression.estimate import LatencyEstimate, estimate_next_itl, estimate_next_ttft
from planner_core.regression.fit import FitMethod, LinearFit, fit_linear
from planner_core.regression.histogram import Quantiles, bucket_quantile
from planner_core.regression.model import (
    FEATURES,
    Admission,
    FitResult,
    OnlineRegression,
    RegressionConfig,
    features_of,
)
from planner_core.regression.samples import Retention, SampleStore
from planner_core.regression.scraped import (
    ScrapedFit,
    ScrapedInterval,
    ScrapedSpeedModel,
    interval_between,
    interval_or_skip,
)
from planner_core.regression.state import (
    RegressionState,
    export_state,
    import_state,
    state_from_json,
    state_to_json,
)

__all__ = [
    "FEATURES",
    "Admission",
    "FitMethod",
    "FitResult",
    "LatencyEstimate",
    "LinearFit",
    "OnlineRegression",
    "Quantiles",
    "RegressionConfig",
    "RegressionState",
    "Retention",
    "SampleStore",
    "ScrapedFit",
    "ScrapedInterval",
    "ScrapedSpeedModel",
    "ShapeAverages",
    "bucket_quantile",
    "estimate_next_itl",
    "estimate_next_ttft",
    "export_state",
    "features_of",
    "fit_linear",
    "import_state",
    "interval_between",
    "interval_or_skip",
    "state_from_json",
    "state_to_json",
]
