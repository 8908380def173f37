"""Engine performance profiles in the reference format (NPZ or JSON), as plain frozen data.

Prefill: 1-D arrays ``prefill_isl`` [tokens], ``prefill_ttft`` [ms], ``prefill_thpt_per_gpu``
[tokens/s/GPU]. Decode: scattered points ``x_kv_usage`` [fraction of max_kv_tokens],
``y_context_length`` [tokens], ``z_itl`` [ms], ``z_thpt_per_gpu`` [output tokens/s/GPU], plus the scalar
``max_kv_tokens``. Pre-swept NPZ files stack one row per engine config; :func:`load_prefill` and
:func:`load_decode` take a ``row``.

Reading files is the only I/O here, and it happens only when a caller hands us a path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

PREFILL_KEYS = ("prefill_isl", "prefill_ttft", "prefill_thpt_per_gpu")
DECODE_KEYS = ("x_kv_usage", "y_context_length", "z_itl", "z_thpt_per_gpu")


class ProfileError(ValueError):
    """A profile file that is missing, unreadable, or inconsistent (names the file and the field)."""


@dataclass(frozen=True)
class PrefillProfile:
    isl_tokens: FloatArray
    ttft_ms: FloatArray
    thpt_per_gpu: FloatArray
    source: str = ""


@dataclass(frozen=True)
class DecodeProfile:
    kv_usage: FloatArray
    context_length_tokens: FloatArray
    itl_ms: FloatArray
    thpt_per_gpu: FloatArray
    max_kv_tokens: int
    source: str = ""


def _read(path: Path) -> dict[str, object]:
    try:
        if path.suffix == ".json":
            data: dict[str, object] = json.loads(path.read_text())
            return data
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files if npz[k].dtype.kind in "fiu"}
    except (OSError, ValueError) as exc:
        raise ProfileError(f"{path}: cannot read profile: {exc}") from None


def _array(data: dict[str, object], key: str, path: Path, row: int) -> FloatArray:
    if key not in data:
        raise ProfileError(f"{path}: missing field {key!r}")
    arr = np.asarray(data[key], dtype=np.float64)
    if arr.ndim == 2:
        if not 0 <= row < arr.shape[0]:
            raise ProfileError(f"{path}: row {row} out of range (file has {arr.shape[0]} configs)")
        arr = arr[row]
    if arr.ndim != 1 or arr.size == 0:
        raise ProfileError(f"{path}: field {key!r} must be a non-empty 1-D array")
    if not np.all(np.isfinite(arr)):
        raise ProfileError(f"{path}: field {key!r} has NaN or infinite values")
    return arr


def _same_length(path: Path, arrays: dict[str, FloatArray]) -> None:
    sizes = {k: v.size for k, v in arrays.items()}
    if len(set(sizes.values())) != 1:
        raise ProfileError(f"{path}: fields differ in length: {sizes}")


def load_prefill(path: str | Path, row: int = 0) -> PrefillProfile:
    p = Path(path)
    data = _read(p)
    arrays = {k: _array(data, k, p, row) for k in PREFILL_KEYS}
    _same_length(p, arrays)
    order = np.argsort(arrays["prefill_isl"])
    return PrefillProfile(
        isl_tokens=arrays["prefill_isl"][order],
        ttft_ms=arrays["prefill_ttft"][order],
        thpt_per_gpu=arrays["prefill_thpt_per_gpu"][order],
        source=str(p),
    )


def load_decode(path: str | Path, row: int = 0) -> DecodeProfile:
    p = Path(path)
    data = _read(p)
    arrays = {k: _array(data, k, p, row) for k in DECODE_KEYS}
    _same_length(p, arrays)
    if "max_kv_tokens" not in data:
        raise ProfileError(f"{p}: missing field 'max_kv_tokens'")
    max_kv = np.asarray(data["max_kv_tokens"]).ravel()
    if max_kv.size == 0 or int(max_kv[min(row, max_kv.size - 1)]) <= 0:
        raise ProfileError(f"{p}: 'max_kv_tokens' must be a positive integer")
    return DecodeProfile(
        kv_usage=arrays["x_kv_usage"],
        context_length_tokens=arrays["y_context_length"],
        itl_ms=arrays["z_itl"],
        thpt_per_gpu=arrays["z_thpt_per_gpu"],
        max_kv_tokens=int(max_kv[min(row, max_kv.size - 1)]),
        source=str(p),
    )


def save_prefill(profile: PrefillProfile, path: str | Path) -> None:
    """Write the reference format: ``.npz`` (np.savez) or ``.json`` by suffix."""
    fields: dict[str, FloatArray | int] = {
        "prefill_isl": profile.isl_tokens,
        "prefill_ttft": profile.ttft_ms,
        "prefill_thpt_per_gpu": profile.thpt_per_gpu,
    }
    _save(fields, Path(path))


def save_decode(profile: DecodeProfile, path: str | Path) -> None:
    fields: dict[str, FloatArray | int] = {
        "x_kv_usage": profile.kv_usage,
        "y_context_length": profile.context_length_tokens,
        "z_itl": profile.itl_ms,
        "z_thpt_per_gpu": profile.thpt_per_gpu,
        "max_kv_tokens": profile.max_kv_tokens,
    }
    _save(fields, Path(path))


def _save(fields: dict[str, FloatArray | int], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        out = {k: (v if isinstance(v, int) else np.asarray(v).tolist()) for k, v in fields.items()}
        path.write_text(json.dumps(out, indent=1))
    else:
        arrays = {k: (np.array([v]) if isinstance(v, int) else np.asarray(v)) for k, v in fields.items()}
        np.savez(path, **arrays)  # type: ignore[arg-type]  # numpy's stub lets **kwds fill allow_pickle: bool
