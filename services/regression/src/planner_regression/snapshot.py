"""From a fitted model and the workers' latest messages to a ComponentSnapshot (pure; time is an
argument)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from planner_core.regression import LatencyEstimate, OnlineRegression, ScrapedSpeedModel
from planner_proto import (
    Component,
    ComponentSnapshot,
    EngineCapabilities,
    EngineInfo,
    ForwardPassMetrics,
    WorkerLoad,
    WorkerLoadSample,
)
from planner_regression.workers import WorkerTrack

DEFAULT_CAPABILITIES = EngineCapabilities()
"""Used for a worker's estimates when it is not (yet) in ``planner_engines``."""

InfoLookup = Callable[[str], EngineInfo | None]


def _ms(est: LatencyEstimate) -> float | None:
    return None if est.latency_s is None else est.latency_s * 1000.0


def _ttft_ms(
    model: OnlineRegression, queued_prefill: float, decode_kv: float, caps: EngineCapabilities, hit: float
) -> float | None:
    if model.config.component is Component.DECODE:
        return None
    return _ms(
        model.estimate_next_ttft(
            queued_prefill_tokens=queued_prefill,
            max_num_batched_tokens=caps.max_num_batched_tokens,
            kv_hit_rate=hit,
            decode_kv_tokens=decode_kv,
        )
    )


def _itl_ms(model: OnlineRegression, scheduled_kv: float, queued_kv: float) -> float | None:
    if model.config.component is Component.PREFILL:
        return None
    return _ms(model.estimate_next_itl(scheduled_kv_tokens=scheduled_kv, queued_kv_tokens=queued_kv))


def _scaled(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def load_from_fpm(
    track: WorkerTrack,
    fpm: ForwardPassMetrics,
    info: EngineInfo | None,
    model: OnlineRegression,
    kv_hit_rate: float,
) -> WorkerLoad:
    s, q = fpm.scheduled_requests, fpm.queued_requests
    caps = info.capabilities if info is not None else DEFAULT_CAPABILITIES
    kv_in_use = s.sum_decode_kv_tokens + s.sum_prefill_kv_tokens + s.sum_prefill_tokens
    kv_demand = kv_in_use + q.sum_decode_kv_tokens
    return WorkerLoad(
        worker_id=track.worker_id,
        last_seen_s=track.last_seen_s,
        started_at_s=info.started_at_s if info is not None else 0.0,
        running_requests=s.num_prefill_requests + s.num_decode_requests,
        waiting_requests=q.num_prefill_requests + q.num_decode_requests,
        scheduled_prefill_tokens=s.sum_prefill_tokens,
        queued_prefill_tokens=q.sum_prefill_tokens,
        scheduled_decode_kv_tokens=s.sum_decode_kv_tokens,
        queued_decode_kv_tokens=q.sum_decode_kv_tokens,
        kv_usage=kv_demand / caps.max_kv_tokens if caps.max_kv_tokens > 0 else 0.0,
        est_ttft_ms=_ttft_ms(model, q.sum_prefill_tokens, s.sum_decode_kv_tokens, caps, kv_hit_rate),
        est_itl_ms=_itl_ms(model, s.sum_decode_kv_tokens, q.sum_decode_kv_tokens),
        draining=info.draining if info is not None else False,
    )


def load_from_sample(
    track: WorkerTrack,
    sample: WorkerLoadSample,
    info: EngineInfo | None,
    model: OnlineRegression,
    kv_hit_rate: float,
    scraped: ScrapedSpeedModel | None = None,
    scraped_view: ScrapedView | None = None,
) -> WorkerLoad:
    """A scrape adapter reports requests and KV usage, not tokens: the KV tokens in use come from the
    usage fraction, and the queued prefill tokens from the waiting requests times the average ISL.

    The pass-time model (learned from FPM engines of the component) gives the estimates when it can;
    otherwise the coarser model learned from the scraped histograms (``scraped``) does."""
    caps = info.capabilities if info is not None else DEFAULT_CAPABILITIES
    max_kv = sample.max_kv_tokens or caps.max_kv_tokens
    kv_tokens = round(sample.kv_usage * max_kv)
    queued_prefill = 0
    if scraped is not None and scraped_view is not None:
        if sample.kv_usage <= 0.0 and sample.running_requests > 0:
            # no KV usage exported (llama.cpp): the running requests at the typical KV each holds
            kv_tokens = round(sample.running_requests * scraped_view.kv_per_request)
        queued_prefill = round(sample.waiting_requests * scraped_view.isl_tokens)
    avg_isl = model.averages.avg_isl_tokens
    ttft = None
    if avg_isl is not None:
        ttft = _ttft_ms(model, sample.waiting_requests * avg_isl, kv_tokens, caps, kv_hit_rate)
    itl = _itl_ms(model, kv_tokens, 0.0)
    if scraped is not None:
        comp = model.config.component
        if ttft is None and comp is not Component.DECODE:
            ttft = _scaled(scraped.estimate_ttft_s(sample.waiting_requests))
        if itl is None and comp is not Component.PREFILL:
            itl = _scaled(scraped.estimate_itl_s(sample.running_requests))
    return WorkerLoad(
        worker_id=track.worker_id,
        last_seen_s=track.last_seen_s,
        started_at_s=info.started_at_s if info is not None else 0.0,
        running_requests=sample.running_requests,
        waiting_requests=sample.waiting_requests,
        scheduled_decode_kv_tokens=kv_tokens,
        queued_prefill_tokens=queued_prefill,
        kv_usage=sample.kv_usage if sample.kv_usage > 0.0 or max_kv <= 0 else kv_tokens / max_kv,
        est_ttft_ms=ttft,
        est_itl_ms=itl,
        draining=info.draining if info is not None else False,
    )


@dataclass(frozen=True)
class ScrapedView:
    """How a scraped fleet's requests translate into the pass-time model's tokens."""

    kv_per_request: float
    """KV tokens a running request holds: from the exported KV usage when there is one, else the
    engine's KV capacity over its slots (llama.cpp: the context of one slot)."""
    isl_tokens: float
    """Mean prompt length: from the TTFT histogram's request count, else half a request's KV."""


def scraped_view(
    samples: Iterable[tuple[WorkerLoadSample, EngineInfo | None]], scraped: ScrapedSpeedModel
) -> ScrapedView:
    per_req: list[float] = []
    slots: list[float] = []
    for sample, info in samples:
        caps = info.capabilities if info is not None else DEFAULT_CAPABILITIES
        max_kv = sample.max_kv_tokens or caps.max_kv_tokens
        if sample.kv_usage > 0.0 and sample.running_requests > 0 and max_kv > 0:
            per_req.append(sample.kv_usage * max_kv / sample.running_requests)
        elif max_kv > 0:
            slots.append(max_kv / caps.max_num_seqs)
    pool = per_req or slots
    kv_per_request = sum(pool) / len(pool) if pool else 1024.0
    isl = scraped.avg_isl_tokens or kv_per_request / 2.0
    return ScrapedView(kv_per_request=kv_per_request, isl_tokens=isl)


def effective_info(
    track: WorkerTrack, info: EngineInfo | None, namespace: str, component: Component
) -> EngineInfo | None:
    """The registry entry, else (an engine of the relay's static list) one made from the capabilities
    its scraped samples carry; None when nothing gives them."""
    sample = track.sample
    if info is not None or sample is None or sample.capabilities is None:
        return info
    return EngineInfo(
        namespace=namespace,
        component=component,
        worker_id=track.engine_id,
        engine_kind=sample.engine_kind,
        capabilities=sample.capabilities,
    )


def common_capabilities(infos: Iterable[EngineInfo | None]) -> EngineCapabilities | None:
    """The capabilities most of the component's registered workers have; None when none is known."""
    counts = Counter(i.capabilities for i in infos if i is not None)
    return counts.most_common(1)[0][0] if counts else None


def build_snapshot(
    *,
    namespace: str,
    component: Component,
    now_s: float,
    tracks: Iterable[WorkerTrack],
    lookup: InfoLookup,
    model: OnlineRegression,
    kv_hit_rate: float,
    scraped: ScrapedSpeedModel | None = None,
) -> ComponentSnapshot:
    workers: list[WorkerLoad] = []
    infos: list[EngineInfo | None] = []
    tracks = list(tracks)
    looked = [(t, effective_info(t, lookup(t.engine_id), namespace, component)) for t in tracks]
    without = sorted({t.worker_id for t, info in looked if info is None})
    fpm_model = model.to_latency_model()
    view: ScrapedView | None = None
    samples = [(t.sample, info) for t, info in looked if t.latest is None and t.sample is not None]
    if scraped is not None and samples and not fpm_model.ready:
        view = scraped_view(samples, scraped)
    for t, info in looked:
        infos.append(info)
        if t.latest is not None:
            workers.append(load_from_fpm(t, t.latest, info, model, kv_hit_rate))
        elif t.sample is not None:
            workers.append(load_from_sample(t, t.sample, info, model, kv_hit_rate, scraped, view))
    workers.sort(key=lambda w: w.worker_id)
    avg = model.averages
    if view is not None and scraped is not None:
        # No FPM model: the coarser one learned from the scraped intervals, in the same features.
        scraped_model = scraped.latency_model(component, view.kv_per_request)
        busy = [s.running_requests for s, _ in samples]
        return ComponentSnapshot(
            namespace=namespace,
            component=component,
            issued_at_s=now_s,
            workers=workers,
            model=scraped_model,
            capabilities=common_capabilities(infos),
            avg_isl_tokens=view.isl_tokens,
            avg_decode_length_tokens=view.kv_per_request,
            avg_prefill_tokens_per_pass=0.0,
            avg_num_decode_requests=sum(busy) / len(busy),
            kv_hit_rate=kv_hit_rate,
            model_source="scraped",
            workers_without_capabilities=without,
        )
    return ComponentSnapshot(
        namespace=namespace,
        component=component,
        issued_at_s=now_s,
        workers=workers,
        model=model.to_latency_model(),
        capabilities=common_capabilities(infos),
        avg_isl_tokens=avg.avg_isl_tokens,
        avg_decode_length_tokens=avg.avg_decode_length_tokens,
        avg_prefill_tokens_per_pass=avg.avg_prefill_tokens_per_pass,
        avg_num_decode_requests=avg.avg_num_decode_requests,
        kv_hit_rate=kv_hit_rate,
        model_source="fpm",
        workers_without_capabilities=without,
    )
