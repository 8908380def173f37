"""An embedded NATS JetStream cluster (``nats-server`` processes routed on loopback) for the demo, the
chaos run and the tests.

Each node is a :class:`~planner_runtime.natsd.NatsServer` with its own client port, cluster (route)
port, server name and store directory; every node lists every other node's route, so any two can
form the full mesh. JetStream clustering needs at least 3 nodes for replicated streams (R3 keeps a
quorum of 2 when one node is gone).

Faults (for chaos and tests), all on one node ``i``:

- :meth:`NatsCluster.kill` -- SIGKILL, as a crash; :meth:`NatsCluster.start_node` brings it back on the
  same ports and store (JetStream catches it up from the others).
- :meth:`NatsCluster.partition` -- the node restarts with its route listener on another port and
  routes to ports nobody listens on: it is alive and serves the clients that (re)connect to it, but it is cut off from the other
  nodes (they keep dialling its old route port in vain), so it has no JetStream quorum.
  :meth:`NatsCluster.heal` restarts it with its routes back. (A restart, not a firewall: the clients
  it had reconnect, to it or to another node, as after a short network blip.)
- :meth:`NatsCluster.restart_all` -- every node stopped, then all started again (store kept).
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from planner_runtime.natsd import NatsServer
from planner_runtime.processes import free_port

CLUSTER_NAME = "planner"


class NatsCluster:
    def __init__(self, size: int = 3, store_dir: str | Path | None = None, host: str = "127.0.0.1") -> None:
        if size < 1:
            raise ValueError("a cluster has at least one node")
        self.size = size
        self.host = host
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if store_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="planner-nats-cluster-")
            store_dir = self._tmp.name
        self.store_dir = Path(store_dir)
        self.client_ports = [free_port(host) for _ in range(size)]
        self.route_ports = [free_port(host) for _ in range(size)]
        self.monitor_ports = [free_port(host) for _ in range(size)]
        self.partitioned: set[int] = set()
        self.nodes = [self._node(i, routed=True) for i in range(size)]

    def name(self, i: int) -> str:
        return f"n{i}"

    def _node(self, i: int, routed: bool) -> NatsServer:
        route_port = self.route_ports[i] if routed else free_port(self.host)
        args = ["-n", self.name(i), "-m", str(self.monitor_ports[i])]
        if self.size > 1:
            args += ["--cluster_name", CLUSTER_NAME, "--cluster", f"nats://{self.host}:{route_port}"]
            if routed:
                routes = [f"nats://{self.host}:{p}" for j, p in enumerate(self.route_ports) if j != i]
            else:  # a clustered JetStream node must have routes: give it ones that lead nowhere
                routes = [f"nats://{self.host}:{free_port(self.host)}" for j in range(self.size) if j != i]
            args += ["--routes", ",".join(routes)]
        return NatsServer(
            port=self.client_ports[i],
            store_dir=self.store_dir / self.name(i),
            host=self.host,
            extra_args=args,
        )

    @property
    def urls(self) -> list[str]:
        return [f"nats://{self.host}:{p}" for p in self.client_ports]

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (what ``nats_url`` takes)."""
        return ",".join(self.urls)

    def index_of(self, url_or_port: str | int) -> int | None:
        """The node serving a client URL or port (e.g. a connection's ``connected_url``)."""
        port = url_or_port if isinstance(url_or_port, int) else int(str(url_or_port).rsplit(":", 1)[1])
        return self.client_ports.index(port) if port in self.client_ports else None

    def start(self, timeout_s: float = 30.0) -> NatsCluster:
        """Start every node and wait until JetStream is usable on each (meta leader elected)."""
        for node in self.nodes:
            node.start(timeout_s)
        self.wait_healthy(timeout_s)
        return self

    def healthy(self, i: int) -> bool:
        """Node ``i`` answers ``/healthz`` with JetStream current (its ``/healthz`` says ok)."""
        try:
            url = f"http://{self.host}:{self.monitor_ports[i]}/healthz"
            with urllib.request.urlopen(url, timeout=1.0) as r:
                return bool(r.status == 200 and json.loads(r.read()).get("status") == "ok")
        except (OSError, ValueError):
            return False

    def wait_healthy(self, timeout_s: float = 30.0, nodes: list[int] | None = None) -> bool:
        """True once every node of ``nodes`` (default: all running ones) is healthy."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            want = nodes if nodes is not None else [i for i, n in enumerate(self.nodes) if n.running]
            if all(self.healthy(i) for i in want):
                return True
            time.sleep(0.1)
        return False

    def start_node(self, i: int, timeout_s: float = 20.0) -> None:
        self.nodes[i].start(timeout_s)

    def kill(self, i: int) -> None:
        """SIGKILL node ``i``."""
        self.nodes[i].kill()

    def stop_node(self, i: int) -> None:
        self.nodes[i].stop()

    def partition(self, i: int, timeout_s: float = 20.0) -> None:
        """Cut node ``i`` off from the others (it keeps serving its clients)."""
        self.nodes[i].stop()
        self.nodes[i] = self._node(i, routed=False)
        self.nodes[i].start(timeout_s)
        self.partitioned.add(i)

    def heal(self, i: int, timeout_s: float = 20.0) -> None:
        """Give node ``i`` its routes back."""
        self.nodes[i].stop()
        self.nodes[i] = self._node(i, routed=True)
        self.nodes[i].start(timeout_s)
        self.partitioned.discard(i)

    def restart_all(self, timeout_s: float = 30.0) -> None:
        for node in self.nodes:
            node.stop()
        self.start(timeout_s)

    def running(self) -> list[bool]:
        return [n.running for n in self.nodes]

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
