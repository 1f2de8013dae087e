"""The webhook server's options: its limits and the shared CA, as `serve` (``--webhook-...``)
and `topogate webhook` (``--...``) take them. Light to import: every command's parser is built
from it, `plan`'s too."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from topogate.api.errors import InputError


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


@dataclass(frozen=True, slots=True)
class ClientAuth:
    """Who may learn more than allow/deny. A review's message and warnings name the queue's
    topology and its levels, so they go only to a client that presented a certificate signed
    by ``ca`` (the API server, through its admission configuration). Without a CA no client
    can be told apart, so every client gets the whole answer (as on an install that has not set
    one up, a managed control plane above all: allow/deny alone would hide every refusal's
    reason from the people submitting jobs); serve warns that the port tells anyone."""

    ca: str | None = None  # a PEM file of the CA that signs the API server's client cert
    required: bool = False  # refuse at the TLS handshake a client without such a cert
    # Messages and warnings for everyone: for an API server that cannot present a client
    # certificate (a managed control plane), with the port closed to others by the network.
    anonymous_details: bool = False

    def tells(self, authenticated: bool) -> bool:
        """Whether a client gets messages and warnings, not allow/deny alone."""
        return authenticated or self.anonymous_details or self.ca is None


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
    group.add_argument(
        f"{prefix}client-ca",
        dest="webhook_client_ca",
        metavar="FILE",
        help="CA (PEM) of the API server's client certificate (its admission configuration); "
        "only clients presenting a certificate it signed get refusal messages and warnings",
    )
    group.add_argument(
        f"{prefix}require-client-cert",
        dest="webhook_require_client_cert",
        action="store_true",
        help=f"refuse at the TLS handshake any client without such a certificate "
        f"(needs {prefix}client-ca)",
    )
    group.add_argument(
        f"{prefix}anonymous-details",
        dest="webhook_anonymous_details",
        action="store_true",
        help=f"with {prefix}client-ca, give refusal messages and warnings to unauthenticated "
        "clients too: they name queues' topologies and levels (without a client CA everyone "
        "gets them)",
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
    if args.webhook_require_client_cert and not args.webhook_client_ca:
        raise InputError("a client certificate can only be required with its CA (client-ca)")
    client_auth = ClientAuth(
        ca=args.webhook_client_ca,
        required=args.webhook_require_client_cert,
        anonymous_details=args.webhook_anonymous_details,
    )
    return {
        "limits": limits,
        "client_auth": client_auth,
        "ca_secret": args.webhook_ca_secret,
        "renew_interval": args.webhook_renew_interval,
    }


def native_gangs_argument(parser: Any) -> None:
    """`--native-gangs` (`serve` and `webhook`): pods join their gang's PodGroup at creation."""
    parser.add_argument(
        "--native-gangs",
        choices=("auto", "on", "off"),
        default="auto",
        help="give every admitted gang a scheduling.k8s.io PodGroup (a gang of the admitted "
        "count in the domain topogate chose) that its pods join, so kube-scheduler binds "
        "all or none; auto: when the API server serves PodGroups (default: %(default)s)",
    )
