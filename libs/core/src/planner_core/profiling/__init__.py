"""Performance profiles without an engine: the reference NPZ/JSON profile from a timing model."""

from planner_core.profiling.estimate import EngineShape, estimate_decode, estimate_prefill, recommend

__all__ = ["EngineShape", "estimate_decode", "estimate_prefill", "recommend"]
