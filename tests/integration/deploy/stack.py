"""Run what deploy/ ships, as local processes: the rendered Kubernetes manifests' containers (their
command, args, env from ConfigMaps and the Secret, mounted files) against the shipped NATS
configuration (deploy/nats/nats.conf with its TLS, certificates made here with openssl) and the
Kubernetes API fake with RBAC from the rendered Roles.

What stands in for the cluster, and nothing else is changed:
- service DNS names in env values (``nats:4222``, ``prometheus:9090``) point at the local servers;
- each pod's HTTP port is a free loopback port (``PLANNER_HTTP_HOST``/``PLANNER_HTTP_PORT``);
- a mounted Secret is a folder of files, and env values under its mount path point into it;
- a mounted service-account token is a file with a token the API fake knows, given to the client
  as ``PLANNER_API_URL`` + ``PLANNER_API_TOKEN_FILE`` (actuator-k8s) and ``PLANNER_K8S_API_URL`` +
  ``PLANNER_K8S_TOKEN_FILE`` (fpm-relay) (in a pod, the in-cluster config reads it).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any
from unittest import mock

import pytest
import yaml

from planner_runtime.natsd import NatsServer
from planner_runtime.processes import die_with_parent, free_port

REPO = Path(__file__).resolve().parents[3]
NATS_DIR = REPO / "deploy" / "nats"
PLANNER = str(Path(sys.executable).parent / "planner")


def render(folder: str) -> list[dict[str, Any]]:
    """``kubectl kustomize <folder>``."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        why = (
            "kubectl not found (scripts/ensure-kubectl.sh; `just test` runs it): cannot render the manifests"
        )
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(why)
        pytest.skip(why)
    out = subprocess.run(
        [kubectl, "kustomize", str(REPO / folder)], capture_output=True, check=True, timeout=60
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def example_secrets() -> dict[str, dict[str, str]]:
    """The Secrets of deploy/k8s/nats-secret.example.yaml, every planner-nats password made random."""
    path = REPO / "deploy" / "k8s" / "nats-secret.example.yaml"
    out = {d["metadata"]["name"]: dict(d["stringData"]) for d in yaml.safe_load_all(path.read_text()) if d}
    out["planner-nats"] = {k: secrets.token_hex(12) for k in out["planner-nats"]}
    return out


def make_tls(folder: Path) -> None:
    """A CA and a server certificate for 127.0.0.1 and the Service name ``nats`` (tls.crt, tls.key,
    ca.crt, as a cert-manager Secret holds them)."""
    folder.mkdir(parents=True, exist_ok=True)

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-subj", "/CN=planner-test-ca", "-days", "1")  # fmt: skip
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=nats")
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:nats,DNS:localhost\n")
    ssl(
        "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "tls.crt", "-days", "1", "-extfile", "san.ext",
    )  # fmt: skip


def shipped_nats_conf(folder: Path, tls_dir: Path, store: Path, monitor_port: int) -> Path:
    """deploy/nats/nats.conf with its paths and monitor port made local (each must be there once,
    so a changed layout fails here rather than testing something else); auth.conf beside it."""
    text = (NATS_DIR / "nats.conf").read_text()
    for old, new in (
        ("/etc/nats/tls/", f"{tls_dir}/"),
        ("store_dir: /data", f"store_dir: {store}"),
        ("http: 8222", f"http: 127.0.0.1:{monitor_port}"),
    ):
        assert old in text, f"deploy/nats/nats.conf has no {old!r}"
        text = text.replace(old, new)
    assert "include ./auth.conf" in text
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(NATS_DIR / "auth.conf", folder / "auth.conf")
    conf = folder / "nats.conf"
    conf.write_text(text)
    return conf


@contextmanager
def nats_with_env(conf: Path, env: dict[str, str], log_file: Path) -> Iterator[NatsServer]:
    """nats-server -c conf, the passwords in its environment (as the Secret gives them in a pod)."""
    server = NatsServer(jetstream=False, extra_args=["-c", str(conf)], log_file=log_file)
    with mock.patch.dict(os.environ, env):  # the conf reads the passwords from nats-server's env
        server.start()
    try:
        yield server
    finally:
        server.close()


class HttpServer:
    """GETs on loopback, in a thread: each answered with ``reply(path)`` -> (content type, body)."""

    def __init__(self, reply: Callable[[str], tuple[str, bytes]]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                kind, data = reply(self.path)
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class FakePrometheus(HttpServer):
    """``/api/v1/query``: every query answers one sample of ``value`` (a steady frontend)."""

    def __init__(self, value: float = 30.0) -> None:
        self.queries: list[str] = []

        def reply(path: str) -> tuple[str, bytes]:
            self.queries.append(path)
            body = {
                "status": "success",
                "data": {
                    "resultType": "vector",
                    "result": [{"metric": {}, "value": [time.time(), str(value)]}],
                },
            }
            return "application/json", json.dumps(body).encode()

        super().__init__(reply)


@dataclass
class Pod:
    name: str
    argv: list[str]
    env: dict[str, str]
    http_port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    files: dict[str, Path] = field(default_factory=dict)

    def start(self) -> Pod:
        base = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
        self.proc = subprocess.Popen(
            self.argv,
            env={**base, **self.env},
            stdin=subprocess.DEVNULL,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,  # never outlives a test run that dies
        )
        return self

    def health(self) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/healthz", timeout=2) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
        except (OSError, ValueError):
            return 0, {}

    def metric(self, series: str) -> float | None:
        """On /metrics: the value of one series (name and labels exactly as exposed), or with a bare
        name the sum over its label sets."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return None
        found: list[float] = []
        for line in text.splitlines():
            name, _, value = line.rpartition(" ")
            if name == series or ("{" not in series and name.split("{")[0] == series):
                found.append(float(value))
        return sum(found) if found else None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, timeout_s: float = 20.0) -> int | None:
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        return proc.returncode


def _env_value(
    item: dict[str, Any], config: dict[str, dict[str, str]], secret: dict[str, dict[str, str]]
) -> str:
    if "value" in item:
        return str(item["value"])
    ref = item["valueFrom"]
    if "secretKeyRef" in ref:
        return secret[ref["secretKeyRef"]["name"]][ref["secretKeyRef"]["key"]]
    if "configMapKeyRef" in ref:
        return config[ref["configMapKeyRef"]["name"]][ref["configMapKeyRef"]["key"]]
    raise AssertionError(f"env source not supported by the smoke test: {ref}")


def pods_of(
    docs: list[dict[str, Any]],
    secret: dict[str, dict[str, str]],
    dns: dict[str, str],
    root: Path,
    api: tuple[str, str] | None = None,
    only: set[str] | None = None,
) -> list[Pod]:
    """One local process per Deployment of ``docs`` (its first container), as the manifest says.
    ``dns``: ``host:port`` -> local ``127.0.0.1:port``; ``api``: (API URL, token) for pods whose
    service account token is mounted."""
    config = {d["metadata"]["name"]: dict(d.get("data") or {}) for d in docs if d["kind"] == "ConfigMap"}
    pods: list[Pod] = []
    for d in docs:
        if d["kind"] != "Deployment" or (only is not None and d["metadata"]["name"] not in only):
            continue
        name = d["metadata"]["name"]
        spec = d["spec"]["template"]["spec"]
        c = spec["containers"][0]
        env: dict[str, str] = {}
        for src in c.get("envFrom") or []:
            env.update(config[src["configMapRef"]["name"]])
        for item in c.get("env") or []:
            env[item["name"]] = _env_value(item, config, secret)
        for k, v in env.items():
            for host, local in dns.items():
                v = v.replace(f"//{host}", f"//{local}")
            env[k] = v
        home = root / name
        files: dict[str, Path] = {}
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for m in c.get("volumeMounts") or []:
            vol = volumes[m["name"]]
            assert "secret" in vol, f"{name}: only Secret volumes are mounted by the smoke test"
            data = secret[vol["secret"]["secretName"]]
            folder = home / m["mountPath"].strip("/")
            folder.mkdir(parents=True, exist_ok=True)
            items = vol["secret"].get("items") or [{"key": k, "path": k} for k in data]
            for it in items:
                (folder / it["path"]).write_text(data[it["key"]])
                files[f"{m['mountPath']}/{it['path']}"] = folder / it["path"]
            for k, v in env.items():
                if v.startswith(m["mountPath"] + "/"):
                    env[k] = str(folder / v.removeprefix(m["mountPath"] + "/"))
        if spec.get("automountServiceAccountToken", True) and spec.get("serviceAccountName") and api:
            token_file = home / "serviceaccount-token"
            token_file.parent.mkdir(parents=True, exist_ok=True)
            token_file.write_text(api[1])
            # what the in-cluster config gives a pod, under each service's setting names
            env["PLANNER_API_URL"], env["PLANNER_API_TOKEN_FILE"] = api[0], str(token_file)  # actuator-k8s
            env["PLANNER_K8S_API_URL"], env["PLANNER_K8S_TOKEN_FILE"] = api[0], str(token_file)  # fpm-relay
        port = free_port()
        env["PLANNER_HTTP_HOST"], env["PLANNER_HTTP_PORT"] = "127.0.0.1", str(port)
        home.mkdir(parents=True, exist_ok=True)
        argv = (
            [PLANNER, *(c.get("command") or [])[1:], *c["args"]]
            if c.get("command")
            else [PLANNER, *c["args"]]
        )
        pods.append(Pod(name, argv, env, port, home / "output.log", files=files))
    return pods


def wait_for(pred: Any, timeout_s: float, what: str, every_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
