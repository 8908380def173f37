"""Datasheet figures of the GPUs people serve LLMs on, datacenter and consumer.

``memory_gib`` is the total ``torch.cuda.mem_get_info`` reports (vLLM multiplies it by
``gpu_memory_utilization``), a little below the nominal GB figure (ECC, driver reservation): exact
where a real vLLM report gives it (H100 79.19, H200 139.8), otherwise the nominal size in GiB less
the same ~1 % share. FLOPs are dense (no 2:4 sparsity) with FP32 accumulation, which is what vLLM's
GEMMs use: GeForce cards run that at half their FP16-accumulate rate. ``fp8_tflops`` is 0 without FP8
tensor cores (Ampere, Turing, Volta): FP8 weights then run through a weight-only kernel.
``nvlink_gb_s`` is per-GPU bidirectional NVLink bandwidth (0 = PCIe only), ``pcie_gb_s`` the
per-direction host link (PCIe 3.0 x16 = 16, 4.0 = 32, 5.0 = 64).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_gib: float  # total device memory as torch reports it
    hbm_gb_s: float  # memory bandwidth, 1e9 bytes/s
    bf16_tflops: float  # dense
    fp8_tflops: float  # dense; 0 = no FP8 tensor cores
    nvlink_gb_s: float  # per-GPU bidirectional NVLink bandwidth; 0 = PCIe only
    pcie_gb_s: float = 64.0  # per-direction host link

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    @property
    def has_fp8(self) -> bool:
        return self.fp8_tflops > 0

    @property
    def link_gb_s(self) -> float:
        """Per-direction bandwidth between two GPUs of one server: NVLink when present, else PCIe."""
        return self.nvlink_gb_s / 2.0 if self.nvlink_gb_s > 0 else self.pcie_gb_s


@dataclass(frozen=True)
class GpuEntry:
    """A table row plus what name matching needs: the family token, the board form and the nominal
    memory size that tell variants of one family apart."""

    spec: GpuSpec
    family: str  # token searched for in a normalised name, e.g. "a100", "4090", "6000ada"
    nominal_gb: float
    form: str = ""  # "sxm", "pcie", "nvl" or "" (the family's only or default board)


def _e(name: str, family: str, gb: float, gib: float, bw: float, bf16: float, fp8: float, nvl: float,
       pcie: float, form: str = "") -> GpuEntry:  # fmt: skip
    return GpuEntry(GpuSpec(name, gib, bw, bf16, fp8, nvl, pcie), family, gb, form)


# The first entry of a family is its default when a name gives no memory size or board form.
ENTRIES: tuple[GpuEntry, ...] = (
    # name             family     GB    GiB    GB/s    BF16    FP8  NVLink PCIe form
    _e("A100-80GB", "a100", 80, 79.15, 2039, 312, 0, 600, 32, "sxm"),
    _e("A100-40GB", "a100", 40, 39.39, 1555, 312, 0, 600, 32, "sxm"),
    _e("A100-80GB-PCIe", "a100", 80, 79.15, 1935, 312, 0, 600, 32, "pcie"),
    _e("H100-SXM", "h100", 80, 79.19, 3350, 989, 1979, 900, 64, "sxm"),
    _e("H100-PCIe", "h100", 80, 79.19, 2000, 756, 1513, 600, 64, "pcie"),
    _e("H100-NVL", "h100", 94, 93.1, 3900, 835, 1671, 600, 64, "nvl"),
    _e("H20", "h20", 96, 95.0, 4000, 148, 296, 900, 64),
    _e("H200", "h200", 141, 139.8, 4800, 989, 1979, 900, 64, "sxm"),
    _e("H200-NVL", "h200", 141, 139.8, 4800, 836, 1671, 900, 64, "nvl"),
    _e("GH200", "gh200", 96, 95.0, 4000, 989, 1979, 900, 450),
    _e("GH200-144GB", "gh200", 144, 142.5, 4900, 989, 1979, 900, 450),
    _e("B200", "b200", 180, 178.4, 8000, 2250, 4500, 1800, 64),
    _e("B300", "b300", 288, 285.0, 8000, 2250, 4500, 1800, 64),
    _e("GB200", "gb200", 186, 184.0, 8000, 2500, 5000, 1800, 450),
    _e("GB300", "gb300", 288, 285.0, 8000, 2500, 5000, 1800, 450),
    _e("L4", "l4", 24, 22.05, 300, 121, 242, 0, 32),
    _e("L40", "l40", 48, 44.4, 864, 181, 362, 0, 32),
    _e("L40S", "l40s", 48, 44.4, 864, 362, 733, 0, 32),
    _e("A10", "a10", 24, 22.05, 600, 125, 0, 0, 32),
    _e("A10G", "a10g", 24, 22.05, 600, 70, 0, 0, 32),
    _e("T4", "t4", 16, 14.58, 320, 65, 0, 0, 16),  # Turing: FP16 only (vLLM serves bf16 as fp16)
    _e("V100-32GB", "v100", 32, 31.74, 900, 125, 0, 300, 16),
    _e("V100-16GB", "v100", 16, 15.77, 900, 125, 0, 300, 16),
    _e("RTX-3090", "3090", 24, 23.69, 936, 71.0, 0, 112.5, 32),
    _e("RTX-4060", "4060", 8, 7.63, 272, 30.2, 60.5, 0, 16),
    _e("RTX-4070", "4070", 12, 11.72, 504, 58.3, 116.6, 0, 32),
    _e("RTX-4080", "4080", 16, 15.57, 717, 97.5, 195.0, 0, 32),
    _e("RTX-4090", "4090", 24, 23.65, 1008, 165.2, 330.3, 0, 32),
    _e("RTX-5090", "5090", 32, 31.36, 1792, 209.5, 419.0, 0, 64),
    _e("RTX-A6000", "a6000", 48, 47.43, 768, 154.8, 0, 112.5, 32),
    _e("RTX-6000-Ada", "6000ada", 48, 47.5, 960, 364.2, 728.5, 0, 32),
)
