"""Placeholder, replaced by ``just fit-estimate``."""

PARAMS: dict[str, dict[str, float]] = {"vllm": {}, "sglang": {}, "trtllm": {}}
