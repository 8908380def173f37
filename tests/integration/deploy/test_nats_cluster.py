"""deploy/nats as shipped: the rendered 3-node StatefulSet's nats.conf and auth.conf, each pod's
environment built as the kubelet builds it (the Secret planner-nats, then ``env`` with its
``$(VAR)`` references), run as three real nats-servers. The planner's users reach JetStream R3 over
TLS, the nodes route to each other over mutual TLS; anonymous clients, and nodes without the route
password, without TLS or with a certificate of another CA are refused.

What stands in for the cluster, and nothing else is changed: each pod's DNS name in the route URLs
and its listen ports are loopback ports, its mounted paths (TLS Secret, data, pid) local folders.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from unittest import mock

import nats
import pytest

from planner_proto.subjects import STATE_BUCKET
from planner_runtime.bus import Bus
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port
from planner_runtime.settings import BaseSettings

from . import stack as st

pytestmark = pytest.mark.integration

SIZE = 3


def _kubelet_env(container: dict[str, Any], secrets: dict[str, dict[str, str]], pod: str) -> dict[str, str]:
    """A container's environment: ``envFrom`` Secrets, then ``env`` in order, ``$(VAR)`` expanded
    from what is already defined (as the kubelet does), ``fieldRef: metadata.name`` the pod name."""
    env: dict[str, str] = {}
    for ref in container.get("envFrom", []):
        env.update(secrets[ref["secretRef"]["name"]])
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = re.sub(
                r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), e["value"]
            )
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[e["name"]] = pod
        else:
            raise AssertionError(f"env {e['name']}: a source this test does not emulate")
    return env


def _once(text: str, old: str, new: str, times: int = 1) -> str:
    assert text.count(old) == times, f"the shipped nats.conf has {text.count(old)} of {old!r}, not {times}"
    return text.replace(old, new)


class Cluster:
    def __init__(self, root: Path) -> None:
        docs = st.render("deploy/nats")
        self.sts = next(d for d in docs if d["kind"] == "StatefulSet")
        cm = next(d for d in docs if d["kind"] == "ConfigMap")
        container = self.sts["spec"]["template"]["spec"]["containers"][0]
        self.tls = root / "tls"
        st.make_tls(self.tls)  # valid for 127.0.0.1 and the Service name "nats"
        auth_vars = re.findall(r"password: \$(\w+)", cm["data"]["auth.conf"])
        self.passwords = {v: os.urandom(8).hex() for v in auth_vars}
        self.route_password = os.urandom(8).hex()
        secrets = {"planner-nats": {**self.passwords, "ROUTE_PASSWORD": self.route_password}}
        self.client = [free_port() for _ in range(SIZE)]
        self.route = [free_port() for _ in range(SIZE)]
        self.monitor = [free_port() for _ in range(SIZE)]
        self.servers: list[NatsServer] = []
        self._pods: list[tuple[NatsServer, dict[str, str]]] = []
        headless = self.sts["spec"]["serviceName"]
        for i in range(SIZE):
            pod = f"{self.sts['metadata']['name']}-{i}"
            folder = root / pod
            (folder / "data").mkdir(parents=True)
            for name, text in cm["data"].items():
                (folder / name).write_text(text)
            conf = cm["data"]["nats.conf"]
            for f in ("tls.crt", "tls.key", "ca.crt"):  # client TLS and route TLS
                conf = _once(conf, f"/etc/nats/tls/{f}", f"{self.tls}/{f}", times=2)
            conf = _once(conf, "store_dir: /data", f"store_dir: {folder / 'data'}")
            conf = _once(conf, "/var/run/nats", str(folder))
            conf = _once(conf, "http: 8222", f"http: 127.0.0.1:{self.monitor[i]}")
            conf = _once(conf, "  port: 6222", f"  listen: 127.0.0.1:{self.route[i]}")
            (folder / "nats.conf").write_text(conf)
            env = _kubelet_env(container, secrets, pod)
            for j in range(SIZE):  # pod j's DNS name and route port -> its loopback route port
                for k, v in env.items():
                    env[k] = v.replace(
                        f"@{self.sts['metadata']['name']}-{j}.{headless}:6222", f"@127.0.0.1:{self.route[j]}"
                    )
            server = NatsServer(
                port=self.client[i], store_dir=folder / "data", jetstream=False,
                extra_args=["-c", str(folder / "nats.conf")], log_file=folder / "nats.log",
            )  # fmt: skip
            self._pods.append((server, env))

    def start(self) -> None:
        for server, env in self._pods:
            with mock.patch.dict(os.environ, env):  # the config reads the passwords from its env
                server.start(30)
            self.servers.append(server)

    def close(self) -> None:
        for s in self.servers:
            s.close()

    def monitor_json(self, i: int, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.monitor[i]}{path}", timeout=2) as r:
            data: dict[str, Any] = json.loads(r.read())
            return data

    def wait(self, what: str, ok: Any, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not ok():
            assert time.monotonic() < deadline, what
            time.sleep(0.2)

    def routes(self, i: int) -> set[str]:
        return {r.get("remote_name", r.get("remote_id")) for r in self.monitor_json(i, "/routez")["routes"]}

    def settings(self, user: str, password: str, node: int = 0) -> BaseSettings:
        return BaseSettings(
            nats_url=f"nats://127.0.0.1:{self.client[node]}", nats_user=user, nats_password=password,
            nats_tls_ca_file=str(self.tls / "ca.crt"), nats_connect_timeout_s=5.0,
        )  # fmt: skip


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed: cannot make the test certificates")
    c = Cluster(tmp_path)
    try:
        await asyncio.to_thread(c.start)
        yield c
    finally:
        await asyncio.to_thread(c.close)


async def test_the_shipped_cluster_forms_and_serves_the_planner_users_over_tls(cluster: Cluster) -> None:
    names = {f"nats-{i}" for i in range(SIZE)}
    for i in range(SIZE):
        await asyncio.to_thread(
            cluster.wait, f"nats-{i} never routed to the other nodes",
            lambda i=i: cluster.routes(i) >= names - {f"nats-{i}"},
        )  # fmt: skip
    await asyncio.to_thread(
        cluster.wait, "JetStream never became healthy",
        lambda: all(cluster.monitor_json(i, "/healthz?js-enabled-only=true").get("status") == "ok" for i in range(SIZE)),
    )  # fmt: skip
    # the predictor, as its user, over TLS through one node: its state bucket gets 3 replicas
    s = cluster.settings("predictor", cluster.passwords["PREDICTOR_PASSWORD"], node=1)
    bus = await Bus.connect(s, max_wait_s=30)
    try:
        kv = await bus.kv(STATE_BUCKET)
        await kv.put("prod.predictor.demand_state", b"{}")
        info = await bus.nc.jetstream().stream_info(f"KV_{STATE_BUCKET}")
        assert info.config.num_replicas == SIZE and info.cluster is not None
        assert len(info.cluster.replicas or []) == SIZE - 1
        assert bus.replicas == SIZE  # from the node addresses the server advertises
    finally:
        await bus.close()
    # another node serves what was written through node 1
    reader = await Bus.connect(cluster.settings("predictor", cluster.passwords["PREDICTOR_PASSWORD"], node=2))
    try:
        entry = await (await reader.kv(STATE_BUCKET)).get("prod.predictor.demand_state")
        assert entry.value == b"{}"
    finally:
        await reader.close()


async def test_the_shipped_cluster_refuses_anonymous_clients_plain_text_and_foreign_nodes(
    cluster: Cluster, tmp_path: Path
) -> None:
    with pytest.raises((nats.errors.Error, OSError, asyncio.TimeoutError)):
        nc = await nats.connect(
            f"tls://127.0.0.1:{cluster.client[0]}", allow_reconnect=False, connect_timeout=3,
            tls=__import__("ssl").create_default_context(cafile=str(cluster.tls / "ca.crt")),
        )  # fmt: skip
        await nc.close()
    # nodes that know the route addresses never join: without the password, without TLS, or with a
    # certificate of another CA
    other = tmp_path / "another-ca"
    st.make_tls(other)
    password = cluster.route_password
    intruders = {
        "no-password": ("route:wrong@", cluster.tls),
        "no-tls": (f"route:{password}@", None),
        "other-ca": (f"route:{password}@", other),
    }
    started: list[NatsServer] = []
    try:
        for name, (creds, tls) in intruders.items():
            folder = tmp_path / name
            folder.mkdir()
            block = (
                f"tls {{ cert_file: {tls}/tls.crt, key_file: {tls}/tls.key, ca_file: {tls}/ca.crt, verify: true }}, "
                if tls is not None
                else ""
            )
            (folder / "nats.conf").write_text(
                f"server_name: {name}\n"
                f"cluster {{ name: planner, listen: 127.0.0.1:{free_port()}, {block}routes: ["
                + ", ".join(f"nats://{creds}127.0.0.1:{p}" for p in cluster.route)
                + "] }\n"
            )
            server = NatsServer(
                jetstream=False, extra_args=["-c", str(folder / "nats.conf")], log_file=folder / "log"
            )
            await asyncio.to_thread(server.start, 15)
            started.append(server)
        await asyncio.sleep(3.0)
        for i in range(SIZE):
            assert not (cluster.routes(i) & set(intruders)), f"nats-{i} routed to {cluster.routes(i)}"
        assert "Authorization Violation" in (tmp_path / "no-password" / "log").read_text(errors="replace")
    finally:
        for server in started:
            await asyncio.to_thread(server.close)


def test_the_documented_certificate_recipe_fits_clients_and_routes(tmp_path: Path) -> None:
    """The openssl commands of docs/getting-started/kubernetes.md, run as written: the certificate is
    valid for the Service name and every pod's headless name, for server and client use."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    doc = (st.REPO / "docs/getting-started/kubernetes.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", doc, re.S) if "openssl x509 -req" in b)
    subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, check=True, capture_output=True, timeout=60
    )
    crt = str(tmp_path / "nats.crt")

    def openssl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["openssl", *args], cwd=tmp_path, capture_output=True, text=True, timeout=30)

    for purpose in ("sslserver", "sslclient"):
        verify = openssl("verify", "-CAfile", "ca.crt", "-purpose", purpose, crt)
        assert verify.returncode == 0, verify.stdout + verify.stderr
    for host in ("nats", "nats.planner.svc", *(f"nats-{i}.nats-headless" for i in range(SIZE))):
        out = openssl("x509", "-in", crt, "-noout", "-checkhost", host)
        assert "does match" in out.stdout, out.stdout + out.stderr
    assert "does NOT match" in openssl("x509", "-in", crt, "-noout", "-checkhost", "nats-0.elsewhere").stdout
