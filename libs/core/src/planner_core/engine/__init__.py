"""Engine model: a vLLM-v1-style scheduler (pure step function) and per-pass timing models."""

from planner_core.engine.kv_pool import BlockPool
from planner_core.engine.passes import EnginePass, to_fpm, variance
from planner_core.engine.request import EngineRequest, EngineRole, RequestId, SchedulerConfig
from planner_core.engine.roofline import RooflineParams, RooflineTiming
from planner_core.engine.scheduler import Scheduler
from planner_core.engine.timing import (
    CalibratedTiming,
    MockerTiming,
    TimingModel,
    fit_calibrated,
    lone_ttft_s,
    profile_mape,
)
from planner_core.engine.transfer import DEFAULT_KV_BANDWIDTH_BYTES_PER_S, kv_transfer_time_s

__all__ = [
    "DEFAULT_KV_BANDWIDTH_BYTES_PER_S",
    "BlockPool",
    "CalibratedTiming",
    "EnginePass",
    "EngineRequest",
    "EngineRole",
    "MockerTiming",
    "RequestId",
    "RooflineParams",
    "RooflineTiming",
    "Scheduler",
    "SchedulerConfig",
    "TimingModel",
    "fit_calibrated",
    "kv_transfer_time_s",
    "lone_ttft_s",
    "profile_mape",
    "to_fpm",
    "variance",
]
