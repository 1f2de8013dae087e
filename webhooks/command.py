"""`topogate webhook`: the admission webhook server alone (`topogate serve` embeds the same one).

With ``--register-url`` it also writes the webhook configurations (URL + caBundle) into the
cluster named by ``--kubeconfig``, which is how the local control plane and the tests use it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=9443)
    parser.add_argument(
        "--cert-dir",
        type=Path,
        required=True,
        help="tls.crt/tls.key/ca.crt; made here when absent, reloaded on change",
    )
    parser.add_argument(
        "--dns-name", action="append", default=[], help="SAN for a made certificate"
    )
    parser.add_argument("--ip", action="append", default=[], help="IP SAN for a made certificate")
    parser.add_argument("--kubeconfig", help="cluster to read queues from (default: in-cluster)")
    parser.add_argument("--register-url", help="write webhook configurations pointing here")
    parser.add_argument(
        "--inject-ca",
        metavar="NAME",
        help="put the CA into the webhook configurations named NAME (in-cluster)",
    )
    parser.add_argument("--reload-interval", type=float, default=5.0)


def register(api: Any, url: str, ca_bundle: bytes) -> None:
    """Create or replace both configurations (idempotent)."""
    from kubernetes import client

    from .configuration import configurations

    admission: Any = client.AdmissionregistrationV1Api(api)  # it takes plain dicts
    mutating, validating = configurations(url=url, ca_bundle=ca_bundle)
    for body, create, read, replace in (
        (
            mutating,
            admission.create_mutating_webhook_configuration,
            admission.read_mutating_webhook_configuration,
            admission.replace_mutating_webhook_configuration,
        ),
        (
            validating,
            admission.create_validating_webhook_configuration,
            admission.read_validating_webhook_configuration,
            admission.replace_validating_webhook_configuration,
        ),
    ):
        try:
            create(body)
        except client.ApiException as error:
            if error.status != 409:
                raise
            # An update must name the version it replaces.
            name = body["metadata"]["name"]
            current = read(name)
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            replace(name, body)


def inject_ca(api: Any, name: str, ca_bundle: bytes) -> None:
    """Set every webhook's caBundle in the two configurations called ``name``."""
    import base64

    from kubernetes import client

    admission: Any = client.AdmissionregistrationV1Api(api)
    encoded = base64.b64encode(ca_bundle).decode()
    for read, patch in (
        (
            admission.read_mutating_webhook_configuration,
            admission.patch_mutating_webhook_configuration,
        ),
        (
            admission.read_validating_webhook_configuration,
            admission.patch_validating_webhook_configuration,
        ),
    ):
        current = read(name)
        hooks = [
            {"name": hook.name, "clientConfig": {"caBundle": encoded}} for hook in current.webhooks
        ]
        patch(name, {"webhooks": hooks})


@contextlib.asynccontextmanager
async def serving(
    host: str,
    port: int,
    cert_dir: Path,
    *,
    dns_names: list[str],
    ips: list[str],
    kubeconfig: str | None,
    use_api: bool,
    register_url: str | None = None,
    inject_ca_into: str | None = None,
    reload_interval: float = 5.0,
) -> AsyncIterator[None]:
    """The webhook server, its certificate (made or read, reloaded on change) and, with an API
    client, the queue catalog and the webhook configurations' registration or CA injection."""
    # Imported here so that `topogate plan` does not pay for the Kubernetes client and aiohttp.
    from topogate.kube import api_client

    from .catalog import ApiCatalog
    from .server import ServingCertificate, running

    certificate = ServingCertificate.prepare(
        cert_dir, dns_names or ["localhost"], ips or ["127.0.0.1"]
    )
    api = api_client(kubeconfig) if use_api else None
    catalog = ApiCatalog(api) if api is not None else None
    loop = asyncio.get_running_loop()
    async with running(host, port, certificate, catalog, reload_interval):
        if register_url and api is not None:
            await loop.run_in_executor(
                None, register, api, register_url, certificate.ca.read_bytes()
            )
        if inject_ca_into and api is not None:
            await loop.run_in_executor(
                None, inject_ca, api, inject_ca_into, certificate.ca.read_bytes()
            )
        logging.getLogger("topogate.webhooks").info("serving on %s:%d", host, port)
        yield


async def _run(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with serving(
        args.host,
        args.port,
        args.cert_dir,
        dns_names=args.dns_name,
        ips=args.ip,
        kubeconfig=args.kubeconfig,
        use_api=bool(args.kubeconfig or args.register_url or args.inject_ca),
        register_url=args.register_url,
        inject_ca_into=args.inject_ca,
        reload_interval=args.reload_interval,
    ):
        print(f"webhooks ready on https://{args.host}:{args.port}", flush=True)
        await stop.wait()
    return 0


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return asyncio.run(_run(args))
