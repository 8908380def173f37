"""Time per forward pass: a Protocol, the reference mocker's default, and a model calibrated on profiles.

Every model maps the shape of one pass, (new prefill tokens, prefill KV tokens read, number of decode
requests, decode KV tokens, and optionally the prompt chunks' attention pairs summed per sequence), to
seconds. The roofline model lives in :mod:`planner_core.engine.roofline`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
from scipy.optimize import nnls

from planner_core.profile import DecodeProfile, PrefillProfile

FloatArray = npt.NDArray[np.float64]

PROFILE_MAX_NUM_SEQS = 1024
"""vLLM v1's default max_num_seqs on H100/H200-class GPUs; the reference profiles were taken with it,
so a profiled concurrency above it ran as this many decode requests (the rest queued)."""


class TimingModel(Protocol):
    def pass_time_s(
        self,
        prefill_tokens: int,
        prefill_kv_tokens: int,
        num_decode: int,
        decode_kv_tokens: int,
        prefill_pairs: float | None = None,
    ) -> float:
        """Seconds for one pass computing ``prefill_tokens`` new prompt tokens (reading
        ``prefill_kv_tokens`` of cached / earlier-chunk KV) and one token for each of ``num_decode``
        requests holding ``decode_kv_tokens`` KV tokens in total.

        ``prefill_pairs``: the causal attention pairs of the pass's prompt chunks, summed per sequence
        (:func:`attention_pairs` of each chunk; attention kernels attend within a sequence, so two
        chunks of different prompts do not see each other). None = the pass's chunks are one sequence."""
        ...


def attention_pairs(prefill_tokens: int, prefill_kv_tokens: int) -> float:
    """Query-key pairs of causal attention for one sequence's chunk of T new tokens after K cached
    ones: T*K + T*(T+1)/2."""
    t = prefill_tokens
    return t * prefill_kv_tokens + 0.5 * t * (t + 1)


@dataclass(frozen=True, slots=True)
class MockerTiming:
    """The reference mocker's default polynomials (no profile): prefill_ms(T) with T = new prefill
    tokens, decode_ms(u) with u = active KV tokens / KV capacity, at least 1 ms; a mixed pass pays both."""

    kv_capacity_tokens: int

    def pass_time_s(
        self,
        prefill_tokens: int,
        prefill_kv_tokens: int,
        num_decode: int,
        decode_kv_tokens: int,
        prefill_pairs: float | None = None,
    ) -> float:
        ms = 0.0
        if prefill_tokens > 0:
            t = float(prefill_tokens)
            ms += 4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142
        if num_decode > 0:
            u = (decode_kv_tokens + prefill_kv_tokens + prefill_tokens) / self.kv_capacity_tokens
            ms += max(1.0, -25.74 * u * u + 54.01 * u + 5.74)
        return ms * 1e-3


@dataclass(frozen=True, slots=True)
class CalibratedTiming:
    """Physically shaped model fitted on profiles (all coefficients >= 0, milliseconds):

    - prefill part = p_base + p_token * T + p_attn * attention_pairs(T, K)   (GEMMs linear in tokens,
      attention quadratic);
    - decode part = d_base + d_request * n + d_kv * kv   (weights read once per pass, per-sequence
      sampling/launch work, KV read);
    - a mixed pass is the sum of the parts minus the smaller base, paid once (one launch, one weight read).
    """

    p_base_ms: float
    p_token_ms: float
    p_attn_ms: float
    d_base_ms: float
    d_request_ms: float
    d_kv_ms: float

    def prefill_ms(self, prefill_tokens: int, prefill_kv_tokens: int) -> float:
        return (
            self.p_base_ms
            + self.p_token_ms * prefill_tokens
            + self.p_attn_ms * attention_pairs(prefill_tokens, prefill_kv_tokens)
        )

    def decode_ms(self, num_decode: int, decode_kv_tokens: int) -> float:
        return self.d_base_ms + self.d_request_ms * num_decode + self.d_kv_ms * decode_kv_tokens

    def pass_time_s(
        self,
        prefill_tokens: int,
        prefill_kv_tokens: int,
        num_decode: int,
        decode_kv_tokens: int,
        prefill_pairs: float | None = None,
    ) -> float:
        if prefill_tokens > 0:
            t = prefill_tokens
            pairs = attention_pairs(t, prefill_kv_tokens) if prefill_pairs is None else prefill_pairs
            ms = self.p_base_ms + self.p_token_ms * t + self.p_attn_ms * pairs
            if num_decode > 0:
                ms += self.d_request_ms * num_decode + self.d_kv_ms * decode_kv_tokens
                ms += max(self.d_base_ms - self.p_base_ms, 0.0)
            return ms * 1e-3
        if num_decode > 0:
            return (self.d_base_ms + self.d_request_ms * num_decode + self.d_kv_ms * decode_kv_tokens) * 1e-3
        return 0.0


# ---- single-request figures shared by the fit, the benchmark and the tests -------------------------


def chunk_schedule(isl_tokens: int, chunk_tokens: int) -> list[tuple[int, int]]:
    """(new tokens, KV tokens already computed) for each pass of a lone request's chunked prefill."""
    out: list[tuple[int, int]] = []
    done = 0
    while done < isl_tokens:
        t = min(chunk_tokens, isl_tokens - done)
        out.append((t, done))
        done += t
    return out


def lone_ttft_s(model: TimingModel, isl_tokens: int, chunk_tokens: int = 8192) -> float:
    """TTFT of one request on an idle engine: the sum of its chunked-prefill passes."""
    return sum(model.pass_time_s(t, k, 0, 0) for t, k in chunk_schedule(isl_tokens, chunk_tokens))


def decode_points(
    profile: DecodeProfile, max_num_seqs: int = PROFILE_MAX_NUM_SEQS
) -> tuple[FloatArray, FloatArray]:
    """(decode requests, decode KV tokens) behind each profile point: concurrency = kv_usage *
    max_kv_tokens / context, capped at the engine's max_num_seqs."""
    ctx = profile.context_length_tokens
    conc = np.maximum(1.0, np.round(profile.kv_usage * profile.max_kv_tokens / ctx))
    n = np.minimum(conc, float(max_num_seqs))
    return n, n * ctx


def fit_calibrated(
    prefill: PrefillProfile,
    decode: DecodeProfile,
    chunk_tokens: int = 8192,
    profile_max_num_seqs: int = PROFILE_MAX_NUM_SEQS,
) -> CalibratedTiming:
    """Non-negative least squares on relative error: TTFT(ISL) as a sum of chunked prefill passes of
    ``chunk_tokens`` (the profiled engine's max_num_batched_tokens), ITL as one decode pass."""
    rows = []
    for isl in prefill.isl_tokens:
        row = np.zeros(3)
        for t, k in chunk_schedule(int(isl), chunk_tokens):
            row += (1.0, t, attention_pairs(t, k))
        rows.append(row)
    p_coef = _nnls_relative(np.array(rows), prefill.ttft_ms)
    n, kv = decode_points(decode, profile_max_num_seqs)
    d_coef = _nnls_relative(np.column_stack([np.ones_like(n), n, kv]), decode.itl_ms)
    return CalibratedTiming(
        p_base_ms=float(p_coef[0]),
        p_token_ms=float(p_coef[1]),
        p_attn_ms=float(p_coef[2]),
        d_base_ms=float(d_coef[0]),
        d_request_ms=float(d_coef[1]),
        d_kv_ms=float(d_coef[2]),
    )


def _nnls_relative(a: FloatArray, y: FloatArray) -> FloatArray:
    w = 1.0 / np.maximum(y, 1e-9)
    scale = np.maximum(np.abs(a).max(axis=0), 1e-30)  # column scaling keeps NNLS well conditioned
    coef, _ = nnls((a / scale) * w[:, None], y * w)
    out: FloatArray = coef / scale
    return out


def mape_pct(predicted: FloatArray, observed: FloatArray) -> float:
    return float(np.mean(np.abs(predicted - observed) / observed) * 100.0)


def profile_mape(
    model: TimingModel,
    prefill: PrefillProfile,
    decode: DecodeProfile,
    chunk_tokens: int = 8192,
    profile_max_num_seqs: int = PROFILE_MAX_NUM_SEQS,
) -> tuple[float, float]:
    """(TTFT MAPE %, ITL MAPE %) of ``model`` over every profile point."""
    ttft = np.array([lone_ttft_s(model, int(isl), chunk_tokens) * 1e3 for isl in prefill.isl_tokens])
    n, kv = decode_points(decode, profile_max_num_seqs)
    itl = np.array([model.pass_time_s(0, 0, int(a), int(b)) * 1e3 for a, b in zip(n, kv, strict=True)])
    return mape_pct(ttft, prefill.ttft_ms), mape_pct(itl, decode.itl_ms)
