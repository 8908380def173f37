"""vLLM engine settings that shape memory, and vLLM's own defaults for the ones left unset."""

from __future__ import annotations

import re
from dataclasses import dataclass

# vLLM's default for an OpenAI server on a >= 70 GiB GPU (H100/H200/B200/A100-80GB); smaller GPUs
# get the second pair.
BIG_GPU_GIB = 70.0
DEFAULT_MAX_NUM_SEQS = (1024, 256)
DEFAULT_MAX_NUM_BATCHED_TOKENS = (8192, 2048)


# vLLM >= 0.21 counts CUDA-graph memory inside the budget and raised the default to compensate.
UTILIZATION_092_SINCE = (0, 21)

Version = tuple[int, ...]  # (major, minor) or (major, minor, patch); compared as tuples

# The versions whose start-up this model follows. From 0.8.0 the V1 engine is vLLM's default: one
# profile run (max_num_batched_tokens through the model, max_num_seqs through the sampler), KV =
# budget - weights - activation peak - non-torch, and the "GPU KV cache size" / "Maximum
# concurrency" log lines. Older versions (the V0 engine) profile differently and are refused. The
# newest version whose behaviour is modelled is 0.21 (CUDA graphs inside the budget); later ones are
# estimated as 0.21 with a warning.
OLDEST_SUPPORTED_VLLM: Version = (0, 8, 0)
NEWEST_MODELLED_VLLM: Version = (0, 21)


def format_version(v: Version) -> str:
    return ".".join(str(x) for x in v)


def supported_range() -> str:
    return f"{format_version(OLDEST_SUPPORTED_VLLM)} to {format_version(NEWEST_MODELLED_VLLM)}.x"


def version_problem(v: Version) -> str | None:
    """Why vLLM ``v`` is refused (older than the V1 engine's default), or None when it is supported."""
    if v < OLDEST_SUPPORTED_VLLM:
        return (
            f"vLLM {format_version(v)} is not supported: the memory model follows the V1 engine's "
            f"start-up (vLLM {supported_range()})"
        )
    return None


def version_warning(v: Version) -> str | None:
    """A one-line caveat for versions newer than the newest one modelled, else None."""
    if v[:2] > NEWEST_MODELLED_VLLM[:2]:
        return (
            f"vLLM {format_version(v)} is newer than the newest version modelled "
            f"({format_version(NEWEST_MODELLED_VLLM)}); estimated as {format_version(NEWEST_MODELLED_VLLM)}"
        )
    return None


def default_gpu_memory_utilization(vllm_version: Version) -> float:
    """vLLM's default ``gpu_memory_utilization`` for a version."""
    return 0.92 if vllm_version >= UTILIZATION_092_SINCE else 0.9


class SettingsError(ValueError):
    """An engine setting out of its allowed range (names the field)."""


@dataclass(frozen=True)
class EngineSettings:
    gpu_memory_utilization: float = 0.9
    max_model_len: int = 8192
    max_num_seqs: int | None = None  # None: vLLM's default for the GPU size
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"  # "auto" = the checkpoint dtype
    quantization: str = ""  # --quantization on an unquantized checkpoint ("fp8"); "" = none
    tp: int = 1
    pp: int = 1
    block_size: int = 16
    cudagraph_capture_sizes: tuple[int, ...] | None = None  # None: vLLM's default list
    enforce_eager: bool = False
    vllm_version: Version = (0, 19)
    # --disable-hybrid-kv-cache-manager: every layer keeps KV for every token, sliding or not
    disable_hybrid_kv_cache_manager: bool = False

    def validate(self) -> None:
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise SettingsError(f"gpu_memory_utilization={self.gpu_memory_utilization} not in (0, 1]")
        for name in ("max_model_len", "tp", "pp", "block_size"):
            if getattr(self, name) < 1:
                raise SettingsError(f"{name}={getattr(self, name)} must be >= 1")
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise SettingsError(f"{name}={v} must be >= 1")
        if self.cudagraph_capture_sizes is not None and any(s < 1 for s in self.cudagraph_capture_sizes):
            raise SettingsError("cudagraph_capture_sizes must be positive")
        problem = version_problem(self.vllm_version)
        if problem is not None:
            raise SettingsError(problem)

    def resolved_max_num_seqs(self, gpu_total_gib: float) -> int:
        if self.max_num_seqs is not None:
            return self.max_num_seqs
        return DEFAULT_MAX_NUM_SEQS[0 if gpu_total_gib >= BIG_GPU_GIB else 1]

    def resolved_max_num_batched_tokens(self, gpu_total_gib: float) -> int:
        if self.max_num_batched_tokens is not None:
            return self.max_num_batched_tokens
        return DEFAULT_MAX_NUM_BATCHED_TOKENS[0 if gpu_total_gib >= BIG_GPU_GIB else 1]

    def capture_sizes(self, gpu_total_gib: float) -> tuple[int, ...]:
        if self.enforce_eager:
            return ()
        if self.cudagraph_capture_sizes is not None:
            return tuple(sorted(set(self.cudagraph_capture_sizes)))
        return default_capture_sizes(self.resolved_max_num_seqs(gpu_total_gib), self.vllm_version)


def default_capture_sizes(max_num_seqs: int, vllm_version: Version = (0, 19)) -> tuple[int, ...]:
    """vLLM's default CUDA-graph capture sizes.

    Since 0.11 the largest size is min(2 * max_num_seqs, 512), with steps of 8 up to 256 and of 16
    beyond (51 sizes at the default 1024 seqs). Before that: 1, 2, 4 and multiples of 8 up to 512,
    capped at max_num_seqs (67 sizes, the list the seed spec uses).
    """
    if vllm_version >= (0, 11):
        top = min(2 * max_num_seqs, 512)
        sizes = [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)]
    else:
        top = min(max_num_seqs, 512)
        sizes = [1, 2, 4, *range(8, 513, 8)]
    return tuple(s for s in sizes if s <= top)


def parse_version(text: str) -> Version:
    """ "0.19.0" -> (0, 19, 0), "v0.9.1rc2" -> (0, 9, 1), "0.19" -> (0, 19, 0); empty -> (0, 19, 0), the
    version most reports come from. Raises :class:`SettingsError` on text that is not a version."""
    t = text.strip().lstrip("vV")
    if not t:
        return (0, 19, 0)
    m = _VERSION.match(t)
    if m is None:
        raise SettingsError(f"vllm_version {text.strip()!r} is not a version like 0.19.0")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")
