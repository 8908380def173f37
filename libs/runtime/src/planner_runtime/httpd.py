"""A minimal asyncio HTTP endpoint for ``/metrics`` (Prometheus text) and ``/healthz``.

Only GET of a few fixed paths, loopback by default, bounded request size and a read timeout: it is
a probe target, not a web server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

HealthFn = Callable[[], tuple[bool, dict[str, object]]]

_STATUS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}


class HttpEndpoint:
    def __init__(
        self, registry: CollectorRegistry, health: HealthFn, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.registry = registry
        self.health = health
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=8192)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def _route(self, method: str, path: str) -> tuple[int, str, bytes]:
        path = path.split("?", 1)[0]
        if method != "GET":
            return 405, "text/plain", b"only GET\n"
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if path in ("/healthz", "/readyz"):
            ok, detail = self.health()
            body = json.dumps({"status": "ok" if ok else "unhealthy", **detail}, default=str).encode()
            return (200 if ok else 503), "application/json", body
        return 404, "text/plain", b"not found\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=5.0)
            while True:  # skip headers
                h = await asyncio.wait_for(reader.readline(), timeout=5.0)
                if h in (b"\r\n", b"\n", b""):
                    break
            parts = line.decode("latin-1").split()
            if len(parts) < 2:
                status, ctype, body = 400, "text/plain", b"bad request\n"
            else:
                status, ctype, body = self._route(parts[0], parts[1])
            head = (
                f"HTTP/1.1 {status} {_STATUS.get(status, '')}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except ConnectionError:
                pass
