"""Service settings: one frozen struct per service, read from flags, ``PLANNER_*`` env and YAML.

Precedence, lowest first: field defaults, the YAML file (``--config FILE`` or ``PLANNER_CONFIG``),
environment variables ``PLANNER_<FIELD>``, command-line flags ``--<field-with-dashes>``. The result
is validated once by msgspec (types and ``Meta`` constraints) and by the struct's ``__post_init__``;
errors name the field, its flag and env var, and the allowed range.

A field whose type is a dataclass is a *group*: its fields are settings of their own, with flat
names (``ttft_target_ms``, not ``policy_config.ttft_target_ms``), gathered into the group when the
settings are loaded. The decider embeds the policy's knobs (``PolicyConfig``) this way, so they are
declared once, in the policy.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import os
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import msgspec
import yaml
from msgspec import Meta

S = TypeVar("S", bound="BaseSettings")

SECRET_FIELDS = re.compile(r"(^|_)(password|token|secret|seed)$", re.I)


class SettingsError(ValueError):
    """Settings that cannot be used; the message names the field and what is allowed."""


Port = Annotated[int, Meta(ge=0, le=65535)]


class BaseSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What every service has: namespace, NATS connection and auth, HTTP port, logging."""

    namespace: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_\-]+$")] = "default"
    """One planner deployment: its services talk on ``{subject_prefix}.{namespace}.*`` subjects."""
    subject_prefix: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_\-]+$")] = "planner"
    """First token of every subject and key (two planners can share one NATS with different prefixes)."""
    nats_url: str = "nats://127.0.0.1:4222"
    """Comma-separated server URLs (any nodes of a cluster: the client learns the others from them and
    fails over to another node when the one it is on goes away)."""
    nats_replicas: Annotated[int, Meta(ge=0, le=5)] = 0
    """Replicas of the JetStream streams and KV buckets this service creates; 0 takes it from the
    cluster size seen at connect (3 on a cluster of 3 or more nodes, else the node count)."""
    nats_user: str = ""
    """NATS user/password auth (with ``nats_password``)."""
    nats_password: str = ""
    nats_token: str = ""
    """NATS token auth."""
    nats_creds_file: str = ""
    """NATS decentralised auth: a ``.creds`` file (JWT + nkey seed)."""
    nats_nkey_seed_file: str = ""
    """NATS nkey auth: a file holding the seed."""
    nats_tls_ca_file: str = ""
    """TLS to NATS: the CA bundle (with ``nats_tls_cert_file``/``nats_tls_key_file`` for mutual TLS)."""
    nats_tls_cert_file: str = ""
    nats_tls_key_file: str = ""
    nats_connect_timeout_s: Annotated[float, Meta(gt=0, le=300)] = 5.0
    """How long the first connection to NATS may take before the service gives up."""
    http_host: str = "127.0.0.1"
    """Address /metrics and /healthz listen on (0.0.0.0 in a container)."""
    http_port: Port = 0
    """Port for /metrics and /healthz; 0 picks a free one (logged at start)."""
    log_level: typing.Literal["debug", "info", "warning", "error"] = "info"
    """Lowest level written to stderr."""
    log_json: bool = True
    """One JSON object per log line (false: human-readable lines)."""
    drain_timeout_s: Annotated[float, Meta(gt=0, le=3600)] = 30.0
    """How long SIGTERM waits for in-flight work before giving up."""

    def __post_init__(self) -> None:
        if bool(self.nats_tls_cert_file) != bool(self.nats_tls_key_file):
            raise ValueError("nats_tls_cert_file and nats_tls_key_file must be given together")
        if self.nats_user and not self.nats_password:
            raise ValueError("nats_user needs nats_password")
        if self.nats_token and self.nats_user:
            raise ValueError("use either nats_token or nats_user/nats_password, not both")

    def redacted(self) -> dict[str, Any]:
        """The settings as a dict with secrets masked, for logs."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        for group in setting_groups(type(self)):
            out.update(out.pop(group))  # a group's settings by their own names
        for k, v in out.items():
            if v and SECRET_FIELDS.search(k) and not k.endswith("_file"):
                out[k] = "***"
        return out

    def secrets(self) -> list[str]:
        return [
            str(getattr(self, f))
            for f in self.__struct_fields__
            if SECRET_FIELDS.search(f) and not f.endswith("_file") and getattr(self, f)
        ]


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def env_name(field: str) -> str:
    return "PLANNER_" + field.upper()


def setting_groups(cls: type[BaseSettings]) -> dict[str, type[Any]]:
    """The fields of ``cls`` that are groups of settings (their type is a dataclass), with that type."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out: dict[str, type[Any]] = {}
    for f in cls.__struct_fields__:
        tp = _base_type(hints[f])
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            out[f] = tp
    return out


def setting_types(cls: type[BaseSettings]) -> dict[str, Any]:
    """Every setting of ``cls`` by its flat name, in order, with its type: a group contributes its
    own fields in its place."""
    hints = typing.get_type_hints(cls, include_extras=True)
    groups = setting_groups(cls)
    out: dict[str, Any] = {}
    for f in cls.__struct_fields__:
        inner = (
            {
                g.name: typing.get_type_hints(groups[f], include_extras=True)[g.name]
                for g in dataclasses.fields(groups[f])
            }
            if f in groups
            else {f: hints[f]}
        )
        for name, tp in inner.items():
            if name in out:
                raise TypeError(f"{cls.__name__}: setting {name!r} is declared twice")
            out[name] = tp
    return out


def _base_type(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _base_type(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _base_type(args[0]) if len(args) == 1 else str
    return tp


def _is_bool(tp: Any) -> bool:
    return _base_type(tp) is bool


def _is_list(tp: Any) -> bool:
    return typing.get_origin(_base_type(tp)) in (list, tuple)


def _coerce_env(tp: Any, raw: str) -> Any:
    """Env values are strings; lists are comma-separated, or a JSON/YAML list (``["a=1,b=2", "c"]``:
    items that hold commas themselves, such as label selectors), dicts are YAML/JSON."""
    base = _base_type(tp)
    if _is_bool(tp):
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off", ""):
            return False
        return raw
    if _is_list(tp):
        if raw.lstrip().startswith("["):
            try:
                items = yaml.safe_load(raw)
            except yaml.YAMLError:
                return raw  # not a list: validation says so
            return items if isinstance(items, list) else raw
        return [part.strip() for part in raw.split(",") if part.strip()]
    if typing.get_origin(base) is dict:
        return yaml.safe_load(raw)
    return raw


def _enum_value(kind: type[enum.Enum]) -> Callable[[str], Any]:
    """Flag converter for an enum setting: a value the enum accepts (its own, or a former name its
    ``_missing_`` maps) becomes the current value; anything else is left for argparse's choices check,
    whose message lists the allowed values."""

    def convert(raw: str) -> Any:
        try:
            return kind(raw).value
        except ValueError:
            return raw

    convert.__name__ = kind.__name__
    return convert


def add_flags(parser: argparse.ArgumentParser, cls: type[BaseSettings]) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML settings file (env PLANNER_CONFIG)")
    for f, tp in setting_types(cls).items():
        dest = f"setting__{f}"
        help_text = f"env {env_name(f)}"
        if _is_bool(tp):
            parser.add_argument(
                flag_name(f), dest=dest, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        elif _is_list(tp):
            parser.add_argument(
                flag_name(f),
                dest=dest,
                default=None,
                metavar=f.upper(),
                help=help_text + " (comma-separated)",
            )
        else:
            base = _base_type(tp)
            choices = (
                [m.value for m in base] if isinstance(base, type) and issubclass(base, enum.Enum) else None
            )
            lit = typing.get_args(base) if typing.get_origin(base) is typing.Literal else None
            parser.add_argument(
                flag_name(f),
                dest=dest,
                default=None,
                type=_enum_value(base) if choices else str,
                choices=choices or lit or None,
                metavar=None if (choices or lit) else f.upper(),
                help=help_text,
            )


def _describe(cls: type[BaseSettings], path: str) -> str:
    parts = [p.split("[")[0] for p in path.removeprefix("$.").split(".")]
    if len(parts) > 1 and parts[0] in setting_groups(cls):
        parts = parts[1:]  # a setting of a group is known by its own name
    field = parts[0]
    if field in setting_types(cls):
        return f"setting '{field}' ({flag_name(field)}, {env_name(field)})"
    return f"setting at {path}"


def load_settings(
    cls: type[S],
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: str | Path | None = None,
) -> S:
    """Merge defaults < YAML < env < flags and validate. Raises :class:`SettingsError`."""
    env = os.environ if env is None else env
    hints = setting_types(cls)
    merged: dict[str, Any] = {}
    path = config_file or env.get("PLANNER_CONFIG")
    if path:
        try:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SettingsError(f"cannot read settings file {path}: {exc}") from None
        if not isinstance(loaded, dict):
            raise SettingsError(f"settings file {path} must hold a mapping of setting: value")
        merged.update({str(k).replace("-", "_"): v for k, v in loaded.items()})
    for f in hints:
        if env_name(f) in env:
            merged[f] = _coerce_env(hints[f], env[env_name(f)])
    for f, v in (flags or {}).items():
        if v is not None:
            merged[f] = (
                _coerce_env(hints[f], v)
                if isinstance(v, str) and (_is_list(hints[f]) or _is_bool(hints[f]))
                else v
            )
    unknown = sorted(set(merged) - set(hints))
    if unknown:
        raise SettingsError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(hints)}")
    for group, tp in setting_groups(cls).items():
        inside = {f.name: merged.pop(f.name) for f in dataclasses.fields(tp) if f.name in merged}
        if inside:
            merged[group] = inside
    try:
        return msgspec.convert(merged, cls, strict=False)
    except msgspec.ValidationError as exc:
        msg = str(exc)
        m = re.search(r" - at `([^`]+)`$", msg)
        if m:
            raise SettingsError(f"{_describe(cls, m.group(1))}: {msg[: m.start()]}") from None
        raise SettingsError(f"invalid settings: {msg}") from None


def settings_from_args(cls: type[S], argv: Sequence[str], prog: str) -> S:
    """Parse ``argv`` for ``cls`` and load. Raises SettingsError; argparse exits on ``--help``."""
    parser = argparse.ArgumentParser(
        prog=prog, description=(cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else None
    )
    add_flags(parser, cls)
    ns = parser.parse_args(list(argv))
    flags = {k.removeprefix("setting__"): v for k, v in vars(ns).items() if k.startswith("setting__")}
    return load_settings(cls, flags=flags, config_file=ns.config)


class LeaseSettings(BaseSettings, frozen=True, kw_only=True):
    """What a service with one active instance and optional standbys adds (docs/concepts/design.md,
    "Leases")."""

    lease_ttl_s: Annotated[float, Meta(ge=0.5, le=600)] = 10.0
    """A lease not renewed for this long expires and a standby takes over; the active instance
    stops acting on its own shortly before. The ``planner_leases`` bucket keeps the TTL it was
    created with (the first instance's), and every instance goes by the bucket's."""
    lease_renew_s: Annotated[float, Meta(gt=0, le=200)] = 2.0
    """How often the active instance renews its lease, and a standby checks whether it is free
    (a standby also takes over at once when the active one releases the lease on shutdown)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.lease_renew_s * 3 > self.lease_ttl_s:
            raise ValueError(
                f"lease_renew_s ({self.lease_renew_s:g}) must be at most a third of lease_ttl_s "
                f"({self.lease_ttl_s:g}), so that a renewal or two can fail without losing the lease"
            )
