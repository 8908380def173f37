"""Pick the per-pass timing model and the KV figures the settings ask for (reads profile files)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from planner_core.engine import (
    CalibratedTiming,
    MockerTiming,
    RooflineTiming,
    SchedulerConfig,
    TimingModel,
    fit_calibrated,
)
from planner_core.hardware import gpu_spec
from planner_core.modelcfg import load_model_config
from planner_core.profile import load_decode, load_prefill
from planner_engine_sim.settings import EngineSimSettings

DEFAULT_NUM_GPU_BLOCKS = SchedulerConfig().num_gpu_blocks
DEFAULT_KV_BYTES_PER_TOKEN = 131072.0
"""Llama-3.1-8B: 32 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes (bf16 KV cache)."""


@dataclass(frozen=True)
class TimingChoice:
    model: TimingModel
    kind: str
    source: str
    num_gpu_blocks: int
    kv_bytes_per_token: float


def default_profile_dirs() -> list[Path]:
    """../shared/data/dynamo seen from the working directory, then from the repository."""
    repo = Path(__file__).resolve().parents[4]
    return [Path.cwd().parent / "shared" / "data" / "dynamo", repo.parent / "shared" / "data" / "dynamo"]


def _profile_file(folder: Path, name: str, kind: str) -> Path | None:
    for suffix in (".npz", ".json"):
        path = folder / f"{name}_{kind}_raw_data{suffix}"
        if path.is_file():
            return path
    return None


def _blocks(settings: EngineSimSettings, kv_tokens: int) -> int:
    if settings.num_gpu_blocks:
        return settings.num_gpu_blocks
    return max(1, kv_tokens // settings.block_size) if kv_tokens else DEFAULT_NUM_GPU_BLOCKS


def choose_timing(settings: EngineSimSettings) -> TimingChoice:
    """Raises ValueError (ProfileError, ModelConfigError, UnknownGpuError) with the file and field."""
    kv_bytes = settings.kv_bytes_per_token or DEFAULT_KV_BYTES_PER_TOKEN
    if settings.timing == "roofline":
        model_cfg = load_model_config(settings.model_config)
        timing = RooflineTiming.build(model_cfg, gpu_spec(settings.gpu))
        kv_bytes = settings.kv_bytes_per_token or model_cfg.kv_bytes_per_token()
        return TimingChoice(timing, "roofline", settings.model_config, _blocks(settings, 0), float(kv_bytes))
    if settings.timing == "calibrated":
        folders = [Path(settings.profile_dir)] if settings.profile_dir else default_profile_dirs()
        for folder in folders:
            pre = _profile_file(folder, settings.profile_name, "prefill")
            dec = _profile_file(folder, settings.profile_name, "decode")
            if pre and dec:
                prefill, decode = load_prefill(pre), load_decode(dec)
                fitted: CalibratedTiming = fit_calibrated(prefill, decode)
                return TimingChoice(
                    fitted, "calibrated", str(pre), _blocks(settings, decode.max_kv_tokens), kv_bytes
                )
        if settings.profile_dir:
            raise ValueError(
                f"profile_dir {settings.profile_dir}: no {settings.profile_name}_prefill_raw_data.npz/.json "
                f"and matching _decode_ file"
            )
    blocks = _blocks(settings, 0)
    return TimingChoice(MockerTiming(blocks * settings.block_size), "mocker", "default", blocks, kv_bytes)
