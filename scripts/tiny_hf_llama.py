"""Make the tiny random-weight Llama that the real-vLLM tests and demo serve, in Hugging Face format.

Runs with vLLM's own Python (it needs transformers and tokenizers, which the planner's environment
does not carry): ``python scripts/tiny_hf_llama.py [DIR]`` (default
``~/.cache/planner/models/tiny-hf-llama``). Idempotent: an existing complete model is kept.

The text it writes is noise, but everything vLLM does with it is real: tokenization (a byte-level
BPE vocabulary trained here, on generated text, so any text maps to tokens), prefill, decode, the
paged KV cache, scheduling and /metrics. Fixed seeds: the same shape gives the same model.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

SHAPE = {
    "num_hidden_layers": 2,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "vocab_size": 2048,
    "max_position_embeddings": 4096,
}
SEED = 13
DONE = "planner-tiny.json"
"""Written last: its presence means the folder is complete (and with which shape)."""


def default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "planner" / "models" / "tiny-hf-llama"


def _corpus(n_lines: int = 4000) -> list[str]:
    rng = random.Random(SEED)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "ve", "da", "gen", "ro", "ti", "ul", "an"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(600)]
    words += [str(i) for i in range(100)] + list(".,;:!?()-'\"")
    return [" ".join(rng.choice(words) for _ in range(rng.randint(4, 24))) for _ in range(n_lines)]


def make(dest: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=SHAPE["vocab_size"],
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=SHAPE["max_position_embeddings"],
    )
    torch.manual_seed(SEED)
    cfg = LlamaConfig(
        **SHAPE,
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"),
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-hf-llama-", dir=dest.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        fast.save_pretrained(tmp)
        (tmp / DONE).write_text(json.dumps({"shape": SHAPE, "seed": SEED}))
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str]) -> int:
    dest = Path(argv[1]) if len(argv) > 1 else default_dir()
    done = dest / DONE
    if done.exists() and json.loads(done.read_text()).get("shape") == SHAPE:
        print(dest)
        return 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    make(dest)
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
