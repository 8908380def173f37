"""FPM relay speed against the raw nats-py ceiling, on this machine, in one run.

(a) raw ceiling: a nats-py publisher process blasts ~430-byte FPM payloads to the NATS subscriber in
    this process (the same subscriber measures everything).
(b) relay end to end: a ZMQ PUB process (the "engine") -> the relay service in its own process (default
    settings: validation and sharding on) -> NATS -> the same subscriber.
(c) relay, backlog: as (b), but the relay is paused (SIGSTOP) while the engine sends, and resumed when
    the clock starts. On this 2-core machine the engine emulator's sending otherwise takes CPU from the
    relay and the subscriber, which a real engine on its own host does not; (b) then measures the
    sharing of 2 cores by 4 busy processes as much as the relay. Both are printed against (a).
(d) with --naive: a relay written the straightforward way (``await recv_multipart()``, the same checks,
    ``await publish()`` per message) in place of the relay service, throughput only.
Throughput is counted at the subscriber (first to last message of a blast). Latency runs send at a
fixed rate; each payload is a valid FPM whose ``counter_id`` indexes the send-time table written by
the sending process (CLOCK_MONOTONIC is shared by all processes), so latency = receive - send.
"Added" latency is the relay path minus the raw NATS path at the same rate and percentile.

After a warm-up, (a) and (b) run ``--reps`` times, alternating, so that both see the same load; the
table shows the median and the range over the repetitions, and the ratio is the median of the
per-repetition ratios. CPU per message of every process on the path is measured from /proc during
the throughput blasts; on a shared machine the ratio follows the total CPU of each path.

    uv run python benchmarks/bench_relay.py [--n 100000] [--reps 5] [--naive] [--json]
"""

from __future__ import annotations

import argparse
import array
import asyncio
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from planner_proto import ForwardPassMetrics, QueuedRequestMetrics, ScheduledRequestMetrics, encode_fpm

SUBJECT = "planner.bench.fpm.agg.bench"
_DEC = msgspec.msgpack.Decoder(ForwardPassMetrics)


def payload(counter: int) -> bytes:
    return encode_fpm(
        ForwardPassMetrics(
            worker_id="bench",
            counter_id=counter,
            wall_time=0.0123,
            scheduled_requests=ScheduledRequestMetrics(1, 2000, 3.5, 400, 50, 60000, 123.4),
            queued_requests=QueuedRequestMetrics(2, 3000, 4.5, 5, 6000, 7.5),
        )
    )


# ---- sender processes: read "run START N RATE FILE" lines on stdin, answer "done" -------------------
def paced_send(send: Any, start: int, n: int, rate: float, out: str) -> None:
    """``send(i)`` for i in 0..n-1, at ``rate`` per second (0: as fast as possible), writing the
    send times to ``out``. Everything sent is built before the clock starts."""
    times = array.array("q", bytes(8 * n))
    clock = time.monotonic_ns
    t0 = clock()
    for i in range(n):
        if rate > 0:
            target = t0 + int(i * 1e9 / rate)
            while (now := clock()) < target:
                if target - now > 300_000:
                    time.sleep((target - now - 200_000) / 1e9)
        times[i] = clock()
        send(i)
    Path(out).write_bytes(times.tobytes())


def zmq_sender(endpoint: str) -> None:
    import zmq
    from zmq.backend import Socket as BackendSocket

    from planner_proto import pack_frames

    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.bind(endpoint)
    # The emulated engine sends as cheaply as pyzmq allows, as the raw path's sender does with nats-py:
    # the compiled send, not pyzmq's Python wrapper (which handles routing ids and groups first and
    # costs 1.5 us of the 3.5 us of three sends here). The relay's receives are the compiled ones too.
    zsend, more = BackendSocket.send.__get__(sock), zmq.SNDMORE
    warm = 0
    joined = False
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], 0.01 if not joined else None)
        if not ready:  # until the first run, a heartbeat so that the relay's SUB can join
            warm += 1
            sock.send_multipart(pack_frames(warm, payload(10**12 + warm)))
            continue
        line = sys.stdin.readline().split()
        if not line or line[0] == "quit":
            return
        start, n, rate, out = int(line[1]), int(line[2]), float(line[3]), line[4]
        joined = True
        seq0 = warm + 1
        payloads = [payload(start + i) for i in range(n)]
        seqs = [(seq0 + i).to_bytes(8, "big") for i in range(n)]

        def send(i: int, payloads: list[bytes] = payloads, seqs: list[bytes] = seqs) -> None:
            # three sends: pyzmq's send_multipart costs ~10 us per message here, more than the relay,
            # and three of the wrapper's sends 3.5 us
            zsend(b"", more)
            zsend(seqs[i], more)
            zsend(payloads[i])

        paced_send(send, start, n, rate, out)
        warm = seq0 + n
        print("done", flush=True)


def nats_sender(url: str) -> None:
    import nats

    async def main() -> None:
        nc = await nats.connect(url)
        loop = asyncio.get_running_loop()
        while True:
            line = (await loop.run_in_executor(None, sys.stdin.readline)).split()
            if not line or line[0] == "quit":
                break
            start, n, rate, out = int(line[1]), int(line[2]), float(line[3]), line[4]
            # Publishing is async: yield now and then so that nats-py's flusher runs.
            payloads = [payload(start + i) for i in range(n)]
            times = array.array("q", bytes(8 * n))
            t0 = time.monotonic_ns()
            for i in range(n):
                if rate > 0:
                    target = t0 + int(i * 1e9 / rate)
                    while (now := time.monotonic_ns()) < target:
                        await asyncio.sleep(max(0.0, (target - now - 200_000) / 1e9))
                times[i] = time.monotonic_ns()
                await nc.publish(SUBJECT, payloads[i])
                if rate == 0 and i % 512 == 0:
                    await asyncio.sleep(0)
            await nc.flush()
            await asyncio.to_thread(Path(out).write_bytes, times.tobytes())
            print("done", flush=True)
        await nc.close()

    asyncio.run(main())


def naive_relay(endpoint: str, url: str) -> None:
    """(d), with --naive: the straightforward relay, one ``await`` per receive and per publish, doing
    the same checks as the relay (frame count, sequence, ``decode_fpm``)."""
    import nats
    import zmq
    import zmq.asyncio

    from planner_proto import DecodeError, decode_fpm

    async def main() -> None:
        nc = await nats.connect(url)
        sock = zmq.asyncio.Context().socket(zmq.SUB)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(endpoint)
        last, gaps = -1, 0
        while True:
            frames = await sock.recv_multipart()
            if len(frames) != 3 or len(frames[1]) != 8:
                continue
            seq = int.from_bytes(frames[1], "big")
            if last >= 0 and seq > last + 1:
                gaps += seq - last - 1
            last = seq
            try:
                decode_fpm(frames[2])
            except DecodeError:
                continue
            await nc.publish(SUBJECT, frames[2])

    asyncio.run(main())


# ---- the measuring side ---------------------------------------------------------------------------
class Sink:
    def __init__(self) -> None:
        self.count = 0
        self.first_ns = 0
        self.last_ns = 0
        self.decode = False
        self.recv: dict[int, int] = {}
        self.errors: list[str] = []

    async def cb(self, msg: Any) -> None:
        now = time.monotonic_ns()
        if self.count == 0:
            self.first_ns = now
        self.count += 1
        self.last_ns = now
        if self.decode:
            self.recv[_DEC.decode(msg.data).counter_id] = now

    async def on_error(self, exc: Exception) -> None:
        self.errors.append(repr(exc))  # e.g. slow consumer: the numbers of this run are suspect

    def reset(self, decode: bool) -> None:
        self.count, self.first_ns, self.last_ns, self.decode, self.recv = 0, 0, 0, decode, {}


class Sender:
    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    async def run(self, start: int, n: int, rate: float, out: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"run {start} {n} {rate} {out}\n")
        self.proc.stdin.flush()
        line = await asyncio.to_thread(self.proc.stdout.readline)
        assert line.strip() == "done", line

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all threads (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def count_in_file(path: str, text: str) -> int:
    return Path(path).read_text().count(text)


class Route:
    """One path under test: the sending process and the processes whose CPU is accounted to it
    (``hop``: the process between sender and NATS, which a backlog run pauses, if any)."""

    def __init__(self, name: str, sender: Sender, pids: dict[str, int], hop: int | None = None) -> None:
        self.name = name
        self.sender = sender
        self.pids = pids
        self.hop = hop


async def wait_count(sink: Sink, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    idle_since = time.monotonic()
    last = -1
    while sink.count < n and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        if sink.count != last:
            last, idle_since = sink.count, time.monotonic()
        elif time.monotonic() - idle_since > 3.0:
            break  # nothing more is coming


async def throughput(sink: Sink, path: Route, n: int, tmp: str, backlog: bool = False) -> dict[str, Any]:
    """Blast ``n`` messages. ``backlog``: the hop is paused (SIGSTOP) while the engine sends them, and
    the clock runs from its resumption: what the relay moves when the engine's sending does not share
    the CPU with it (as in production, where engines run on their own hosts)."""
    hop = path.hop if backlog else None
    if backlog and hop is None:
        raise ValueError("a backlog run needs a hop to pause")
    sink.reset(decode=False)
    if hop is not None:
        os.kill(hop, signal.SIGSTOP)
        try:
            await path.sender.run(0, n, 0, f"{tmp}/tp.bin")
            await asyncio.sleep(0.3)  # the engine's ZMQ IO thread has queued what it sent
        except BaseException:
            os.kill(hop, signal.SIGCONT)
            raise
        assert sink.count == 0, "the relay relayed while stopped"
    cpu0 = {k: cpu_s(pid) for k, pid in path.pids.items()}
    if hop is not None:
        os.kill(hop, signal.SIGCONT)
    else:
        await path.sender.run(0, n, 0, f"{tmp}/tp.bin")
    await wait_count(sink, n, 120)
    cpu = {k: (cpu_s(pid) - cpu0[k]) / n * 1e6 for k, pid in path.pids.items()}
    span_s = max(1e-9, (sink.last_ns - sink.first_ns) / 1e9)
    return {"msgs_per_s": (sink.count - 1) / span_s, "received": sink.count, "sent": n, "cpu_us_per_msg": cpu}


async def latency(sink: Sink, path: Route, rate: float, seconds: float, tmp: str) -> dict[str, Any]:
    n = int(rate * seconds)
    sink.reset(decode=True)
    out = f"{tmp}/lat.bin"
    cpu0 = {k: cpu_s(pid) for k, pid in path.pids.items()}
    await path.sender.run(0, n, rate, out)
    await wait_count(sink, n, 30)
    cpu = {k: (cpu_s(pid) - cpu0[k]) / n * 1e6 for k, pid in path.pids.items()}
    sent = array.array("q")
    sent.frombytes(await asyncio.to_thread(Path(out).read_bytes))
    lat_ms = sorted((sink.recv[i] - t) / 1e6 for i, t in enumerate(sent) if i in sink.recv)
    if len(lat_ms) < 2:
        return {"received": len(lat_ms), "sent": n}
    q = statistics.quantiles(lat_ms, n=100, method="inclusive")
    return {
        "p50_ms": q[49],
        "p99_ms": q[98],
        "max_ms": lat_ms[-1],
        "received": len(lat_ms),
        "sent": n,
        "cpu_us_per_msg": cpu,
    }


async def one_rep(sink: Sink, path: Route, n: int, tmp: str) -> dict[str, Any]:
    backlog = {"throughput_backlog": await throughput(sink, path, n, tmp, True)} if path.hop else {}
    return {
        **backlog,
        "throughput": await throughput(sink, path, n, tmp),
        "latency_1k": await latency(sink, path, 1_000, 2.0, tmp),
        "latency_10k": await latency(sink, path, 10_000, 1.0, tmp),
    }


async def bench(n: int, reps: int, relay_flags: list[str], naive: bool = False) -> dict[str, Any]:
    import nats
    import zmq  # noqa: F401  (fail early when missing)

    from planner_runtime.natsd import NatsServer
    from planner_runtime.processes import free_port

    out: dict[str, Any] = {
        "payload_bytes": len(payload(123456)),
        "cpus": os.cpu_count(),
        "n": n,
        "reps": reps,
        "loadavg_start": os.getloadavg(),
        "relay_flags": relay_flags,
    }
    sink = Sink()
    with tempfile.TemporaryDirectory() as tmp, NatsServer(log_file=f"{tmp}/nats.log") as server:
        nc = await nats.connect(server.url, error_cb=sink.on_error)
        await nc.subscribe(SUBJECT, cb=sink.cb, pending_msgs_limit=-1, pending_bytes_limit=-1)
        await nc.flush()
        server_pid = server._proc.pid if server._proc is not None else -1  # for CPU accounting
        me = os.getpid()

        endpoint = f"tcp://127.0.0.1:{free_port()}"
        raw_sender = Sender(["--role", "nats", "--url", server.url])
        engine = Sender(["--role", "zmq", "--endpoint", endpoint])
        relay = subprocess.Popen(  # noqa: ASYNC220  (started once, before anything is timed)
            [sys.executable, "-m", "planner_fpm_relay", "--nats-url", server.url, "--namespace", "bench",
             "--static-engines", f"agg:bench={endpoint}", "--no-watch-engines", "--zmq-rcvhwm", "0",
             "--log-level", "warning", *relay_flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        raw = Route(
            "raw", raw_sender, {"sender": raw_sender.proc.pid, "nats-server": server_pid, "subscriber": me}
        )
        via = Route(
            "relay",
            engine,
            {"sender": engine.proc.pid, "relay": relay.pid, "nats-server": server_pid, "subscriber": me},
            hop=relay.pid,
        )
        extra: list[Sender] = []
        naive_proc: subprocess.Popen[bytes] | None = None
        try:
            await heartbeats(sink, relay, "relay")
            for path in (raw, via):  # warm-up: connections, caches, the relay's first batches
                await throughput(sink, path, min(n, 20_000), tmp)
                await latency(sink, path, 1_000, 0.5, tmp)
            slow_path: Route | None = None
            if naive:  # its own engine: a second SUB on the same PUB would publish everything twice
                naive_endpoint = f"tcp://127.0.0.1:{free_port()}"
                extra.append(Sender(["--role", "zmq", "--endpoint", naive_endpoint]))
                naive_proc = subprocess.Popen(  # noqa: ASYNC220
                    [
                        sys.executable,
                        __file__,
                        "--role",
                        "naive",
                        "--endpoint",
                        naive_endpoint,
                        "--url",
                        server.url,
                    ]
                )
                pids = {
                    "sender": extra[0].proc.pid,
                    "relay": naive_proc.pid,
                    "nats-server": server_pid,
                    "subscriber": me,
                }
                slow_path = Route("naive", extra[0], pids)
                await heartbeats(sink, naive_proc, "naive relay")
                await throughput(sink, slow_path, min(n, 20_000), tmp)
            runs: dict[str, list[dict[str, Any]]] = {"raw": [], "relay": []}
            for _ in range(reps):
                for path in (raw, via):
                    runs[path.name].append(await one_rep(sink, path, n, tmp))
                if slow_path is not None:
                    runs.setdefault("naive", []).append(
                        {"throughput": await throughput(sink, slow_path, n, tmp)}
                    )
        finally:
            for sender in extra:
                sender.close()
            if naive_proc is not None:
                naive_proc.kill()
                naive_proc.wait()
            raw_sender.close()
            engine.close()
            relay.terminate()
            try:
                relay.wait(20)
            except subprocess.TimeoutExpired:
                relay.kill()
                relay.wait()
            await nc.close()
        slow = count_in_file(f"{tmp}/nats.log", "Slow Consumer")
    out["loadavg_end"] = os.getloadavg()
    out["runs"] = runs
    out["nats_slow_consumer_events"] = slow
    out["subscriber_errors"] = sink.errors
    out["summary"] = summarize(runs)
    return out


async def heartbeats(sink: Sink, proc: subprocess.Popen[bytes], what: str) -> None:
    """Until an engine's heartbeats flow through ``proc`` (its SUB has joined the engine's PUB)."""
    sink.reset(decode=False)
    deadline = time.monotonic() + 30
    while sink.count < 5 and time.monotonic() < deadline and proc.poll() is None:
        await asyncio.sleep(0.05)
    if sink.count < 5:
        raise RuntimeError(f"the {what} never relayed the engine's heartbeats")


def spread(values: list[float]) -> dict[str, float]:
    vals = [v for v in values if v == v]
    if not vals:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan")}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def cpu_spread(rs: list[dict[str, Any]], key: str = "throughput") -> dict[str, dict[str, float]]:
    """Per process, the spread of CPU per message over the repetitions ``rs`` of blast ``key``."""
    return {k: spread([r[key]["cpu_us_per_msg"][k] for r in rs]) for k in rs[0][key]["cpu_us_per_msg"]}


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    raw, rel = runs["raw"], runs["relay"]
    nan = float("nan")
    s: dict[str, Any] = {
        "raw_msgs_per_s": spread([r["throughput"]["msgs_per_s"] for r in raw]),
        "relay_msgs_per_s": spread([r["throughput"]["msgs_per_s"] for r in rel]),
        "ratio": spread(
            [b["throughput"]["msgs_per_s"] / a["throughput"]["msgs_per_s"] for a, b in zip(raw, rel, strict=True)]
        ),
        "relay_backlog_msgs_per_s": spread([r["throughput_backlog"]["msgs_per_s"] for r in rel]),
        "ratio_backlog": spread(
            [b["throughput_backlog"]["msgs_per_s"] / a["throughput"]["msgs_per_s"] for a, b in zip(raw, rel, strict=True)]
        ),
        "relay_lost": sum(
            r[k]["sent"] - r[k]["received"] for r in rel for k in ("throughput", "throughput_backlog")
        ),
        "cpu_us_per_msg": {"raw": cpu_spread(raw), "relay": cpu_spread(rel)},
        "cpu_us_per_msg_backlog": cpu_spread(rel, "throughput_backlog"),
    }  # fmt: skip
    for rate in ("1k", "10k"):
        key = f"latency_{rate}"
        for q in ("p50_ms", "p99_ms"):
            s[f"raw_{rate}_{q}"] = spread([r[key].get(q, nan) for r in raw])
            s[f"relay_{rate}_{q}"] = spread([r[key].get(q, nan) for r in rel])
            s[f"added_{rate}_{q}"] = spread(
                [b[key].get(q, nan) - a[key].get(q, nan) for a, b in zip(raw, rel, strict=True)]
            )
        s[f"relay_{rate}_cpu_us_per_msg"] = spread(
            [r[key].get("cpu_us_per_msg", {}).get("relay", nan) for r in rel]
        )
        s[f"relay_{rate}_complete"] = all(r[key]["received"] == r[key]["sent"] for r in rel)
    if "naive" in runs:
        nv = runs["naive"]
        s["naive_msgs_per_s"] = spread([r["throughput"]["msgs_per_s"] for r in nv])
        s["cpu_us_per_msg_naive"] = cpu_spread(nv)
    s["targets"] = {
        "throughput ratio >= 0.8, engine sending live on the same 2 cores (median)": s["ratio"]["median"]
        >= 0.8,
        "throughput ratio >= 0.8, engine's sends queued beforehand (median)": s["ratio_backlog"]["median"]
        >= 0.8,
        "added p99 <= 3 ms at 1k/s (median)": s["added_1k_p99_ms"]["median"] <= 3.0,
    }
    return s


def fmt(sp: dict[str, float], unit: str = "", digits: int = 2, scale: float = 1.0) -> str:
    m, lo, hi = (sp[k] * scale for k in ("median", "min", "max"))
    return f"{m:>9,.{digits}f}{unit} [{lo:,.{digits}f} .. {hi:,.{digits}f}]"


def report(res: dict[str, Any]) -> None:
    s = res["summary"]
    la0, la1 = res["loadavg_start"], res["loadavg_end"]
    flags = f", relay flags {' '.join(res['relay_flags'])}" if res["relay_flags"] else ""
    print(f"payload {res['payload_bytes']} B, {res['cpus']} CPUs, {res['reps']} reps of {res['n']:,} msgs;"
          f" load average {la0[0]:.2f} -> {la1[0]:.2f} (1 min){flags}")  # fmt: skip
    print("median [min .. max] over the repetitions")
    print(f"(a) raw nats-py ceiling        {fmt(s['raw_msgs_per_s'], ' msg/s', 0)}")
    print(f"(b) relay end to end           {fmt(s['relay_msgs_per_s'], ' msg/s', 0)}"
          f"   lost {s['relay_lost']}")  # fmt: skip
    print(f"    ratio (b)/(a)              {fmt(s['ratio'])}   target >= 0.8")
    print(f"(c) relay, backlog             {fmt(s['relay_backlog_msgs_per_s'], ' msg/s', 0)}"
          "   (engine's sends queued while the relay was paused)")  # fmt: skip
    print(f"    ratio (c)/(a)              {fmt(s['ratio_backlog'])}   target >= 0.8")
    cpus = {"raw": s["cpu_us_per_msg"]["raw"], "relay": s["cpu_us_per_msg"]["relay"],
            "backlog": s["cpu_us_per_msg_backlog"]}  # fmt: skip
    if "naive_msgs_per_s" in s:
        print(f"(d) naive await loop           {fmt(s['naive_msgs_per_s'], ' msg/s', 0)}"
              "   (one await per receive and per publish, same checks)")  # fmt: skip
        cpus["naive"] = s["cpu_us_per_msg_naive"]
        ratio = s["cpu_us_per_msg_naive"]["relay"]["median"] / s["cpu_us_per_msg"]["relay"]["relay"]["median"]
        print(f"    relay-hop CPU per message, naive / relay: {ratio:.1f}x")
    for name, cpu in cpus.items():
        parts = ", ".join(f"{k} {v['median']:.1f}" for k, v in cpu.items())
        total = sum(v["median"] for v in cpu.values())
        print(f"    CPU us/msg, {name:7s}     {parts} (total {total:.1f})")
    for rate in ("1k", "10k"):
        for q in ("p50_ms", "p99_ms"):
            print(f"latency @{rate:>3}/s {q[:3]}  relay {fmt(s[f'relay_{rate}_{q}'], ' ms', 3)}"
                  f" | raw {fmt(s[f'raw_{rate}_{q}'], ' ms', 3)} | added {fmt(s[f'added_{rate}_{q}'], ' ms', 3)}")  # fmt: skip
        print(f"    relay CPU per msg at {rate}/s {fmt(s[f'relay_{rate}_cpu_us_per_msg'], ' us', 1)}")
        if not s[f"relay_{rate}_complete"]:
            print(f"    relay fell behind at {rate}/s: some messages did not arrive in time")
    if res["nats_slow_consumer_events"] or res["subscriber_errors"]:
        print(f"WARNING: slow consumer events {res['nats_slow_consumer_events']}, subscriber errors"
              f" {res['subscriber_errors'][:3]}: this run's numbers are suspect")  # fmt: skip
    for target, ok in s["targets"].items():
        print(f"{'PASS' if ok else 'FAIL'}  {target}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000, help="messages per throughput blast")
    p.add_argument("--reps", type=int, default=5, help="repetitions of (a) and (b), alternating")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--relay-flag",
        action="append",
        default=[],
        help="extra relay flag, e.g. --relay-flag=--batch-window-s=0",
    )
    p.add_argument("--naive", action="store_true", help="also measure (d), a naive await-per-message relay")
    p.add_argument("--role", choices=["zmq", "nats", "naive"], help=argparse.SUPPRESS)
    p.add_argument("--endpoint", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.role == "zmq":
        zmq_sender(a.endpoint)
        return
    if a.role == "nats":
        nats_sender(a.url)
        return
    if a.role == "naive":
        naive_relay(a.endpoint, a.url)
        return
    res = asyncio.run(bench(a.n, a.reps, a.relay_flag, a.naive))
    if a.json:
        print(json.dumps(res, indent=2))
        return
    report(res)


if __name__ == "__main__":
    main()
