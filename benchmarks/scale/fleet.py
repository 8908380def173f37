"""Every process a scale run starts: spawned in their own sessions (they die with this process), spoken
to over stdin/stdout (the engine processes' JSON-line protocol), stopped in reverse dependency order."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner_runtime.natsd import NatsServer
from planner_runtime.processes import die_with_parent


@dataclass
class Proc:
    name: str
    role: str
    popen: subprocess.Popen[bytes]
    http_port: int = 0
    log_path: Path | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class Fleet:
    """Every process this run started, stopped in reverse dependency order whatever happens."""

    procs: list[Proc] = field(default_factory=list)
    nats: NatsServer | None = None

    def spawn(
        self, name: str, role: str, args: list[str], log_dir: Path, http_port: int = 0, pipes: bool = False
    ) -> Proc:
        log_path = log_dir / f"{name}.log"
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                args,
                stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
                stdout=subprocess.PIPE if pipes else log,
                stderr=log,
                start_new_session=True,  # Ctrl-C reaches the harness only; it stops the rest in order
                preexec_fn=die_with_parent,
                env={**os.environ, "PYTHONFAULTHANDLER": "1"},
            )
        proc = Proc(name, role, popen, http_port, log_path)
        self.procs.append(proc)
        return proc

    def by_role(self, role: str) -> list[Proc]:
        return [p for p in self.procs if p.role == role]

    def stop_all(self, timeout_s: float = 40.0) -> dict[str, int | None]:
        codes: dict[str, int | None] = {}
        for role in ("engines", "relay", "regression", "decider"):
            group = [p for p in self.by_role(role) if p.alive()]
            for p in group:
                with contextlib.suppress(ProcessLookupError):
                    p.popen.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            for p in group:
                try:
                    p.popen.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    # PYTHONFAULTHANDLER is on in the children: SIGABRT writes every thread's stack
                    # to the process log, so a stuck shutdown can be diagnosed afterwards
                    p.popen.send_signal(signal.SIGABRT)
                    try:
                        p.popen.wait(5)
                    except subprocess.TimeoutExpired:
                        p.popen.kill()
                        p.popen.wait(5)
        for p in self.procs:
            for stream in (p.popen.stdin, p.popen.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            codes[p.name] = p.popen.returncode
        if self.nats is not None:
            self.nats.close()
            self.nats = None
        return codes


async def read_json_line(proc: Proc, timeout_s: float) -> dict[str, Any]:
    assert proc.popen.stdout is not None
    stdout = proc.popen.stdout
    while True:
        line = await asyncio.wait_for(asyncio.to_thread(stdout.readline), timeout_s)
        if not line:
            raise RuntimeError(f"{proc.name} exited: {tail(proc)}")
        obj: dict[str, Any] = json.loads(line)
        if "warning" not in obj:
            return obj


def tail(proc: Proc, n: int = 1500) -> str:
    if proc.log_path is None or not proc.log_path.exists():
        return ""
    return proc.log_path.read_text(errors="replace")[-n:]


async def command(proc: Proc, cmd: str, timeout_s: float = 15.0) -> dict[str, Any]:
    assert proc.popen.stdin is not None
    proc.popen.stdin.write(f"{cmd}\n".encode())
    proc.popen.stdin.flush()
    return await read_json_line(proc, timeout_s)
