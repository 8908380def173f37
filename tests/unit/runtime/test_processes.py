"""The process helpers: free_port picks listener ports outside the kernel's ephemeral range, so an
outgoing connection's local end (a client reconnecting while a server restarts on its old port) can
never hold one; a ManagedProcess stops with SIGTERM, or SIGKILL when it ignores that."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import pytest

from planner_runtime import processes
from planner_runtime.processes import ManagedProcess, wait_for_port


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    low = processes._ephemeral_low()
    if low is None:
        pytest.skip("no /proc/sys/net/ipv4/ip_local_port_range on this system")
    ports = [processes.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(low - processes._PICK_WIDTH <= p < low for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))


def test_a_port_held_by_a_listener_is_never_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        # a range of two ports, the held one and the one below it
        monkeypatch.setattr(processes, "_ephemeral_low", lambda: taken + 1)
        monkeypatch.setattr(processes, "_PICK_WIDTH", 2)
        monkeypatch.setattr(processes, "_handed_out", set())
        first, second = processes.free_port(), processes.free_port()
        assert taken not in (first, second)
        assert first != second  # the range used up, the second is a kernel pick


def test_without_the_kernel_range_it_falls_back_to_a_kernel_pick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "_ephemeral_low", lambda: None)
    port = processes.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def _python(code: str, stdout: int | None = None) -> ManagedProcess:
    return ManagedProcess.start([sys.executable, "-c", code], stdout=stdout)


def test_a_managed_process_stops_on_sigterm() -> None:
    proc = _python("import time; time.sleep(60)")
    assert proc.running
    assert proc.stop(timeout_s=10) is False
    assert not proc.running and proc.returncode == -signal.SIGTERM


def test_a_managed_process_that_ignores_sigterm_is_killed() -> None:
    proc = _python(
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)",
        stdout=subprocess.PIPE,
    )
    assert proc.popen.stdout is not None
    assert proc.popen.stdout.readline() == b"ready\n"  # SIGTERM is ignored from here on
    proc.popen.stdout.close()
    assert proc.stop(timeout_s=0.5) is True
    assert proc.returncode == -signal.SIGKILL


def test_what_a_child_in_its_own_session_leaves_behind_is_killed_with_it() -> None:
    """A vLLM in its own session exits on SIGTERM; its multiprocessing resource tracker ignores
    SIGTERM and would outlive it."""
    code = (
        "import signal, subprocess, sys, time\n"
        "leftover = subprocess.Popen([sys.executable, '-c',"
        " 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "print(leftover.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = ManagedProcess.start([sys.executable, "-c", code], stdout=subprocess.PIPE, new_session=True)
    assert proc.popen.stdout is not None
    leftover = int(proc.popen.stdout.readline())
    assert proc.stop(timeout_s=10) is False
    deadline = time.monotonic() + 5
    while _alive(leftover):
        assert time.monotonic() < deadline, "the child's leftover process outlived it"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Running (a zombie, killed and waiting for init to reap it, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_wait_for_port_gives_up_when_the_process_exits() -> None:
    proc = _python("raise SystemExit(3)")
    started = time.monotonic()
    assert wait_for_port("127.0.0.1", processes.free_port(), 20, proc) is False
    assert time.monotonic() - started < 10  # it did not wait for the timeout
    assert proc.wait(5) == 3
