"""GPU look-up by the names people write: "h200", "NVIDIA A100-SXM4-80GB", "4x H100 80GB", "RTX 4090".

:func:`parse_gpu` returns the spec and how many GPUs the name asks for ("4x H100" = 4). Matching:
vendor words and punctuation are dropped, the longest family token found in the name picks the family
("gh200" before "h200" before "h20"), then the board form ("PCIe", "NVL", "SXM") and the memory size
("40GB") pick the variant, else the family's first entry. Anything else is an
:class:`UnknownGpuError`; :func:`custom_gpu` and :func:`gpu_from_mapping` cover boards not in the table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from planner_core.gpu_table import ENTRIES, GpuEntry, GpuSpec

__all__ = ["GPUS", "GpuSelection", "GpuSpec", "UnknownGpuError", "custom_gpu", "gpu_from_mapping",
           "gpu_spec", "parse_gpu"]  # fmt: skip

GPUS: dict[str, GpuSpec] = {e.spec.name: e.spec for e in ENTRIES}
_FAMILIES = sorted({e.family for e in ENTRIES}, key=len, reverse=True)
_COUNT_PREFIX = re.compile(r"^\s*(\d+)\s*[x×*]\s*(.+)$", re.IGNORECASE)
_COUNT_SUFFIX = re.compile(r"^(.+?)\s+[x×*]\s*(\d+)\s*$", re.IGNORECASE)
_MEMORY = re.compile(r"(\d+)\s*gi?b", re.IGNORECASE)


class UnknownGpuError(KeyError):
    """No GPU in the table matches the given name."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class GpuSelection:
    spec: GpuSpec
    count: int = 1


def _norm(name: str) -> str:
    s = name.lower()
    for word in ("nvidia", "tesla", "geforce", "quadro"):
        s = s.replace(word, "")
    return re.sub(r"[^a-z0-9]", "", s)


def _split_count(text: str) -> tuple[str, int]:
    m = _COUNT_PREFIX.match(text)
    if m:
        return m.group(2), int(m.group(1))
    m = _COUNT_SUFFIX.match(text)
    if m:
        return m.group(1), int(m.group(2))
    return text, 1


def _family(key: str) -> str | None:
    for fam in _FAMILIES:
        i = key.find(fam)
        while i >= 0:
            before = key[i - 1] if i > 0 else ""
            after = key[i + len(fam)] if i + len(fam) < len(key) else ""
            # a family token is not part of a longer number ("4090" in "40900") or model ("l4" in "l40")
            if not (
                before.isdigit()
                or (after.isdigit() and fam[-1].isdigit() and not _memory_follows(key, i + len(fam)))
            ):
                return fam
            i = key.find(fam, i + 1)
    return None


def _memory_follows(key: str, pos: int) -> bool:
    """After a family token, digits followed by "gb" are a memory size ("h10080gb"), not more model."""
    m = re.match(r"\d+gi?b", key[pos:])
    return m is not None


def _form(key: str) -> str:
    for form in ("pcie", "nvl", "sxm"):
        if form in key:
            return form
    return ""


def parse_gpu(name: str) -> GpuSelection:
    """Spec and count for a loose GPU name; raises :class:`UnknownGpuError` naming the known GPUs."""
    text, count = _split_count(name.strip())
    if count < 1:
        raise UnknownGpuError(f"GPU count in '{name}' must be >= 1")
    key = _norm(text)
    exact = {_norm(n): s for n, s in GPUS.items()}
    if key in exact:
        return GpuSelection(exact[key], count)
    fam = _family(key)
    if fam is None:
        raise UnknownGpuError(
            f"unknown GPU '{name}' (known: {', '.join(GPUS)}; for another board pass --gpu-memory-gib "
            "or --gpu-spec FILE.yaml)"
        )
    cands: list[GpuEntry] = [e for e in ENTRIES if e.family == fam]
    form = _form(key)
    if form and any(e.form == form for e in cands):
        cands = [e for e in cands if e.form == form]
    mem = _MEMORY.search(text)
    if mem is not None:
        gb = float(mem.group(1))
        cands = sorted(cands, key=lambda e: abs(e.nominal_gb - gb))
    return GpuSelection(cands[0].spec, count)


def gpu_spec(name: str) -> GpuSpec:
    """The spec of one GPU of a loose name (the count, if any, is ignored)."""
    return parse_gpu(name).spec


def custom_gpu(base: GpuSpec | None, memory_gib: float, name: str = "custom") -> GpuSpec:
    """``--gpu-memory-gib``: a known board with another memory size, or a board known only by its
    memory (bandwidth and FLOPs 0: enough for memory planning, refused by a performance estimate)."""
    if memory_gib <= 0:
        raise UnknownGpuError(f"--gpu-memory-gib must be > 0, got {memory_gib}")
    if base is not None:
        return replace(base, memory_gib=memory_gib)
    return GpuSpec(name, memory_gib, 0.0, 0.0, 0.0, 0.0, 0.0)


_SPEC_FIELDS = ("memory_gib", "hbm_gb_s", "bf16_tflops")


def gpu_from_mapping(raw: Mapping[str, object], source: str) -> GpuSpec:
    """A custom board from a parsed YAML/JSON mapping (``--gpu-spec``); errors name the field."""
    vals: dict[str, float] = {}
    for key in (*_SPEC_FIELDS, "fp8_tflops", "nvlink_gb_s", "pcie_gb_s"):
        v = raw.get(key)
        if v is None:
            if key in _SPEC_FIELDS:
                raise UnknownGpuError(f"{source}: field '{key}' is missing")
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise UnknownGpuError(f"{source}: field '{key}' must be a non-negative number, got {v!r}")
        vals[key] = float(v)
    name = raw.get("name")
    return GpuSpec(
        name=str(name) if name is not None else source,
        memory_gib=vals["memory_gib"],
        hbm_gb_s=vals["hbm_gb_s"],
        bf16_tflops=vals["bf16_tflops"],
        fp8_tflops=vals.get("fp8_tflops", 0.0),
        nvlink_gb_s=vals.get("nvlink_gb_s", 0.0),
        pcie_gb_s=vals.get("pcie_gb_s", 32.0),
    )
