"""free_port picks listener ports outside the kernel's ephemeral range, so an outgoing connection's
local end (a client reconnecting while a server restarts on its old port) can never hold one."""

from __future__ import annotations

import socket

import pytest

from planner_runtime import natsd


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    low = natsd._ephemeral_low()
    if low is None:
        pytest.skip("no /proc/sys/net/ipv4/ip_local_port_range on this system")
    ports = [natsd.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(low - natsd._PICK_WIDTH <= p < low for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))


def test_a_port_held_by_a_listener_is_never_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        # a range of two ports, the held one and the one below it
        monkeypatch.setattr(natsd, "_ephemeral_low", lambda: taken + 1)
        monkeypatch.setattr(natsd, "_PICK_WIDTH", 2)
        monkeypatch.setattr(natsd, "_handed_out", set())
        first, second = natsd.free_port(), natsd.free_port()
        assert taken not in (first, second)
        assert first != second  # the range used up, the second is a kernel pick


def test_without_the_kernel_range_it_falls_back_to_a_kernel_pick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(natsd, "_ephemeral_low", lambda: None)
    port = natsd.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
