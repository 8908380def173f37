"""Every `planner serve <service>` turns a busy HTTP port, a bad setting, refused NATS credentials or
a refused subject into one clear line and a non-zero exit (or a logged error while it goes on),
never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner_cli.services import SERVICES
from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port

pytestmark = pytest.mark.integration

PLANNER = str(Path(sys.executable).parent / "planner")
# the least each service needs to get as far as its HTTP port and NATS
NEEDS = {
    "actuator-k8s": ["--dgd-name", "llm-disagg", "--api-url", "http://127.0.0.1:9"],
    "engine-sim": ["--zmq-port-base", "0", "--timing", "mocker"],
    "loadgen": ["--shape", "constant"],
}


@pytest.fixture(scope="module")
def auth_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    folder = tmp_path_factory.mktemp("nats-auth")
    conf = folder / "nats.conf"
    conf.write_text(
        "authorization { users = [\n"
        '  { user: decider, password: "pw-decider" }\n'
        '  { user: predictor, password: "pw-predictor", permissions: { publish: ["planner.prod.forecast"],'
        ' subscribe: ["_INBOX.>"] } }\n'
        "] }\n"
    )
    with NatsServer(store_dir=folder / "js", extra_args=["-c", str(conf)]) as server:
        yield server


def _run(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PLANNER, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def _finish(proc: subprocess.Popen[str], timeout_s: float = 60) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout_s)
    return proc.returncode, out


@pytest.mark.parametrize("service", SERVICES)
def test_busy_port_bad_setting_and_refused_credentials_are_one_line_each(
    service: str, auth_nats: NatsServer
) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        base = ["serve", service, *NEEDS.get(service, []), "--namespace", "prod"]
        procs = {
            "busy_port": _run(
                [*base, "--http-port", str(busy.getsockname()[1]), "--nats-url", auth_nats.url]
            ),
            "bad_setting": _run([*base, "--nats-connect-timeout-s", "-1"]),
            "refused": _run(
                [*base, "--nats-url", auth_nats.url, "--nats-user", "decider", "--nats-password", "wrong"]
            ),
        }
        results = {case: _finish(p) for case, p in procs.items()}
    finally:
        busy.close()
    for case, (code, out) in results.items():
        assert "Traceback" not in out, f"{case}:\n{out}"
        assert code != 0, f"{case}:\n{out}"
    code, out = results["busy_port"]
    assert code == 1 and sum("http_listen_failed" in line for line in out.splitlines()) == 1, out
    assert "address already in use" in out
    code, out = results["bad_setting"]
    assert code == 2 and out.strip().count("\n") == 0, out
    assert "nats_connect_timeout_s" in out
    code, out = results["refused"]
    assert code == 1 and "nats_connect_failed" in out and "refused our credentials" in out, out


def test_a_subject_the_user_may_not_use_is_logged_as_such(auth_nats: NatsServer) -> None:
    """The decider as a user without its lease subject: one error line names the refused subject;
    it stays up (standby), as a logged condition, not a crash."""
    proc = _run(
        [
            "serve", "decider", "--namespace", "prod", "--nats-url", auth_nats.url, "--nats-user", "predictor",
            "--nats-password", "pw-predictor", "--http-port", str(free_port()),
        ]
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:  # until the refusal is reported, then SIGTERM
        lines.append(line)
        if "nats_permission_denied" in line or len(lines) > 200:
            break
    proc.terminate()
    code, rest = _finish(proc, timeout_s=30)
    out = "".join(lines) + rest
    assert "Traceback" not in out, out
    assert code == 0, out  # a clean stop on SIGTERM, even while setup was waiting on JetStream
    denied = [line for line in out.splitlines() if "nats_permission_denied" in line]
    assert denied and "permissions violation" in denied[0].lower(), out


def test_a_setup_that_cannot_finish_is_one_error_line_and_exit_1() -> None:
    """A NATS server without JetStream: the regression service cannot make its KV buckets. It retries
    (logged), then says so in one ``setup_failed`` line and exits 1, never a traceback."""
    with NatsServer(jetstream=False) as server:
        proc = _run(["serve", "regression", "--nats-url", server.url, "--http-port", str(free_port())])
        code, out = _finish(proc, timeout_s=120)
    assert code == 1, out
    assert "Traceback" not in out, out
    failed = [line for line in out.splitlines() if "setup_failed" in line]
    assert len(failed) == 1 and "ServiceUnavailable" in failed[0], out
