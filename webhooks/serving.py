"""Serving the webhooks: the server, its certificate, and the webhook configurations
(registration at a URL, or CA injection). `topogate webhook` runs it alone; `topogate serve`
embeds the same one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from .review import ClusterView
from .server import ViewFor


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
    view: ClusterView | ViewFor | None = None,
    register_url: str | None = None,
    inject_ca_into: str | None = None,
    reload_interval: float = 5.0,
) -> AsyncIterator[None]:
    """The webhook server, its certificate (made or read, reloaded on change) and, with an API
    client, the webhook configurations' registration or CA injection. ``view`` answers the
    validating webhook's questions (`serve` passes its state); without one, and with an API
    client, the API server is asked (:class:`ApiView`)."""
    # Imported here so that `topogate plan` does not pay for the Kubernetes client and aiohttp.
    from topogate.kube.sync import api_client

    from .catalog import ApiView
    from .server import ServingCertificate, running

    certificate = ServingCertificate.prepare(
        cert_dir, dns_names or ["localhost"], ips or ["127.0.0.1"]
    )
    api = api_client(kubeconfig) if use_api else None
    blocking = False
    if view is None and api is not None:
        view, blocking = ApiView(api), True
    loop = asyncio.get_running_loop()
    async with running(host, port, certificate, view, reload_interval, blocking=blocking):
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
