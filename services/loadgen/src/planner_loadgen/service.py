"""loadgen: replays a trace (or runs closed-loop clients) against the registered engines, over NATS
(engine-sim) or OpenAI-compatible HTTP, measures TTFT / ITL / duration per request, exports
frontend-style metrics and publishes a TrafficSample per interval."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import IO

import msgspec
import nats.errors
from nats.js.kv import KeyValue

from planner_loadgen.flights import Flight
from planner_loadgen.frontend_metrics import FrontendMetrics
from planner_loadgen.http_sender import HttpSender
from planner_loadgen.openai_http import Outcome
from planner_loadgen.routing import EngineTable, pick_mode
from planner_loadgen.settings import LoadgenSettings
from planner_loadgen.stats import IntervalStats, RequestResult, format_summary, summarize
from planner_loadgen.workload import Workload, build_workload, phase_at
from planner_proto import DecodeError, EngineInfo, GenerateRequest, TokenChunk, decode, encode
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S
from planner_runtime.bus import kv_watch
from planner_runtime.service import Service, run_service
from planner_sim.traces import TraceError, TraceRequest

MAX_LOGGED_TRACE_ERRORS = 20


class LoadgenService(Service[LoadgenSettings]):
    name = "loadgen"
    settings_type = LoadgenSettings

    def __init__(self, settings: LoadgenSettings) -> None:
        super().__init__(settings)
        self.table = EngineTable(ENGINES_TTL_S, settings.target)
        self.metrics = FrontendMetrics(
            self.registry,
            settings.frontend_metric_prefix,
            settings.model,
            settings.namespace,
            settings.latency_scale,
        )
        self.interval = IntervalStats()
        self.flights: dict[str, Flight] = {}
        self.parked: list[Flight] = []
        self.results: list[RequestResult] = []
        self.workload: Workload | None = None
        self.replay_done = False
        self.summary_text = ""
        self.clients_wanted = 0
        """Closed-loop clients the current phase wants."""
        self.sender: HttpSender | None = None
        self._sent = 0
        self._failed_requests = 0
        self._run_id = uuid.uuid4().hex[:8]
        self._inbox = ""
        self._exit_code = 0
        self._all_done = asyncio.Event()
        self._engines_changed = asyncio.Event()
        self._replay: asyncio.Task[None] | None = None
        self._results_fh: IO[bytes] | None = None
        self._interval_start_wall = time.time()
        self._started_mono = 0.0
        self._enc = msgspec.json.Encoder()

    # ---- lifecycle ----------------------------------------------------------------------------
    async def run(self) -> int:
        code = await super().run()
        return self._exit_code or code

    async def setup(self) -> None:
        s = self.settings
        try:
            self.workload = build_workload(s)
        except TraceError as exc:
            self.log.error("trace_error", path=exc.path, line=exc.line, detail=exc.detail)
            self._fail_start(2)
            return
        except (OSError, ValueError) as exc:
            self.log.error("workload_error", error=str(exc))
            self._fail_start(2)
            return
        for err in self.workload.errors[:MAX_LOGGED_TRACE_ERRORS]:
            self.log.warning("trace_line_skipped", path=err.path, line=err.line, detail=err.detail)
        self.log.info(
            "workload_ready",
            source=self.workload.source,
            requests=len(self.workload.requests),
            skipped_lines=len(self.workload.errors),
            span_s=self.workload.requests[-1].arrival_s if self.workload.requests else 0.0,
        )
        if s.results_file:
            self._results_fh = open(s.results_file, "wb")  # noqa: ASYNC230, SIM115 - once, closed in cleanup()
        kv = await self.bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
        self.spawn(self._watch_engines(kv), "engines")
        if s.target == "nats":
            self._inbox = self.bus.nc.new_inbox()
            await self.bus.subscribe(f"{self._inbox}.*", TokenChunk, self._on_chunk)
            self.every(0.25, self._check_flights, "flights")
        else:
            self.sender = HttpSender(s, self.table, self._on_http_retry)
        self.every(s.interval_s, self._publish_traffic, "traffic")
        self._replay = self.spawn(self._replay_loop(), "replay")

    def _fail_start(self, code: int) -> None:
        self._exit_code = code
        self.request_stop()

    async def drain(self) -> None:
        if self._replay is not None:
            await self._all_done.wait()
            await self._publish_traffic(final=True)
            self._print_summary()

    async def cleanup(self) -> None:
        if self._results_fh is not None:
            self._results_fh.close()
        if self.sender is not None:
            await self.sender.close()

    def health_detail(self) -> dict[str, object]:
        return {
            "in_flight": len(self.flights),
            "parked": len(self.parked),
            "done": len(self.results),
            "failed": self._failed_requests,
            "clients": self.clients_wanted,
            "replay_done": self.replay_done,
            "engines": len(self.table.entries),
        }

    # ---- engines ------------------------------------------------------------------------------
    async def _watch_engines(self, kv: KeyValue) -> None:
        """Follow the registry. Engines refresh their keys every ENGINES_TTL_S / 3, so a watch silent
        for longer than ENGINES_TTL_S / 2 is dead (its consumer was on a NATS node that went away, or
        the connection moved): it is started again, and its initial snapshot refills the table."""
        while True:
            try:
                await self._watch_engines_once(kv)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS unavailable for a moment: try again shortly
                self.log.warning("engines_watch_failed", error=str(exc) or type(exc).__name__)
                await asyncio.sleep(1.0)

    async def _watch_engines_once(self, kv: KeyValue) -> None:
        prefix = f"{self.settings.namespace}."
        watcher = await kv_watch(kv, f"{prefix}>")
        loop = asyncio.get_running_loop()
        last_update = loop.time()
        try:
            while True:
                try:
                    entry = await watcher.updates(timeout=1.0)
                except (TimeoutError, nats.errors.TimeoutError):
                    entry = None
                now = asyncio.get_running_loop().time()
                if entry is not None:
                    last_update = now
                elif now - last_update > ENGINES_TTL_S / 2:
                    self.log.info("engines_watch_restart", silent_s=round(now - last_update, 1))
                    return
                changed = bool(self.table.prune(now))
                if entry is not None:
                    changed = True
                    if entry.operation in ("DEL", "PURGE") or not entry.value:
                        self.table.remove(entry.key)
                    else:
                        try:
                            info = decode(entry.value, EngineInfo)
                        except DecodeError as exc:
                            self.bus.count_bad(ENGINES_BUCKET, exc.reason)
                            continue
                        self.table.upsert(entry.key, info, now)
                if changed:
                    for comp in ("agg", "prefill", "decode"):
                        self.metrics.engines.labels(comp).set(self.table.count(comp))
                    self._engines_changed.set()
        finally:
            try:
                await watcher.stop()
            except Exception:  # the connection may already be closing
                pass

    def _first_stage_engines(self) -> int:
        if self.settings.target == "openai":
            return self.table.count("agg")
        return self.table.count("agg") + self.table.count("prefill")

    async def _wait_for_engines(self) -> bool:
        s = self.settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + s.engine_wait_timeout_s
        while self._first_stage_engines() < s.min_engines:
            if self.stopping.is_set():
                return False
            if loop.time() >= deadline:
                self.log.error(
                    "no_engines",
                    wanted=s.min_engines,
                    found=self._first_stage_engines(),
                    timeout_s=s.engine_wait_timeout_s,
                )
                return False
            self._engines_changed.clear()
            try:
                await asyncio.wait_for(self._engines_changed.wait(), 0.5)
            except TimeoutError:
                pass
        return True

    # ---- replay -------------------------------------------------------------------------------
    async def _replay_loop(self) -> None:
        assert self.workload is not None
        loop = asyncio.get_running_loop()
        try:
            if not await self._wait_for_engines():
                if not self.stopping.is_set():
                    self._exit_code = 1
                return
            t0 = loop.time()
            self._started_mono = t0
            self.log.info("replay_started", engines=len(self.table.entries))
            if self.workload.phases:
                await self._run_clients(t0)
            else:
                await self._replay_requests(t0)
        finally:
            self.replay_done = True
            self._check_done()

    async def _replay_requests(self, t0: float) -> None:
        assert self.workload is not None
        loop = asyncio.get_running_loop()
        for i, r in enumerate(self.workload.requests):
            delay = t0 + r.arrival_s - loop.time()
            if delay > 0:
                try:
                    await asyncio.wait_for(self.stopping.wait(), delay)
                except TimeoutError:
                    pass
            if self.stopping.is_set():
                self.log.info("replay_interrupted", sent=i, total=len(self.workload.requests))
                break
            f = self._new_flight(r)
            if self.settings.target == "openai":
                self.spawn(self._send_http(f), f"request-{f.index}")
            else:
                await self._dispatch(f)

    async def _run_clients(self, t0: float) -> None:
        """As many closed-loop clients as the current phase wants; a client beyond the count stops
        once its request in flight is done."""
        assert self.workload is not None
        loop = asyncio.get_running_loop()
        running: dict[int, asyncio.Task[None]] = {}
        while not self.stopping.is_set():
            phase = phase_at(self.workload.phases, loop.time() - t0)
            if phase is None:
                break
            wanted, left_s = phase
            if wanted != self.clients_wanted:
                self.log.info("clients", count=wanted, for_s=round(left_s, 1))
            self.clients_wanted = wanted
            for idx in range(wanted):
                if idx not in running or running[idx].done():
                    running[idx] = self.spawn(self._client(idx), f"client-{idx}")
            try:
                await asyncio.wait_for(self.stopping.wait(), left_s)
            except TimeoutError:
                pass
        self.clients_wanted = 0
        self.log.info("clients", count=0)
        if running:
            await asyncio.wait(running.values())

    async def _client(self, idx: int) -> None:
        s = self.settings
        loop = asyncio.get_running_loop()
        while not self.stopping.is_set() and idx < self.clients_wanted:
            f = self._new_flight(TraceRequest(loop.time() - self._started_mono, s.isl_tokens, s.osl_tokens))
            if s.target == "openai":
                await self._send_http(f)
            else:
                f.done = asyncio.Event()
                await self._dispatch(f)
                await f.done.wait()

    def _new_flight(self, r: TraceRequest) -> Flight:
        now = asyncio.get_running_loop().time()
        i, self._sent = self._sent, self._sent + 1
        rid = f"{self._run_id}-{i}"
        reply = f"{self._inbox}.{i}" if self._inbox else ""
        f = Flight(i, rid, reply, r, created_s=now, last_activity_s=now)
        self.flights[rid] = f
        self.interval.arrival(r.input_tokens, r.output_tokens)
        self.metrics.arrival(r.input_tokens)
        self.metrics.in_flight.set(len(self.flights))
        return f

    async def _send_http(self, f: Flight) -> None:
        assert self.sender is not None
        out = await self.sender.send(f)
        self._finish(f, ok=not out.error, error=out.error, detail=out.detail)

    def _on_http_retry(self, f: Flight, out: Outcome) -> None:
        self.metrics.retries.inc()
        self.log.debug("retry", request_id=f.request_id, error=out.error, attempts=f.attempts)

    async def _dispatch(self, f: Flight) -> bool:
        """Send ``f`` to the least-loaded engine(s); False (and parked) when none can take it."""
        t = self.table
        mode = pick_mode(self.settings.mode, t)
        now = asyncio.get_running_loop().time()
        if mode == "disagg":
            first, dec = t.choose("prefill", f.excluded), t.choose("decode", f.excluded)
        else:
            first, dec = t.choose("agg", f.excluded), None
        if first is None or (mode == "disagg" and dec is None):
            if f.parked_since_s is None:
                f.parked_since_s = now
                self.parked.append(f)
            return False
        f.parked_since_s = None
        f.attempts += 1
        f.first_key, f.decode_key, f.first_released = first, dec, False
        f.last_activity_s = now
        t.acquire(first)
        if dec is not None:
            t.acquire(dec)
        gr = GenerateRequest(
            request_id=f.request_id,
            input_tokens=f.req.input_tokens,
            output_tokens=f.req.output_tokens,
            reply_subject=f.reply_subject,
            hash_ids=list(f.req.hash_ids),
            prefill_only=dec is not None,
            decode_subject=t.subject(dec) if dec is not None else "",
            arrived_at_s=time.time(),
        )
        await self.bus.nc.publish(t.subject(first), encode(gr))
        return True

    async def _redispatch_decode(self, f: Flight, bad_key: str | None) -> bool:
        """A decode worker turned the hand-off down after the first token: send the request to another
        decode worker (a decode engine treats every request as prefilled elsewhere)."""
        if bad_key:
            f.excluded.add(bad_key)
        dec = self.table.choose("decode", f.excluded)
        if dec is None or dec in f.excluded:
            return False
        f.attempts += 1
        f.decode_key = dec
        self.table.acquire(dec)
        gr = GenerateRequest(
            request_id=f.request_id,
            input_tokens=f.req.input_tokens,
            output_tokens=f.req.output_tokens,
            reply_subject=f.reply_subject,
            hash_ids=list(f.req.hash_ids),
            arrived_at_s=time.time(),
        )
        await self.bus.nc.publish(self.table.subject(dec), encode(gr))
        return True

    def _release(self, f: Flight) -> None:
        if f.first_key is not None and not f.first_released:
            self.table.release(f.first_key)
        if f.decode_key is not None:
            self.table.release(f.decode_key)
        f.first_key = f.decode_key = None
        f.first_released = False

    # ---- replies ------------------------------------------------------------------------------
    async def _on_chunk(self, chunk: TokenChunk, subject: str) -> None:
        f = self.flights.get(chunk.request_id)
        if f is None:
            return  # late chunk of a request already counted failed
        now = asyncio.get_running_loop().time()
        f.last_activity_s = now
        if chunk.error:
            await self._on_error(f, chunk)
            return
        if chunk.tokens:
            if f.first_token_s is None:
                f.first_token_s = now
                if f.decode_key is not None and f.first_key is not None and not f.first_released:
                    self.table.release(f.first_key)  # the prefill worker is done with it
                    f.first_released = True
            f.last_token_s = now
            f.tokens = max(f.tokens, chunk.total_tokens)
            if not f.workers or f.workers[-1] != chunk.worker_id:
                f.workers.append(chunk.worker_id)
        if chunk.finished:
            self._finish(f, ok=True)

    async def _on_error(self, f: Flight, chunk: TokenChunk) -> None:
        bad = self.table.worker_key(chunk.worker_id)
        can_retry = f.attempts <= self.settings.max_retries
        if f.first_token_s is None:
            self._release(f)
            if can_retry:
                if bad:
                    f.excluded.add(bad)
                self.metrics.retries.inc()
                self.log.debug("retry", request_id=f.request_id, error=chunk.error, worker=chunk.worker_id)
                await self._dispatch(f)
                return
        elif f.decode_key is not None and bad == f.decode_key and can_retry:
            self.table.release(f.decode_key)
            f.decode_key = None
            if await self._redispatch_decode(f, bad):
                self.metrics.retries.inc()
                return
        self._finish(f, ok=False, error=chunk.error)

    def _finish(self, f: Flight, ok: bool, error: str = "", detail: str = "") -> None:
        self.flights.pop(f.request_id, None)
        self._release(f)
        r = f.result(ok, error)
        self.results.append(r)
        self.interval.completion(r)
        self.metrics.done(r)
        self.metrics.in_flight.set(len(self.flights))
        if self._results_fh is not None:
            self._results_fh.write(self._enc.encode(r) + b"\n")
        if not ok:
            self._failed_requests += 1
            self.log.warning(
                "request_failed", request_id=f.request_id, error=error, attempts=f.attempts, detail=detail
            )
        if f.done is not None:
            f.done.set()
        self._check_done()

    async def _check_flights(self) -> None:
        """Fail requests whose engine went silent; re-try parked ones."""
        now = asyncio.get_running_loop().time()
        timeout = self.settings.stall_timeout_s
        if self.parked:
            parked, self.parked = self.parked, []
            for f in parked:
                if f.request_id not in self.flights:
                    continue
                since = f.parked_since_s if f.parked_since_s is not None else now
                if now - since > timeout:
                    self._finish(f, ok=False, error="no_engine")
                elif not await self._dispatch(f):
                    self.parked.append(f)
        for f in [f for f in self.flights.values() if f.parked_since_s is None]:
            if now - f.last_activity_s > timeout:
                if f.first_token_s is None and f.attempts <= self.settings.max_retries:
                    # Nothing ever came back (e.g. published while NATS was down): the engine never
                    # saw it, so sending it again loses nothing. Once tokens flowed, a stall is a failure.
                    self._release(f)
                    f.last_activity_s = now
                    self.metrics.retries.inc()
                    self.log.info("retry_stalled", request_id=f.request_id, attempts=f.attempts)
                    await self._dispatch(f)  # parks it when no engine can take it now
                    continue
                self._finish(f, ok=False, error="stalled")

    def _check_done(self) -> None:
        if self.replay_done and not self.flights and not self._all_done.is_set():
            self._all_done.set()
            if self.settings.exit_when_done:
                self.request_stop()

    # ---- reporting ----------------------------------------------------------------------------
    async def _publish_traffic(self, final: bool = False) -> None:
        if not self.settings.publish_traffic:
            return
        now = time.time()
        start = self._interval_start_wall
        interval_s = now - start if final else self.settings.interval_s
        if interval_s <= 0:
            return
        sample = self.interval.sample(self.settings.namespace, start, interval_s, self.settings.latency_scale)
        self.interval.reset()
        self._interval_start_wall = now
        await self.bus.publish(self.subjects.traffic(), sample)

    def _print_summary(self) -> None:
        loop = asyncio.get_running_loop()
        wall = loop.time() - self._started_mono if self._started_mono else 0.0
        summary = summarize(self.results, wall, self.settings.latency_scale)
        self.summary_text = format_summary(summary)
        print(self.summary_text, flush=True)
        self.log.info("summary", **msgspec.to_builtins(summary))


SERVICE = LoadgenService

if __name__ == "__main__":
    raise SystemExit(run_service(LoadgenService))
