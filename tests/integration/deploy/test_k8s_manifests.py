"""The Kubernetes manifests as shipped, run as local processes (see stack.py for what stands in for
the cluster): every Deployment of ``kubectl kustomize deploy/k8s`` starts from its container's args,
ConfigMaps, Secret keys and mounts, as its own NATS user, against nats-server running the shipped
deploy/nats/nats.conf (TLS, auth.conf's users) and the Kubernetes API fake enforcing the rendered
RBAC. Beside them the users the manifests do not run: an engine (engine-sim as ``engine``), the
loadgen (as ``loadgen``) and an outside consumer (``observer``).

Asserted: every process becomes healthy; the NATS server logs no permission violation for anyone
(so each user may do what its service does); the decider leads and publishes decisions; actuator-k8s
scales the DynamoGraphDeployment in the engines' namespace and acks ``completed``; the observer reads
the decision stream with its own durable consumer and acks; the scale-workloads overlay's actuator
scales the Deployments; a verb the Role does not grant is refused with 403 and reported in one log
line without a traceback.
"""

from __future__ import annotations

import asyncio
import importlib.util
import secrets
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from planner_proto import ScalingAck, ScalingDecision, Subjects, decode
from planner_proto.subjects import ENGINES_TTL_S
from planner_runtime.bus import Bus
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port
from planner_runtime.settings import BaseSettings

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed"),
]

HERE = Path(__file__).resolve().parent
FAKES = HERE.parent / "actuators"
SA = ("planner", "planner-actuator-k8s")
STARTUP_S = 90.0


def _load(path: Path) -> ModuleType:
    name = f"planner_tests_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


k8s_fake = _load(FAKES / "k8s_fake.py")
standin_vllm = _load(HERE.parent / "standin_vllm.py")
k8s_rbac = _load(FAKES / "k8s_rbac.py")
st = _load(HERE / "stack.py")


@dataclass
class Stack:
    docs: list[dict[str, Any]]
    secret: dict[str, dict[str, str]]
    nats: NatsServer
    ca: Path
    kube: Any
    prometheus: st.FakePrometheus
    pods: dict[str, st.Pod]
    root: Path
    token: str

    def settings(self, user: str) -> BaseSettings:
        key = f"{user.upper().replace('-', '_')}_PASSWORD"
        return BaseSettings(
            nats_url=self.nats.url,
            nats_user=user,
            nats_password=self.secret["planner-nats"][key],
            nats_tls_ca_file=str(self.ca),
            namespace="prod",
        )

    def violations(self) -> list[str]:
        text = self.nats.log_file.read_text(errors="replace")
        return [line for line in text.splitlines() if "Violation" in line]


def _extra_pods(s: Stack) -> list[st.Pod]:
    """The users no manifest runs: one engine and the loadgen, started as ``planner serve``."""
    out = []
    for svc, user, args in (
        ("engine-sim", "engine", ["--timing", "mocker", "--zmq-port-base", "0", "--time-compression", "5"]),
        (
            "loadgen",
            "loadgen",
            [
                "--shape",
                "constant",
                "--rate-per-s",
                "2",
                "--duration-s",
                "600",
                "--isl-tokens",
                "64",
                "--osl-tokens",
                "8",
                "--interval-s",
                "2",
                "--no-exit-when-done",
            ],
        ),
    ):
        port = free_port()
        cfg = s.settings(user)
        env = {
            "PLANNER_NAMESPACE": "prod",
            "PLANNER_NATS_URL": cfg.nats_url,
            "PLANNER_NATS_USER": user,
            "PLANNER_NATS_PASSWORD": cfg.nats_password,
            "PLANNER_NATS_TLS_CA_FILE": cfg.nats_tls_ca_file,
            "PLANNER_HTTP_PORT": str(port),
        }
        (s.root / svc).mkdir(parents=True, exist_ok=True)
        out.append(st.Pod(svc, [st.PLANNER, "serve", svc, *args], env, port, s.root / svc / "output.log"))
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("k8s-smoke")
    docs = st.render("deploy/k8s")
    secret = st.example_secrets()
    tls = root / "tls"
    st.make_tls(tls)
    secret["nats-tls"] = {"ca.crt": (tls / "ca.crt").read_text()}
    conf = st.shipped_nats_conf(root / "nats", tls, root / "nats" / "js", free_port())
    kube = k8s_fake.FakeKube(namespace="llm", ready_delay_s=0.5)
    services = {
        "Prefill": {"subComponentType": "prefill", "replicas": 0},
        "Decode": {"subComponentType": "decode", "replicas": 0},
    }
    kube.add_dgd("llm-disagg", services)
    kube.add_workload("deployments", "prefill-worker", 0)
    kube.add_workload("deployments", "decode-worker", 0)
    token = secrets.token_hex(16)
    kube.rbac = k8s_rbac.Rbac(docs, {token: SA})
    kube.start()
    prom = st.FakePrometheus()
    with st.nats_with_env(conf, secret["planner-nats"], root / "nats" / "server.log") as nats:
        dns = {"nats:4222": f"127.0.0.1:{nats.port}", "prometheus:9090": prom.url.removeprefix("http://")}
        pods = {p.name: p for p in st.pods_of(docs, secret, dns, root, api=(kube.url, token))}
        s = Stack(docs, secret, nats, tls / "ca.crt", kube, prom, pods, root, token)
        for extra in _extra_pods(s):
            pods[extra.name] = extra
        try:
            for p in pods.values():
                p.start()
            yield s
        finally:
            # the loadgen first: it drains its requests, which needs the engine still there
            order = sorted(pods, key=lambda n: n != "loadgen")
            codes = {name: pods[name].stop() for name in order}
            kube.stop()
            prom.stop()
            # SIGTERM is a clean stop for every service
            assert all(c == 0 for c in codes.values()), {
                n: (c, pods[n].output()[-1500:]) for n, c in codes.items() if c
            }


def _healthy(s: Stack) -> bool:
    for p in s.pods.values():
        assert p.proc is None or p.proc.poll() is None, f"{p.name} exited:\n{p.output()[-3000:]}"
    return all(p.health()[0] == 200 for p in s.pods.values())


def test_every_deployment_starts_healthy_as_its_own_user(stack: Stack) -> None:
    deployments = {d["metadata"]["name"] for d in stack.docs if d["kind"] == "Deployment"}
    assert deployments == {
        "planner-fpm-relay",
        "planner-regression",
        "planner-predictor",
        "planner-decider",
        "planner-actuator-k8s",
    }
    st.wait_for(lambda: _healthy(stack), STARTUP_S, "every service's /healthz")
    for name in deployments:
        env = stack.pods[name].env
        assert env["PLANNER_NATS_USER"] and env["PLANNER_NATS_TLS_CA_FILE"].endswith("ca.crt")
        assert "nats_connected" in stack.pods[name].output()


def test_decider_leads_and_actuator_k8s_scales_the_dgd_in_the_engines_namespace(stack: Stack) -> None:
    st.wait_for(lambda: _healthy(stack), STARTUP_S, "every service's /healthz")
    decider = stack.pods["planner-decider"]
    st.wait_for(lambda: decider.health()[1].get("role") == "active", 30, "the decider's lease")
    assert stack.pods["planner-actuator-k8s"].health()[1].get("role") == "active"
    dgd = ("dynamographdeployments", "llm-disagg")
    st.wait_for(
        lambda: all(r.spec >= 1 for r in stack.kube.objects[dgd].replicas.values()),
        60,
        "actuator-k8s to scale the DGD's services up to the minimum",
    )
    assert any(
        p.startswith("/apis/nvidia.com/v1alpha1/namespaces/llm/")
        for m, p in stack.kube.requests
        if m == "PATCH"
    )
    acks = asyncio.run(_acks(stack, "k8s", timeout_s=30))
    assert any(a.status == "completed" for a in acks), acks
    assert not stack.kube.rbac.denied, stack.kube.rbac.denied
    assert not stack.violations(), "\n".join(stack.violations())


async def _acks(stack: Stack, actuator_id: str, timeout_s: float) -> list[ScalingAck]:
    """The acks of ``actuator_id`` heard within ``timeout_s`` (as the observer, who may read acks)."""
    bus = await Bus.connect(stack.settings("observer"), max_wait_s=10)
    got: list[ScalingAck] = []

    async def on(a: ScalingAck, _s: str) -> None:
        if a.actuator_id == actuator_id:
            got.append(a)

    try:
        await bus.subscribe(Subjects(ns="prod").ack(), ScalingAck, on)
        for _ in range(int(timeout_s * 10)):
            if any(a.status == "completed" for a in got):
                break
            await asyncio.sleep(0.1)
    finally:
        await bus.close()
    return got


def test_observer_reads_the_decision_stream_with_its_own_durable_consumer_and_acks(stack: Stack) -> None:
    st.wait_for(lambda: _healthy(stack), STARTUP_S, "every service's /healthz")
    subjects = Subjects(ns="prod")

    async def read() -> list[ScalingDecision]:
        bus = await Bus.connect(stack.settings("observer"), max_wait_s=10)
        try:
            sub = await bus.js.pull_subscribe(
                subjects.decision(), durable="observer", stream=subjects.decision_stream()
            )
            for _ in range(60):
                try:
                    msgs = await sub.fetch(batch=10, timeout=1)
                except TimeoutError:
                    continue
                out = [decode(m.data, ScalingDecision) for m in msgs]
                for m in msgs:
                    await m.ack()
                last = out[-1]
                await bus.publish(
                    subjects.ack(),
                    ScalingAck(decision_id=last.decision_id, actuator_id="observer", status="accepted"),
                )
                await bus.flush()
                return out
            return []
        finally:
            await bus.close()

    decisions = asyncio.run(read())
    assert decisions and decisions[0].namespace == "prod"
    info = asyncio.run(_consumer_pending(stack))
    assert info == 0 or info is None or info < len(decisions) + 5
    assert not stack.violations(), "\n".join(stack.violations())


async def _consumer_pending(stack: Stack) -> int | None:
    bus = await Bus.connect(stack.settings("observer"), max_wait_s=10)
    try:
        ci = await bus.js.consumer_info(Subjects(ns="prod").decision_stream(), "observer")
        return int(ci.num_ack_pending or 0)
    finally:
        await bus.close()


def test_engine_and_loadgen_users_do_their_jobs(stack: Stack) -> None:
    """The engine registers in planner_engines and serves; the loadgen finds it there, sends
    requests and gets them answered (its TrafficSample publishes would show as violations)."""
    st.wait_for(lambda: _healthy(stack), STARTUP_S, "every service's /healthz")
    loadgen = stack.pods["loadgen"]
    st.wait_for(
        lambda: (
            (loadgen.metric('planner_loadgen_engines{component="agg"}') or 0) >= 1
            and (loadgen.metric("dynamo_frontend_requests_total") or 0) >= 3
        ),
        60,
        "the loadgen to find the engine and get answers",
    )
    assert not stack.violations(), "\n".join(stack.violations())


def test_register_sidecar_does_its_job_as_the_engine_user(stack: Stack) -> None:
    """``planner register`` beside a (stand-in) vLLM, as the ``engine`` user over TLS: it registers
    the engine in planner_engines, refreshes the entry, and on SIGTERM marks it draining and deletes
    it, all without a permission violation."""
    engine = standin_vllm.StandinVllm(free_port())
    engine.start()
    cfg = stack.settings("engine")
    env = {
        "PLANNER_NAMESPACE": "prod",
        "PLANNER_NATS_URL": cfg.nats_url,
        "PLANNER_NATS_USER": "engine",
        "PLANNER_NATS_PASSWORD": cfg.nats_password,
        "PLANNER_NATS_TLS_CA_FILE": cfg.nats_tls_ca_file,
        "PLANNER_LOG_JSON": "false",
    }
    argv = [st.PLANNER, "register", "--engine-url", f"http://127.0.0.1:{engine.port}", "--worker-id",
            "decode-pod-0", "--component", "decode", "--drain-grace-s", "0"]  # fmt: skip
    (stack.root / "register").mkdir(exist_ok=True)
    pod = st.Pod("register", argv, env, 0, stack.root / "register" / "output.log").start()
    try:
        st.wait_for(lambda: "registered vllm" in pod.output(), 30, "the sidecar to register the engine")
        time.sleep(ENGINES_TTL_S / 3 + 1)  # at least one refresh of the entry
        assert pod.stop() == 0, pod.output()[-2000:]
        out = pod.output()
        assert "drained in" in out, out[-2000:]
        for bad in ("could not write", "could not delete", "Traceback"):
            assert bad not in out, out[-2000:]
    finally:
        engine.stop()
        if pod.proc is not None and pod.proc.poll() is None:
            pod.stop()
    assert not stack.violations(), "\n".join(stack.violations())


def test_overlay_scale_workloads_scales_the_deployments(stack: Stack) -> None:
    st.wait_for(lambda: _healthy(stack), STARTUP_S, "every service's /healthz")
    docs = st.render("deploy/k8s-overlays/scale-workloads")
    dns = {"nats:4222": f"127.0.0.1:{stack.nats.port}"}
    (pod,) = st.pods_of(
        docs,
        stack.secret,
        dns,
        stack.root / "overlay",
        api=(stack.kube.url, stack.token),
        only={"planner-actuator-k8s"},
    )
    # a second actuator beside the first one (in a cluster it would replace it): its own id
    pod.env["PLANNER_ACTUATOR_ID"] = "k8s-workloads"
    pod.start()
    try:
        st.wait_for(
            lambda: all(
                stack.kube.objects[("deployments", n)].replicas[""].spec >= 1
                for n in ("prefill-worker", "decode-worker")
            ),
            60,
            "the overlay's actuator to scale the Deployments",
        )
        assert not stack.kube.rbac.denied, stack.kube.rbac.denied
    finally:
        assert pod.stop() == 0, pod.output()[-3000:]


def test_a_verb_the_role_does_not_grant_is_refused_and_reported_in_one_line(stack: Stack) -> None:
    st.wait_for(lambda: _healthy(stack), STARTUP_S, "every service's /healthz")
    (pod,) = st.pods_of(
        stack.docs, stack.secret, {"nats:4222": f"127.0.0.1:{stack.nats.port}"}, stack.root / "forbidden",
        api=(stack.kube.url, stack.token), only={"planner-actuator-k8s"},
    )  # fmt: skip
    # a workload the Role does not name
    pod.env.update(PLANNER_ACTUATOR_ID="k8s-refused", PLANNER_DGD_NAME="not-granted")
    stack.kube.add_dgd("not-granted", {"Decode": {"subComponentType": "decode", "replicas": 1}})
    pod.start()
    try:
        st.wait_for(lambda: "(403)" in pod.output(), 60, "the refusal in the actuator's log")
    finally:
        pod.stop()
    out = pod.output()
    assert "Traceback" not in out, out[-3000:]
    lines = [line for line in out.splitlines() if "forbidden" in line]
    # one event says what was refused, to whom, on what
    assert any(
        "403" in line
        and "cannot get resource" in line
        and "not-granted" in line
        and "planner-actuator-k8s" in line
        for line in lines
    ), out[-3000:]
    assert any(
        u == "system:serviceaccount:planner:planner-actuator-k8s" and a.name == "not-granted"
        for u, a in stack.kube.rbac.denied
    )


def test_overlay_stock_vllm_finds_the_engine_pods_and_counts_their_traffic(
    stack: Stack, shared_data: Path
) -> None:
    """deploy/k8s-overlays/stock-vllm as rendered: fpm-relay, with its own ServiceAccount and the
    Role that only lets it list pods in "llm", finds the vLLM pods by label and scrapes them; the
    predictor on ``source: engines`` counts the traffic from what the relay publishes. (The stack's
    relay and predictor step aside meanwhile: one relay Deployment, one predictor lease.)"""
    st.wait_for(lambda: _healthy(stack), STARTUP_S, "every service's /healthz")
    docs = st.render("deploy/k8s-overlays/stock-vllm")
    capture = shared_data / "engines" / "vllm-0.32.0-cpu-metrics.txt"
    if not capture.is_file():
        pytest.skip(f"real vLLM capture {capture.name} not found under the shared data folder")
    exposition = capture.read_text().partition("# Part B")[0].encode()  # a real vLLM 0.32, idle
    engines = [st.HttpServer(lambda path: ("text/plain", exposition)) for _ in range(2)]
    kube = k8s_fake.FakeKube(namespace="llm", ready_delay_s=0.2)
    token = secrets.token_hex(16)
    kube.rbac = k8s_rbac.Rbac(docs, {token: ("planner", "planner-fpm-relay")})
    kube.pod_ip = lambda name, seq: "127.0.0.1"
    for name in ("prefill-worker", "decode-worker"):
        kube.add_workload("deployments", name, 1)
    kube.add_workload("deployments", "unrelated", 1)  # not selected
    kube.start()
    for (pod,), srv in zip(
        (kube.pods_of("prefill-worker"), kube.pods_of("decode-worker")), engines, strict=True
    ):
        kube.set_pod(pod, annotations={"prometheus.io/port": str(srv.port)})
    dns = {"nats:4222": f"127.0.0.1:{stack.nats.port}"}
    pods = st.pods_of(
        docs, stack.secret, dns, stack.root / "stock-vllm", api=(kube.url, token),
        only={"planner-fpm-relay", "planner-predictor"},
    )  # fmt: skip
    base = [stack.pods["planner-fpm-relay"], stack.pods["planner-predictor"]]
    for p in base:
        assert p.stop() == 0, p.output()[-2000:]
    relay, predictor = (
        next(p for p in pods if p.name == n) for n in ("planner-fpm-relay", "planner-predictor")
    )
    predictor.env["PLANNER_INTERVAL_S"] = "5"  # a traffic sample every 5 s, not every minute: test time
    try:
        for p in pods:
            p.start()
        st.wait_for(
            lambda: relay.metric("planner_fpm_engines_scraped") == 2, 60, "the relay to scrape both pods"
        )
        # the engines' counters make the traffic: intervals observed (a request counter read from
        # both engines: decode's, where requests end), none unknown once both are read twice
        st.wait_for(
            lambda: (predictor.metric('planner_predictor_intervals_total{outcome="observed"}') or 0) >= 2,
            90, "the predictor to count traffic from the engines",
        )  # fmt: skip
        assert predictor.metric("planner_traffic_engines") == 1  # decode: where a request is counted
        assert not kube.rbac.denied, kube.rbac.denied
        # the relay's only API call: list pods in the engines' namespace
        assert {(m, p.split("?")[0]) for m, p in kube.requests} == {("GET", "/api/v1/namespaces/llm/pods")}
        assert all(p.health()[0] == 200 for p in pods)
    finally:
        codes = {p.name: (p.stop(), p.output()[-3000:]) for p in pods}  # every pod stopped, then judged
        for srv in engines:
            srv.stop()
        kube.stop()
        for p in base:
            p.start()
    assert all(code == 0 for code, _ in codes.values()), codes
