"""llm-d-planner's capacity planner on the rows :mod:`bench_memory` hands it (run by its own Python).

Not part of the product: ``bench_memory.py --peer-python /path/to/venv/bin/python`` runs this file
with the interpreter of a throwaway venv holding ``llm-d-planner`` (0.3.3) and ``transformers``.
The peer reads a model's config and its parameter counts by dtype from the Hugging Face hub; with
no hub here, it gets the local config.json and the parameter counts ``bench_memory`` computed, and
nothing else of ours. Its inputs are what its API takes: GPU memory (whole GiB, as it truncates),
utilisation, TP/PP, max_model_len, batch size (max_num_seqs) and block size; it has no input for an
fp8 KV cache or ``--quantization``. Per GPU: its KV budget and blocks are totals over the TP x PP
GPUs, so both are divided by TP x PP; its concurrency is whole requests, as it reports them.

    python benchmarks/memory_peer_llmd.py rows.json   # prints a JSON list, one entry per row
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any


def main() -> int:
    import planner.capacity_planner as cp  # type: ignore[import-not-found]
    from transformers import AutoConfig  # type: ignore[import-not-found]

    rows = json.loads(Path(sys.argv[1]).read_text())
    out: list[dict[str, Any]] = []
    for r in rows:
        d = Path(tempfile.mkdtemp())
        raw = json.loads(Path(r["config"]).read_text())
        if "_note" in raw:  # a summary with every field: given the shape of a config.json
            raw = {k: v for k, v in raw.items() if not k.startswith("_")}
            raw.setdefault("architectures", [raw.get("architecture", "")])
        (d / "config.json").write_text(json.dumps(raw))
        try:
            cfg = AutoConfig.from_pretrained(str(d))
            cp.get_model_config_from_hf = lambda *_a, _c=cfg, **_k: _c
            cp.model_params_by_dtype = lambda *_a, _p=r["params"], **_k: dict(_p)
            tp, pp, gib = r["tp"], r["pp"], int(r["gpu_gib"])
            alloc = cp.allocatable_kv_cache_memory(
                "m", cfg, gib, r["util"], tp, pp, 1, max_model_len=r["mml"], batch_size=r["seqs"]
            )
            blocks = cp.total_kv_cache_blocks(
                "m", cfg, r["mml"], gib, r["util"], r["seqs"], r["block"], tp, pp, 1
            )
            conc = cp.max_concurrent_requests("m", cfg, r["mml"], gib, r["util"], r["seqs"], tp, pp, 1)
            out.append({"row_id": r["row_id"], "kv_cache_gib": alloc / (tp * pp),
                        "kv_cache_tokens": blocks * r["block"] / (tp * pp), "max_concurrency": conc})  # fmt: skip
        except Exception as exc:
            out.append({"row_id": r["row_id"], "error": f"{type(exc).__name__}: {exc}"})
        finally:
            shutil.rmtree(d)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
