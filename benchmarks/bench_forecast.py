"""One-step-ahead forecast error of every model on the real Azure traces (code, conv).

Each trace is binned at 60 s and 180 s (``planner_sim.traces.bin_requests``; the last, partial bin is
dropped). Every model runs online: at each interval it forecasts, then sees the actual value. Scored
from the second interval on, on the same steps for every model; MAPE skips intervals whose actual is
0 or has no requests (no mean ISL/OSL). ``cover`` is the share of intervals whose request count was at
or under the 0.9 upper forecast (scored once 5 residuals exist). Time = fit + predict per step, per
series. ARIMA cadence: order re-chosen every 24 values (KPSS for d, AIC over five (p, q)), parameters
re-estimated every 8, the fitted model filtered forward in between.

    uv run python benchmarks/bench_forecast.py [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from planner_core.forecast import ForecastConfig, SeriesForecaster
from planner_sim.traces import bin_requests, read_azure_csv

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "traces"
MODELS: dict[str, dict[str, object]] = {
    "constant (baseline)": {"model": "constant"},
    "moving_average": {"model": "moving_average"},
    "holt": {"model": "holt"},
    "arima": {"model": "arima"},
    "kalman": {"model": "kalman"},
    "auto": {"model": "auto"},
    "auto log1p": {"model": "auto", "log1p": True},
}
SERIES = ("num_requests", "mean_isl", "mean_osl")


def score(values: np.ndarray, name: str, interval_s: float) -> dict[str, float]:
    spec = MODELS[name]
    cfg = ForecastConfig(
        model=str(spec["model"]), log1p=bool(spec.get("log1p", False)), interval_s=interval_s
    )
    f = SeriesForecaster(cfg)
    errs: list[float] = []
    covered: list[bool] = []
    elapsed = 0.0
    for i, v in enumerate(values):
        t0 = time.perf_counter()
        fc = f.forecast()
        elapsed += time.perf_counter() - t0
        if i >= 1 and fc.mean is not None and math.isfinite(v) and v > 0:
            errs.append(abs(fc.mean - v) / v)
            if fc.upper is not None:
                covered.append(v <= fc.upper)
        t0 = time.perf_counter()
        f.update(float(v))
        elapsed += time.perf_counter() - t0
    return {
        "mape_pct": float(np.mean(errs) * 100) if errs else math.nan,
        "cover": float(np.mean(covered)) if covered else math.nan,
        "ms_per_step": elapsed / len(values) * 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    t_start = time.perf_counter()
    rows: list[dict[str, object]] = []
    for trace in ("code", "conv"):
        reqs = read_azure_csv(TRACES / f"AzureLLMInferenceTrace_{trace}.csv").requests
        for interval_s in (60.0, 180.0):
            b = bin_requests(reqs, interval_s)
            cols = {
                "num_requests": b.num_requests[:-1],
                "mean_isl": b.mean_isl_tokens[:-1],
                "mean_osl": b.mean_osl_tokens[:-1],
            }
            for name in MODELS:
                for series in SERIES:
                    r = score(cols[series], name, interval_s)
                    rows.append(
                        {"trace": trace, "interval_s": interval_s, "model": name, "series": series, **r}
                    )
    total_s = time.perf_counter() - t_start
    if args.json:
        print(json.dumps({"rows": rows, "total_s": total_s}, indent=1))
        return

    def get(trace: str, iv: float, model: str, series: str, key: str) -> float:
        for r in rows:
            if (r["trace"], r["interval_s"], r["model"], r["series"]) == (trace, iv, model, series):
                return float(str(r[key]))
        return math.nan

    for trace in ("code", "conv"):
        for iv in (60.0, 180.0):
            n = (
                len(
                    bin_requests(
                        read_azure_csv(TRACES / f"AzureLLMInferenceTrace_{trace}.csv").requests, iv
                    ).num_requests
                )
                - 1
            )
            print(f"\nAzure {trace}, {iv:.0f} s bins ({n} intervals): one-step MAPE %  (x vs last value)")
            print(
                f"{'model':22s}{'requests':>18s}{'mean ISL':>18s}{'mean OSL':>18s}{'cover@0.9':>11s}{'ms/step':>9s}"
            )
            for m in MODELS:
                cells = ""
                for s in SERIES:
                    v = get(trace, iv, m, s, "mape_pct")
                    base = get(trace, iv, "constant (baseline)", s, "mape_pct")
                    cells += f"{v:10.1f} ({v / base:4.2f}x)"
                cover = get(trace, iv, m, "num_requests", "cover")
                ms = np.mean([get(trace, iv, m, s, "ms_per_step") for s in SERIES])
                print(f"{m:22s}{cells}{cover:11.2f}{ms:9.2f}")
    print(f"\ntotal runtime {total_s:.1f} s")


if __name__ == "__main__":
    # One BLAS thread: small statsmodels/numpy fits run ~10x slower when BLAS threads fight over shared cores.
    with threadpool_limits(1):
        main()
