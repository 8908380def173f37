"""The worker command template: parsed once, rendered into an argv list with validated values.

The template is trusted configuration; the values put into it (worker id, component, namespace...)
come from decisions and watcher names, so each one is checked against a strict pattern and lands
inside a single argv item. Nothing is ever given to a shell, so no value can add a command.
"""

from __future__ import annotations

import re
import shlex
import string
from dataclasses import dataclass

PLACEHOLDERS = frozenset({"worker_id", "component", "namespace", "nats_url", "index", "gpus"})
_TOKEN = re.compile(r"^[A-Za-z0-9_\-]{1,128}$")
_URL = re.compile(r"^[A-Za-z0-9+.:/@,_\-\[\]%=?&]{1,1024}$")
_GPUS = re.compile(r"^[0-9,]{0,1024}$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CHECKS: dict[str, re.Pattern[str]] = {
    "worker_id": _TOKEN,
    "component": _TOKEN,
    "namespace": _TOKEN,
    "index": re.compile(r"^[0-9]{1,6}$"),
    "nats_url": _URL,
    "gpus": _GPUS,
}


class TemplateError(ValueError):
    """A template or a value that cannot be used (permanent: retrying will not help)."""


def _fields(item: str) -> set[str]:
    names: set[str] = set()
    for _lit, name, spec, conv in string.Formatter().parse(item):
        if name is None:
            continue
        if name not in PLACEHOLDERS:
            raise TemplateError(f"unknown placeholder {{{name}}}; allowed: {sorted(PLACEHOLDERS)}")
        if spec or conv:
            raise TemplateError(f"placeholder {{{name}}} must not carry a format spec or conversion")
        names.add(name)
    return names


def check_value(name: str, value: str) -> str:
    pattern = _CHECKS[name]
    if not pattern.match(value) or "$(" in value or "((" in value:
        raise TemplateError(f"{name} {value!r} is not allowed in a worker command")
    return value


@dataclass(frozen=True)
class WorkerCommand:
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, template: str, env_items: list[str] | None = None) -> WorkerCommand:
        try:
            argv = tuple(shlex.split(template))
        except ValueError as exc:
            raise TemplateError(f"worker_cmd cannot be split: {exc}") from None
        if not argv:
            raise TemplateError("worker_cmd is empty")
        if _fields(argv[0]):
            raise TemplateError("the executable (first word of worker_cmd) must not hold placeholders")
        for item in argv[1:]:
            _fields(item)
        env: list[tuple[str, str]] = []
        for item in env_items or []:
            key, sep, value = item.partition("=")
            if not sep or not _ENV_KEY.match(key):
                raise TemplateError(f"worker_env item {item!r} must be KEY=VALUE")
            if key == "CUDA_VISIBLE_DEVICES":
                raise TemplateError("CUDA_VISIBLE_DEVICES is set by the actuator from gpu_pool")
            _fields(value)
            env.append((key, value))
        return cls(argv=argv, env=tuple(env))

    def render(self, values: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """(argv, env) for one worker; every value is validated first."""
        missing = PLACEHOLDERS - set(values)
        if missing:
            raise TemplateError(f"missing values for {sorted(missing)}")
        checked = {k: check_value(k, v) for k, v in values.items() if k in PLACEHOLDERS}
        argv = [self.argv[0], *(item.format(**checked) for item in self.argv[1:])]
        env = {k: v.format(**checked) for k, v in self.env}
        return argv, env
