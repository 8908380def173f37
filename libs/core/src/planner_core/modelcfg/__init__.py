"""Model architecture from a local HF ``config.json`` (or a ``.summary.json`` partial summary).

:func:`load_model_config` reads the file a caller names; everything else is pure arithmetic over the
frozen :class:`ModelConfig`: parameter counts (total and active per token), weight bytes and KV-cache
bytes per token. Multimodal wrappers (``text_config``) are unwrapped to their language model; the
vision tower is ignored (it is small next to the LLM, and vLLM profiles it separately).

A ``.summary.json`` file holds only some fields (layers, KV heads, head_dim, a per-token KV figure).
Fields it lacks are 0 and listed in :attr:`ModelConfig.missing`; a function that needs one of them
raises :class:`ModelConfigError` naming the file and the field, rather than guessing.
"""

from planner_core.modelcfg.model import (
    DTYPE_BYTES,
    LayerAttention,
    LayerKind,
    MLAConfig,
    ModelConfig,
    ModelConfigError,
    MoEConfig,
    QuantConfig,
    dtype_bytes,
)
from planner_core.modelcfg.parse import load_model_config, parse_hf_config, parse_summary
from planner_core.modelcfg.quant import parse_quant, quant_from_flag

__all__ = [
    "DTYPE_BYTES",
    "LayerAttention",
    "LayerKind",
    "MLAConfig",
    "MoEConfig",
    "ModelConfig",
    "ModelConfigError",
    "QuantConfig",
    "dtype_bytes",
    "load_model_config",
    "parse_hf_config",
    "parse_quant",
    "parse_summary",
    "quant_from_flag",
]
