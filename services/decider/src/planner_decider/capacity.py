"""The profile for throughput mode: which files, and the interpolators built from them once."""

from __future__ import annotations

from pathlib import Path

from planner_core.interpolation import DecodeInterpolator, PrefillInterpolator
from planner_core.policy import CapacityModel
from planner_core.profile import load_decode, load_prefill

DEFAULT_PREFILL = "h200_llama31_8b_fp8_tp1_prefill_raw_data.npz"
DEFAULT_DECODE = "h200_llama31_8b_fp8_tp1_decode_raw_data.npz"
_SUFFIXES = (".npz", ".json")


def _pick(folder: Path, role: str, preferred: str) -> Path:
    if (folder / preferred).is_file():
        return folder / preferred
    found = sorted(p for p in folder.iterdir() if role in p.name and p.suffix in _SUFFIXES)
    if not found:
        raise FileNotFoundError(f"profile_dir {folder}: no *{role}*.npz or *{role}*.json file")
    return found[0]


def profile_files(folder: Path) -> tuple[Path, Path]:
    """(prefill file, decode file) in ``folder``: the H200 reference names first, else the first
    ``*prefill*`` / ``*decode*`` NPZ or JSON file in name order."""
    if not folder.is_dir():
        raise FileNotFoundError(f"profile_dir {folder}: not a directory")
    return _pick(folder, "prefill", DEFAULT_PREFILL), _pick(folder, "decode", DEFAULT_DECODE)


def load_capacity(folder: Path) -> CapacityModel:
    prefill, decode = profile_files(folder)
    return CapacityModel(
        prefill=PrefillInterpolator(load_prefill(prefill)), decode=DecodeInterpolator(load_decode(decode))
    )
