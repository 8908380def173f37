"""NATS connection and auth flags shared by the client commands (watch, ack): the same options every
service has (user/password, token, creds, nkey seed, TLS), with secrets also read from PLANNER_* env."""

from __future__ import annotations

import argparse
import os

from planner_runtime.settings import BaseSettings


def add_nats_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("NATS connection")
    g.add_argument(
        "--nats-url",
        default=os.environ.get("PLANNER_NATS_URL", "nats://127.0.0.1:4222"),
        help="comma-separated server URLs (env PLANNER_NATS_URL)",
    )
    g.add_argument("--namespace", default=os.environ.get("PLANNER_NAMESPACE", "default"))
    g.add_argument("--subject-prefix", default="planner")
    g.add_argument("--nats-user", default=os.environ.get("PLANNER_NATS_USER", ""))
    g.add_argument(
        "--nats-password",
        default=os.environ.get("PLANNER_NATS_PASSWORD", ""),
        help="prefer env PLANNER_NATS_PASSWORD (keeps it out of shell history)",
    )
    g.add_argument(
        "--nats-token",
        default=os.environ.get("PLANNER_NATS_TOKEN", ""),
        help="token auth (or env PLANNER_NATS_TOKEN)",
    )
    g.add_argument("--nats-creds-file", default="", help="NATS .creds file")
    g.add_argument("--nats-nkey-seed-file", default="", help="nkey seed file")
    g.add_argument("--nats-tls-ca-file", default="", help="CA bundle to verify the server")
    g.add_argument("--nats-tls-cert-file", default="", help="client certificate (mutual TLS)")
    g.add_argument("--nats-tls-key-file", default="", help="client key (mutual TLS)")
    g.add_argument("--connect-timeout-s", type=float, default=10.0)


def nats_settings(args: argparse.Namespace) -> BaseSettings:
    """Raises ValueError (with the field named) on an inconsistent combination."""
    return BaseSettings(
        nats_url=args.nats_url,
        namespace=args.namespace,
        subject_prefix=args.subject_prefix,
        nats_user=args.nats_user,
        nats_password=args.nats_password,
        nats_token=args.nats_token,
        nats_creds_file=args.nats_creds_file,
        nats_nkey_seed_file=args.nats_nkey_seed_file,
        nats_tls_ca_file=args.nats_tls_ca_file,
        nats_tls_cert_file=args.nats_tls_cert_file,
        nats_tls_key_file=args.nats_tls_key_file,
    )
