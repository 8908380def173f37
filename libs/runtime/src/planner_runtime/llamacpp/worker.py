"""A llama-server worker that joins a planner fleet: ``python -m planner_runtime.llamacpp.worker``.

One case of ``planner register`` (planner_runtime.register): it resolves llama-server and the model
(the tiny generated Llama by default), then runs the generic wrapper on the server's command line,
which starts it on a free loopback port, registers it with the capabilities llama-server shows on
``/props`` (slots, context per slot), keeps the entry fresh, and on SIGTERM drains it (entry marked
draining, then stopped once ``/metrics`` have shown nothing processing or deferred, and no decode or
token counter moving, for ``drain_quiet_s``).
"""

from __future__ import annotations

import argparse
import sys

from planner_proto import Component
from planner_runtime.llamacpp.binary import find_llama_server
from planner_runtime.llamacpp.server import server_args
from planner_runtime.llamacpp.tinymodel import ensure_tiny_llama
from planner_runtime.register.run import main as register
from planner_runtime.register.settings import RegisterSettings
from planner_runtime.settings import SettingsError


def command(args: argparse.Namespace) -> list[str] | None:
    binary = args.binary or find_llama_server()
    if not binary:
        return None
    model = args.model or ensure_tiny_llama()
    return server_args(
        binary,
        model,
        port="{port}",
        parallel=args.parallel,
        ctx_per_slot=args.ctx_per_slot,
        extra=("--batch-size", "2048"),  # llama-server's default, stated so the wrapper reads it
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m planner_runtime.llamacpp.worker", description=__doc__)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--component", default="agg", choices=[c.value for c in Component])
    p.add_argument("--namespace", required=True)
    p.add_argument("--nats-url", required=True)
    p.add_argument("--parallel", type=int, default=2, help="llama-server slots (--parallel)")
    p.add_argument("--ctx-per-slot", type=int, default=1024)
    p.add_argument("--binary", default="", help="llama-server (default: PLANNER_LLAMA_SERVER, cache, PATH)")
    p.add_argument("--model", default="", help="GGUF model (default: the tiny generated Llama)")
    p.add_argument("--start-timeout-s", type=float, default=60.0)
    p.add_argument("--drain-grace-s", type=float, default=1.0)
    p.add_argument("--drain-timeout-s", type=float, default=60.0)
    args = p.parse_args(argv)
    cmd = command(args)
    if cmd is None:
        print("llamacpp worker: llama-server not found (scripts/ensure-llama-server.sh)", file=sys.stderr)
        return 1
    try:
        settings = RegisterSettings(
            namespace=args.namespace,
            nats_url=args.nats_url,
            component=args.component,
            worker_id=args.worker_id,
            engine_kind="llamacpp",
            start_timeout_s=args.start_timeout_s,
            drain_grace_s=args.drain_grace_s,
            drain_timeout_s=args.drain_timeout_s,
            log_json=False,
        )
    except SettingsError as exc:
        print(f"llamacpp worker: {exc}", file=sys.stderr)
        return 2
    return register(settings, cmd)


if __name__ == "__main__":
    raise SystemExit(main())
