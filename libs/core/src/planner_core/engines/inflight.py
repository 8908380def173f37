"""Requests an engine still holds (running plus waiting), from its own ``/metrics``: what a drain
waits on for an engine without a drain protocol of its own."""

from __future__ import annotations

from planner_core.engines.exposition import samples


def trt_names(suffix: str) -> tuple[str, ...]:
    """A TRT-LLM serve metric's candidate names: its exporters' three prefixes."""
    return tuple(f"{p}{suffix}" for p in ("trtllm_", "trtllm:", "tensorrt_llm:"))


IN_FLIGHT: dict[str, tuple[tuple[str, ...], ...]] = {
    "vllm": (("vllm:num_requests_running",), ("vllm:num_requests_waiting",)),
    "sglang": (("sglang:num_running_reqs",), ("sglang:num_queue_reqs",)),
    "llamacpp": (("llamacpp:requests_processing",), ("llamacpp:requests_deferred",)),
    "trtllm": (trt_names("num_requests_running"), trt_names("num_requests_waiting")),
}
"""Per engine kind: the running gauge's candidate names, then the waiting gauge's."""


def in_flight(kind: str, text: str) -> float | None:
    """Running plus waiting requests summed over every label set (data-parallel ranks, models);
    None when the kind is unknown or the exposition has neither gauge (nothing to judge a drain by)."""
    groups = IN_FLIGHT.get(kind)
    return None if groups is None else groups_total(text, groups)


def groups_total(text: str, groups: tuple[tuple[str, ...], ...]) -> float | None:
    """The sum over ``groups`` of each group's first metric present in ``text`` (candidate names),
    summed over its label sets (negative samples count 0); None when no group has one."""
    total, seen = 0.0, False
    for names in groups:
        for name in names:
            found = samples(text, name)
            if found:
                total += sum(max(0.0, s.value) for s in found)
                seen = True
                break
    return total if seen else None


def detect_kind(text: str) -> str | None:
    """The engine kind whose gauges the exposition carries, or None."""
    for kind, groups in IN_FLIGHT.items():
        if any(samples(text, name) for names in groups for name in names):
            return kind
    return None
