"""The embedded nats-server: a port it picked itself that something else bound before nats-server
did is replaced by another; a port the caller gave is not (clients know it), and the error says why."""

from __future__ import annotations

import socket

import pytest

from planner_runtime.natsd import NatsServer
from planner_runtime.processes import wait_for_port

pytestmark = pytest.mark.integration


def _hold(port: int) -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def test_a_picked_port_taken_before_the_bind_is_replaced() -> None:
    server = NatsServer(jetstream=False)
    picked = server.port
    with _hold(picked):
        try:
            server.start()
            assert server.port != picked
            assert wait_for_port("127.0.0.1", server.port, 1.0)
        finally:
            server.close()


def test_a_given_port_that_is_taken_is_a_clear_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with _hold(port):
        server = NatsServer(port=port, jetstream=False)
        try:
            with pytest.raises(RuntimeError, match="address already in use"):
                server.start()
            assert server.port == port
        finally:
            server.close()
