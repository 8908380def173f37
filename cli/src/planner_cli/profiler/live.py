"""The live sweep behind ``planner profile`` (without ``--estimate``): one engine per TP value, swept in
turn with a progress bar; then the TP choice, the profiles, the plots and the recommendations."""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner_cli.profiler.endpoints import Endpoint, EndpointError, NatsEngineEndpoint, OpenAIEndpoint
from planner_cli.profiler.output import plot_all, recommendation_lines, summary, write_profiles, write_summary
from planner_cli.profiler.runner import SweepError, TpResult, sweep_engine
from planner_cli.profiler.spawn import SpawnedEngineSim, SpawnError
from planner_core.profiling import (
    EngineLimits,
    SweepConfig,
    choose_decode_tp,
    choose_prefill_tp,
    planner_settings,
    sweep_requests,
)
from planner_runtime.register.probe import probe


class LiveError(RuntimeError):
    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class LiveConfig:
    tps: list[int]
    sweep: SweepConfig
    out: Path
    ttft_ms: float = 500.0
    itl_ms: float = 50.0
    isl: float = 1155.0
    osl: float = 211.0
    # engine-sim over NATS
    nats_url: str = ""
    namespace: str = "default"
    worker_ids: list[str] = field(default_factory=list)
    time_compression: float = 0.0
    prefill_compression: float = 2.0
    """--spawn-engine-sim: time compression of the engine the prefill points run on."""
    # --spawn-engine-sim
    spawn: bool = False
    timing: str = "calibrated"
    model_config: Path | None = None
    gpu: str = "h200"
    profile_dir: str = ""
    context_length_tokens: int = 16384
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    num_gpu_blocks: int = 0
    # OpenAI-compatible
    openai_urls: list[str] = field(default_factory=list)
    model: str = ""
    api_key: str = ""
    ignore_eos: bool = True
    prompt_format: str = "tokens"
    # limits by flag (override what the engine reports)
    max_kv_tokens: int = 0
    plots: bool = True
    show_progress: bool = True

    @property
    def kind(self) -> str:
        if self.openai_urls:
            return "openai"
        return "spawn" if self.spawn else "nats"


def _check(cfg: LiveConfig) -> None:
    if not cfg.tps or any(tp < 1 for tp in cfg.tps):
        raise LiveError("--tp: give one or more positive integers, e.g. 1,2,4")
    if sum(bool(x) for x in (cfg.openai_urls, cfg.spawn, cfg.worker_ids)) != 1:
        raise LiveError(
            "choose one endpoint: --openai-url URL --model NAME, --nats-url URL --worker-id W, "
            "or --spawn-engine-sim"
        )
    for what, items in (("--openai-url", cfg.openai_urls), ("--worker-id", cfg.worker_ids)):
        if items and len(items) != len(cfg.tps):
            raise LiveError(f"{what}: give one per --tp value ({len(cfg.tps)}), got {len(items)}")
    if cfg.openai_urls and not cfg.model:
        raise LiveError("--openai-url needs --model NAME (the served model name)")
    if cfg.spawn and cfg.timing == "roofline" and cfg.model_config is None:
        raise LiveError("--timing roofline needs --model-config CONFIG.json")


async def _limits(endpoint: Endpoint, cfg: LiveConfig, tp: int) -> EngineLimits:
    found = await endpoint.limits()
    ctx = found.context_length_tokens if found else cfg.context_length_tokens
    seqs = found.max_num_seqs if found else cfg.max_num_seqs
    engine_kv = found.max_kv_tokens if found else 0
    if isinstance(endpoint, OpenAIEndpoint) and found is None:
        ctx = await endpoint.model_context_length() or cfg.context_length_tokens
        # what the engine shows of itself, as `planner register` reads it (vLLM: cache_config_info)
        shown = await asyncio.to_thread(probe, endpoint.server_url, "auto")
        if shown is not None and shown.sources != ("settings",):
            engine_kv = shown.capabilities.max_kv_tokens
            if "props" in shown.sources:  # llama.cpp: slots are the batch limit
                seqs = shown.capabilities.max_num_seqs
            endpoint.truncate_text = shown.kind == "vllm"
            print(
                f"planner profile: {endpoint.name}: {shown.kind}, KV capacity {engine_kv} tokens "
                f"(from {', '.join(shown.sources)})",
                file=sys.stderr,
            )
    kv = cfg.max_kv_tokens or engine_kv
    if kv <= 0:
        raise LiveError(
            f"{endpoint.name}: KV capacity unknown (the engine's /metrics do not show it); give "
            "--max-kv-tokens (vLLM logs it at start-up as 'GPU KV cache size: N tokens')"
        )
    return EngineLimits(max_kv_tokens=kv, context_length_tokens=ctx, max_num_seqs=seqs, gpus=tp)


class _Progress:
    """A rich progress bar whose total grows as each engine's plan becomes known."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar: Any = None
        self._task: Any = None
        self.total = 0

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]{task.description:<34}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("requests"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                transient=False,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task("connecting", total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)

    def grow(self, n: int) -> None:
        self.total += n
        if self._bar is not None:
            self._bar.update(self._task, total=self.total)

    def advance(self, n: int, what: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=n, description=what)


async def _nats_endpoint(url: str, ns: str, worker_id: str, compression: float) -> NatsEngineEndpoint:
    return await NatsEngineEndpoint(url, ns, worker_id, time_compression=compression).connect()


async def _sweep_tp(
    cfg: LiveConfig, i: int, tp: int, progress: _Progress, spawned: SpawnedEngineSim | None
) -> TpResult:
    endpoints: list[Endpoint] = []
    workers: list[str] = []
    try:
        if cfg.kind == "openai":
            ep: Endpoint = await OpenAIEndpoint(
                cfg.openai_urls[i],
                cfg.model,
                api_key=cfg.api_key,
                ignore_eos=cfg.ignore_eos,
                prompt_format=cfg.prompt_format,
            ).connect()
            endpoints = [ep]
        elif spawned is not None:
            # TTFT and ITL are read off the engine's own clock (arrival and token stamps), so any
            # compression measures the same; the prefill points run on their own engine so that the long
            # decode batches (on a fast-clocked one) never share a pass with them.
            workers = [spawned.start_engine(tp, spawned.prefill_compression, "p")]
            workers.append(spawned.start_engine(tp, spawned.time_compression))
            for w, c in zip(workers, (spawned.prefill_compression, spawned.time_compression), strict=True):
                endpoints.append(await _nats_endpoint(spawned.nats_url, spawned.namespace, w, c))
        else:
            endpoints = [
                await _nats_endpoint(cfg.nats_url, cfg.namespace, cfg.worker_ids[i], cfg.time_compression)
            ]
        for ep in endpoints[:-1]:
            await ep.limits()  # engine-sim: waits until the engine has registered (and subscribed)
        limits = await _limits(endpoints[-1], cfg, tp)
        progress.grow(sweep_requests(limits, cfg.sweep) + len(endpoints))
        for ep in endpoints:
            progress.advance(0, f"TP{tp} warm-up")
            await ep.warm_up()
            progress.advance(1, f"TP{tp} warm-up")
        return await sweep_engine(endpoints[0], tp, limits, cfg.sweep, progress.advance, endpoints[-1])
    except EndpointError:
        if spawned is not None:
            for w in workers:
                spawned.check(w)
        raise
    finally:
        for ep in endpoints:
            await ep.close()
        if spawned is not None:
            for w in workers:
                spawned.stop_engine(w)


async def _run_all(cfg: LiveConfig, progress: _Progress, spawned: SpawnedEngineSim | None) -> list[TpResult]:
    return [await _sweep_tp(cfg, i, tp, progress, spawned) for i, tp in enumerate(cfg.tps)]


def run_live(cfg: LiveConfig) -> tuple[dict[str, Any], list[TpResult]]:
    """Sweep, choose, write; returns the summary (also written to ``profile_summary.json``)."""
    _check(cfg)
    # the bus logs its own connection events (a disconnect at close, for one): not for a CLI run
    logging.getLogger("planner.bus").setLevel(logging.ERROR)
    cfg.out.mkdir(parents=True, exist_ok=True)
    spawned: SpawnedEngineSim | None = None
    try:
        if cfg.spawn:
            spawned = SpawnedEngineSim(
                timing=cfg.timing,
                model_config=cfg.model_config,
                gpu=cfg.gpu,
                profile_dir=cfg.profile_dir,
                time_compression=cfg.time_compression or 20.0,
                prefill_compression=cfg.prefill_compression,
                context_length_tokens=cfg.context_length_tokens,
                max_num_seqs=cfg.max_num_seqs,
                max_num_batched_tokens=cfg.max_num_batched_tokens,
                num_gpu_blocks=cfg.num_gpu_blocks,
                log_dir=cfg.out / "engine-logs",
            ).__enter__()
        with _Progress(cfg.show_progress) as progress:
            results = asyncio.run(_run_all(cfg, progress, spawned))
    except (EndpointError, SweepError, SpawnError) as exc:
        raise LiveError(str(exc), code=1) from None
    finally:
        if spawned is not None:
            spawned.close()
    prefill = choose_prefill_tp({r.tp: r.prefill for r in results}, cfg.ttft_ms, cfg.isl)
    decode = choose_decode_tp({r.tp: r.decode for r in results}, cfg.itl_ms, cfg.isl + cfg.osl / 2)
    ctx = next(r.limits.context_length_tokens for r in results if r.tp == prefill.tp)
    settings = planner_settings(
        prefill, decode, ttft_sla_ms=cfg.ttft_ms, isl=cfg.isl, osl=cfg.osl, context_length_tokens=ctx
    )
    write_profiles(cfg.out, results, prefill.tp, decode.tp)
    sla = {"ttft_ms": cfg.ttft_ms, "itl_ms": cfg.itl_ms, "isl": cfg.isl, "osl": cfg.osl}
    source = {
        "openai": "openai-compatible",
        "spawn": f"spawned engine-sim ({cfg.timing})",
        "nats": "engine-sim",
    }[cfg.kind]
    data = summary(results, prefill, decode, settings, sla, source, cfg.out)
    if cfg.plots:
        try:
            data["plots"] = [str(p) for p in plot_all(cfg.out, results, sla)]
        except ImportError:  # matplotlib missing: profiles and summary still count
            print("planner profile: matplotlib not installed, no plots", file=sys.stderr)
    write_summary(cfg.out, data)
    data["recommendations"] = recommendation_lines(data)
    return data, results
