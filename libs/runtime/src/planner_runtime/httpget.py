"""A blocking HTTP GET with a timeout that never raises: for probing engines (health, metrics, props)
from a thread."""

from __future__ import annotations

import urllib.error
import urllib.request


def get(url: str, timeout_s: float = 2.0) -> tuple[int, bytes]:
    """``(status, body)`` of a GET; status 0 when nothing answered (or the URL is not one)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError, ValueError):
        return 0, b""
