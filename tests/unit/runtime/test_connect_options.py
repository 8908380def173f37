"""What a service hands nats-py: credentials and TLS as the settings ask, and, over TLS to one named
server (a Kubernetes Service), that name for checking the certificate of every node the cluster
advertises by address."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner_runtime.bus import connect_options
from planner_runtime.settings import BaseSettings


@pytest.fixture
def ca(tmp_path: Path) -> str:
    import subprocess

    key, crt = tmp_path / "ca.key", tmp_path / "ca.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
         "-subj", "/CN=test-ca", "-days", "1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return str(crt)


def test_tls_to_one_named_server_checks_every_node_against_that_name(ca: str) -> None:
    opts = connect_options(
        BaseSettings(nats_url="nats://nats:4222", nats_tls_ca_file=ca, nats_user="u", nats_password="p")
    )
    assert opts["tls"] is not None and opts["tls_hostname"] == "nats"
    assert (opts["user"], opts["password"]) == ("u", "p")


def test_several_servers_or_no_tls_keep_each_servers_own_name(ca: str) -> None:
    several = connect_options(BaseSettings(nats_url="nats://a:4222,nats://b:4222", nats_tls_ca_file=ca))
    assert "tls" in several and "tls_hostname" not in several
    plain = connect_options(BaseSettings(nats_url="nats://nats:4222"))
    assert "tls" not in plain and "tls_hostname" not in plain
