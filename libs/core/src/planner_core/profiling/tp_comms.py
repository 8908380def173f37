"""Tensor-parallel communication: the all-reduces a TP group runs per decoder layer.

A Megatron-style TP layer ends its attention and its MLP with an all-reduce of the layer's output
(tokens x hidden, in the activation dtype), so a pass runs 2 x layers of them. A ring all-reduce of
``b`` bytes over ``tp`` GPUs sends 2 (tp - 1) / tp x b per GPU; at small sizes a fixed latency per
call dominates (NCCL and custom all-reduce kernels: ~5-20 us on NVLink, more over PCIe). Bandwidth is
the per-direction GPU-to-GPU link: NVLink when the board has it, else PCIe.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner_core.gpu_table import GpuSpec


@dataclass(frozen=True)
class CommParams:
    latency_s: float = 8e-6  # per all-reduce call on NVLink
    pcie_latency_factor: float = 3.0  # latency multiplier without NVLink
    bus_efficiency: float = 0.7  # share of link bandwidth an all-reduce reaches


def allreduce_s(nbytes: float, tp: int, gpu: GpuSpec, p: CommParams = CommParams()) -> float:
    """One ring all-reduce of ``nbytes`` over ``tp`` GPUs of ``gpu``."""
    if tp <= 1 or nbytes < 0:
        return 0.0
    bw = gpu.link_gb_s * 1e9 * p.bus_efficiency
    lat = p.latency_s * (1.0 if gpu.nvlink_gb_s > 0 else p.pcie_latency_factor)
    return lat + 2.0 * (tp - 1) / tp * nbytes / bw


def pass_comm_s(
    tokens: float, hidden: int, layers: int, tp: int, gpu: GpuSpec, act_bytes: float = 2.0,
    p: CommParams = CommParams(),
) -> float:  # fmt: skip
    """All-reduce time of one forward pass of ``tokens`` tokens: two per layer."""
    if tp <= 1 or tokens <= 0:
        return 0.0
    return 2 * layers * allreduce_s(tokens * hidden * act_bytes, tp, gpu, p)
