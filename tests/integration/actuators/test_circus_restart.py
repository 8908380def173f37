"""actuator-circus survives its own death (SIGKILL) without touching its workers, and adopts
watcher changes made by someone else (circusctl add / rm) as external changes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration


def actuator_argv(settings: Any) -> list[str]:
    return [
        sys.executable,
        "-m",
        "planner_actuator_circus",
        "--namespace",
        settings.namespace,
        "--nats-url",
        settings.nats_url,
        "--circus-endpoint",
        settings.circus_endpoint,
        "--worker-cmd",
        settings.worker_cmd,
        "--gpu-pool",
        ",".join(map(str, settings.gpu_pool)),
        "--status-interval-s",
        "0.5",
        "--worker-drain-timeout-s",
        "20",
        "--ready-timeout-s",
        "30",
        "--log-level",
        "info",
    ]


def spawn(argv: list[str], log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)


def stop_proc(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


async def test_restarted_actuator_keeps_its_workers(
    circusd: Any, recorder: Any, make_settings: Any, tmp_path: Path
) -> None:
    argv = actuator_argv(make_settings())
    log1 = (tmp_path / "actuator1.log").open("wb")
    log2 = (tmp_path / "actuator2.log").open("wb")
    first = spawn(argv, log1)
    second: subprocess.Popen[bytes] | None = None
    try:
        d1 = await recorder.decide({"prefill": 2, "decode": 1})
        await recorder.wait_ack(d1, "completed", timeout_s=45)
        before = {w: circusd.pids(w) for w in circusd.watchers()}
        assert sorted(before) == ["t_decode_0", "t_prefill_0", "t_prefill_1"]

        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        recorder.status.clear()
        second = spawn(argv, log2)
        st = await recorder.wait_status(
            lambda s: (
                s.last_decision_id == d1
                and s.components["prefill"].ready == 2
                and s.components["decode"].ready == 1
            ),
            timeout_s=30,
        )
        assert not st.external_change
        assert st.components["prefill"].desired == 2
        # same watchers, same processes: nothing restarted, nothing duplicated
        assert {w: circusd.pids(w) for w in circusd.watchers()} == before
        assert len(circusd.all_started()) == 3

        # the new instance knows which GPUs are taken
        d2 = await recorder.decide({"prefill": 3, "decode": 1})
        await recorder.wait_ack(d2, "completed", timeout_s=45)
        cuda = [e["cuda"] for e in circusd.all_started()]
        assert sorted(cuda) == ["0", "1", "2", "3"]
        d3 = await recorder.decide({"prefill": 1, "decode": 1})
        await recorder.wait_ack(d3, "completed", timeout_s=45)
        assert sorted(circusd.watchers()) == ["t_decode_0", "t_prefill_0"]
        # d1 was completed before the restart: the new instance does not complete it again
        assert recorder.acks_for(d1) == ["accepted", "completed"]
    finally:
        stop_proc(first)
        if second is not None:
            stop_proc(second)
        log1.close()
        log2.close()
    # the actuator's SIGTERM leaves workers running (a restart would adopt them)
    assert circusd.pids("t_prefill_0")


async def test_external_changes_are_adopted(
    circusd: Any, recorder: Any, make_settings: Any, run_actuator: Any
) -> None:
    settings = make_settings()
    async with run_actuator(settings):
        d1 = await recorder.decide({"prefill": 1})
        await recorder.wait_ack(d1, "completed", timeout_s=40)
        # someone adds a worker by hand (circusctl add), holding GPU 3
        argv = settings.worker_cmd.split()
        args = [
            a.format(worker_id="t_prefill_7", component="prefill", namespace="t", nats_url=settings.nats_url)
            for a in argv[1:]
        ]
        circusd.call(
            "add",
            name="t_prefill_7",
            cmd=argv[0],
            args=args,
            options={"env": {"CUDA_VISIBLE_DEVICES": "3"}, "respawn": False, "copy_env": True},
            start=True,
        )
        st = await recorder.wait_status(lambda s: s.external_change and s.components["prefill"].desired == 2)
        assert st.last_decision_id == d1
        # the adopted worker's GPU is respected: 2 prefill + 3 decode > 4 GPUs
        over = await recorder.decide({"decode": 3})
        assert "gpu_budget" in (await recorder.wait_ack(over, "failed")).message
        d2 = await recorder.decide({"decode": 2})
        await recorder.wait_ack(d2, "completed", timeout_s=40)
        decode_gpus = sorted(e["cuda"] for e in circusd.all_started() if "decode" in e["worker_id"])
        assert decode_gpus == ["1", "2"]
        # someone removes one by hand (circusctl rm): forgotten, count adopted
        circusd.call("rm", name="t_prefill_7")
        st = await recorder.wait_status(lambda s: s.external_change and s.components["prefill"].desired == 1)
        assert st.components["decode"].desired == 2
