"""ZMQ PUB of ForwardPassMetrics, framed as the reference engines do (docs/concepts/design.md, "Encoding")."""

from __future__ import annotations

import zmq

from planner_proto import ForwardPassMetrics, encode_fpm, pack_frames


class FpmPublisher:
    """Binds ``tcp://{host}:{port}`` (port 0 = a free one); each message gets the next sequence."""

    def __init__(self, host: str, port: int, sndhwm: int = 100_000) -> None:
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.PUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SNDHWM, sndhwm)
        if port == 0:
            port = self._sock.bind_to_random_port(f"tcp://{host}")
        else:
            self._sock.bind(f"tcp://{host}:{port}")
        self.port = port
        self.endpoint = f"tcp://{host}:{port}"
        self.sequence = 0
        """Sequence of the next message (the first one sent is 0)."""

    def send(self, fpm: ForwardPassMetrics) -> None:
        # A PUB socket never blocks: past the high-water mark messages are dropped, as in the engines.
        self._sock.send_multipart(pack_frames(self.sequence, encode_fpm(fpm)), flags=zmq.NOBLOCK)
        self.sequence += 1

    def close(self) -> None:
        self._sock.close(linger=0)
