"""TP all-reduce arithmetic, the roofline's communication term, and the serving model's structure."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner_core.engine.roofline import RooflineTiming
from planner_core.hardware import gpu_spec
from planner_core.modelcfg import load_model_config, quant_from_flag
from planner_core.profiling.serving import ServingParams, ServingPoint, predict_serving
from planner_core.profiling.silicon import usable
from planner_core.profiling.tp_comms import CommParams, allreduce_s, pass_comm_s


@pytest.mark.parametrize(
    ("gpu", "tp", "nbytes", "expected_s"),
    [
        # H100 NVLink 900 GB/s bidirectional -> 450 GB/s per direction x 0.7 = 315e9 B/s;
        # ring: 2 x 7/8 x 64 MiB / 315e9 = 0.4661 ms, + 8 us latency
        ("h100", 8, 64 * 2**20, 8e-6 + 2 * 7 / 8 * 64 * 2**20 / 315e9),
        # TP2: 2 x 1/2 x 1 MB / 315e9 + 8 us
        ("h100", 2, 1e6, 8e-6 + 1e6 / 315e9),
        # L40S has no NVLink: PCIe 4.0 x16 32 GB/s x 0.7, latency x3
        ("l40s", 2, 1e6, 24e-6 + 1e6 / 22.4e9),
        ("h100", 1, 1e9, 0.0),
    ],
)
def test_allreduce(gpu: str, tp: int, nbytes: float, expected_s: float) -> None:
    assert allreduce_s(nbytes, tp, gpu_spec(gpu), CommParams()) == pytest.approx(expected_s)


def test_pass_comm_two_per_layer() -> None:
    g = gpu_spec("h200")
    # 80 layers x 2 all-reduces of 512 tokens x 8192 hidden x 2 bytes
    one = allreduce_s(512 * 8192 * 2, 4, g)
    assert pass_comm_s(512, 8192, 80, 4, g) == pytest.approx(160 * one)
    assert pass_comm_s(512, 8192, 80, 1, g) == 0.0


def test_roofline_pays_for_tp(shared_data: Path) -> None:
    m = load_model_config(shared_data / "model_configs" / "meta-llama--Llama-3.1-70B.json")
    g, q = gpu_spec("h100"), quant_from_flag("fp8")
    t1 = RooflineTiming.build(m, g, quant=q, tp=1)
    t8 = RooflineTiming.build(m, g, quant=q, tp=8)
    # 160 all-reduces of >= 8 us each: a decode pass of TP8 costs at least 1.28 ms more than 1/8 of TP1's
    assert t8.comm_fixed_s == pytest.approx(160 * 8e-6)
    d1, d8 = t1.pass_time_s(0, 0, 32, 32 * 2000), t8.pass_time_s(0, 0, 32, 32 * 2000)
    assert d8 > d1 / 8 + 160 * 8e-6 - t1.params.pass_overhead_s
    assert t1.comm_fixed_s == 0.0


def test_serving_structure(shared_data: Path) -> None:
    m = load_model_config(shared_data / "model_configs" / "meta-llama--Llama-3.1-70B.json")
    g, p = gpu_spec("h200"), ServingParams()
    lo = predict_serving(m, g, ServingPoint(1024, 1024, 4, tp=4), p)
    hi = predict_serving(m, g, ServingPoint(1024, 1024, 64, tp=4), p)
    assert hi.tpot_ms > lo.tpot_ms and hi.ttft_ms > lo.ttft_ms and hi.running == 64
    # TTFT: fixed + prefill x (1 + w_queue x (B - 1))
    assert lo.ttft_ms == pytest.approx(p.ttft_fixed_s * 1e3 + lo.prefill_ms * (1 + p.w_queue * 3))
    # 64 x (1024 + 8192) tokens do not fit one H200 at TP1 next to 70 GB of FP8 weights: requests wait
    tight = predict_serving(m, g, ServingPoint(1024, 8192, 64, tp=1), p)
    assert tight.running < 64 and tight.ttft_ms > 10 * lo.ttft_ms
    tp8 = predict_serving(m, g, ServingPoint(1024, 1024, 4, tp=8), p)
    assert tp8.decode_pass_ms < lo.decode_pass_ms


def test_usable_rows_reasons() -> None:
    base = {"id": "x", "mode": "agg", "pp_size": "1", "attention_dp_size": "1", "tp_size": "4", "moe_ep_size": "1",
            "model_path": "m", "precision": "fp8", "system": "h200_sxm", "isl": "1024", "osl": "128",
            "batch_size": "8", "backend": "vllm", "silicon_ttft_ms": "100", "silicon_tpot_ms": "10"}  # fmt: skip
    assert not isinstance(usable(base, lambda _: True), str)
    assert usable({**base, "mode": "disagg"}, lambda _: True) == "disaggregated"
    assert usable(base, lambda _: False) == "no model config"
    # whole experts spread over the TP group (vLLM --enable-expert-parallel): modelled
    ep = usable({**base, "moe_ep_size": "4", "moe_tp_size": "1"}, lambda _: True)
    assert not isinstance(ep, str) and ep.point.ep == 4 and ep.point.tp == 4
    assert usable({**base, "moe_ep_size": "8"}, lambda _: True) == "expert parallel over more GPUs"
    assert (
        usable({**base, "tp_size": "16", "moe_ep_size": "4", "moe_tp_size": "4"}, lambda _: True)
        == "expert parallel x expert TP"
    )
    # MoE sharded over more GPUs than the attention's TP group: attention data parallel, even with
    # attention_dp_size left empty (vLLM rows "tp 2, moe_tp 4" run on four GPUs)
    assert (
        usable({**base, "attention_dp_size": "", "moe_tp_size": "8"}, lambda _: True)
        == "attention data parallel"
    )
    assert not isinstance(usable({**base, "moe_tp_size": "4"}, lambda _: True), str)
    assert not isinstance(usable({**base, "moe_tp_size": "1"}, lambda _: True), str)  # dense rows say 1
    assert usable({**base, "system": "tpu_v5"}, lambda _: True) == "unknown GPU system"
    assert usable({**base, "silicon_ttft_ms": "n/a"}, lambda _: True) == "no measurement"
