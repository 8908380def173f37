"""The file side of the GPU-free estimate (:mod:`planner_core.profiling.model_estimate`): read a
``--gpu-spec`` YAML file and a model config.json, write the profile files the decider reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planner_core.hardware import GpuSelection
from planner_core.modelcfg import ModelConfig
from planner_core.profiling.model_estimate import LLAMA_8B_ARCH, EstimateError, ModelEstimate, select_gpu


def resolve_gpu(name: str, memory_gib: float | None = None, spec_path: str | None = None) -> GpuSelection:
    """:func:`select_gpu` with ``--gpu-spec`` read from ``spec_path``; every failure is an
    :class:`EstimateError` with one clear line."""
    if not spec_path:
        return select_gpu(name, memory_gib)
    import yaml

    try:
        raw = yaml.safe_load(Path(spec_path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise EstimateError(f"--gpu-spec {spec_path}: cannot read: {exc}") from None
    if not isinstance(raw, dict):
        raise EstimateError(f"--gpu-spec {spec_path}: top level must be a mapping")
    return select_gpu(name, memory_gib, raw, spec_path)


def load_model(path: Path) -> ModelConfig:
    """The model config at ``path``; an unreadable or invalid one is an :class:`EstimateError`."""
    from planner_core.modelcfg import ModelConfigError, load_model_config

    try:
        return load_model_config(path)
    except ModelConfigError as exc:
        raise EstimateError(str(exc)) from None


def write_profile(estimate: ModelEstimate, out: Path) -> dict[str, Any]:
    """Write ``prefill_raw_data.npz`` and ``decode_raw_data.npz`` to ``out``; the summary with
    ``out`` added."""
    from planner_core.profile import save_decode, save_prefill

    out.mkdir(parents=True, exist_ok=True)
    save_prefill(estimate.prefill, out / "prefill_raw_data.npz")
    save_decode(estimate.decode, out / "decode_raw_data.npz")
    return estimate.summary | {"out": str(out)}


def write_default_model_config(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(LLAMA_8B_ARCH, indent=1))
    return path
