"""engine-sim: one simulated engine process. Drives the core scheduler in (compressed) real time,
publishes ForwardPassMetrics on ZMQ, registers in ``planner_engines``, serves GenerateRequest over
NATS and streams TokenChunks back; SIGTERM drains (docs/services.md)."""

from __future__ import annotations

import asyncio
import os
import time

from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue
from prometheus_client import Counter, Gauge

from planner_core.engine import (
    EnginePass,
    EngineRequest,
    EngineRole,
    Scheduler,
    SchedulerConfig,
    kv_transfer_time_s,
    to_fpm,
)
from planner_engine_sim.fpm_pub import FpmPublisher
from planner_engine_sim.pacing import Pacer
from planner_engine_sim.settings import EngineSimSettings
from planner_engine_sim.streams import Outbox, StreamTable, error_chunk
from planner_engine_sim.timing_select import TimingChoice, choose_timing
from planner_proto import (
    Component,
    EngineCapabilities,
    EngineInfo,
    ForwardPassMetrics,
    GenerateRequest,
    TokenChunk,
    encode,
)
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S
from planner_runtime.bus import kv_put
from planner_runtime.service import Service, run_service


class EngineMetrics:
    def __init__(self, service: EngineSimService) -> None:
        reg = service.registry
        self.passes = Counter("planner_engine_passes", "Forward passes simulated", registry=reg)
        self.model_seconds = Counter(
            "planner_engine_model_seconds", "Modelled (uncompressed) GPU time of all passes", registry=reg
        )
        self.requests = Counter("planner_engine_requests", "Requests by outcome", ["outcome"], registry=reg)
        self.lag = Gauge(
            "planner_engine_lag_seconds", "How far the pass loop is behind real time", registry=reg
        )
        self.lag_resets = Counter(
            "planner_engine_lag_resets", "Times the loop gave up catching up with real time", registry=reg
        )
        self.running = Gauge("planner_engine_running_requests", "Requests running", registry=reg)
        self.waiting = Gauge("planner_engine_waiting_requests", "Requests queued", registry=reg)
        self.kv_usage = Gauge("planner_engine_kv_usage_ratio", "KV blocks in use / total", registry=reg)


class EngineSimService(Service[EngineSimSettings]):
    name = "engine-sim"
    settings_type = EngineSimSettings

    def __init__(self, settings: EngineSimSettings) -> None:
        super().__init__(settings)
        self.worker_id = settings.worker_id or f"sim-{os.getpid()}"
        self.role = EngineRole(str(settings.component))
        self.request_subject = self.subjects.generate(self.worker_id)
        self.key = self.subjects.engine_key(str(settings.component), self.worker_id)
        self.metrics = EngineMetrics(self)
        self.streams = StreamTable(self.worker_id, self.role is EngineRole.PREFILL)
        self.pacer = Pacer(settings.time_compression, settings.max_lag_s)
        self.choice: TimingChoice | None = None
        self.scheduler: Scheduler | None = None
        self.publisher: FpmPublisher | None = None
        self.registered = False
        self.draining = False
        self.passes = 0
        self._stamp_s = 0.0
        """Engine time of the last pass's end on the pacer's virtual clock: what token chunks carry."""
        self.started_at_s = 0.0
        self._kv: KeyValue | None = None
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._t0 = 0.0
        self._refresh: asyncio.Task[None] | None = None
        self._startup: asyncio.Task[None] | None = None

    # ---- lifecycle ----------------------------------------------------------------------------
    async def run(self) -> int:
        try:
            self.choice = choose_timing(self.settings)
        except (ValueError, OSError, KeyError) as exc:
            self.log.error("timing_model_error", error=str(exc))
            return 2
        s = self.settings
        self.scheduler = Scheduler(
            SchedulerConfig(
                max_num_batched_tokens=s.max_num_batched_tokens,
                max_num_seqs=s.max_num_seqs,
                block_size=s.block_size,
                num_gpu_blocks=self.choice.num_gpu_blocks,
                enable_prefix_caching=s.enable_prefix_caching,
                role=self.role,
            ),
            self.choice.model,
        )
        try:
            self.publisher = FpmPublisher(s.zmq_host, s.zmq_port_base + s.dp_rank if s.zmq_port_base else 0)
        except Exception as exc:  # zmq.ZMQError: address in use, bad host
            self.log.error("zmq_bind_failed", error=str(exc), host=s.zmq_host, port=s.zmq_port_base)
            return 1
        self.log.info(
            "engine_configured",
            worker_id=self.worker_id,
            component=str(s.component),
            timing=self.choice.kind,
            timing_source=self.choice.source,
            num_gpu_blocks=self.choice.num_gpu_blocks,
            zmq_endpoint=self.publisher.endpoint,
        )
        return await super().run()

    async def setup(self) -> None:
        self._startup = self.spawn(self._start(), "startup")

    async def _start(self) -> None:
        await asyncio.sleep(self.settings.startup_delay_s / self.settings.time_compression)
        self._kv = await self.bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
        await self.bus.subscribe(self.request_subject, GenerateRequest, self._on_generate)
        self._t0 = asyncio.get_running_loop().time()
        self.spawn(self._engine_loop(), "engine")
        self.started_at_s = time.time()
        await self._put_info()
        self.registered = True
        self._refresh = self.spawn(self._refresh_loop(), "register")
        self.log.info("registered", key=self.key, request_subject=self.request_subject)

    async def drain(self) -> None:
        self.draining = True
        if self._startup is not None and not self._startup.done():
            self._startup.cancel()
        if not self.registered:
            return
        await self._put_info()
        self.log.info("draining", in_flight=len(self.streams))
        await self._idle.wait()
        if self._refresh is not None:
            self._refresh.cancel()
        await self._deregister()
        self.log.info("drained", completed=self.streams.completed, forwarded=self.streams.forwarded)

    async def cleanup(self) -> None:
        if self.publisher is not None:
            self.publisher.close()

    def health_detail(self) -> dict[str, object]:
        sched = self.scheduler
        return {
            "worker_id": self.worker_id,
            "registered": self.registered,
            "draining": self.draining,
            "running": sched.num_running if sched else 0,
            "waiting": sched.num_waiting if sched else 0,
            "lag_s": round(self.pacer.lag_s, 4),
        }

    # ---- registry -----------------------------------------------------------------------------
    def engine_info(self) -> EngineInfo:
        s = self.settings
        assert self.choice is not None and self.publisher is not None
        host = "127.0.0.1" if s.zmq_host in ("*", "0.0.0.0", "") else s.zmq_host
        return EngineInfo(
            namespace=s.namespace,
            component=Component(s.component),
            worker_id=self.worker_id,
            zmq_endpoint=f"tcp://{host}:{self.publisher.port}",
            engine_kind="engine-sim",
            dp_rank=s.dp_rank,
            capabilities=EngineCapabilities(
                max_num_batched_tokens=s.max_num_batched_tokens,
                max_num_seqs=s.max_num_seqs,
                num_gpu_blocks=self.choice.num_gpu_blocks,
                block_size_tokens=s.block_size,
                context_length_tokens=s.context_length_tokens,
                gpus=s.gpus,
            ),
            request_subject=self.request_subject,
            started_at_s=self.started_at_s,
            draining=self.draining,
        )

    async def _put_info(self) -> None:
        assert self._kv is not None
        await kv_put(self._kv, self.key, self.engine_info())

    async def _refresh_loop(self) -> None:
        # Not `self.every`: the key must stay alive while a drain runs after SIGTERM.
        while True:
            await asyncio.sleep(self.settings.register_interval_s)
            try:
                await self._put_info()
            except Exception as exc:  # NATS down for a moment: the next refresh retries
                self.log.warning("register_refresh_failed", error=str(exc))

    async def _deregister(self) -> None:
        assert self._kv is not None
        try:
            await self._kv.delete(self.key)
        except KeyNotFoundError:
            pass
        except Exception as exc:
            self.log.warning("deregister_failed", error=str(exc))
        self.registered = False

    # ---- requests -----------------------------------------------------------------------------
    def _engine_now(self, wall_s: float) -> float:
        return self.pacer.engine_time_s(wall_s, self._t0)

    async def _reply(self, subject: str, chunk: TokenChunk) -> None:
        await self.bus.nc.publish(subject, encode(chunk))

    async def _on_generate(self, req: GenerateRequest, subject: str) -> None:
        sched = self.scheduler
        assert sched is not None
        if self.draining:
            self.metrics.requests.labels("rejected").inc()
            await self._reply(req.reply_subject, error_chunk(req, self.worker_id, "draining"))
            return
        error = ""
        if req.input_tokens + req.output_tokens > self.settings.context_length_tokens:
            error = "context_length_exceeded"
        elif self.role is EngineRole.PREFILL and req.output_tokens > 1 and not req.decode_subject:
            error = "prefill_worker_needs_decode_subject"
        now = asyncio.get_running_loop().time()
        if not error:
            decode = self.role is EngineRole.DECODE
            received = self.pacer.arrival_engine_s(now, self._t0)
            rid = self.streams.add(req, now, initial_tokens=1 if decode else 0, received_engine_s=received)
            self._idle.clear()
            ereq = EngineRequest(rid, req.input_tokens, req.output_tokens, tuple(req.hash_ids))
            try:
                if decode:
                    assert self.choice is not None
                    transfer_s = kv_transfer_time_s(
                        req.input_tokens,
                        self.choice.kv_bytes_per_token,
                        self.settings.kv_bandwidth_bytes_per_s,
                    )
                    sched.add_remote(ereq, self._engine_now(now) + transfer_s)
                else:
                    sched.add_request(ereq)
                    self.pacer.wake(now)
            except ValueError:
                del self.streams.live[rid]
                if not self.streams.live:
                    self._idle.set()
                error = "prompt_too_long"
        if error:
            self.metrics.requests.labels("rejected").inc()
            await self._reply(req.reply_subject, error_chunk(req, self.worker_id, error))
            return
        self._wake.set()

    # ---- the pass loop ------------------------------------------------------------------------
    async def _engine_loop(self) -> None:
        s = self.settings
        sched = self.scheduler
        assert sched is not None
        loop = asyncio.get_running_loop()
        clock = loop.time
        next_hb = clock() + s.heartbeat_interval_s
        next_flush = clock() + s.stream_interval_s
        pacer = self.pacer
        pacer.stop_busy()
        while True:
            now = clock()
            eng_now = self._engine_now(now)
            ready = sched.next_remote_ready_s
            if not (sched.has_work or (ready is not None and ready <= eng_now)):
                pacer.stop_busy()
                if now >= next_hb:
                    self._heartbeat()
                    next_hb = now + s.heartbeat_interval_s
                if now >= next_flush:
                    await self._flush(now)
                    next_flush = now + s.stream_interval_s
                until = next_hb
                if self.streams.live:
                    until = min(until, next_flush)
                if ready is not None:
                    until = min(until, self._t0 + ready / s.time_compression)
                await self._sleep_or_wake(until - now)
                continue
            if not pacer.busy:
                pacer.start_busy(now)
            p = sched.step(eng_now)
            if p.is_idle:  # queued work that cannot be scheduled yet (KV full): wait for a change
                pacer.stop_busy()
                if p.finished_ids:  # remote requests whose only token came from the prefill worker
                    await self._send(self.streams.on_pass(p, now, eng_now))
                    if not self.streams.live:
                        self._idle.set()
                    continue
                await self._sleep_or_wake(0.01)
                continue
            end = pacer.pass_end(now, p.duration_s)
            delay = end - clock()
            await asyncio.sleep(delay if delay > 0 else 0)
            now = clock()
            await self._emit(p, now)
            next_hb = now + s.heartbeat_interval_s
            if now >= next_flush:
                await self._flush(now)
                next_flush = now + s.stream_interval_s

    async def _sleep_or_wake(self, timeout_s: float) -> None:
        if timeout_s <= 0:
            await asyncio.sleep(0)
            return
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout_s)
        except TimeoutError:
            pass

    def _heartbeat(self) -> None:
        assert self.publisher is not None
        self.publisher.send(
            ForwardPassMetrics(
                worker_id=self.worker_id, dp_rank=self.settings.dp_rank, counter_id=self.passes
            )
        )

    async def _emit(self, p: EnginePass, now: float) -> None:
        assert self.publisher is not None
        self.passes += 1
        m = self.metrics
        m.passes.inc()
        m.model_seconds.inc(p.duration_s)
        self.publisher.send(to_fpm(p, self.worker_id, self.settings.dp_rank, counter_id=self.passes))
        self._stamp_s = self.pacer.virtual_engine_s(self._t0)
        out = self.streams.on_pass(p, now, self._stamp_s)
        if out:
            await self._send(out)
            if not self.streams.live:
                self._idle.set()

    async def _send(self, out: Outbox) -> None:
        nc = self.bus.nc
        for subject, chunk in out.chunks:
            await nc.publish(subject, encode(chunk))
            if chunk.finished:
                self.metrics.requests.labels("completed").inc()
        for fwd in out.forwards:
            await nc.publish(fwd.subject, encode(fwd.req))
            self.metrics.requests.labels("forwarded").inc()

    async def _flush(self, now: float) -> None:
        sched = self.scheduler
        assert sched is not None
        m = self.metrics
        m.running.set(sched.num_running)
        m.waiting.set(sched.num_waiting)
        m.kv_usage.set(sched.kv_usage)
        m.lag.set(self.pacer.lag_s)
        if self.pacer.resets:
            m.lag_resets.inc(self.pacer.resets)
            self.pacer.resets = 0
        nc = self.bus.nc
        # unsent tokens were made by passes that ended by the last one: they carry its stamp
        for subject, chunk in self.streams.flush(now, self._stamp_s, self.settings.keepalive_interval_s):
            await nc.publish(subject, encode(chunk))


SERVICE = EngineSimService

if __name__ == "__main__":
    raise SystemExit(run_service(EngineSimService))
