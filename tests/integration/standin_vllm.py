"""A stand-in for a vLLM server on loopback: ``/health``, ``/v1/models`` and ``/metrics`` as a real
vLLM 0.32 answered them (its exposition recorded idle), for tests of what reads an engine's own
endpoints without starting one (the real-vLLM tests are in tests/integration/vllm)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

IDLE = (Path(__file__).parents[1] / "unit" / "fpm_relay" / "recorded" / "vllm-idle.txt").read_text()


class StandinVllm:
    """Started and stopped at will, on the same port (an engine restarting)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                routes = {
                    "/health": b"",
                    "/metrics": IDLE.encode(),
                    "/v1/models": json.dumps({"data": [{"id": "tiny", "max_model_len": 2048}]}).encode(),
                }
                body = routes.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
