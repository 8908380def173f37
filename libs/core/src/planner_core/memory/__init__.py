"""Pure vLLM memory model: weights, activation peak, non-torch, CUDA graphs, KV cache."""

from planner_core.memory.breakdown import MemoryBreakdown, predict_memory, predict_stage
from planner_core.memory.params import DEFAULT_PARAMS, MemoryParams
from planner_core.memory.settings import EngineSettings, SettingsError, default_capture_sizes

__all__ = [
    "DEFAULT_PARAMS",
    "EngineSettings",
    "MemoryBreakdown",
    "MemoryParams",
    "SettingsError",
    "default_capture_sizes",
    "predict_memory",
    "predict_stage",
]
