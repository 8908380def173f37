"""The compose smoke (`just compose-smoke`): build the image, start docker-compose.yml with podman,
check that the planner works end to end behind the secured NATS, stop and remove everything.

Steps (docs/getting-started/compose.md describes the same path for a user):

1. podman and podman-compose ready (scripts/ensure-podman.sh); the base image made locally when no
   registry can be reached (scripts/build-base-image.sh; PLANNER_SMOKE_BASE=python:3.11-slim to
   use the official one);
2. `podman build -f deploy/Dockerfile -t planner:latest` (the host's CA bundle is given to the build
   as the secret ``cacert``, for TLS-intercepting proxies); the image size is printed;
3. an env file with a random password for every NATS user and a free port for NATS;
4. `podman-compose -f docker-compose.yml -f deploy/compose-smoke.yml up -d` with the planner
   services (not Prometheus and Grafana, whose images cannot be pulled here); the override only
   runs nats-server from the planner image;
5. asserted, polling (services take 10-40 s to turn healthy):
   - every container's health check passes (`podman healthcheck run`: podman runs no timers
     without systemd);
   - the decider is active and holds its lease (its /healthz and planner_lease_active);
   - engines registered: actuator-circus started engine-sim workers and reports them ready
     (ReplicaStatus), and the engines logged their registration;
   - traffic flows: loadgen requests completed, the relay relays the engines' FPMs, regression
     publishes snapshots, the predictor forecasts;
   - a decision is published, not advisory, and acknowledged ``completed`` by the actuator
     (planner_acks_total{status="completed"} at the decider);
   - an outside subscriber, the ``observer`` user, reads the decision stream with a durable pull
     consumer of its own (nats-py from the host, as docs/outside-integration.md shows);
6. `podman-compose down -v`: containers, network and volumes removed (also on failure, after the
   last lines of every container's log are printed).

Outside CI a machine where podman cannot run prints one SKIP line and exits 0; under CI=true that
is a failure. Exit 0 = passed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from planner_cli.services import SERVICES as PLANNER_SERVICES
from planner_runtime.processes import free_port

REPO = Path(__file__).resolve().parents[1]
IMAGE = "planner:latest"
COMPOSE_NAMES = {"actuator-circus": "actuator", "engine-sim": "engines"}
"""Planner services whose docker-compose.yml service has another name ("engines": the circusd engine
host whose watchers are the engine-sim workers actuator-circus starts)."""
NOT_IN_COMPOSE = ("actuator-k8s",)
SERVICES = (
    "nats",
    *(COMPOSE_NAMES.get(name, name) for name in PLANNER_SERVICES if name not in NOT_IN_COMPOSE),
)
"""The compose services the smoke starts: NATS and every planner service (not Prometheus and
Grafana, whose images cannot be pulled here)."""
USERS = ("fpm-relay", "regression", "predictor", "decider", "actuator", "engine", "loadgen", "observer")
NAMESPACE = "prod"
T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"compose-smoke [{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


class SmokeFailed(Exception):
    pass


def run(
    argv: list[str], *, check: bool = True, capture: bool = True, timeout: float = 1800
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        argv, cwd=REPO, text=True, capture_output=capture, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if check and proc.returncode != 0:
        tail = "\n".join(((proc.stdout or "") + (proc.stderr or "")).strip().splitlines()[-20:])
        raise SmokeFailed(f"{' '.join(argv[:4])} ... exited {proc.returncode}:\n{tail}")
    return proc


def ca_bundle() -> str:
    for candidate in (
        os.environ.get("SSL_CERT_FILE", ""),
        os.environ.get("PIP_CERT", ""),
        "/etc/ssl/certs/ca-certificates.crt",
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    return ""


# ---- steps ---------------------------------------------------------------------------------------
def ensure_podman() -> str:
    proc = run(["bash", "scripts/ensure-podman.sh"], check=False)
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["podman cannot run"])[-1]
        raise PodmanUnavailable(reason)
    return proc.stdout.strip().splitlines()[-1]


class PodmanUnavailable(Exception):
    pass


def base_image() -> str:
    if os.environ.get("PLANNER_SMOKE_BASE"):
        return os.environ["PLANNER_SMOKE_BASE"]
    t = time.monotonic()
    proc = run(["bash", "scripts/build-base-image.sh"], capture=False, check=False)
    if proc.returncode != 0:
        raise SmokeFailed("the base image could not be made (scripts/build-base-image.sh)")
    name = "localhost/planner-base:bookworm"
    say(f"base image {name} ready ({time.monotonic() - t:.0f}s)")
    return name


def build_image(base: str) -> int:
    argv = ["podman", "build", "--pull=never", "--format", "docker", "-f", "deploy/Dockerfile"]
    argv += ["--build-arg", f"BASE={base}", "-t", IMAGE]
    ca = ca_bundle()
    if ca:
        argv += ["--secret", f"id=cacert,src={ca}"]
    if os.environ.get("PIP_INDEX_URL", "").startswith(("http://", "https://")):
        argv += ["--build-arg", f"PIP_INDEX_URL={os.environ['PIP_INDEX_URL']}"]
    argv.append(".")  # the context: the repository root (.dockerignore keeps it to the packages)
    old = run(["podman", "image", "inspect", IMAGE, "--format", "{{.Id}}"], check=False).stdout.strip()
    t = time.monotonic()
    say(f"building {IMAGE} from deploy/Dockerfile (BASE={base}{', CA bundle ' + ca if ca else ''})")
    run(argv)
    new = run(["podman", "image", "inspect", IMAGE, "--format", "{{.Id}}"]).stdout.strip()
    if old and old != new:  # the previous build, now untagged: not kept around (750 MB each)
        run(["podman", "rmi", old], check=False)
    size = int(run(["podman", "image", "inspect", IMAGE, "--format", "{{.Size}}"]).stdout.strip())
    say(f"image {IMAGE} built in {time.monotonic() - t:.0f}s: {size / 1e6:.0f} MB")
    return size


class Stack:
    def __init__(self, compose: str, workdir: Path) -> None:
        self.project = f"plsmoke{os.getpid()}"
        self.nats_port = free_port()
        self.passwords = {u: secrets.token_hex(16) for u in USERS}
        self.env_file = workdir / "smoke.env"
        lines = [f"{u.upper().replace('-', '_')}_PASSWORD={p}" for u, p in self.passwords.items()]
        lines.append(f"NATS_PORT={self.nats_port}")
        self.env_file.write_text("\n".join(lines) + "\n")
        self.env_file.chmod(0o600)
        self.base = [
            compose,
            "--env-file",
            str(self.env_file),
            "-p",
            self.project,
            "-f",
            "docker-compose.yml",
            "-f",
            "deploy/compose-smoke.yml",
        ]

    def container(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def up(self) -> None:
        say(
            f"podman-compose up -d {' '.join(SERVICES)} (project {self.project}, NATS on 127.0.0.1:{self.nats_port})"
        )
        run([*self.base, "up", "-d", *SERVICES])

    def down(self) -> None:
        run([*self.base, "down", "-v", "-t", "10"], check=False)
        left = run(
            ["podman", "ps", "-a", "-q", "--filter", f"name={self.project}_"], check=False
        ).stdout.split()
        if left:
            run(["podman", "rm", "-f", "-v", *left], check=False)
        vols = run(["podman", "volume", "ls", "-q", "--filter", f"name={self.project}_"], check=False)
        if vols.stdout.split():
            run(["podman", "volume", "rm", "-f", *vols.stdout.split()], check=False)
        # podman-compose's down leaves the project's network behind
        nets = run(["podman", "network", "ls", "-q", "--filter", f"name={self.project}_"], check=False)
        if nets.stdout.split():
            run(["podman", "network", "rm", "-f", *nets.stdout.split()], check=False)
        say(f"stack {self.project} stopped; containers, network and volumes removed")

    def dump_logs(self) -> None:
        for svc in SERVICES:
            proc = run(["podman", "logs", "--tail", "15", self.container(svc)], check=False)
            print(f"----- {svc} (last lines)", flush=True)
            print(((proc.stdout or "") + (proc.stderr or "")).rstrip()[-4000:], flush=True)

    def state(self, service: str) -> str:
        proc = run(
            ["podman", "inspect", self.container(service), "--format", "{{.State.Status}}"], check=False
        )
        return proc.stdout.strip() or "missing"

    def healthy(self, service: str) -> bool:
        return run(["podman", "healthcheck", "run", self.container(service)], check=False).returncode == 0

    def http(self, service: str, path: str) -> str:
        code = (
            "import urllib.request,sys;"
            f"sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:9100{path}', timeout=3).read().decode())"
        )
        proc = run(["podman", "exec", self.container(service), "python", "-c", code], check=False)
        return proc.stdout if proc.returncode == 0 else ""

    def logs(self, service: str) -> str:
        proc = run(["podman", "logs", self.container(service)], check=False)
        return (proc.stdout or "") + (proc.stderr or "")


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


# ---- the outside subscriber ----------------------------------------------------------------------
async def observe(stack: Stack, timeout_s: float) -> dict[str, object]:
    """Connect as ``observer`` from the host; read decisions from the stream with a durable pull
    consumer of its own, and listen to replica status and acks."""
    import nats
    from nats.errors import TimeoutError as NatsTimeout

    url = f"nats://127.0.0.1:{stack.nats_port}"
    nc = await nats.connect(
        url,
        user="observer",
        password=stack.passwords["observer"],
        connect_timeout=5,
        max_reconnect_attempts=3,
    )
    seen: dict[str, object] = {"decisions": [], "replicas": None, "acks": []}
    try:

        async def on_replicas(msg: object) -> None:
            seen["replicas"] = json.loads(msg.data)  # type: ignore[attr-defined]

        async def on_ack(msg: object) -> None:
            seen["acks"].append(json.loads(msg.data))  # type: ignore[attr-defined,union-attr]

        await nc.subscribe(f"planner.{NAMESPACE}.replicas", cb=on_replicas)
        await nc.subscribe(f"planner.{NAMESPACE}.ack", cb=on_ack)
        js = nc.jetstream()
        stream = f"PLANNER_DECISIONS_{NAMESPACE.upper()}"
        sub = await js.pull_subscribe(
            f"planner.{NAMESPACE}.decision", durable="smoke-observer", stream=stream
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                msgs = await sub.fetch(10, timeout=2)
            except NatsTimeout:  # nothing new yet (nats-py raises on an empty fetch)
                if seen["decisions"] and seen["replicas"]:
                    break
                continue
            for msg in msgs:
                seen["decisions"].append(json.loads(msg.data))  # type: ignore[union-attr]
                await msg.ack()
        await sub.unsubscribe()  # else the drain below waits out its 30 s for the pull subscription
    finally:
        await nc.drain()
    return seen


# ---- the checks ----------------------------------------------------------------------------------
def wait_for(what: str, check: object, timeout_s: float, every_s: float = 3.0) -> object:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        last = check()  # type: ignore[operator]
        if last:
            say(f"ok: {what}")
            return last
        if time.monotonic() > deadline:
            raise SmokeFailed(f"not within {timeout_s:.0f}s: {what}")
        time.sleep(every_s)


def checks(stack: Stack, timeout_s: float) -> None:
    pending = set(SERVICES)

    def all_healthy() -> bool:
        for svc in sorted(pending):
            st = stack.state(svc)
            if st not in ("running",):
                raise SmokeFailed(f"container {svc} is {st}")
            if stack.healthy(svc):
                say(f"  {svc} healthy")
                pending.discard(svc)
        return not pending

    wait_for("every service healthy: " + ", ".join(SERVICES), all_healthy, timeout_s)

    def decider_leads() -> bool:
        raw = stack.http("decider", "/healthz")
        health = json.loads(raw) if raw else {}
        metrics = stack.http("decider", "/metrics")
        return (
            health.get("role") == "active"
            and health.get("lease") == f"{NAMESPACE}.decider"
            and metric(metrics, "planner_lease_active") == 1.0
        )

    wait_for(f"the decider is active and holds its lease {NAMESPACE}.decider", decider_leads, timeout_s)

    def engines_registered() -> bool:
        logs = stack.logs("engines")
        comps = {
            c
            for c in ("prefill", "decode")
            if re.search(rf'"event": "registered", "key": "{NAMESPACE}\.{c}\.', logs)
        }
        return comps == {"prefill", "decode"}

    wait_for(
        "engine-sim workers (prefill and decode) registered in planner_engines", engines_registered, timeout_s
    )

    def decision_completed() -> bool:
        m = stack.http("decider", "/metrics")
        return (
            metric(m, "planner_acks_total", status="completed") >= 1 and metric(m, "planner_decision_id") >= 1
        )

    wait_for(
        "a decision was published and acknowledged completed by the actuator", decision_completed, timeout_s
    )

    def traffic_flows() -> bool:
        lg = stack.http("loadgen", "/metrics")
        relay = stack.http("fpm-relay", "/metrics")
        reg = stack.http("regression", "/metrics")
        pred = stack.http("predictor", "/metrics")
        done = metric(lg, "dynamo_frontend_requests_total")
        relayed = metric(relay, "planner_fpm_relayed_total")
        snaps = metric(reg, "planner_regression_passes_total")
        forecasts = metric(pred, "planner_predictor_forecasts_total")
        say(
            f"  loadgen requests {done:.0f}, FPMs relayed {relayed:.0f}, regression passes {snaps:.0f}, forecasts {forecasts:.0f}"
        )
        return done > 0 and relayed > 0 and snaps > 0 and forecasts > 0

    wait_for(
        "traffic flows: loadgen -> engines -> fpm-relay -> regression; predictor forecasts",
        traffic_flows,
        timeout_s,
        5,
    )

    say("outside subscriber: user observer reads the decision stream from the host")
    seen = asyncio.run(observe(stack, timeout_s=60))
    decisions = seen["decisions"]
    assert isinstance(decisions, list)
    if not decisions:
        raise SmokeFailed("the observer read no decision from the stream")
    live = [d for d in decisions if not d.get("advisory") and d.get("namespace") == NAMESPACE]
    if not live:
        raise SmokeFailed(f"the observer read only advisory or foreign decisions: {decisions}")
    first = live[0]
    say(f"ok: observer read {len(decisions)} decision(s); #{first['decision_id']} targets {first['targets']}")
    replicas = seen["replicas"]
    if not isinstance(replicas, dict):
        raise SmokeFailed("the observer saw no ReplicaStatus from the actuator")
    comps = replicas.get("components", {})
    ready = {c: v.get("ready", 0) for c, v in comps.items() if isinstance(v, dict)}
    if not (ready.get("prefill", 0) >= 1 and ready.get("decode", 0) >= 1):
        raise SmokeFailed(f"the actuator reports no ready engines: {replicas}")
    say(f"ok: observer sees the actuator's ReplicaStatus: ready {ready}")

    m = stack.http("decider", "/metrics")
    say(
        f"decider: {metric(m, 'planner_decision_id'):.0f} decision(s), acks completed "
        f"{metric(m, 'planner_acks_total', status='completed'):.0f}, failed {metric(m, 'planner_acks_total', status='failed'):.0f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--timeout-s", type=float, default=300, help="per check (default 300)")
    parser.add_argument("--keep", action="store_true", help="leave the stack running (you stop it)")
    args = parser.parse_args()

    say("start")
    try:
        compose = ensure_podman()
    except PodmanUnavailable as exc:
        if in_ci():
            print(f"compose-smoke: FAILED: podman cannot run under CI: {exc}", flush=True)
            return 1
        print(f"compose-smoke: SKIP: podman cannot run on this machine ({exc})", flush=True)
        return 0
    stack: Stack | None = None
    with tempfile.TemporaryDirectory(prefix="planner-smoke-") as tmp:
        try:
            build_image(base_image())
            stack = Stack(compose, Path(tmp))
            stack.up()
            checks(stack, args.timeout_s)
        except (SmokeFailed, subprocess.TimeoutExpired, OSError) as exc:
            if stack is not None:
                stack.dump_logs()
            print(f"compose-smoke: FAILED: {exc}", flush=True)
            return 1
        finally:
            if stack is not None and not args.keep:
                stack.down()
    say("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
