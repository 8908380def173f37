"""Write your own actuator: each worker is a local process (``--worker-cmd``), pid files in ``--run-dir``.

The actuation core (planner_runtime.actuation) follows the decision protocol; a backend only lists,
starts, drains and removes workers. Passes the actuator conformance suite, like circus and k8s.

    python examples/process_actuator.py --namespace default --worker-cmd "sleep 86400"
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path

from planner_runtime.actuation import ActuatorService, ActuatorSettings, Backend, Seen, WorkerRecord
from planner_runtime.service import run_service


class ProcessSettings(ActuatorSettings, frozen=True, kw_only=True):
    actuator_id: str = "process"
    worker_cmd: str = "sleep 86400"
    run_dir: str = "/tmp/planner-process-actuator"
    drain_timeout_s: float = 30.0


def alive(pid: int) -> bool:
    with suppress(ChildProcessError):  # not our child: a previous holder started it
        if os.waitpid(pid, os.WNOHANG)[0]:
            return False  # our child, and it exited (now reaped)
    with suppress(ProcessLookupError):
        os.kill(pid, 0)
        return True
    return False


class ProcessBackend(Backend):
    def __init__(self, s: ProcessSettings) -> None:
        self.s, self.dir = s, Path(s.run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)

    def components(self) -> Sequence[str]:
        return ["prefill", "decode", "agg"]

    def live_pid(self, name: str) -> int:
        f = self.dir / f"{name}.pid"
        pid = int(f.read_text()) if f.exists() else 0
        return pid if pid and alive(pid) else 0  # never alive(0): waitpid(0) is any child

    async def workers(self, known: Mapping[str, WorkerRecord]) -> list[Seen]:
        seen = []
        for f in sorted(self.dir.glob("*.pid")):
            component, _, index = f.stem.rpartition("-")
            if alive(int(f.read_text())):
                seen.append(Seen(name=f.stem, component=component, ready=True, index=int(index)))
            else:
                f.unlink()  # exited: gone (an external change unless it was draining)
        return seen

    async def start(self, component: str, count: int, known: Sequence[WorkerRecord]) -> list[WorkerRecord]:
        used = {w.index for w in known if w.component == component}
        argv, started = shlex.split(self.s.worker_cmd), []
        for index in [i for i in range(len(used) + count) if i not in used][:count]:
            pid = await asyncio.to_thread(os.posix_spawnp, argv[0], argv, dict(os.environ), setsid=True)
            name = f"{component}-{index}"
            (self.dir / f"{name}.pid").write_text(str(pid))
            started.append(
                WorkerRecord(name=name, component=component, index=index, started_at_s=time.time())
            )
        return started

    async def drain(self, workers: Sequence[WorkerRecord]) -> None:
        for pid in filter(None, (self.live_pid(w.name) for w in workers)):
            os.kill(pid, signal.SIGTERM)

    async def remove(self, worker: WorkerRecord) -> bool:
        if pid := self.live_pid(worker.name):
            if time.time() > worker.drain_started_at_s + self.s.drain_timeout_s:
                os.kill(pid, signal.SIGKILL)
            return False
        (self.dir / f"{worker.name}.pid").unlink(missing_ok=True)
        return True


class ProcessActuator(ActuatorService[ProcessSettings]):
    name = "actuator-process"
    settings_type = ProcessSettings
    lease = "actuator-process"

    async def make_backend(self) -> Backend:
        return ProcessBackend(self.settings)


if __name__ == "__main__":
    raise SystemExit(run_service(ProcessActuator, prog="process_actuator.py"))
