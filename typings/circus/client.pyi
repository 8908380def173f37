from collections.abc import Mapping
from typing import Any

import zmq

class CircusClient:
    endpoint: str
    def __init__(
        self,
        context: zmq.Context[Any] | None = None,
        endpoint: str = ...,
        timeout: float = 5.0,
        ssh_server: str | None = None,
        ssh_keyfile: str | None = None,
    ) -> None: ...
    def stop(self) -> None: ...
    def send_message(self, command: str, **props: Any) -> dict[str, Any]: ...
    def call(self, cmd: Mapping[str, Any]) -> dict[str, Any]: ...
