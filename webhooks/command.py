"""`topogate webhook`: run the admission webhook server (the controller's `serve` embeds it later).

With ``--register-url`` it also writes the webhook configurations (URL + caBundle) into the
cluster named by ``--kubeconfig``, which is how the local control plane and the tests use it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
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


async def _run(args: argparse.Namespace) -> int:
    # Imported here so that `topogate plan` does not pay for the Kubernetes client and aiohttp.
    from topogate.kube import api_client

    from .catalog import ApiCatalog
    from .server import ServingCertificate, running

    certificate = ServingCertificate.prepare(
        args.cert_dir, args.dns_name or ["localhost"], args.ip or ["127.0.0.1"]
    )
    wants_api = args.kubeconfig or args.register_url or args.inject_ca
    api = api_client(args.kubeconfig) if wants_api else None
    catalog = ApiCatalog(api) if api is not None else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with running(args.host, args.port, certificate, catalog, args.reload_interval):
        if args.register_url and api is not None:
            await loop.run_in_executor(
                None, register, api, args.register_url, certificate.ca.read_bytes()
            )
        if args.inject_ca and api is not None:
            await loop.run_in_executor(
                None, inject_ca, api, args.inject_ca, certificate.ca.read_bytes()
            )
        logging.getLogger("topogate.webhooks").info("serving on %s:%d", args.host, args.port)
        print(f"webhooks ready on https://{args.host}:{args.port}", flush=True)
        await stop.wait()
    return 0


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return asyncio.run(_run(args))
