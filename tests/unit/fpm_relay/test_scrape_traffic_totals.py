"""Traffic totals read by the scrape adapters: on the real vLLM 0.32 capture, and per kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner_fpm_relay.scrape.adapters import read_load

CAPTURE = "engines/vllm-0.32.0-cpu-metrics.txt"


def _capture(shared_data: Path) -> tuple[str, str]:
    path = shared_data / CAPTURE
    if not path.is_file():
        pytest.skip(f"real vLLM capture {CAPTURE} not found under the shared data folder")
    head, sep, tail = path.read_text().partition("# Part B")
    return head, sep + tail


def test_real_vllm_capture_traffic_totals(shared_data: Path) -> None:
    idle, loaded = _capture(shared_data)
    a = read_load("vllm", idle)
    # request_success_total sums every finished_reason (stop 0 + length 21 + abort/error/repetition 0);
    # the prompt/generation length histograms saw the same 21 requests: 3438 and 1344 tokens.
    assert (a.requests_total, a.isl_tokens_sum, a.isl_tokens_count) == (21.0, 3438.0, 21.0)
    assert (a.osl_tokens_sum, a.osl_tokens_count) == (1344.0, 21.0)
    assert not [m for m in a.missing if m.startswith(("requests", "isl", "osl"))]
    # the per-request time-per-output-token histogram: 20 of the 21 at or under 10 ms, all by 25 ms
    assert a.tpot_bucket_le_s[:3] == (0.01, 0.025, 0.05) and len(a.tpot_bucket_le_s) == 19
    assert a.tpot_bucket_counts[:2] == (20.0, 21.0) and a.tpot_bucket_counts[-1] == 21.0
    b = read_load("vllm", loaded)
    # mid-load: 72 finished; prompt_tokens_total (60704) also counts the 56 in flight, the histogram not
    assert (b.requests_total, b.isl_tokens_sum, b.osl_tokens_sum) == (72.0, 58008.0, 18432.0)
    assert b.prompt_tokens_total == 60704.0
    assert (b.running_requests, b.waiting_requests) == (8, 48)


@pytest.mark.parametrize(
    ("kind", "text", "want", "missing"),
    [
        (
            "sglang",
            'sglang:num_requests_total{model_name="m"} 5\nsglang:prompt_tokens_total{model_name="m"} 50\n',
            (5.0, None, None),
            ("isl_tokens_sum", "isl_tokens_count", "osl_tokens_sum", "osl_tokens_count"),
        ),
        (
            "sglang",
            "sglang:num_requests_total 4\nsglang:prompt_tokens_total 40\nsglang:prompt_tokens_histogram_sum 40\n"
            "sglang:prompt_tokens_histogram_count 4\n",
            (4.0, 40.0, 4.0),
            ("osl_tokens_sum", "osl_tokens_count"),
        ),
        # llama.cpp counts no requests and has no length histograms: None, and not listed as missing
        ("llamacpp", "llamacpp:prompt_tokens_total 100\n", (None, None, None), ()),
    ],
)
def test_traffic_totals_per_kind(
    kind: str, text: str, want: tuple[float | None, ...], missing: tuple[str, ...]
) -> None:
    got = read_load(kind, text)
    assert (got.requests_total, got.isl_tokens_sum, got.isl_tokens_count) == want
    assert tuple(m for m in got.missing if m.startswith(("requests", "isl", "osl"))) == missing
