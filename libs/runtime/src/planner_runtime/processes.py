"""Child processes and loopback ports, as the embedded nats-server, the llama.cpp workers,
``planner register`` and the demos use them.

- :func:`free_port`: a loopback port nothing listens on, for a server to bind a moment later;
- :func:`wait_for_port`: wait until a port accepts connections (or its process exits);
- :func:`die_with_parent`: a ``preexec_fn`` that makes a child die with this process (Linux);
- :class:`ManagedProcess`: a child started with :func:`die_with_parent`, stopped with SIGTERM and,
  after a grace period, SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = ["ManagedProcess", "die_with_parent", "free_port", "wait_for_port"]


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGTERM when the process that started it dies, so a killed test run or
    demo never leaves a child behind. A no-op where ``prctl`` is not available."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_PICK_WIDTH = 10_000  # ports just below the ephemeral range to pick from
_handed_out: set[int] = set()


def _ephemeral_low() -> int | None:
    """The lowest port the kernel hands to outgoing connections (Linux), or None if unknown."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers that will bind it do
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, for a server to bind a moment later.

    Picked below the kernel's ephemeral range (Linux): a port from that range (what binding port 0
    gives) can be taken in between by any outgoing connection's local end, e.g. a client reconnecting
    while a node restarts on its old port ("bind: address already in use"). Ports below the range
    are only ever taken by a listener; this process never hands the same one out twice.
    """
    low = _ephemeral_low()
    if low is not None and low > _PICK_WIDTH + 1024:
        rng = random.SystemRandom()
        for _ in range(200):
            port = rng.randrange(low - _PICK_WIDTH, low)
            if port not in _handed_out and _bindable(host, port):
                _handed_out.add(port)
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port = int(s.getsockname()[1])
        _handed_out.add(port)
        return port


def wait_for_port(
    host: str,
    port: int,
    timeout_s: float,
    proc: subprocess.Popen[bytes] | ManagedProcess | None = None,
) -> bool:
    """True once ``host:port`` accepts connections; False on timeout or when ``proc`` has exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class ManagedProcess:
    """A child process that dies with this one (Linux) and stops with SIGTERM, then SIGKILL.

    :meth:`start` runs ``args`` with stdin from ``/dev/null`` unless told otherwise;
    ``new_session=True`` puts the child in its own session, so a terminal's Ctrl-C reaches only
    this process, which then stops the child in its own order.
    """

    def __init__(self, popen: subprocess.Popen[bytes], own_group: bool = False) -> None:
        self.popen = popen
        self.own_group = own_group
        """The child leads its own process group (``new_session``): what it leaves behind (a
        Python ``multiprocessing`` resource tracker ignores SIGTERM) is killed with it."""

    @classmethod
    def start(
        cls,
        args: Sequence[str],
        *,
        stdin: int | IO[Any] | None = subprocess.DEVNULL,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
        env: Mapping[str, str] | None = None,
        new_session: bool = False,
    ) -> ManagedProcess:
        popen = subprocess.Popen(
            list(args),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=env,
            start_new_session=new_session,
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )
        return cls(popen, own_group=new_session)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout_s: float | None = None) -> int:
        """The exit status; :class:`subprocess.TimeoutExpired` if still running after ``timeout_s``."""
        return self.popen.wait(timeout=timeout_s)

    def stop(self, timeout_s: float = 10.0, kill_wait_s: float = 5.0) -> bool:
        """SIGTERM, up to ``timeout_s`` for the exit, then SIGKILL. True when it had to be killed."""
        killed = False
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=kill_wait_s)
                killed = True
        self._kill_group()
        return killed

    def _kill_group(self) -> None:
        """SIGKILL whatever is left of the child's own process group once the child has exited."""
        if self.own_group and self.popen.poll() is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGKILL)

    def kill(self, wait_s: float = 5.0) -> None:
        """SIGKILL now, as a crash would."""
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=wait_s)
        self._kill_group()
