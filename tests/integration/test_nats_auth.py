"""NATS auth through the runtime (every service connects through it): user/password, token, nkey,
TLS; wrong credentials fail with a clear error; secrets never reach the logs."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nkeys
import pytest

from planner_proto import TrafficSample
from planner_runtime.bus import Bus
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port
from planner_runtime.settings import BaseSettings

pytestmark = pytest.mark.integration

PASSWORD = "pw-Zr81-not-in-logs"
TOKEN = "tok-Qa73-not-in-logs"


def _server(tmp_path: Path, conf: str) -> NatsServer:
    path = tmp_path / "nats.conf"
    path.write_text(conf)
    return NatsServer(store_dir=tmp_path / "js", extra_args=["-c", str(path)])


@pytest.fixture
def user_server(tmp_path: Path) -> Iterator[NatsServer]:
    with _server(tmp_path, f'authorization {{ user: planner, password: "{PASSWORD}" }}\n') as s:
        yield s


async def _round_trip(settings: BaseSettings) -> None:
    bus = await Bus.connect(settings, max_wait_s=10)
    got: list[TrafficSample] = []

    async def on(m: TrafficSample, s: str) -> None:
        got.append(m)

    await bus.subscribe("auth.check", TrafficSample, on)
    await bus.publish("auth.check", TrafficSample(namespace="a", start_s=0, interval_s=1, num_requests=3))
    for _ in range(100):
        if got:
            break
        await asyncio.sleep(0.02)
    await bus.close()
    assert [m.num_requests for m in got] == [3]


async def test_user_password(user_server: NatsServer) -> None:
    await _round_trip(BaseSettings(nats_url=user_server.url, nats_user="planner", nats_password=PASSWORD))


async def test_wrong_password_is_a_clear_permanent_error(user_server: NatsServer) -> None:
    settings = BaseSettings(nats_url=user_server.url, nats_user="planner", nats_password="wrong-password")
    with pytest.raises(ConnectionError, match=r"(?i)authoriz"):
        await Bus.connect(settings, max_wait_s=30)


async def test_token(tmp_path: Path) -> None:
    with _server(tmp_path, f'authorization {{ token: "{TOKEN}" }}\n') as s:
        await _round_trip(BaseSettings(nats_url=s.url, nats_token=TOKEN))


async def test_nkey(tmp_path: Path) -> None:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(seed).public_key.decode()
    seed_file = tmp_path / "user.nk"
    seed_file.write_bytes(seed)
    with _server(tmp_path, f'authorization {{ users = [ {{ nkey: "{public}" }} ] }}\n') as s:
        await _round_trip(BaseSettings(nats_url=s.url, nats_nkey_seed_file=str(seed_file)))


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")
async def test_tls(tmp_path: Path) -> None:
    def ssl_cmd(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True, timeout=60)

    ssl_cmd(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        "/CN=planner-test-ca",
        "-days",
        "1",
    )
    ssl_cmd(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    )
    (tmp_path / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    ssl_cmd(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "1",
        "-extfile",
        "san.ext",
    )
    conf = f'tls {{ cert_file: "{tmp_path}/server.crt", key_file: "{tmp_path}/server.key" }}\n'
    with _server(tmp_path, conf) as s:
        url = s.url.replace("nats://", "tls://")
        await _round_trip(BaseSettings(nats_url=url, nats_tls_ca_file=str(tmp_path / "ca.crt")))
        # Without the CA the server's certificate is not trusted: no silent plaintext fallback.
        with pytest.raises(ConnectionError):
            await Bus.connect(BaseSettings(nats_url=url, nats_connect_timeout_s=1), max_wait_s=2)


def test_service_logs_never_show_secrets(user_server: NatsServer) -> None:
    env = {**os.environ, "PLANNER_NATS_PASSWORD": PASSWORD, "PLANNER_LOG_LEVEL": "debug"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "planner_runtime.testing",
            "--nats-url",
            user_server.url,
            "--nats-user",
            "planner",
            "--http-port",
            str(free_port()),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        import time

        time.sleep(2.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = (out + err).decode()
    assert proc.returncode == 0, text[-2000:]
    assert "nats_connected" in text
    assert PASSWORD not in text
    assert '"nats_password": "***"' in text
