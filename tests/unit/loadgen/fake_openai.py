"""A stand-in OpenAI-compatible engine on a loopback port: ``POST /v1/completions`` answered as each
request's mode says (a proper token stream, an HTTP error, a malformed or cut-off stream, a stall).
Bodies are close-delimited (``Connection: close``), as a minimal server may send them."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any


def chunk(text: str, finish: str | None = None, usage: int | None = None) -> bytes:
    msg: dict[str, Any] = {"choices": [{"text": text, "index": 0, "finish_reason": finish}]}
    if usage is not None:
        msg["usage"] = {"completion_tokens": usage}
    return b"data: " + json.dumps(msg).encode() + b"\n\n"


def ok_stream(tokens: int) -> list[bytes]:
    """As llama-server sends it: one chunk per token, a last one with finish_reason and usage, [DONE]."""
    return [chunk("x") for _ in range(tokens)] + [chunk("", "length", tokens), b"data: [DONE]\n\n"]


# mode -> (status, the pieces of the body; None: stall there)
MODES: dict[str, tuple[int, list[bytes | None]]] = {
    "ok": (200, ok_stream(3)),
    "503": (503, [b'{"error": {"code": 503, "message": "Loading model"}}']),
    "500": (500, [b"boom"]),
    "malformed": (200, [chunk("x"), b"data: {not json\n\n"]),
    "not_a_chunk": (200, [b'data: {"choices": "x"}\n\n']),
    "error_event": (200, [chunk("x"), b'data: {"error": {"message": "slot died"}}\n\n']),
    "truncated": (200, [chunk("x"), chunk("y")]),
    "no_tokens": (200, [b": keep-alive\n\n", b"data: [DONE]\n\n"]),
    "finish_no_done": (200, [chunk("x"), chunk("y"), chunk("", "length", 2)]),
    "stall": (200, [chunk("x"), None]),
}


@dataclass
class FakeOpenAI:
    modes: list[str] = field(default_factory=lambda: ["ok"])
    """Mode of the n-th request (the last one repeats)."""
    gap_s: float = 0.0
    """Pause before each piece of the body."""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    port: int = 0
    _server: asyncio.Server | None = None
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> FakeOpenAI:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for t in list(self._handlers):  # a stalled answer, or one the client walked away from
            t.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.decode().split("\r\n"):
                name, _, value = line.partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            self.bodies.append(json.loads(await reader.readexactly(length)))
            mode = self.modes[min(len(self.bodies), len(self.modes)) - 1]
            status, pieces = MODES[mode]
            ctype = "text/event-stream" if status == 200 else "application/json"
            writer.write(
                f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nConnection: close\r\n\r\n".encode()
            )
            for piece in pieces:
                if self.gap_s:
                    await asyncio.sleep(self.gap_s)
                if piece is None:
                    await asyncio.sleep(3600)
                writer.write(piece)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.in_flight -= 1
            self._handlers.discard(task)
            writer.close()
