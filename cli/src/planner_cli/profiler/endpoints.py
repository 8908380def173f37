"""Engines the live profiler talks to: engine-sim over NATS, or an OpenAI-compatible HTTP server.

Each endpoint turns one (ISL, OSL) request into a :class:`StreamTrace`:

- engine-sim: a GenerateRequest on ``Subjects.generate(worker_id)``, TokenChunks back on a private
  reply subject. Chunks carry the engine's own (uncompressed) clock: ``engine_time_s`` when the
  chunk's last token was made and ``received_engine_time_s`` when the request arrived, which give ITL
  and TTFT free of NATS, client and host-scheduling jitter. An engine that does not stamp arrivals
  gets the client's wall-clock TTFT (minus the transport round trip measured on the warm-up) times the
  engine's time compression (given, or estimated on the warm-up from chunk clocks against wall clock).
- OpenAI-compatible: a streamed ``/completions`` request with ``max_tokens`` (and ``ignore_eos`` /
  ``min_tokens`` so the full OSL is produced, where the server takes them), prompt as token ids (exact
  ISL) or as words (approximate; exact on vLLM, which cuts them to the ISL). TTFT = first streamed
  choice; ITL from the gaps between chunks, each chunk counted as one token unless the final
  ``usage`` says otherwise.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from planner_core.profiling import EngineLimits, StreamTrace


class EndpointError(RuntimeError):
    pass


class Endpoint(Protocol):
    name: str

    async def limits(self) -> EngineLimits | None: ...

    async def warm_up(self) -> None: ...

    async def generate(self, isl: int, osl: int) -> StreamTrace: ...

    async def close(self) -> None: ...


# ---- engine-sim over NATS ---------------------------------------------------------------------------


@dataclass
class _Pending:
    sent_wall: float
    done: asyncio.Future[None]
    walls: list[float] = field(default_factory=list)
    engine: list[float] = field(default_factory=list)
    totals: list[int] = field(default_factory=list)
    first_wall: float | None = None
    received_engine: float = 0.0
    error: str = ""
    last_seen: float = 0.0


class NatsEngineEndpoint:
    """One engine-sim worker reached over NATS."""

    def __init__(
        self,
        nats_url: str,
        namespace: str,
        worker_id: str,
        *,
        time_compression: float = 0.0,
        stall_timeout_s: float = 30.0,
        limits_timeout_s: float = 20.0,
    ) -> None:
        self.nats_url = nats_url
        self.namespace = namespace
        self.worker_id = worker_id
        self.name = f"engine-sim {worker_id}"
        self.time_compression = time_compression
        self.stall_timeout_s = stall_timeout_s
        self.limits_timeout_s = limits_timeout_s
        self._bus: Any = None
        self._inbox = f"_PROFILE.{uuid.uuid4().hex}"
        self._pending: dict[str, _Pending] = {}
        self._seq = 0
        self.overhead_s = 0.0

    async def connect(self) -> NatsEngineEndpoint:
        from planner_proto.subjects import Subjects
        from planner_runtime.bus import Bus
        from planner_runtime.settings import BaseSettings

        settings = BaseSettings(nats_url=self.nats_url, namespace=self.namespace, log_level="warning")
        self._subjects = Subjects(self.namespace, settings.subject_prefix)
        try:
            self._bus = await Bus.connect(settings, name="planner-profile", max_wait_s=10.0)
        except ConnectionError as exc:
            raise EndpointError(str(exc)) from None
        await self._bus.subscribe_raw(f"{self._inbox}.*", self._on_chunk)
        return self

    async def _on_chunk(self, data: bytes, subject: str) -> None:
        from planner_proto import TokenChunk, decode

        now = time.perf_counter()
        chunk = decode(data, TokenChunk)
        p = self._pending.get(chunk.request_id)
        if p is None:
            return
        p.last_seen = now
        if chunk.error:
            p.error = chunk.error
        elif chunk.tokens > 0:
            if p.first_wall is None:
                p.first_wall = now
                p.received_engine = chunk.received_engine_time_s
            p.walls.append(now)
            p.engine.append(chunk.engine_time_s)
            p.totals.append(chunk.total_tokens)
        if (chunk.finished or chunk.error) and not p.done.done():
            p.done.set_result(None)

    async def limits(self) -> EngineLimits | None:
        """The engine's capabilities from its ``planner_engines`` registry entry (waits for it)."""
        from planner_proto import EngineInfo
        from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S
        from planner_runtime.bus import kv_get

        kv = await self._bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
        deadline = time.monotonic() + self.limits_timeout_s
        while time.monotonic() < deadline:
            for comp in ("agg", "decode", "prefill"):
                info = await kv_get(kv, self._subjects.engine_key(comp, self.worker_id), EngineInfo)
                if info is not None:
                    cap = info.capabilities
                    return EngineLimits(
                        max_kv_tokens=max(1, cap.max_kv_tokens),
                        context_length_tokens=cap.context_length_tokens,
                        max_num_seqs=cap.max_num_seqs,
                        gpus=max(1, cap.gpus),
                    )
            await asyncio.sleep(0.2)
        raise EndpointError(
            f"engine {self.worker_id!r} is not registered in namespace {self.namespace!r} "
            f"(no {ENGINES_BUCKET} entry after {self.limits_timeout_s:.0f} s)"
        )

    async def _request(self, isl: int, osl: int) -> _Pending:
        from planner_proto import GenerateRequest

        self._seq += 1
        rid = f"profile-{self._seq}"
        loop = asyncio.get_running_loop()
        req = GenerateRequest(
            request_id=rid, input_tokens=isl, output_tokens=osl, reply_subject=f"{self._inbox}.{rid}"
        )
        p = _Pending(sent_wall=time.perf_counter(), done=loop.create_future())
        p.last_seen = p.sent_wall
        self._pending[rid] = p
        await self._bus.publish(self._subjects.generate(self.worker_id), req)
        try:
            while not p.done.done():
                try:
                    await asyncio.wait_for(asyncio.shield(p.done), timeout=1.0)
                except TimeoutError:
                    # engine-sim sends keep-alive chunks every second while a request waits
                    if time.perf_counter() - p.last_seen > self.stall_timeout_s:
                        p.error = f"no chunk for {self.stall_timeout_s:.0f} s"
                        break
        finally:
            self._pending.pop(rid, None)
        return p

    async def warm_up(self) -> None:
        """One short request; estimates the time compression when it was not given, and the
        round-trip overhead outside the engine's passes (NATS both ways, the request handler) from
        requests the engine rejects at once (longer than any context)."""
        p = await self._request(100, 128)
        if p.error:
            raise EndpointError(f"warm-up request failed on {self.worker_id}: {p.error}")
        rtts = []
        for _ in range(7):
            probe = await self._request(10**9, 1)
            if probe.error and probe.last_seen > probe.sent_wall:
                rtts.append(probe.last_seen - probe.sent_wall)
        self.overhead_s = statistics.median(rtts) if rtts else 0.0
        if self.time_compression <= 0:
            est = 0.0
            if len(p.walls) >= 2 and p.walls[-1] > p.walls[0]:
                est = (p.engine[-1] - p.engine[0]) / (p.walls[-1] - p.walls[0])
            self.time_compression = est if est > 0 else 1.0

    async def generate(self, isl: int, osl: int) -> StreamTrace:
        p = await self._request(isl, osl)
        if p.error or p.first_wall is None:
            return StreamTrace(ttft_s=-1.0, error=p.error or "no tokens")
        if p.received_engine > 0.0:  # the engine's own clock: free of NATS and host scheduling noise
            ttft_s = max(p.engine[0] - p.received_engine, 0.0)
        else:  # an engine that does not stamp arrivals: the client's wall clock, stretched
            scale = self.time_compression if self.time_compression > 0 else 1.0
            ttft_s = max(p.first_wall - p.sent_wall - self.overhead_s, 0.0) * scale
        return StreamTrace(
            ttft_s=ttft_s,
            times_s=tuple(p.engine),
            tokens=tuple(p.totals),
        )

    async def close(self) -> None:
        if self._bus is not None:
            await self._bus.close()
            self._bus = None


# ---- OpenAI-compatible HTTP ---------------------------------------------------------------------------

_WORDS = ("time", "people", "water", "house", "story", "light", "music", "river", "paper", "world")


def openai_base(url: str) -> str:
    """The API base of an OpenAI-compatible server: ``http://host:port`` means ``http://host:port/v1``
    (what llama-server, vLLM and SGLang serve); a URL with a path is kept as given."""
    from urllib.parse import urlsplit

    url = url.rstrip("/")
    return url + "/v1" if urlsplit(url).path in ("", "/") else url


class OpenAIEndpoint:
    """An OpenAI-compatible server (vLLM, SGLang, TRT-LLM, llama.cpp, ...): streamed completions."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str = "",
        ignore_eos: bool = True,
        prompt_format: str = "tokens",
        limits: EngineLimits | None = None,
        timeout_s: float = 600.0,
        seed: int = 0,
        transport: Any = None,
    ) -> None:
        import httpx

        self.base_url = openai_base(base_url)
        self.server_url = self.base_url.removesuffix("/v1")
        """The server's root (``/health``, ``/metrics``) under the OpenAI base."""
        self.model = model
        self.name = f"openai {self.base_url}"
        self.ignore_eos = ignore_eos
        self.prompt_format = prompt_format
        self.truncate_text = False
        """Text prompts cut to exactly the ISL by the server (vLLM's ``truncate_prompt_tokens``):
        words are at least a token each, so the cut makes the approximate format exact."""
        self._limits = limits
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            headers=headers,
            limits=httpx.Limits(max_connections=4096, max_keepalive_connections=256),
            transport=transport,
        )
        self._rng = random.Random(seed)
        self._token_range = (1000, 30000)

    async def connect(self) -> OpenAIEndpoint:
        """Reads the vocabulary size where the server tells it (llama-server's ``/models`` meta), so
        token prompts stay inside small vocabularies."""
        n_vocab = await self.vocab_size()
        if n_vocab is not None and n_vocab < self._token_range[1]:
            self._token_range = (min(1000, n_vocab // 4), n_vocab)
        return self

    async def vocab_size(self) -> int | None:
        import httpx

        try:
            r = await self._client.get(f"{self.base_url}/models")
            r.raise_for_status()
            for m in r.json().get("data", []):
                meta = m.get("meta") or {}
                if meta.get("n_vocab"):
                    return int(meta["n_vocab"])
        except (httpx.HTTPError, ValueError, TypeError, AttributeError):
            return None
        return None

    async def limits(self) -> EngineLimits | None:
        """The limits given by flags; the context length from ``/models`` (vLLM's max_model_len) when
        the flags left it out."""
        if self._limits is not None:
            return self._limits
        return None

    async def model_context_length(self) -> int | None:
        import httpx

        try:
            r = await self._client.get(f"{self.base_url}/models")
            r.raise_for_status()
            for m in r.json().get("data", []):
                if m.get("id") == self.model and m.get("max_model_len"):
                    return int(m["max_model_len"])
        except (httpx.HTTPError, ValueError, TypeError, AttributeError):
            return None
        return None

    def _prompt(self, isl: int) -> list[int] | str:
        if self.prompt_format == "tokens":
            # random ids from the range every common vocabulary has: no prefix-cache hits between requests
            lo, hi = self._token_range
            return [self._rng.randrange(lo, hi) for _ in range(isl)]
        return " ".join(self._rng.choice(_WORDS) for _ in range(isl))

    def _body(self, isl: int, osl: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": self._prompt(isl),
            "max_tokens": osl,
            "stream": True,
            "temperature": 0.0,
            "stream_options": {"include_usage": True},
        }
        if self.ignore_eos:
            body["ignore_eos"] = True
            body["min_tokens"] = osl
        if self.truncate_text and self.prompt_format == "text":
            body["truncate_prompt_tokens"] = isl
        return body

    async def warm_up(self) -> None:
        t = await self.generate(32, 8)
        if t.error:
            raise EndpointError(f"warm-up request to {self.base_url} failed: {t.error}")

    async def generate(self, isl: int, osl: int) -> StreamTrace:
        import httpx

        walls: list[float] = []
        usage_tokens = 0
        sent = time.perf_counter()
        try:
            async with self._client.stream(
                "POST", f"{self.base_url}/completions", json=self._body(isl, osl)
            ) as r:
                if r.status_code >= 400:
                    text = (await r.aread()).decode(errors="replace")[:300]
                    return StreamTrace(ttft_s=-1.0, error=f"HTTP {r.status_code}: {text}")
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        break
                    now = time.perf_counter()
                    try:
                        msg = json.loads(payload)
                    except ValueError:
                        continue
                    if msg.get("choices"):
                        walls.append(now)
                    usage = msg.get("usage") or {}
                    if usage.get("completion_tokens"):
                        usage_tokens = int(usage["completion_tokens"])
        except httpx.HTTPError as exc:
            return StreamTrace(ttft_s=-1.0, error=f"{type(exc).__name__}: {exc}")
        if not walls:
            return StreamTrace(ttft_s=-1.0, error="no tokens streamed")
        n = len(walls)
        if usage_tokens > n > 1:  # chunks of several tokens: the first carries the first token,
            # the later ones share the rest evenly
            tokens = tuple(1 + round(i * (usage_tokens - 1) / (n - 1)) for i in range(n))
        else:
            tokens = tuple(range(1, n + 1))
        return StreamTrace(ttft_s=walls[0] - sent, times_s=tuple(walls), tokens=tokens)

    async def close(self) -> None:
        await self._client.aclose()
