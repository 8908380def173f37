"""Structured logs: one JSON object per line on stderr, secrets masked.

Use ``log = get_logger(__name__)`` then ``log.info("engine_added", worker_id=w)``: the event is a
stable snake_case word, details go in fields. Values registered with :func:`register_secret` (NATS
passwords, tokens) are replaced by ``***`` wherever they appear.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_SECRETS: set[str] = set()


def register_secret(value: str) -> None:
    if value and len(value) >= 3:
        _SECRETS.add(value)


def redact(text: str) -> str:
    for s in _SECRETS:
        if s in text:
            text = text.replace(s, "***")
    return text


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(out, default=str))


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None) or {}
        kv = " ".join(f"{k}={v}" for k, v in fields.items())
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        line = f"{stamp} {record.levelname[0]} {record.name}: {record.getMessage()} {kv}".rstrip()
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return redact(line)


class Log:
    """A logger taking keyword fields: ``log.warning("bad_message", subject=s, reason=r)``."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def _log(self, level: int, event: str, exc_info: bool, fields: dict[str, Any]) -> None:
        if self._logger.isEnabledFor(level):
            self._logger.log(level, event, extra={"fields": fields}, exc_info=exc_info)

    def debug(self, event: str, **fields: Any) -> None:
        self._log(logging.DEBUG, event, False, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log(logging.INFO, event, False, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log(logging.WARNING, event, False, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._log(logging.ERROR, event, False, fields)

    def exception(self, event: str, **fields: Any) -> None:
        self._log(logging.ERROR, event, True, fields)


def get_logger(name: str) -> Log:
    return Log(logging.getLogger(name))


def configure_logging(level: str = "info", json_lines: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # nats-py logs every reconnect attempt at error level; our callbacks report those once.
    logging.getLogger("nats").setLevel(logging.CRITICAL)
