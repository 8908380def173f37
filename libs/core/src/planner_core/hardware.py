"""GPU specifications, looked up by loose names ("h200", "NVIDIA H100 80GB", "h200_sxm").

Figures are vendor datasheet values for dense maths (no 2:4 sparsity). ``memory_gib`` is what
``torch.cuda.mem_get_info`` reports as total on that board (a little below the nominal GB figure:
ECC and the driver's reservation), because vLLM multiplies that total by ``gpu_memory_utilization``;
the H100 80GB value (79.19 GiB) is the one in the real vLLM reports, the others are nominal memory
less the same share and are approximate. ``fp8_tflops`` is 0 where the tensor cores have no FP8
(Ampere): vLLM then runs FP8 weights through a weight-only kernel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_gib: float  # total device memory as torch reports it
    hbm_gb_s: float  # memory bandwidth, 1e9 bytes/s
    bf16_tflops: float  # dense
    fp8_tflops: float  # dense; 0 = no FP8 tensor cores
    nvlink_gb_s: float  # per-GPU bidirectional NVLink bandwidth; 0 = PCIe only
    pcie_gb_s: float = 64.0  # per-direction host link (PCIe 5.0 x16 = 64, 4.0 x16 = 32)

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    @property
    def has_fp8(self) -> bool:
        return self.fp8_tflops > 0


GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec("A100-40GB", 39.39, 1555.0, 312.0, 0.0, 600.0, 32.0),
        GpuSpec("A100-80GB", 79.15, 2039.0, 312.0, 0.0, 600.0, 32.0),
        GpuSpec("H100-SXM", 79.19, 3350.0, 989.0, 1979.0, 900.0),
        GpuSpec("H100-PCIe", 79.19, 2000.0, 756.0, 1513.0, 600.0),
        GpuSpec("H200", 139.8, 4800.0, 989.0, 1979.0, 900.0),
        GpuSpec("B200", 178.4, 8000.0, 2250.0, 4500.0, 1800.0),
        GpuSpec("L40S", 44.4, 864.0, 362.0, 733.0, 0.0, 32.0),
        GpuSpec("L4", 22.0, 300.0, 121.0, 242.0, 0.0, 32.0),
        GpuSpec("A10G", 22.0, 600.0, 70.0, 0.0, 0.0, 32.0),
    )
}

# normalised alias -> table name; normalisation drops case, "nvidia", "tesla" and punctuation
_ALIASES: dict[str, str] = {
    "a10040gb": "A100-40GB",
    "a10040g": "A100-40GB",
    "a100sxm440gb": "A100-40GB",
    "a100pcie40gb": "A100-40GB",
    "a100": "A100-80GB",
    "a10080gb": "A100-80GB",
    "a10080g": "A100-80GB",
    "a100sxm480gb": "A100-80GB",
    "a100sxm80gb": "A100-80GB",
    "a100pcie80gb": "A100-80GB",
    "h100": "H100-SXM",
    "h100sxm": "H100-SXM",
    "h100sxm5": "H100-SXM",
    "h10080gb": "H100-SXM",
    "h100sxm580gb": "H100-SXM",
    "h10080gbhbm3": "H100-SXM",
    "h100pcie": "H100-PCIe",
    "h100pcie80gb": "H100-PCIe",
    "h200": "H200",
    "h200sxm": "H200",
    "h200141gb": "H200",
    "h200sxm141gb": "H200",
    "b200": "B200",
    "b200sxm": "B200",
    "b200180gb": "B200",
    "l40s": "L40S",
    "l4": "L4",
    "a10g": "A10G",
}


class UnknownGpuError(KeyError):
    """No GPU in the table matches the given name."""


def _norm(name: str) -> str:
    s = name.lower()
    for word in ("nvidia", "tesla", "geforce"):
        s = s.replace(word, "")
    return re.sub(r"[^a-z0-9]", "", s)


def gpu_spec(name: str) -> GpuSpec:
    """Look a GPU up by a loose name; raises :class:`UnknownGpuError` listing the known names."""
    key = _norm(name)
    if key in _ALIASES:
        return GPUS[_ALIASES[key]]
    for table_name, spec in GPUS.items():
        if _norm(table_name) == key:
            return spec
    raise UnknownGpuError(f"unknown GPU '{name}' (known: {', '.join(GPUS)})")
