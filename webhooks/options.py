"""The webhook server's options: its limits and the shared CA, as `serve` (``--webhook-...``)
and `topogate webhook` (``--...``) take them. Light to import: every command's parser is built
from it, `plan`'s too."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Limits:
    """How long a client may take and how many connections all clients may hold: without
    them 249 idle connections exhausted a 256-fd limit and valid reviews timed out."""

    header_timeout: float = 5.0  # accept -> TLS handshake -> first request's headers read
    body_timeout: float = 10.0  # headers read -> whole body read (then 408)
    # Between requests on a keep-alive connection. Below client-go's 90 s idle timeout would
    # race its reuse of a connection; the cap, not this, is what protects the fds.
    idle_timeout: float = 60.0
    max_connections: int = 128  # open and handshaking; more are closed at once
    log_interval: float = 60.0  # refusals are logged once per interval, with their count


def _secret_name(value: str) -> tuple[str, str]:
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {value!r}")
    return namespace, name


def add_arguments(group: Any, prefix: str = "--webhook-") -> None:
    """The server's limits and the shared CA, for `serve` (``--webhook-...``) and
    `topogate webhook` (prefix ``--``); read them back with :func:`options`."""
    defaults = Limits()
    group.add_argument(
        f"{prefix}ca-secret",
        dest="webhook_ca_secret",
        type=_secret_name,
        metavar="NAMESPACE/NAME",
        help="one CA for all replicas in this Secret (created when missing); each replica "
        "issues its serving certificate from it and injects its bundle",
    )
    group.add_argument(
        f"{prefix}renew-interval",
        dest="webhook_renew_interval",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="how often the CA and the serving certificate are checked for renewal",
    )
    for name, kind, default, text in (
        ("header-timeout", float, defaults.header_timeout, "accept to first request's headers"),
        ("body-timeout", float, defaults.body_timeout, "headers to the whole body (then 408)"),
        ("idle-timeout", float, defaults.idle_timeout, "idle keep-alive connections"),
        ("max-connections", int, defaults.max_connections, "more are closed at once"),
    ):
        group.add_argument(
            f"{prefix}{name}",
            dest=f"webhook_{name.replace('-', '_')}",
            type=kind,
            default=default,
            help=f"{text} (default: %(default)s)",
        )


def options(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of :func:`serving` from the arguments :func:`add_arguments` added."""
    limits = Limits(
        header_timeout=args.webhook_header_timeout,
        body_timeout=args.webhook_body_timeout,
        idle_timeout=args.webhook_idle_timeout,
        max_connections=args.webhook_max_connections,
    )
    return {
        "limits": limits,
        "ca_secret": args.webhook_ca_secret,
        "renew_interval": args.webhook_renew_interval,
    }
