"""The demo's traffic: requests of the Azure conv trace (real ISL/OSL pairs, in trace order) with
arrivals that ramp up to a peak, hold, and fall to zero, so the fleet must scale up and then down."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from planner_sim.traces import TraceRequest, read_azure_csv, synthetic


def rise_and_fall_rate(t: float, load_s: float, base: float, peak: float) -> float:
    """Requests/s at ``t``: base for the first 15 %, a ramp to peak until 40 %, peak until 70 %,
    a ramp back to base until 90 %, then nothing."""
    x = t / load_s
    if x < 0.15:
        return base
    if x < 0.40:
        return base + (peak - base) * (x - 0.15) / 0.25
    if x < 0.70:
        return peak
    if x < 0.90:
        return peak + (base - peak) * (x - 0.70) / 0.20
    return 0.0


def build(
    trace: Path | None,
    load_s: float,
    base_rate: float,
    peak_rate: float,
    seed: int = 7,
    max_isl: int = 6000,
    max_osl: int = 1024,
) -> list[TraceRequest]:
    rng = np.random.default_rng(seed)
    if trace is not None and trace.exists():
        pool = [(r.input_tokens, r.output_tokens) for r in read_azure_csv(trace).requests]
    else:
        pool = [
            (r.input_tokens, r.output_tokens)
            for r in synthetic("constant", 3600, 5, 1150, 210, length_jitter=0.6, seed=seed)
        ]
    out: list[TraceRequest] = []
    t, i = 0.0, 0
    lam = max(peak_rate, base_rate, 1e-6)
    while True:  # thinning: a Poisson process with the shaped rate
        t += float(rng.exponential(1.0 / lam))
        if t >= load_s:
            break
        if rng.random() * lam <= rise_and_fall_rate(t, load_s, base_rate, peak_rate):
            isl, osl = pool[i % len(pool)]
            i += 1
            out.append(TraceRequest(t, min(isl, max_isl), min(osl, max_osl)))
    return out


def write_mooncake(requests: list[TraceRequest], path: Path) -> None:
    with path.open("w") as fh:
        for r in requests:
            fh.write(
                json.dumps(
                    {
                        "timestamp": math.floor(r.arrival_s * 1000),
                        "input_length": r.input_tokens,
                        "output_length": r.output_tokens,
                    }
                )
                + "\n"
            )
