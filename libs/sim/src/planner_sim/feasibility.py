"""SLA targets per request, and the requests no fleet can serve within them.

A request is *infeasible* when its TTFT target is below what an idle engine needs to prefill its prompt
(chunked by ``max_num_batched_tokens``, on the simulator's own timing model), or when its prompt is
longer than the engines' context (``ClusterSettings.context_length_tokens``). No number of GPUs makes
such a request meet the SLA, so the bench counts them (``infeasible_requests``) and leaves them out of
the attainment and out of the oracles' searches (otherwise they drive the oracle to its worker cap).
Requests over the context are also left out of the simulated traffic: a real engine rejects them.

The TTFT target may grow with the prompt: ``ttft_ms + ttft_ms_per_1k_isl * ISL / 1000`` (long-context
operators give long prompts more time).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from planner_sim.traces import TraceRequest
from planner_sim.workers import ClusterSettings

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, kw_only=True)
class SlaTargets:
    ttft_ms: float = 500.0
    itl_ms: float = 50.0
    ttft_ms_per_1k_isl: float = 0.0

    def __post_init__(self) -> None:
        for name, v in (("ttft_ms", self.ttft_ms), ("itl_ms", self.itl_ms)):
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name}: must be > 0, got {v}")
        if not (math.isfinite(self.ttft_ms_per_1k_isl) and self.ttft_ms_per_1k_isl >= 0):
            raise ValueError(f"ttft_ms_per_1k_isl: must be >= 0, got {self.ttft_ms_per_1k_isl}")

    def ttft_target_ms(self, isl_tokens: npt.ArrayLike) -> FloatArray:
        isl = np.asarray(isl_tokens, dtype=np.float64)
        out: FloatArray = self.ttft_ms + self.ttft_ms_per_1k_isl * isl / 1000.0
        return out

    def policy_ttft_ms(self, mean_isl_tokens: float) -> float:
        """The one TTFT target a policy is given: the target of the trace's mean prompt."""
        return float(self.ttft_ms + self.ttft_ms_per_1k_isl * mean_isl_tokens / 1000.0)


def idle_ttft_ms(settings: ClusterSettings, isl_tokens: int) -> float:
    """TTFT of a prompt alone on an idle prefill engine: its chunks' passes back to back."""
    chunk = max(1, settings.max_num_batched_tokens)
    done = 0
    total = 0.0
    while done < isl_tokens:
        t = min(chunk, isl_tokens - done)
        total += settings.timing.pass_time_s(t, done, 0, 0)
        done += t
    return total * 1e3


@dataclass(frozen=True, kw_only=True)
class Feasibility:
    feasible: BoolArray
    """Per request: some fleet can serve it within the SLA."""
    too_long: BoolArray
    """Per request: prompt longer than the engines' context."""
    too_slow: BoolArray
    """Per request: an idle engine's TTFT is over the request's TTFT target."""

    @property
    def infeasible(self) -> int:
        return int((~self.feasible).sum())


def check_feasibility(
    requests: Sequence[TraceRequest], settings: ClusterSettings, sla: SlaTargets
) -> Feasibility:
    isl = np.array([r.input_tokens for r in requests], dtype=np.int64)
    too_long = isl > settings.context_length_tokens
    idle: dict[int, float] = {}
    for v in np.unique(isl[~too_long]):
        idle[int(v)] = idle_ttft_ms(settings, int(v))
    idle_ms = np.array([idle.get(int(v), math.inf) for v in isl], dtype=np.float64)
    too_slow = ~too_long & (idle_ms > sla.ttft_target_ms(isl))
    return Feasibility(feasible=~(too_long | too_slow), too_long=too_long, too_slow=too_slow)
