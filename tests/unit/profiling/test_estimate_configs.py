"""The GPU-free estimate (`planner profile --estimate`) on every real model config that fits one H200."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner_cli.estimate import write_profile
from planner_cli.main import main
from planner_core.hardware import gpu_spec
from planner_core.interpolation import DecodeInterpolator, PrefillInterpolator
from planner_core.memory.breakdown import predict_memory
from planner_core.memory.settings import EngineSettings
from planner_core.modelcfg import ModelConfigError, load_model_config
from planner_core.profile import load_decode, load_prefill
from planner_core.profiling.model_estimate import EstimateError, estimate_model


def _fits_h200(path: Path) -> bool | None:
    """True/False for a full config; None for a partial summary the memory model cannot size."""
    try:
        model = load_model_config(path)
        mem = predict_memory(model, gpu_spec("h200").memory_gib, EngineSettings(max_model_len=8192))
    except ModelConfigError:
        return None
    return mem.kv_cache_tokens >= 8192


def test_estimate_every_config_that_fits(shared_data: Path, tmp_path: Path) -> None:
    configs = sorted((shared_data / "model_configs").glob("*.json"))
    ran = []
    for cfg in configs:
        fits = _fits_h200(cfg)
        if fits is None:
            continue
        model = load_model_config(cfg)
        if not fits:
            with pytest.raises(EstimateError) as err:
                estimate_model(model, "h200")
            assert err.value.code == 1, cfg.name
            continue
        estimate = estimate_model(model, "h200")
        summary, prefill, decode = estimate
        assert summary["max_kv_tokens"] > 8192, cfg.name
        assert prefill.ttft_ms.min() > 0 and decode.itl_ms.min() > 0, cfg.name
        # the decider takes the files as they are
        written = write_profile(estimate, tmp_path / cfg.stem)
        assert written == summary | {"out": str(tmp_path / cfg.stem)}, cfg.name
        PrefillInterpolator(load_prefill(tmp_path / cfg.stem / "prefill_raw_data.npz"))
        DecodeInterpolator(load_decode(tmp_path / cfg.stem / "decode_raw_data.npz"))
        ran.append(cfg.name)
    assert "meta-llama--Llama-3.1-8B.json" in ran
    assert len(ran) >= 10


def test_estimate_cli_still_works(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = shared_data / "model_configs" / "meta-llama--Llama-3.1-8B.json"
    code = main(
        ["profile", "--estimate", "--model", str(cfg), "--gpu", "h200", "--out", str(tmp_path), "--json"]
    )
    assert code == 0
    assert '"max_kv_tokens"' in capsys.readouterr().out
    assert (tmp_path / "prefill_raw_data.npz").is_file()
    assert main(["profile", "--estimate", "--model", str(cfg), "--tp", "1,2", "--out", str(tmp_path)]) == 2
