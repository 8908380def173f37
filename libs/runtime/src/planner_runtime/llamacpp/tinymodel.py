"""A tiny random-weight Llama model in GGUF, generated once and cached, so a real llama-server can run
on any machine without downloading a model.

Its text is noise but everything the server does with it is real: tokenization (a byte-fallback
SentencePiece vocabulary, so any text maps to tokens), prefill, decode, KV cache, slots and /metrics.
The file is a function of :class:`TinyLlama` only: the same shape gives the same bytes (fixed seed),
cached under ``~/.cache/planner/models/`` with the shape in its name.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}"
)
"""A ChatML template, so ``/v1/chat/completions`` works."""


@dataclass(frozen=True)
class TinyLlama:
    layers: int = 4
    hidden: int = 256
    heads: int = 8
    kv_heads: int = 2
    ffn: int = 512
    context: int = 4096
    extra_tokens: int = 64
    """Normal (non-byte) vocabulary entries after the 3 control and 256 byte tokens."""
    seed: int = 13

    @property
    def vocab(self) -> int:
        return 3 + 256 + self.extra_tokens

    @property
    def file_name(self) -> str:
        return (
            f"tiny-llama-l{self.layers}-h{self.hidden}-a{self.heads}-kv{self.kv_heads}"
            f"-f{self.ffn}-c{self.context}-v{self.vocab}-s{self.seed}.gguf"
        )


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "planner" / "models"


def _vocab(spec: TinyLlama) -> tuple[list[str], list[float], list[int]]:
    import gguf

    tokens = ["<unk>", "<s>", "</s>"]
    types = [int(gguf.TokenType.UNKNOWN), int(gguf.TokenType.CONTROL), int(gguf.TokenType.CONTROL)]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [int(gguf.TokenType.BYTE)] * 256
    # A few whole pieces (word-start marker and lower-case letters), so common text merges a little.
    pieces = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += ["\u2581" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces = pieces[: spec.extra_tokens]
    while len(pieces) < spec.extra_tokens:
        pieces.append(f"<extra_{len(pieces)}>")
    tokens += pieces
    types += [int(gguf.TokenType.NORMAL)] * len(pieces)
    scores = [0.0] * (3 + 256) + [-float(i) for i in range(len(pieces))]
    return tokens, scores, types


def write_tiny_llama(path: Path, spec: TinyLlama) -> None:
    """Write the model to ``path`` (overwrites)."""
    import gguf

    rng = np.random.default_rng(spec.seed)
    head_dim = spec.hidden // spec.heads
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("planner-tiny-llama")
    w.add_context_length(spec.context)
    w.add_embedding_length(spec.hidden)
    w.add_block_count(spec.layers)
    w.add_feed_forward_length(spec.ffn)
    w.add_head_count(spec.heads)
    w.add_head_count_kv(spec.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(spec.vocab)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))

    tokens, scores, types = _vocab(spec)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHATML)

    def mat(rows: int, cols: int) -> np.ndarray:
        out: np.ndarray = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float16)
        return out

    def norm(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    h, kv = spec.hidden, spec.kv_heads * head_dim
    w.add_tensor("token_embd.weight", mat(spec.vocab, h))
    for i in range(spec.layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(h))
        w.add_tensor(p + "attn_q.weight", mat(h, h))
        w.add_tensor(p + "attn_k.weight", mat(kv, h))
        w.add_tensor(p + "attn_v.weight", mat(kv, h))
        w.add_tensor(p + "attn_output.weight", mat(h, h))
        w.add_tensor(p + "ffn_norm.weight", norm(h))
        w.add_tensor(p + "ffn_gate.weight", mat(spec.ffn, h))
        w.add_tensor(p + "ffn_up.weight", mat(spec.ffn, h))
        w.add_tensor(p + "ffn_down.weight", mat(h, spec.ffn))
    w.add_tensor("output_norm.weight", norm(h))
    w.add_tensor("output.weight", mat(spec.vocab, h))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def ensure_tiny_llama(spec: TinyLlama | None = None, cache_dir: Path | None = None) -> Path:
    """The cached model file for ``spec``, generated first if absent (atomically: a half-written file
    is never visible under the final name)."""
    spec = spec or TinyLlama()
    folder = cache_dir or default_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / spec.file_name
    if path.is_file() and path.stat().st_size > 0:
        return path
    fd, tmp = tempfile.mkstemp(prefix=".tiny-llama-", suffix=".gguf", dir=folder)
    os.close(fd)
    try:
        write_tiny_llama(Path(tmp), spec)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
