"""Typed reads of config.json fields; errors name the file and the field."""

from __future__ import annotations

from planner_core.modelcfg.model import ModelConfigError


def int_field(d: dict[str, object], key: str, src: str, default: int | None = None) -> int:
    v = d.get(key)
    if v is None:
        if default is None:
            raise ModelConfigError(f"{src}: required field '{key}' is missing")
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or int(v) != v:
        raise ModelConfigError(f"{src}: field '{key}' must be a non-negative integer, got {v!r}")
    return int(v)


def arch_name(d: dict[str, object]) -> str:
    archs = d.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    arch = d.get("architecture")
    return arch if isinstance(arch, str) else ""


def dtype_name(d: dict[str, object], outer: dict[str, object]) -> str:
    for src in (d, outer):
        for key in ("torch_dtype", "dtype"):
            v = src.get(key)
            if isinstance(v, str):
                return v
    return "bfloat16"
