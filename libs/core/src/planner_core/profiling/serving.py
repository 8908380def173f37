"""TTFT and TPOT of an engine serving a fixed number of concurrent requests, GPU-free.

One engine of ``tp`` GPUs. A pass of ``n`` new tokens over context costs, kernel kind by kernel kind
(each bound by its own roofline, the kinds running one after another),
``GEMMs + attention + step overhead + layers x layer overhead + TP all-reduces``:

- GEMMs: ``max(compute, weights / bandwidth)``. Compute is 2 x linear parameters / tp per token at
  the tensor-core peak of the weight format times an efficiency that grows with the GEMM's rows,
  ``e_g x m / (m + h x ridge)`` (small GEMMs do not fill the GPU; ``ridge`` = peak / bandwidth x
  bytes per weight / 2 rows, where compute time meets weight-streaming time, so the curve moves with
  the GPU and the format rather than sitting at a fixed row count): ``m = n`` for dense layers, and
  for routed experts the tokens each touched expert receives, ``n k / E_touched`` (1024 tokens over
  128 experts x top-8 give each expert GEMM ~64 rows), times ``moe_compute_efficiency`` (grouped
  GEMMs, routing and token permutation: fitted at ~0.2 of a dense GEMM at the same rows, shared by
  every GPU; without it long MoE prompts came out ~20-40 % too fast while short ones fitted, as the
  weights bound them). The weights are those the pass touches (for
  MoE, ``E_touched = E (1 - (1 - k/E)^n)`` experts per layer) at the HBM bandwidth times ``e_mem``;
  under expert parallelism (whole experts spread over the TP group) the experts' FLOPs and bytes are
  those of the busiest GPU (:func:`ep_imbalance`);
- attention: ``max(causal attention FLOPs at the BF16 peak x e_attn x L / (L + attn_half_keys), KV read /
  bandwidth)``, L the keys per query of the pass (short rows do not fill FlashAttention's tiles); in
  sliding-window layers (gpt-oss: 18 of 36 layers see the last 128 tokens) a query attends to and
  reads at most the window, so their pairs and KV reads are counted apart (:func:`prompt_pairs`);
- all-reduces from :mod:`planner_core.profiling.tp_comms`.

Serving at concurrency ``B`` with prompts of ``isl`` and ``osl`` outputs, in steady state: the
running batch is ``B`` unless the KV cache holds fewer whole requests. TPOT is one decode step of
that batch at mean context ``isl + osl / 2`` that also carries the other requests' prompts (each
of the ``B - 1`` others brings ``isl`` tokens every ``osl`` steps, weighted by ``w_mix``: chunked
prefill shares the steps), plus a host cost per running request and step (scheduling, sampling,
detokenisation: measured TPOT at TP8 grows ~0.06-0.12 ms per request where memory and compute
cannot explain it). TTFT is the request's own chunked prefill, longer by ``w_queue`` of a prefill
per other running request (measured TTFT grows linearly in concurrency, in proportion to the
prefill time, independently of the output length), plus ``w_ttft_steps`` decode steps of the running
batch when other requests run (the step in flight on arrival, the one carrying the prefill; a request
alone has no batch to wait for: its TTFT is its prefill passes and the intake, which is what a lone-request
profile measures), plus a fixed intake time, plus, when the KV
cache is short, the wait for a free slot (a share of a request's whole cycle per request that does
not fit). Every efficiency and weight is in :class:`ServingParams`, fitted on measured rows
(:func:`planner_core.profiling.silicon.fit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

from planner_core.gpu_table import GpuSpec
from planner_core.modelcfg import ModelConfig
from planner_core.profiling.tp_comms import CommParams, pass_comm_s

GIB = float(2**30)

# bits per weight and whether the tensor cores run the format natively (else BF16 maths)
FORMAT_BITS: dict[str, float] = {"bf16": 16.0, "fp16": 16.0, "fp8": 8.0, "fp4": 4.5, "int4": 4.25}


@dataclass(frozen=True)
class ServingParams:
    e_gemm: float = 0.7
    # rows at which a GEMM reaches half its peak efficiency, in units of the GPU's ridge rows
    # (ridge_rows: ~206 for FP8 on an H200, 281 on a B200): a GEMM of m rows does 2 m FLOPs per
    # weight byte, so how full it runs depends on m against the FLOPs:bandwidth ratio, not on m alone
    n_half_ridge: float = 1.25
    e_attn: float = 0.4
    # attention's efficiency grows with the keys each query attends to (FlashAttention's tiles fill and
    # its fixed costs amortise over long rows): ``e_attn x L / (L + attn_half_keys)``, L = query-key
    # pairs per new token of the pass; 0 = the same efficiency at every length
    attn_half_keys: float = 0.0
    e_mem: float = 0.8
    step_overhead_s: float = 0.004  # per pass: scheduling, sampling, launches (backend dependent)
    layer_overhead_s: float = 2e-5  # per layer and pass: kernels too small to hide
    # per running request and pass: host-side scheduling, sampling, detokenisation, streaming
    seq_overhead_s: float = 5e-5
    w_mix: float = 1.0
    w_queue: float = 0.06  # TTFT grows by this share of a prefill per other running request
    # TTFT also waits this many decode steps of the running batch: the step in flight when the request
    # arrives, the step that carries its prefill, the first token's path out (measured TTFT minus the
    # prefill is ~9-13 TPOTs at every concurrency on vLLM rows, where it is 3-44 prefills)
    w_ttft_steps: float = 0.0
    w_kv_wait: float = 0.5
    ttft_fixed_s: float = 0.03  # request intake, tokenisation, first-token path (backend dependent)
    chunk_tokens: int = 8192
    # share of the output a running request holds in KV on average: vLLM and SGLang allocate blocks
    # as tokens come (a request holds isl + osl/2 on average), TRT-LLM reserves isl + osl up front
    kv_output_share: float = 0.5
    # routed experts stream at this share of the dense weights' bandwidth (many small grouped GEMMs)
    moe_efficiency: float = 1.0
    # routed experts' GEMMs run at this share of a dense GEMM's efficiency at the same rows (grouped
    # GEMMs over uneven groups, routing, token permutation and the weighted sum around them)
    moe_compute_efficiency: float = 1.0
    comm: CommParams = field(default_factory=CommParams)
    mem_util: float = 0.9


@dataclass(frozen=True)
class ServingPoint:
    isl: int
    osl: int
    concurrency: int
    tp: int = 1
    weight_format: str = "fp8"  # bf16, fp8, fp4, int4
    kv_bytes: float = 2.0  # per KV element
    ep: int = 1
    """Expert parallelism: 1 = each expert sharded over the ``tp`` GPUs; ``tp`` = each GPU holds
    ``experts / tp`` whole experts (vLLM ``--enable-expert-parallel``: attention stays tensor-parallel
    and the MoE output is reduced as in TP)."""


def _peak_flops(gpu: GpuSpec, fmt: str) -> float:
    if fmt == "fp8" and gpu.has_fp8:
        return gpu.fp8_tflops * 1e12
    if fmt == "fp4" and gpu.has_fp8:
        # FP4 tensor cores (Blackwell) run at twice FP8; Hopper runs FP4 weights at FP8 speed
        return gpu.fp8_tflops * (2.0 if gpu.bf16_tflops >= 2000 else 1.0) * 1e12
    return gpu.bf16_tflops * 1e12


@dataclass(frozen=True)
class _Shape:
    lin_flops_token: float  # per GPU, non-expert GEMMs (attention projections, dense MLPs, lm_head)
    expert_flops_token: float  # per GPU, the routed experts a token runs
    dense_bytes: float  # non-expert weights per GPU
    expert_bytes: float  # one expert of one layer, per GPU
    moe_layers: int
    experts: int
    topk: int
    kv_token_bytes: float  # per GPU, all layers
    attn_flops_pair: float  # per GPU
    layers: int
    hidden: int
    ep: int = 1
    window_tokens: float = 0.0  # keys a sliding-window layer sees (0: every layer attends in full)
    window_flop_share: float = 0.0  # share of attn_flops_pair in sliding-window layers
    window_kv_share: float = 0.0  # share of kv_token_bytes in sliding-window layers


def _windows(model: ModelConfig) -> tuple[float, float, float]:
    """(window, share of the attention FLOPs, share of the KV bytes per token) of the model's
    sliding-window (or chunked) layers; the most common window stands for all of them."""
    windowed = [layer for layer in model.layers if layer.window_tokens is not None and layer.kind != "full"]
    if not windowed or model.mla is not None:
        return 0.0, 0.0, 0.0
    sizes = [layer.window_tokens or 0 for layer in windowed]
    w = max(set(sizes), key=sizes.count)
    flops = sum(layer.head_dim for layer in windowed) / sum(layer.head_dim for layer in model.layers)
    per_token = model.kv_bytes_per_token("auto", 1)
    # between contexts w and 2w only the full layers' KV grows
    full = (model.kv_bytes_per_request(2 * w) - model.kv_bytes_per_request(w)) / w
    return float(w), flops, 1.0 - full / per_token if per_token > 0 else 0.0


def windowed(tokens: float, window: float) -> float:
    """Keys a query at context ``tokens`` sees: all of them, or at most ``window`` (0 = no window)."""
    return min(tokens, window) if window > 0 else tokens


def prompt_pairs(done: float, n: float, window: float = 0.0) -> float:
    """Causal query-key pairs of ``n`` prompt tokens after ``done`` cached ones, each query seeing at
    most ``window`` keys (0 = all): ``n done + n^2 / 2`` without a window, about ``n window`` once
    the prompt is longer than it."""

    def upto(x: float) -> float:
        if window <= 0 or x <= window:
            return 0.5 * x * x
        return 0.5 * window * window + window * (x - window)

    return upto(done + n) - upto(done)


def _shape(model: ModelConfig, pt: ServingPoint) -> _Shape:
    bits = FORMAT_BITS.get(pt.weight_format)
    if bits is None:
        raise ValueError(f"unknown weight format '{pt.weight_format}' (known: {', '.join(FORMAT_BITS)})")
    tp = pt.tp
    if pt.ep not in (1, tp):
        raise ValueError(f"expert parallelism {pt.ep} with TP {tp}: only ep = 1 or ep = tp is modelled")
    active = model.active_params_per_token()
    total = model.total_params()
    moe = model.moe
    expert_params = 0.0
    n_moe = 0
    if moe is not None:
        expert_params = (3 if model.gated_mlp else 2) * model.hidden_size * moe.moe_intermediate_size
        n_moe = len(moe.moe_layers)
    routed_total = expert_params * (moe.num_experts if moe else 0) * n_moe
    routed_active = expert_params * (moe.experts_per_token if moe else 0) * n_moe
    head = model.embedding_params() * (1 if model.tie_word_embeddings else 2)
    dense = (total - routed_total - head) * bits / 8 + head * 2.0
    per_elem = pt.kv_bytes / model.dtype_bytes if model.dtype_bytes else 1.0
    window, window_flops, window_kv = _windows(model)
    return _Shape(
        lin_flops_token=2.0 * (active - routed_active) / tp,
        expert_flops_token=2.0 * routed_active / tp,
        dense_bytes=dense / tp,
        expert_bytes=expert_params * bits / 8 / tp,
        moe_layers=n_moe,
        experts=moe.num_experts if moe else 0,
        topk=moe.experts_per_token if moe else 0,
        kv_token_bytes=model.kv_bytes_per_token("auto", tp) * per_elem,
        attn_flops_pair=4.0 * model.num_layers * model.num_attention_heads * model.head_dim / tp,
        layers=model.num_layers,
        hidden=model.hidden_size,
        ep=pt.ep if moe is not None else 1,
        window_tokens=window,
        window_flop_share=window_flops,
        window_kv_share=window_kv,
    )


def _experts_touched(s: _Shape, tokens: float) -> float:
    """Distinct experts per MoE layer that ``tokens`` tokens route to, uniform routing assumed."""
    return float(s.experts * (1.0 - (1.0 - s.topk / s.experts) ** max(tokens, 1.0)))


def _weights_read(s: _Shape, experts: float, moe_efficiency: float = 1.0) -> float:
    """Bytes of weights one pass streams on a GPU that touches ``experts`` experts per MoE layer, in
    dense-weight equivalents."""
    return s.dense_bytes + s.expert_bytes * experts * s.moe_layers / moe_efficiency


def _max_normal(n: int) -> float:
    """Expected largest of ``n`` standard normal draws (Blom's approximation; 0 for one)."""
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def ep_imbalance(s: _Shape, tokens: float, touched: float | None = None) -> tuple[float, float]:
    """Under expert parallelism the busiest GPU sets the pace: (its routed tokens, its touched
    experts) relative to the mean over the ``ep`` GPUs, for uniform routing. A GPU holds ``E / ep``
    experts; the routed tokens it gets are about binomial (``n k`` draws, ``1 / ep`` each), the
    experts it touches about hypergeometric (``E_touched`` of ``E``, ``E / ep`` of them its own); the
    busiest of ``ep`` lies ~z(ep) standard deviations above the mean. Few tokens make it large: one
    decode token's 8 experts over 4 GPUs put 2 on a GPU on average, about 3 on the busiest.
    ``touched``: :func:`_experts_touched` of ``tokens``, when the caller has it already."""
    if s.ep <= 1 or s.experts == 0:
        return 1.0, 1.0
    z = _max_normal(s.ep)
    draws = max(tokens, 1.0) * s.topk
    tok = 1.0 + z * math.sqrt((1.0 - 1.0 / s.ep) * s.ep / draws)
    if touched is None:
        touched = _experts_touched(s, tokens)
    mean = touched / s.ep
    var = mean * (1.0 - touched / s.experts) * (1.0 - 1.0 / s.ep)
    exp = 1.0 + z * math.sqrt(max(var, 0.0)) / mean if mean > 0 else 1.0
    return tok, min(exp, float(s.ep))


def ridge_rows(gpu: GpuSpec, fmt: str) -> float:
    """GEMM rows at which compute time equals weight-streaming time: peak FLOPs / HBM bandwidth x
    bytes per weight / 2 (a row does 2 FLOPs per weight)."""
    return _peak_flops(gpu, fmt) * FORMAT_BITS[fmt] / 8.0 / (2.0 * gpu.hbm_gb_s * 1e9)


def gemm_efficiency(tokens: float, p: ServingParams, ridge: float) -> float:
    """Share of the tensor-core peak a GEMM over ``tokens`` rows reaches,
    ``e_gemm x n / (n + n_half_ridge x ridge)``."""
    return p.e_gemm * tokens / (tokens + p.n_half_ridge * ridge)


def pass_s(
    s: _Shape, gpu: GpuSpec, fmt: str, tp: int, new_tokens: float, kv_read_tokens: float, pairs: float,
    p: ServingParams, window_kv_read: float | None = None, window_pairs: float | None = None,
) -> float:  # fmt: skip
    """One forward pass: ``new_tokens`` computed, ``kv_read_tokens`` of KV read, ``pairs`` attention
    query-key pairs (in a full-attention layer; ``window_kv_read`` and ``window_pairs`` are those of a
    sliding-window layer, the same when not given). Each kind of kernel is bound by its own roofline
    and the kinds run one after another: the GEMMs take ``max(compute, weights / bandwidth)``,
    attention ``max(compute, KV / bandwidth)``. A routed expert's GEMM has only the tokens routed to
    it as rows, so its efficiency follows the tokens per touched expert, not the tokens of the pass."""
    peak = _peak_flops(gpu, fmt)
    bw = gpu.hbm_gb_s * 1e9 * p.e_mem
    ridge = ridge_rows(gpu, fmt)
    gemm = s.lin_flops_token * new_tokens / (peak * gemm_efficiency(new_tokens, p, ridge))
    touched = _experts_touched(s, new_tokens) if s.experts else 0.0
    tok_skew, exp_skew = ep_imbalance(s, new_tokens, touched)
    if s.experts:
        per_expert = new_tokens * s.topk / touched
        eff = gemm_efficiency(per_expert, p, ridge) * p.moe_compute_efficiency
        gemm += tok_skew * s.expert_flops_token * new_tokens / (peak * eff)
    gemm = max(gemm, _weights_read(s, touched * exp_skew, p.moe_efficiency) / bw)
    w_pairs = pairs if window_pairs is None else window_pairs
    w_kv = kv_read_tokens if window_kv_read is None else window_kv_read
    ws, wk = s.window_flop_share, s.window_kv_share
    attn_flops = _attn_s(s.attn_flops_pair * (1.0 - ws), pairs, new_tokens, gpu, p)
    attn_flops += _attn_s(s.attn_flops_pair * ws, w_pairs, new_tokens, gpu, p)
    attn = max(attn_flops, s.kv_token_bytes * ((1.0 - wk) * kv_read_tokens + wk * w_kv) / bw)
    comm = pass_comm_s(new_tokens, s.hidden, s.layers, tp, gpu, 2.0, p.comm)
    return gemm + attn + p.step_overhead_s + s.layers * p.layer_overhead_s + comm


def _attn_s(flops_pair: float, pairs: float, new_tokens: float, gpu: GpuSpec, p: ServingParams) -> float:
    """Attention compute of ``pairs`` query-key pairs over ``new_tokens`` queries."""
    if flops_pair <= 0 or pairs <= 0:
        return 0.0
    e_attn = p.e_attn
    if p.attn_half_keys > 0:
        keys = pairs / max(new_tokens, 1.0)
        e_attn *= keys / (keys + p.attn_half_keys)
    return flops_pair * pairs / (gpu.bf16_tflops * 1e12 * e_attn)


def prefill_s(s: _Shape, gpu: GpuSpec, pt: ServingPoint, p: ServingParams) -> float:
    done, total, w = 0, 0.0, s.window_tokens
    while done < pt.isl:
        n = min(p.chunk_tokens, pt.isl - done)
        total += pass_s(s, gpu, pt.weight_format, pt.tp, n, done, prompt_pairs(done, n), p,
                        windowed(done, w), prompt_pairs(done, n, w))  # fmt: skip
        done += n
    return total


def kv_capacity_tokens(s: _Shape, gpu: GpuSpec, p: ServingParams) -> float:
    free = gpu.memory_gib * GIB * p.mem_util - s.dense_bytes - s.expert_bytes * s.experts * s.moe_layers
    free -= 2.0 * GIB  # activations, CUDA graphs, communication buffers
    return max(free, 0.0) / s.kv_token_bytes if s.kv_token_bytes > 0 else float("inf")


def kv_capacity_for(
    model: ModelConfig, gpu: GpuSpec, pt: ServingPoint, p: ServingParams | None = None
) -> float:
    """KV tokens one engine of ``pt.tp`` GPUs holds (0 when the weights alone do not fit)."""
    return kv_capacity_tokens(_shape(model, pt), gpu, p or ServingParams())


@dataclass(frozen=True)
class ServingTiming:
    """One engine's forward passes under the serving model, as a
    :class:`planner_core.engine.timing.TimingModel`: what ``planner profile --estimate`` builds its
    profile from, and what :func:`serve` runs a steady state on."""

    shape: _Shape
    gpu: GpuSpec
    weight_format: str
    tp: int
    params: ServingParams

    @classmethod
    def build(
        cls, model: ModelConfig, gpu: GpuSpec, tp: int = 1, weight_format: str = "fp8", kv_bytes: float = 2.0,
        params: ServingParams | None = None, ep: int = 1,
    ) -> ServingTiming:  # fmt: skip
        pt = ServingPoint(1, 1, 1, tp=tp, weight_format=weight_format, kv_bytes=kv_bytes, ep=ep)
        return cls(_shape(model, pt), gpu, weight_format, tp, params or ServingParams())

    def raw_pass_s(
        self, new_tokens: float, kv_read_tokens: float, pairs: float, window_kv_read: float | None = None,
        window_pairs: float | None = None,
    ) -> float:  # fmt: skip
        """:func:`pass_s` of this engine (no per-request host cost)."""
        return pass_s(self.shape, self.gpu, self.weight_format, self.tp, new_tokens, kv_read_tokens, pairs,
                      self.params, window_kv_read, window_pairs)  # fmt: skip

    def pass_time_s(
        self,
        prefill_tokens: int,
        prefill_kv_tokens: int,
        num_decode: int,
        decode_kv_tokens: int,
        prefill_pairs: float | None = None,
    ) -> float:
        """A pass of ``prefill_tokens`` prompt tokens after ``prefill_kv_tokens`` cached ones, plus one
        token for each of ``num_decode`` requests holding ``decode_kv_tokens``; decode requests also pay
        the host cost per running request (``seq_overhead_s``). Given ``prefill_pairs`` (the chunks'
        pairs summed per sequence), a windowed layer's prompt pairs shrink in the same proportion."""
        if prefill_tokens <= 0 and num_decode <= 0:
            return 0.0
        t, w = float(prefill_tokens), self.shape.window_tokens
        one = prompt_pairs(prefill_kv_tokens, t)
        share = 1.0 if prefill_pairs is None or one <= 0 else min(prefill_pairs / one, 1.0)
        pairs = one * share + decode_kv_tokens
        # a decode request at context k reads and attends to min(k, window) keys in a windowed layer
        dec_w = num_decode * windowed(decode_kv_tokens / num_decode, w) if num_decode > 0 else 0.0
        work = self.raw_pass_s(
            t + num_decode, prefill_kv_tokens + decode_kv_tokens, pairs,
            windowed(prefill_kv_tokens, w) + dec_w, prompt_pairs(prefill_kv_tokens, t, w) * share + dec_w,
        )  # fmt: skip
        return work + self.params.seq_overhead_s * num_decode

    def prefill_s(self, isl: int) -> float:
        """A lone request's chunked prefill (no intake time)."""
        pt = ServingPoint(isl, 1, 1, tp=self.tp, weight_format=self.weight_format)
        return prefill_s(self.shape, self.gpu, pt, self.params)

    def intake_s(self, isl: int) -> float:
        """What a lone request's TTFT adds to its prefill passes: the fixed intake only (no running batch,
        so no decode steps to wait for: :func:`serve` at concurrency 1)."""
        return self.params.ttft_fixed_s

    def lone_ttft_s(self, isl: int) -> float:
        return self.prefill_s(isl) + self.intake_s(isl)


@dataclass(frozen=True)
class ServingEstimate:
    ttft_ms: float
    tpot_ms: float
    running: int  # requests the KV cache holds at once
    prefill_ms: float
    decode_pass_ms: float


def serve(
    timing: ServingTiming, isl: int, osl: int, concurrency: int, kv_tokens: float, max_seqs: int = 1 << 30
) -> ServingEstimate:
    """Steady state of ``concurrency`` requests of ``isl`` prompt and ``osl`` output tokens on one
    engine whose KV cache holds ``kv_tokens`` and that runs at most ``max_seqs`` requests at once (see
    the module docstring)."""
    p = timing.params
    held = isl + p.kv_output_share * osl
    running = max(1, min(concurrency, max_seqs, int(kv_tokens // max(held, 1.0))))
    ctx = isl + osl / 2.0
    w = timing.shape.window_tokens
    dec_w = running * windowed(ctx, w)  # KV read and pairs of the decodes in a windowed layer
    dec = timing.raw_pass_s(running, running * ctx, running * ctx, dec_w, dec_w)
    pf = timing.prefill_s(isl)
    # steady state: the other requests' prompts (isl each, one per osl steps) ride in the decode steps
    mix = p.w_mix * (running - 1) * isl / max(osl, 1)
    mix_w = mix * prompt_pairs(0, isl, w) / max(isl, 1)  # a prompt token's pairs in a windowed layer
    tpot = timing.raw_pass_s(
        running + mix, running * ctx + mix * isl / 2.0, running * ctx + mix * isl / 2.0,
        dec_w + mix * windowed(isl / 2.0, w), dec_w + mix_w,
    )  # fmt: skip
    tpot += p.seq_overhead_s * running
    cycle = pf + osl * tpot
    ttft = p.ttft_fixed_s + pf * (1.0 + p.w_queue * (running - 1))
    if running > 1:
        # the decode steps of the others' batch a new request waits through; alone, there are none
        ttft += p.w_ttft_steps * tpot
    if concurrency > running:
        ttft += p.w_kv_wait * (concurrency - running) / running * cycle
    return ServingEstimate(ttft * 1e3, tpot * 1e3, running, pf * 1e3, dec * 1e3)


def predict_serving(model: ModelConfig, gpu: GpuSpec, pt: ServingPoint, p: ServingParams) -> ServingEstimate:
    timing = ServingTiming.build(model, gpu, pt.tp, pt.weight_format, pt.kv_bytes, p, ep=pt.ep)
    return serve(timing, pt.isl, pt.osl, pt.concurrency, kv_capacity_tokens(timing.shape, gpu, p))
