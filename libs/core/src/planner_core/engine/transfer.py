"""Disaggregated KV hand-off: how long the prompt's KV takes to reach the decode engine."""

from __future__ import annotations

DEFAULT_KV_BANDWIDTH_BYTES_PER_S = 64e9


def kv_transfer_time_s(
    isl_tokens: int,
    kv_bytes_per_token: float,
    bandwidth_bytes_per_s: float = DEFAULT_KV_BANDWIDTH_BYTES_PER_S,
) -> float:
    """isl * kv_bytes_per_token / bandwidth (the reference mocker's rule; 64 GB/s by default)."""
    if bandwidth_bytes_per_s <= 0:
        raise ValueError("bandwidth_bytes_per_s must be positive")
    return max(0, isl_tokens) * kv_bytes_per_token / bandwidth_bytes_per_s
