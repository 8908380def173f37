"""Start a real llama-server on its own loopback port, wait until it serves, stop it.

``llama-server -m MODEL --host 127.0.0.1 --port P --metrics --threads 1 --parallel N -c CTX``: one
process per worker. ``/health`` answers 503 while the model loads and 200 once it serves; the server
is then ready for ``/v1/completions``, ``/v1/chat/completions`` and ``/metrics``.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from planner_runtime.httpget import get
from planner_runtime.llamacpp.binary import find_llama_server
from planner_runtime.llamacpp.tinymodel import ensure_tiny_llama
from planner_runtime.processes import ManagedProcess, free_port


def server_args(
    binary: Path | str,
    model: Path | str,
    *,
    port: int | str,
    host: str = "127.0.0.1",
    parallel: int = 2,
    ctx_per_slot: int = 1024,
    threads: int = 1,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """The command line of one worker (the context is split evenly over the ``parallel`` slots)."""
    return [
        str(binary),
        "-m",
        str(model),
        "--host",
        host,
        "--port",
        str(port),
        "--metrics",
        "--threads",
        str(threads),
        "--threads-batch",
        str(threads),
        "--parallel",
        str(parallel),
        "-c",
        str(ctx_per_slot * parallel),
        "--no-warmup",
        *extra,
    ]


def wait_healthy(
    url: str, timeout_s: float, proc: subprocess.Popen[bytes] | ManagedProcess | None = None
) -> bool:
    """True once ``{url}/health`` answers 200; False on timeout or when ``proc`` exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        status, _ = get(f"{url}/health", timeout_s=1.0)
        if status == 200:
            return True
        time.sleep(0.1)
    return False


class LlamaServer:
    """One llama-server process. ``with LlamaServer(parallel=2) as s: s.url``."""

    def __init__(
        self,
        *,
        binary: Path | str | None = None,
        model: Path | str | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
        parallel: int = 2,
        ctx_per_slot: int = 1024,
        extra: tuple[str, ...] = (),
        log_dir: Path | None = None,
    ) -> None:
        found = binary or find_llama_server()
        if found is None:
            raise FileNotFoundError(
                "llama-server not found: run scripts/ensure-llama-server.sh and set PLANNER_LLAMA_SERVER"
            )
        self.binary = Path(found)
        self.model = Path(model) if model is not None else ensure_tiny_llama()
        self.host = host
        self.port = port or free_port(host)
        self.parallel = parallel
        self.ctx_per_slot = ctx_per_slot
        self.extra = extra
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if log_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="llama-server-")
            log_dir = Path(self._tmp.name)
        self.log_file = log_dir / f"llama-server-{self.port}.log"
        self._proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def args(self) -> list[str]:
        return server_args(
            self.binary,
            self.model,
            port=self.port,
            host=self.host,
            parallel=self.parallel,
            ctx_per_slot=self.ctx_per_slot,
            extra=self.extra,
        )

    def start(self, timeout_s: float = 30.0) -> LlamaServer:
        if self.running:
            return self
        with self.log_file.open("ab") as log:
            self._proc = ManagedProcess.start(self.args(), stdout=log, stderr=subprocess.STDOUT)
        if not wait_healthy(self.url, timeout_s, self._proc):
            self.stop()
            tail = self.log_file.read_text(errors="replace")[-1500:] if self.log_file.exists() else ""
            raise RuntimeError(f"llama-server did not become healthy on {self.url}:\n{tail}")
        return self

    def metrics(self) -> str:
        status, body = get(f"{self.url}/metrics")
        if status != 200:
            raise RuntimeError(f"{self.url}/metrics answered {status}")
        return body.decode("utf-8", errors="replace")

    def stop(self, timeout_s: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.stop(timeout_s)

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
