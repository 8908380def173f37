"""Scale harness: N synthetic engines -> 3 fpm-relays -> regression -> decider, all real processes.

Layout: an embedded nats-server (JetStream, monitoring port), ``engine_procs`` engine processes
(:mod:`engines`, each owning N/procs ZMQ PUB sockets and their ``planner_engines`` keys), ``relays``
fpm-relay processes (KV discovery with sharding and claims, or static engine lists split between them
with sharding off), one regression and one decider process. This process plays the actuator: it
publishes a ReplicaStatus every 2 s (so that the decider decides; it runs advisory, with no budget or
replica cap), and records every ComponentSnapshot and ScalingDecision it sees.

Phases: start everything; warm-up until every engine is subscribed by exactly one relay and appears
in the regression snapshots (both times are reported); then a measurement window of ``duration_s``
bracketed by two reads of every /metrics, the nats-server /varz, the engines' counters and
/proc/<pid>/stat; then a graceful stop (engines, relays, regression, decider, nats-server). Whatever
happens (error, Ctrl-C, SIGTERM), every process started here is stopped; children also get SIGTERM if
this process dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import yaml
from prometheus_client.parser import text_string_to_metric_families

from planner_proto import ComponentReplicas, ComponentSnapshot, ReplicaStatus, Subjects, encode
from planner_proto.subjects import ENGINES_BUCKET, ENGINES_TTL_S
from planner_runtime.bus import Bus
from planner_runtime.natsd import NatsServer, free_port
from planner_runtime.settings import BaseSettings

from .engines import is_idle

ENGINES_SCRIPT = Path(__file__).with_name("engines.py")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


@dataclass
class ScaleConfig:
    engines: int = 1000
    rate: float = 25.0
    """Forward passes per second of a busy engine (one FPM each)."""
    duration_s: float = 60.0
    """Measurement window (after warm-up)."""
    discovery: str = "kv"
    """kv: relays follow ``planner_engines`` and shard with claims; static: per-relay engine lists."""
    relays: int = 3
    engine_procs: int = 2
    idle_fraction: float = 0.1
    """Engines with no traffic: they send the 1 s all-zero heartbeat only."""
    prefill_fraction: float = 0.25
    transport: str = "tcp"
    sndhwm: int = 1000
    regression_tick_s: float = 1.0
    decider_interval_s: float = 2.0
    """The decider's load_interval_s (its tick); the service default is 5 s."""
    warmup_timeout_s: float = 90.0
    stop_timeout_s: float = 40.0
    """Per process group, after SIGTERM (the services' drain_timeout_s is 30 s)."""
    namespace: str = "scale"
    relay_args: list[str] = field(default_factory=list)
    """Extra fpm-relay flags, e.g. ``--relay-ttl-s 15 --relay-heartbeat-s 5``."""
    keep_logs: str = ""
    """Copy the processes' logs here (empty: temp dir, removed)."""


@dataclass
class Proc:
    name: str
    role: str
    popen: subprocess.Popen[bytes]
    http_port: int = 0
    log_path: Path | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


@dataclass
class Fleet:
    """Every process this run started, stopped in reverse dependency order whatever happens."""

    procs: list[Proc] = field(default_factory=list)
    nats: NatsServer | None = None

    def spawn(
        self, name: str, role: str, args: list[str], log_dir: Path, http_port: int = 0, pipes: bool = False
    ) -> Proc:
        log_path = log_dir / f"{name}.log"
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                args,
                stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
                stdout=subprocess.PIPE if pipes else log,
                stderr=log,
                start_new_session=True,  # Ctrl-C reaches the harness only; it stops the rest in order
                preexec_fn=_die_with_parent,
                env={**os.environ, "PYTHONFAULTHANDLER": "1"},
            )
        proc = Proc(name, role, popen, http_port, log_path)
        self.procs.append(proc)
        return proc

    def by_role(self, role: str) -> list[Proc]:
        return [p for p in self.procs if p.role == role]

    def stop_all(self, timeout_s: float = 40.0) -> dict[str, int | None]:
        codes: dict[str, int | None] = {}
        for role in ("engines", "relay", "regression", "decider"):
            group = [p for p in self.by_role(role) if p.alive()]
            for p in group:
                with contextlib.suppress(ProcessLookupError):
                    p.popen.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            for p in group:
                try:
                    p.popen.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    # PYTHONFAULTHANDLER is on in the children: SIGABRT writes every thread's stack
                    # to the process log, so a stuck shutdown can be diagnosed afterwards
                    p.popen.send_signal(signal.SIGABRT)
                    try:
                        p.popen.wait(5)
                    except subprocess.TimeoutExpired:
                        p.popen.kill()
                        p.popen.wait(5)
        for p in self.procs:
            for stream in (p.popen.stdin, p.popen.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            codes[p.name] = p.popen.returncode
        if self.nats is not None:
            self.nats.close()
            self.nats = None
        return codes


# ---- reading processes and metrics -----------------------------------------------------------------
def proc_cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_mem_mb(pid: int) -> tuple[float, float]:
    """(RSS, peak RSS) in MiB."""
    rss = hwm = math.nan
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    except OSError:
        pass
    return rss, hwm


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + parts[4]
    total = sum(parts[:8])
    return float(total - idle), float(total)


Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: Samples = defaultdict(list)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name].append((dict(s.labels), float(s.value)))
    return out


def timed_scrape(port: int) -> tuple[float, Samples]:
    samples = scrape(port)
    return time.monotonic(), samples


def total(samples: Samples, name: str, **match: str) -> float:
    return sum(v for labels, v in samples.get(name, []) if all(labels.get(k) == x for k, x in match.items()))


def per_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for labels, v in samples.get(name, []):
        out[labels.get(label, "")] += v
    return out


def hist_delta(before: Samples, after: Samples, loop: str) -> dict[str, Any]:
    """Quantiles of ``planner_tick_seconds{loop}`` over the window (linear within a bucket)."""

    def buckets(s: Samples) -> dict[float, float]:
        return {
            float(lab["le"]): v
            for lab, v in s.get("planner_tick_seconds_bucket", [])
            if lab.get("loop") == loop
        }

    b0, b1 = buckets(before), buckets(after)
    cum = sorted((le, b1.get(le, 0.0) - b0.get(le, 0.0)) for le in b1)
    count = total(after, "planner_tick_seconds_count", loop=loop) - total(
        before, "planner_tick_seconds_count", loop=loop
    )
    ssum = total(after, "planner_tick_seconds_sum", loop=loop) - total(
        before, "planner_tick_seconds_sum", loop=loop
    )

    def quantile(q: float) -> float | None:
        if count <= 0:
            return None
        rank = q * count
        prev_le, prev_c = 0.0, 0.0
        for le, c in cum:
            if c >= rank:
                if math.isinf(le):
                    return prev_le  # beyond the last finite bucket: a lower bound
                frac = (rank - prev_c) / (c - prev_c) if c > prev_c else 1.0
                return prev_le + frac * (le - prev_le)
            prev_le, prev_c = le, c
        return None

    return {
        "count": int(count),
        "mean_s": ssum / count if count else None,
        "p50_s": quantile(0.5),
        "p99_s": quantile(0.99),
        "max_bucket_s": next((le for le, c in reversed(cum) if c > 0 and not math.isinf(le)), None)
        if count
        else None,
    }


def varz(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/varz", timeout=5) as r:
        data: dict[str, Any] = json.loads(r.read())
        return data


# ---- what this process listens to --------------------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.snaps: dict[str, list[tuple[float, int, int, float]]] = defaultdict(list)
        """component -> (monotonic arrival, workers, bytes, max worker age at issue time)."""
        self.workers: dict[str, set[str]] = {}
        self.decisions: list[tuple[float, int]] = []
        self._dec = msgspec.json.Decoder(ComponentSnapshot)

    async def on_snapshot(self, data: bytes, subject: str) -> None:
        snap = self._dec.decode(data)
        age = max((snap.issued_at_s - w.last_seen_s for w in snap.workers), default=0.0)
        self.snaps[str(snap.component)].append((time.monotonic(), len(snap.workers), len(data), age))
        self.workers[str(snap.component)] = {w.worker_id for w in snap.workers}

    async def on_decision(self, data: bytes, subject: str) -> None:
        self.decisions.append((time.monotonic(), int(json.loads(data).get("decision_id", 0))))

    def all_workers(self) -> set[str]:
        return set().union(*self.workers.values()) if self.workers else set()


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


# ---- the run -------------------------------------------------------------------------------------------
Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"[scale] {msg}", file=sys.stderr, flush=True)


def run(cfg: ScaleConfig, log: Log = _stderr) -> dict[str, Any]:
    """One full run; returns the result dict. Every process is stopped before this returns or raises."""
    fleet = Fleet()
    tmp = tempfile.TemporaryDirectory(prefix="planner-scale-")
    log_dir = Path(tmp.name)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM -> KeyboardInterrupt
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 4 * cfg.engines + 4096))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # children inherit it
    result: dict[str, Any] = {}
    try:
        result = asyncio.run(_run(cfg, fleet, log_dir, log))
        return result
    finally:
        codes = fleet.stop_all(cfg.stop_timeout_s)
        signal.signal(signal.SIGTERM, previous)
        bad = {n: c for n, c in codes.items() if c not in (0, None)}
        if result:
            result["exit_codes_nonzero"] = bad
        if bad:
            log(f"processes that did not exit 0: {bad}")
        if cfg.keep_logs:
            dest = Path(cfg.keep_logs)
            dest.mkdir(parents=True, exist_ok=True)
            for p in log_dir.glob("*.log"):
                (dest / p.name).write_bytes(p.read_bytes())
        tmp.cleanup()


async def _read_json_line(proc: Proc, timeout_s: float) -> dict[str, Any]:
    assert proc.popen.stdout is not None
    stdout = proc.popen.stdout
    while True:
        line = await asyncio.wait_for(asyncio.to_thread(stdout.readline), timeout_s)
        if not line:
            raise RuntimeError(f"{proc.name} exited: {_tail(proc)}")
        obj: dict[str, Any] = json.loads(line)
        if "warning" not in obj:
            return obj


def _tail(proc: Proc, n: int = 1500) -> str:
    if proc.log_path is None or not proc.log_path.exists():
        return ""
    return proc.log_path.read_text(errors="replace")[-n:]


async def _command(proc: Proc, cmd: str, timeout_s: float = 15.0) -> dict[str, Any]:
    assert proc.popen.stdin is not None
    proc.popen.stdin.write(f"{cmd}\n".encode())
    proc.popen.stdin.flush()
    return await _read_json_line(proc, timeout_s)


async def _wait_http(procs: list[Proc], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for p in procs:
        while True:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited at start: {_tail(p)}")
            try:
                await asyncio.to_thread(scrape, p.http_port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{p.name} did not serve /metrics: {_tail(p)}") from None
                await asyncio.sleep(0.2)


async def _wait_members(relays: list[Proc], n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = await asyncio.gather(*(asyncio.to_thread(scrape, r.http_port) for r in relays))
        if all(total(m, "planner_fpm_relay_members") >= n for m in got):
            return
        await asyncio.sleep(0.3)


async def _run(cfg: ScaleConfig, fleet: Fleet, log_dir: Path, log: Log) -> dict[str, Any]:
    ns = cfg.namespace
    subjects = Subjects(ns=ns)
    monitor = free_port()
    fleet.nats = NatsServer(store_dir=log_dir / "nats", extra_args=["-m", str(monitor)]).start()
    url = fleet.nats.url
    bus = await Bus.connect(BaseSettings(nats_url=url), name="scale-harness", max_wait_s=10)
    try:
        return await _run_connected(cfg, fleet, log_dir, log, bus, subjects, monitor)
    finally:
        await bus.close()


async def _run_connected(
    cfg: ScaleConfig, fleet: Fleet, log_dir: Path, log: Log, bus: Bus, subjects: Subjects, monitor: int
) -> dict[str, Any]:
    ns, url = cfg.namespace, bus.nc.connected_url
    nats_url = fleet.nats.url if fleet.nats else ""
    await bus.kv(ENGINES_BUCKET, ttl_s=ENGINES_TTL_S)
    rec = Recorder()
    await bus.subscribe_raw(subjects.state(), rec.on_snapshot)
    await bus.subscribe_raw(subjects.decision(), rec.on_decision)
    del url

    # engines first (static mode needs their endpoints before the relays start)
    t_start = time.monotonic()
    per = math.ceil(cfg.engines / cfg.engine_procs)
    ipc_dir = log_dir / "ipc"
    ipc_dir.mkdir()
    engine_procs: list[Proc] = []
    for i in range(cfg.engine_procs):
        first, count = i * per, min(per, cfg.engines - i * per)
        if count <= 0:
            break
        spec = {
            "nats_url": nats_url, "namespace": ns, "first": first, "count": count, "rate": cfg.rate,
            "idle_fraction": cfg.idle_fraction, "prefill_fraction": cfg.prefill_fraction,
            "transport": cfg.transport, "ipc_dir": str(ipc_dir), "sndhwm": cfg.sndhwm,
        }  # fmt: skip
        engine_procs.append(
            fleet.spawn(
                f"engines-{i}",
                "engines",
                [sys.executable, str(ENGINES_SCRIPT), json.dumps(spec)],
                log_dir,
                pipes=True,
            )
        )
    endpoints: dict[str, str] = {}
    for p in engine_procs:
        endpoints.update((await _read_json_line(p, 120))["endpoints"])
    t_bound = time.monotonic()
    log(f"{len(endpoints)} engines bound in {t_bound - t_start:.1f} s ({cfg.transport})")
    components = defaultdict(int)
    for key in endpoints:
        components[key.split(":")[0]] += 1

    # services
    def start_service(name: str, role: str, module: str, *extra: str) -> Proc:
        port = free_port()
        args = [sys.executable, "-m", module, "--nats-url", nats_url, "--namespace", ns]
        args += ["--http-port", str(port), "--log-level", "warning", *extra]
        return fleet.spawn(name, role, args, log_dir, http_port=port)

    decider = start_service(
        "decider", "decider", "planner_decider", "--advisory", "--max-gpu-budget", "-1", "--max-replicas", "-1",
        "--load-interval-s", str(cfg.decider_interval_s),
    )  # fmt: skip
    regression = start_service(
        "regression", "regression", "planner_regression", "--tick-s", str(cfg.regression_tick_s),
        "--components", "prefill,decode",
    )  # fmt: skip
    relays: list[Proc] = []
    keys = sorted(endpoints)
    for i in range(cfg.relays):
        extra = ["--relay-id", f"relay-{i}", *cfg.relay_args]
        if cfg.discovery == "static":
            mine = keys[i :: cfg.relays]
            conf = log_dir / f"relay-{i}.yaml"
            conf.write_text(yaml.safe_dump({"static_engines": [f"{k}={endpoints[k]}" for k in mine]}))
            extra += ["--no-watch-engines", "--no-sharding", "--config", str(conf)]
        relays.append(start_service(f"relay-{i}", "relay", "planner_fpm_relay", *extra))
    services = [decider, regression, *relays]
    t_services = time.monotonic()

    # the actuator's side: replica counts, so that the decider decides
    status = ReplicaStatus(
        namespace=ns,
        actuator_id="scale-bench",
        at_s=0.0,
        components={c: ComponentReplicas(desired=n, ready=n) for c, n in components.items()},
    )

    async def replicas_loop() -> None:
        while True:
            await bus.publish_raw(
                subjects.replicas(), encode(msgspec.structs.replace(status, at_s=time.time()))
            )
            await asyncio.sleep(2.0)

    replicas_task = asyncio.create_task(replicas_loop())
    try:
        await _wait_http(services, 60)
        if cfg.discovery == "kv":  # all relays have joined: no relay starts out owning every engine
            await _wait_members(relays, cfg.relays, 30)
        registered = [await _command(p, "register", 120) for p in engine_procs]
        t_registered = time.monotonic()
        log(
            f"services up in {t_registered - t_services:.1f} s; registry filled in "
            f"{max(r['registered_s'] for r in registered):.1f} s"
        )

        # warm-up: every engine served by exactly one relay, and in the snapshots
        want = {k.split(":")[1] for k in endpoints}
        t_subscribed = t_in_snap = None
        deadline = time.monotonic() + cfg.warmup_timeout_s
        subscribed = 0
        while time.monotonic() < deadline:
            samples = await asyncio.gather(
                *(asyncio.to_thread(scrape, r.http_port) for r in relays), return_exceptions=True
            )
            ok = [s for s in samples if not isinstance(s, BaseException)]
            if len(ok) < len(samples):
                log(f"{len(samples) - len(ok)} relay(s) did not answer /metrics within 10 s")
            subscribed = int(sum(total(s, "planner_fpm_engines_subscribed") for s in ok))
            claims = int(sum(total(s, "planner_fpm_relay_claims") for s in ok))
            if cfg.discovery == "kv" and claims != subscribed:
                subscribed = min(subscribed, claims)
            now = time.monotonic()
            if t_subscribed is None and subscribed >= cfg.engines:
                t_subscribed = now
                log(f"all {cfg.engines} engines subscribed {now - t_registered:.1f} s after registration")
            if t_in_snap is None and want <= rec.all_workers():
                t_in_snap = now
                log(f"all engines in the snapshots {now - t_registered:.1f} s after registration")
            if t_subscribed is not None and t_in_snap is not None:
                break
            for p in (*services, *engine_procs):
                if not p.alive():
                    raise RuntimeError(f"{p.name} died during warm-up: {_tail(p)}")
            await asyncio.sleep(0.5)
        else:
            log(
                f"warm-up timed out: {subscribed}/{cfg.engines} subscribed, "
                f"{len(want & rec.all_workers())} in snapshots"
            )
        await asyncio.sleep(2.0)  # let the first ticks with the full fleet pass

        # the measurement window
        pids = {p.name: p.pid for p in (*services, *engine_procs)}
        nats_proc = fleet.nats._proc if fleet.nats else None
        if nats_proc is not None:
            pids["nats-server"] = nats_proc.pid

        unresponsive: list[str] = []

        async def read_all() -> dict[str, Any]:
            got = await asyncio.gather(
                *(asyncio.to_thread(timed_scrape, p.http_port) for p in services), return_exceptions=True
            )
            metrics: list[Samples] = []
            times: dict[str, float] = {}
            for p, m in zip(services, got, strict=True):
                if isinstance(m, BaseException):
                    unresponsive.append(p.name)
                    log(f"{p.name} did not answer /metrics: {m!r}")
                    m = (math.nan, {})
                times[p.name] = m[0]
                metrics.append(m[1])
            eng = await asyncio.gather(*(_command(p, "stats") for p in engine_procs))
            return {
                "t": time.monotonic(),
                "metrics": dict(zip([p.name for p in services], metrics, strict=True)),
                "times": times,
                "engines": eng,
                "varz": await asyncio.to_thread(varz, monitor),
                "cpu": {n: proc_cpu_s(pid) for n, pid in pids.items()},
                "self_cpu": time.process_time(),
                "machine": machine_cpu(),
                "snaps": {c: len(v) for c, v in rec.snaps.items()},
                "decisions": len(rec.decisions),
            }

        log(f"measuring for {cfg.duration_s:.0f} s")
        r0 = await read_all()
        await asyncio.sleep(cfg.duration_s)
        r1 = await read_all()
        mem = {n: proc_mem_mb(pid) for n, pid in pids.items()}
        dead = [p.name for p in (*services, *engine_procs) if not p.alive()]

        # graceful stop of the engines (final counters), then the rest in Fleet.stop_all
        for p in engine_procs:
            with contextlib.suppress(Exception):
                await _command(p, "stop", timeout_s=15)
        for p in engine_procs:  # they delete their registry keys, then exit
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(p.popen.wait, 15)
    finally:
        replicas_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await replicas_task

    return _report(
        cfg,
        r0,
        r1,
        mem,
        rec,
        relays,
        regression,
        decider,
        {
            "bind_s": t_bound - t_start,
            "registry_fill_s": max(r["registered_s"] for r in registered),
            "all_subscribed_after_registration_s": None
            if t_subscribed is None
            else t_subscribed - t_registered,
            "all_in_snapshots_after_registration_s": None if t_in_snap is None else t_in_snap - t_registered,
            "subscribed_at_warmup_end": subscribed,
        },
        dict(components),
        dead,
        unresponsive,
    )


def _report(
    cfg: ScaleConfig,
    r0: dict[str, Any],
    r1: dict[str, Any],
    mem: dict[str, tuple[float, float]],
    rec: Recorder,
    relays: list[Proc],
    regression: Proc,
    decider: Proc,
    discovery: dict[str, Any],
    components: dict[str, int],
    dead: list[str],
    unresponsive: list[str],
) -> dict[str, Any]:
    window = r1["t"] - r0["t"]
    m0, m1 = r0["metrics"], r1["metrics"]

    def span(proc: str) -> float:
        """Each process's counters are rated over the time between its own two reads."""
        w = r1["times"][proc] - r0["times"][proc]
        return w if w > 0 else window

    def delta(proc: str, name: str, **match: str) -> float:
        return total(m1[proc], name, **match) - total(m0[proc], name, **match)

    n_idle = sum(1 for i in range(cfg.engines) if is_idle(i, cfg.idle_fraction))
    offered_rate = (cfg.engines - n_idle) * cfg.rate + n_idle * 1.0
    sent = sum(e["sent"] for e in r1["engines"]) - sum(e["sent"] for e in r0["engines"])
    skipped = sum(e["skipped"] for e in r1["engines"]) - sum(e["skipped"] for e in r0["engines"])

    # relays: throughput, losses, and no engine published by two relays
    relay_rows = []
    owners: dict[str, int] = defaultdict(int)
    for r in relays:
        before = per_label(m0[r.name], "planner_fpm_relayed_total", "worker")
        after = per_label(m1[r.name], "planner_fpm_relayed_total", "worker")
        for w, v in after.items():
            if v - before.get(w, 0.0) > 0:
                owners[w] += 1
        relay_rows.append(
            {
                "name": r.name,
                "engines": int(total(m1[r.name], "planner_fpm_engines_subscribed")),
                "relayed": delta(r.name, "planner_fpm_relayed_total"),
                "relayed_per_s": delta(r.name, "planner_fpm_relayed_total") / span(r.name),
                "seq_gaps": delta(r.name, "planner_fpm_dropped_total", reason="gap"),
                "lease_drops": delta(r.name, "planner_fpm_lease_dropped_total"),
                "bad": delta(r.name, "planner_bad_messages_total"),
                "socket_errors": delta(r.name, "planner_fpm_socket_errors_total"),
                "heartbeat_tick": hist_delta(m0[r.name], m1[r.name], "heartbeat"),
            }
        )
    relayed = sum(x["relayed"] for x in relay_rows)
    reg_name, dec_name = regression.name, decider.name
    received = delta(reg_name, "planner_regression_messages_total", kind="pass") + delta(
        reg_name, "planner_regression_messages_total", kind="heartbeat"
    )

    # snapshot cadence, from what this process received
    snap_rows = {}
    cadence_ok = True
    for comp, rows in rec.snaps.items():
        lo = r0["snaps"].get(comp, 0)
        hi = r1["snaps"].get(comp, 0)
        win = rows[lo:hi]
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(win)]
        expected = window / cfg.regression_tick_s
        row = {
            "count": len(win),
            "expected": round(expected, 1),
            "interval_p50_s": pct(gaps, 0.5),
            "interval_max_s": max(gaps) if gaps else None,
            "workers_min": min((w[1] for w in win), default=0),
            "workers_max": max((w[1] for w in win), default=0),
            "bytes_max": max((w[2] for w in win), default=0),
            "worker_age_max_s": max((w[3] for w in win), default=None),
        }
        row["held"] = bool(
            win and len(win) >= 0.9 * expected and (row["interval_max_s"] or 0) < 2.0 * cfg.regression_tick_s
        )
        cadence_ok = cadence_ok and row["held"]
        snap_rows[comp] = row

    dec_tick = hist_delta(m0[dec_name], m1[dec_name], "decide")
    dec_expected = window / cfg.decider_interval_s
    dec_held = (
        dec_tick["count"] >= 0.9 * dec_expected - 1 and (dec_tick["p99_s"] or 0) < cfg.decider_interval_s
    )

    # processes: CPU over the window, memory at its end
    proc_rows = []
    role_msgs = {"relay": relayed, "regression": received, "nats-server": relayed, "engines": sent}
    for name, c1 in r1["cpu"].items():
        c0 = r0["cpu"][name]
        cpu = c1 - c0
        role = "relay" if name.startswith("relay") else "engines" if name.startswith("engines") else name
        share = (
            relayed / len(relays)
            if role == "relay"
            else sent / max(1, len(r1["engines"]))
            if role == "engines"
            else role_msgs.get(role, 0.0)
        )
        proc_rows.append(
            {
                "name": name,
                "cpu_pct": 100.0 * cpu / window,
                "cpu_us_per_msg": 1e6 * cpu / share if share else None,
                "rss_mb": mem[name][0],
                "peak_rss_mb": mem[name][1],
            }
        )
    self_cpu = r1["self_cpu"] - r0["self_cpu"]
    proc_rows.append(
        {
            "name": "harness",
            "cpu_pct": 100.0 * self_cpu / window,
            "cpu_us_per_msg": None,
            "rss_mb": proc_mem_mb(os.getpid())[0],
            "peak_rss_mb": proc_mem_mb(os.getpid())[1],
        }
    )
    busy0, tot0 = r0["machine"]
    busy1, tot1 = r1["machine"]
    ncpu = os.cpu_count() or 1
    machine_pct = 100.0 * ncpu * (busy1 - busy0) / max(1.0, tot1 - tot0)
    ours = sum(p["cpu_pct"] for p in proc_rows)

    # extrapolation: CPU per relayed message, per role, and the cores the target load would need
    per_msg: dict[str, float] = defaultdict(float)
    for p in proc_rows:
        if p["name"] == "harness":
            continue
        role = (
            "relay"
            if p["name"].startswith("relay")
            else "engines"
            if p["name"].startswith("engines")
            else p["name"]
        )
        cpu_s = p["cpu_pct"] / 100.0 * window
        if relayed:
            per_msg[role] += 1e6 * cpu_s / relayed
    v0, v1 = r0["varz"], r1["varz"]
    return {
        "config": asdict(cfg),
        "components": components,
        "idle_engines": n_idle,
        "window_s": window,
        "offered_per_s": offered_rate,
        "discovery": discovery,
        "engines": {
            "sent": sent,
            "sent_per_s": sum(
                (e1["sent"] - e0["sent"]) / (e1["t"] - e0["t"])
                for e0, e1 in zip(r0["engines"], r1["engines"], strict=True)
            ),
            "skipped_behind": skipped,
        },
        "relays": relay_rows,
        "relay_total": {
            "relayed_per_s": sum(x["relayed_per_s"] for x in relay_rows),
            "seq_gaps": sum(x["seq_gaps"] for x in relay_rows),
            "lease_drops": sum(x["lease_drops"] for x in relay_rows),
            "bad": sum(x["bad"] for x in relay_rows),
            "engines_on_two_relays": sum(1 for v in owners.values() if v > 1),
            "engines_silent": cfg.engines - len(owners),
        },
        "regression": {
            "received_per_s": received / span(reg_name),
            "passes_fitted": delta(reg_name, "planner_regression_passes_total", outcome="accepted"),
            "over_budget": delta(reg_name, "planner_regression_passes_total", outcome="over_budget"),
            "model_ready": {
                lab.get("component", ""): v
                for lab, v in m1[reg_name].get("planner_regression_model_ready", [])
            },
            "tick": hist_delta(m0[reg_name], m1[reg_name], "tick"),
            "snapshots": snap_rows,
        },
        "decider": {
            "tick": dec_tick,
            "expected_ticks": round(dec_expected, 1),
            "decisions": r1["decisions"] - r0["decisions"],
            "held": dec_held,
        },
        "nats": {
            "in_msgs_per_s": (v1["in_msgs"] - v0["in_msgs"]) / window,
            "out_msgs_per_s": (v1["out_msgs"] - v0["out_msgs"]) / window,
            "slow_consumers": v1.get("slow_consumers", 0) - v0.get("slow_consumers", 0),
        },
        "processes": proc_rows,
        "machine": {
            "cpus": ncpu,
            "busy_pct": machine_pct,
            "ours_pct": ours,
            "others_pct": machine_pct - ours,
        },
        "cpu_us_per_relayed_msg": dict(per_msg),
        "cadence_held": cadence_ok and dec_held,
        "dead": dead,
        "unresponsive": unresponsive,
    }


def extrapolate(result: dict[str, Any], engines: int, rate: float) -> dict[str, float]:
    """Cores each role would need for ``engines`` busy engines at ``rate`` (per-message cost only)."""
    msgs = engines * rate
    return {role: us * msgs / 1e6 for role, us in result["cpu_us_per_relayed_msg"].items()}
