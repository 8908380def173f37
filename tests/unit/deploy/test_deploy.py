"""deploy/: the compose file matches the Compose JSON schema, the kustomize output is valid Kubernetes,
and the image runs as a non-root user. No container engine or cluster is needed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
K8S_VERSION = "1.30"


def _need(path: Path, how: str) -> Path:
    if path.exists():
        return path
    if os.environ.get("CI"):
        pytest.fail(f"{path} is missing in CI: {how}")
    pytest.skip(f"{path} is missing: {how}")


def test_compose_file_matches_compose_schema() -> None:
    from check_jsonschema.cli.main_command import main as check

    schema = _need(
        REPO / ".cache" / "compose_spec.json", "run scripts/fetch-compose-schema.sh (just test does)"
    )
    with pytest.raises(SystemExit) as exit_info:
        check(["--schemafile", str(schema), str(REPO / "docker-compose.yml")])
    assert exit_info.value.code == 0


def test_compose_has_every_service_and_infra() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    names = set(compose["services"])
    assert {"nats", "prometheus", "grafana"} <= names
    for svc in ("fpm-relay", "regression", "predictor", "decider", "loadgen"):
        assert svc in names
        assert compose["services"][svc]["command"][:2] == ["serve", svc]
    nats_cmd = compose["services"]["nats"]["command"]
    # JetStream: on the command line, or in the config file it names (deploy/nats/compose.conf)
    if "-js" not in nats_cmd:
        conf = nats_cmd[nats_cmd.index("-c") + 1]
        assert conf.startswith("/etc/nats/"), conf
        assert "jetstream" in (REPO / "deploy" / "nats" / conf.removeprefix("/etc/nats/")).read_text()


def _kustomize(folder: str = "deploy/k8s") -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        # the namespace transformer (unsetOnly) and the overlay's patches need the real kustomize
        if os.environ.get("CI"):
            pytest.fail("kubectl is missing in CI (scripts/ensure-kubectl.sh; `just test` runs it)")
        pytest.skip("kubectl not installed: cannot render the kustomization")
    out = subprocess.run(
        [kubectl, "kustomize", str(REPO / folder)], capture_output=True, check=True, timeout=60
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]


OVERLAYS = ["deploy/k8s", "deploy/k8s-overlays/scale-workloads", "deploy/k8s-overlays/stock-vllm"]


@pytest.mark.parametrize("folder", OVERLAYS)
def test_kubernetes_manifests_are_valid(folder: str) -> None:
    import kubernetes_validate

    docs = _kustomize(folder)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_every_deployment_has_probes_scrape_annotations_and_limits() -> None:
    deployments = [d for d in _kustomize() if d["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} >= {
        "planner-fpm-relay",
        "planner-regression",
        "planner-predictor",
        "planner-decider",
        "planner-actuator-k8s",
    }
    for d in deployments:
        pod = d["spec"]["template"]
        assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        for c in pod["spec"]["containers"]:
            assert c["readinessProbe"]["httpGet"]["path"] == "/healthz"
            assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert "memory" in c["resources"]["limits"]


def test_actuator_rbac_is_least_privilege() -> None:
    docs = _kustomize()
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    assert roles, "actuator-k8s needs a Role"
    assert all(d["kind"] == "Role" for d in roles), "namespaced Role only, no ClusterRole"
    for role in roles:
        for rule in role["rules"]:
            assert "*" not in rule.get("verbs", []) and "*" not in rule.get("resources", [])
            assert not set(rule.get("verbs", [])) & {
                "delete",
                "deletecollection",
                "create",
                "escalate",
                "bind",
            }
    sa_names = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    actuator = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "planner-actuator-k8s"
    )
    assert actuator["spec"]["template"]["spec"]["serviceAccountName"] in sa_names


def test_dockerfile_runs_as_non_root_with_one_entrypoint() -> None:
    text = (REPO / "deploy" / "Dockerfile").read_text()
    assert "USER 10001" in text
    assert 'ENTRYPOINT ["planner"]' in text
    assert re.search(r"uv sync --frozen\b", text), "dependencies from the lock file, as CI tests them"


def test_grafana_dashboard_parses_and_covers_the_essentials() -> None:
    dash = json.loads((REPO / "deploy" / "grafana" / "dashboards" / "planner.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    for metric in (
        "planner_desired_replicas",
        "planner_forecast_requests",
        "time_to_first_token_seconds",
        "inter_token_latency_seconds",
        "planner_decisions_total",
        "planner_bad_messages_total",
    ):
        assert metric in exprs


def test_compose_commands_are_valid_service_settings() -> None:
    """Every `serve <service> --flag value ...` in docker-compose.yml parses with that service's real
    settings (with the compose environment applied), so the file cannot drift from the code."""
    import importlib

    from planner_runtime.settings import settings_from_args

    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    checked = 0
    for name, svc in compose["services"].items():
        cmd = svc.get("command")
        if not cmd or cmd[0] != "serve":
            continue
        module = importlib.import_module(f"planner_{cmd[1].replace('-', '_')}.service")
        # compose's ${VAR:-default} with VAR unset
        env = {
            k: re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(v))
            for k, v in (svc.get("environment") or {}).items()
        }
        with mock.patch.dict(os.environ, env):
            settings = settings_from_args(module.SERVICE.settings_type, cmd[2:], prog=name)
        assert settings.nats_url == "nats://nats:4222", name
        checked += 1
    assert checked >= 6  # the engines run under circus (actuator-circus), not as serve commands


def test_every_dashboard_query_parses_as_promql(tmp_path: Path) -> None:
    """Each panel's expression, as Prometheus's own parser reads it (``promtool check rules`` over
    them as recording rules): a dashboard that ships a query Prometheus rejects shows an empty panel."""
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool missing in CI: scripts/ensure-prometheus.sh installs Debian's prometheus")
        pytest.skip("promtool not found (Debian's prometheus package has it)")
    dash = json.loads((REPO / "deploy" / "grafana" / "dashboards" / "planner.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    rules = {
        "groups": [
            {"name": "dashboard", "rules": [{"record": f"q{i}", "expr": e} for i, e in enumerate(exprs)]}
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(exprs)} rules found" in out.stdout + out.stderr


def test_dashboard_metrics_exist_in_the_code() -> None:
    """Every planner_* metric the Grafana dashboard queries is defined by some service."""
    import re

    dash = json.loads((REPO / "deploy" / "grafana" / "dashboards" / "planner.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    wanted = set(re.findall(r"\bplanner_[a-z_]+", exprs))
    source = " ".join(p.read_text() for p in (REPO / "services").rglob("*.py"))
    source += " ".join(p.read_text() for p in (REPO / "libs" / "runtime").rglob("*.py"))
    missing = []
    for metric in sorted(wanted):
        base = re.sub(r"_(total|bucket|sum|count)$", "", metric)
        if f'"{base}"' not in source and f"'{base}'" not in source:
            missing.append(metric)
    assert not missing, f"dashboard queries metrics no service defines: {missing}"


def _nats_cluster() -> dict[str, dict[str, Any]]:
    """deploy/nats rendered (kubectl kustomize), by kind/name; the generated ConfigMap as ConfigMap/nats-config."""
    out = {}
    for d in _kustomize("deploy/nats"):
        name = d["metadata"]["name"]
        if d["kind"] == "ConfigMap":
            name = name.rsplit("-", 1)[0]  # the content hash kustomize appends
        out[d["kind"] + "/" + name] = d
    return out


def test_nats_cluster_manifest_is_valid_and_consistent() -> None:
    import kubernetes_validate

    docs = _nats_cluster()
    for doc in docs.values():
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert {d["metadata"]["namespace"] for d in docs.values()} == {"planner"}
    sts = docs["StatefulSet/nats"]
    pod = sts["spec"]["template"]["spec"]
    container = pod["containers"][0]
    headless = docs[f"Service/{sts['spec']['serviceName']}"]
    assert headless["spec"]["clusterIP"] == "None"
    conf = docs["ConfigMap/nats-config"]["data"]["nats.conf"]
    assert "include ./auth.conf" in conf and "auth.conf" in docs["ConfigMap/nats-config"]["data"]
    # the config is mounted where the container reads it, under the generated (hashed) name
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    config_dir = container["args"][container["args"].index("--config") + 1].rsplit("/", 1)[0]
    assert mounts["config"] == config_dir
    assert volumes["config"]["configMap"]["name"] == docs["ConfigMap/nats-config"]["metadata"]["name"]
    # TLS: the files nats.conf names are in the mounted server Secret
    assert volumes["tls"]["secret"]["secretName"] == "nats-server-tls"
    for f in re.findall(r"(?:cert|key|ca)_file: (\S+)", conf):
        assert f.rsplit("/", 1)[0] == mounts["tls"], f
    # every password the config reads comes from the Secret the services share
    env = {e["name"]: e for e in container["env"]}
    assert [s["secretRef"]["name"] for s in container["envFrom"]] == ["planner-nats"]
    example = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all((REPO / "deploy" / "k8s" / "nats-secret.example.yaml").read_text())
    }
    secret_keys = set(example["planner-nats"]["stringData"])
    text = conf + docs["ConfigMap/nats-config"]["data"]["auth.conf"]
    unquoted = re.sub(r'"[^"]*"', "", re.sub(r"#.*", "", text))
    wanted = set(re.findall(r"\$([A-Z][A-Z_0-9]*)", unquoted))
    assert wanted - set(env) <= secret_keys, wanted - set(env) - secret_keys
    assert {"tls.crt", "tls.key", "ca.crt"} <= set(example["nats-server-tls"]["stringData"])
    # one route per replica, each the stable DNS name of a pod of this StatefulSet on the cluster
    # port, with the route password
    replicas = sts["spec"]["replicas"]
    assert replicas == 3
    route_vars = re.findall(r"\$(ROUTE_\d+)", conf.split("routes:", 1)[1].split("]", 1)[0])
    routes = [
        re.fullmatch(r"nats://route:\$\(ROUTE_PASSWORD\)@([\w.-]+):(\d+)", env[v]["value"])
        for v in route_vars
    ]
    assert all(routes), [env[v]["value"] for v in route_vars]
    assert sorted(m.group(1) for m in routes if m) == [
        f"nats-{i}.{headless['metadata']['name']}" for i in range(replicas)
    ]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert {int(m.group(2)) for m in routes if m} == {ports["cluster"]}
    # a disruption budget that keeps the R3 quorum
    assert docs["PodDisruptionBudget/nats"]["spec"]["maxUnavailable"] == 1


NATS_USERS = {
    "planner-fpm-relay": ("fpm-relay", "FPM_RELAY_PASSWORD"),
    "planner-regression": ("regression", "REGRESSION_PASSWORD"),
    "planner-predictor": ("predictor", "PREDICTOR_PASSWORD"),
    "planner-decider": ("decider", "DECIDER_PASSWORD"),
    "planner-actuator-k8s": ("actuator", "ACTUATOR_PASSWORD"),
}


def _auth_users() -> dict[str, str]:
    """user -> password variable, from deploy/nats/auth.conf."""
    text = (REPO / "deploy" / "nats" / "auth.conf").read_text()
    return dict(re.findall(r"\{\s*user:\s*([\w-]+),\s*password:\s*\$(\w+)", text))


def test_every_deployment_is_its_own_nats_user_with_the_secret_key_of_that_user() -> None:
    users = _auth_users()
    secret_keys = {
        k
        for d in yaml.safe_load_all((REPO / "deploy" / "k8s" / "nats-secret.example.yaml").read_text())
        if d and d["metadata"]["name"] == "planner-nats"
        for k in d["stringData"]
    }
    # one key per NATS user, named as its variable, and the NATS nodes' route password (deploy/nats)
    assert secret_keys == set(users.values()) | {"ROUTE_PASSWORD"}
    docs = _kustomize()
    config = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    for d in (d for d in docs if d["kind"] == "Deployment"):
        name = d["metadata"]["name"]
        pod = d["spec"]["template"]["spec"]
        c = pod["containers"][0]
        env = {e["name"]: e for e in c["env"]}
        user = env["PLANNER_NATS_USER"]["value"]
        ref = env["PLANNER_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert (user, ref["key"]) == NATS_USERS[name], name
        assert users[user] == ref["key"] and ref["name"] == "planner-nats" and not ref.get("optional")
        # the CA of the NATS server's certificate is mounted where the settings read it
        shared = {k: v for cm in c["envFrom"] for k, v in config[cm["configMapRef"]["name"]].items()}
        ca = shared["PLANNER_NATS_TLS_CA_FILE"]
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        vol = next(n for n, p in mounts.items() if ca.startswith(p + "/"))
        assert volumes[vol]["secret"]["secretName"] == "nats-tls"


def test_actuator_rbac_is_in_the_engines_namespace_for_the_planner_account() -> None:
    docs = _kustomize()
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    cm = by[("ConfigMap", "planner-actuator-k8s-config")]["data"]
    engines_ns = cm["PLANNER_K8S_NAMESPACE"]
    deploy = by[("Deployment", "planner-actuator-k8s")]
    planner_ns = deploy["metadata"]["namespace"]
    assert engines_ns != planner_ns
    sa = by[("ServiceAccount", deploy["spec"]["template"]["spec"]["serviceAccountName"])]
    assert sa["metadata"]["namespace"] == planner_ns, "a pod can only use an account of its namespace"
    role = by[("Role", "planner-actuator-k8s")]
    binding = by[("RoleBinding", "planner-actuator-k8s")]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == engines_ns
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": planner_ns}
    ]
    # the workload the settings name is one the Role grants
    names = {n for rule in role["rules"] for n in rule.get("resourceNames", [])}
    assert cm["PLANNER_TARGET"] == "dgd" and cm["PLANNER_DGD_NAME"] in names


@pytest.mark.parametrize("folder", OVERLAYS)
def test_manifest_settings_load_in_each_service(folder: str) -> None:
    """The env each Deployment gets (its ConfigMaps and Secret keys) is valid settings for its
    service: no unknown value, no `target=dgd needs dgd_name`."""
    import importlib

    from planner_runtime.settings import load_settings

    docs = _kustomize(folder)
    config = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    for d in (d for d in docs if d["kind"] == "Deployment"):
        c = d["spec"]["template"]["spec"]["containers"][0]
        assert c["args"][0] == "serve"
        env = {k: v for cm in c.get("envFrom", []) for k, v in config[cm["configMapRef"]["name"]].items()}
        env.update({e["name"]: e.get("value", "secret") for e in c.get("env", [])})
        module = importlib.import_module(f"planner_{c['args'][1].replace('-', '_')}.service")
        settings = load_settings(module.SERVICE.settings_type, env=env)
        assert settings.namespace == "prod" and settings.nats_user, d["metadata"]["name"]
        if c["args"][1] == "predictor":
            # stock engines count their own traffic; otherwise the frontend's, from Prometheus
            want = "engines" if folder.endswith("stock-vllm") else "prometheus"
            assert settings.redacted()["source"] == want
        if c["args"][1] == "fpm-relay" and folder.endswith("stock-vllm"):
            # one source per component, each a whole label selector
            assert [p.split(":")[0] for p in settings.redacted()["pod_discovery"]] == ["prefill", "decode"]
