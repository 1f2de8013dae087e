"""Serving the webhooks: the server, its certificate, and the webhook configurations
(registration at a URL, or CA injection). `topogate webhook` runs it alone; `topogate serve`
embeds the same one.

Certificates come one of three ways:
- ``ca_secret``: one CA shared by all replicas in a Secret (created by the first replica, read
  by the others); each replica issues its own serving certificate from it, injects the CA
  bundle (the same bytes from every replica), and renews both periodically;
- tls.crt/tls.key (and ca.crt) mounted in the certificate directory, e.g. by cert-manager: used
  as they are and reloaded when they rotate;
- otherwise a CA kept in the certificate directory (``ca/``), renewed the same way as the
  Secret's: for one process alone, such as the local control plane and the tests.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from topogate.kube.blocking import OnLoop
from topogate.kube.errors import API_ERRORS, KubeError
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import JSON_PATCH, MUTATING_WEBHOOKS, SECRETS, VALIDATING_WEBHOOKS

from .certs import issue, issued_by
from .options import ClientAuth, Limits
from .review import ClusterView
from .server import ServingCertificate, ViewFor
from .sharedca import (
    SERVING_RENEW_FRACTION,
    SERVING_VALIDITY,
    CAStore,
    CAUnavailable,
    Stored,
    ensure_ca,
    needs_renewal,
)

log = logging.getLogger("topogate.webhooks")


class SecretStore:
    """The shared CA in a Secret. The store is a blocking seam (``sharedca.CAStore``, called from
    the worker thread that also makes the keys); each call runs on the client's loop."""

    def __init__(self, kube: KubeApi, on_loop: OnLoop, namespace: str, name: str) -> None:
        self.kube, self.on_loop = kube, on_loop
        self.namespace, self.name = namespace, name

    def _body(self, data: dict[str, bytes], version: str | None = None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        metadata["labels"] = {"app.kubernetes.io/name": "topogate"}
        if version is not None:
            metadata["resourceVersion"] = version  # lost to another replica: 409
        encoded = {key: base64.b64encode(value).decode() for key, value in data.items()}
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "type": "Opaque",
            "data": encoded,
        }

    def read(self) -> Stored | None:
        try:
            secret = self.on_loop(self.kube.get(SECRETS, self.name, self.namespace))
        except KubeError as error:
            if error.not_found:
                return None
            raise
        encoded = secret.get("data") or {}
        data = {key: base64.b64decode(value) for key, value in encoded.items()}
        return Stored(data, str(secret["metadata"]["resourceVersion"]))

    def create(self, data: dict[str, bytes]) -> bool:
        body = self._body(data)
        return self._conflict_is_false(self.kube.create(SECRETS, body, self.namespace))

    def replace(self, data: dict[str, bytes], version: str) -> bool:
        body = self._body(data, version)
        return self._conflict_is_false(self.kube.replace(SECRETS, body))

    def _conflict_is_false(self, call: Coroutine[Any, Any, Any]) -> bool:
        try:
            self.on_loop(call)
        except KubeError as error:
            if error.conflict:  # AlreadyExists, or a stale resourceVersion
                return False
            raise
        return True


class FileStore:
    """The CA in ``directory`` (one process alone, no Secret): the same renewal as a Secret's."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def read(self) -> Stored | None:
        files = sorted(self.directory.glob("*.crt")) + sorted(self.directory.glob("*.key"))
        if not (self.directory / "ca.key").exists():
            return None
        data = {path.name: path.read_bytes() for path in files}
        return Stored(data, str((self.directory / "ca.key").stat().st_mtime_ns))

    def create(self, data: dict[str, bytes]) -> bool:
        if (self.directory / "ca.key").exists():
            return False
        self._write(data)
        return True

    def replace(self, data: dict[str, bytes], version: str) -> bool:
        self._write(data)
        return True

    def _write(self, data: dict[str, bytes]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for name, value in data.items():
            _write_file(self.directory / name, value, 0o600 if name.endswith(".key") else 0o644)


def _write_file(path: Path, data: bytes, mode: int) -> None:
    partial = path.with_name(path.name + ".tmp")
    partial.write_bytes(data)
    partial.chmod(mode)
    partial.replace(path)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class CertificateKeeper:
    """This replica's serving certificate (tls.crt/tls.key) and the CA bundle (ca.crt) in
    ``directory``, issued from the shared CA and renewed when :meth:`check` finds them due."""

    def __init__(
        self,
        store: CAStore,
        directory: Path,
        dns_names: list[str],
        ips: list[str],
        *,
        clock: Callable[[], dt.datetime] = _now,
        serving_validity: dt.timedelta = SERVING_VALIDITY,
    ) -> None:
        self.store, self.directory = store, directory
        self.dns_names, self.ips = dns_names, ips
        self.clock, self.serving_validity = clock, serving_validity
        self._issued = False  # the first check always issues: the SANs may have changed

    def check(self) -> tuple[bytes, bool]:
        """(the CA bundle to trust, whether a new serving certificate was written). Blocking:
        run it in an executor."""
        now = self.clock()
        shared = ensure_ca(self.store, now)
        self.directory.mkdir(parents=True, exist_ok=True)
        bundle_path, cert, key = (self.directory / n for n in ("ca.crt", "tls.crt", "tls.key"))
        if not bundle_path.exists() or bundle_path.read_bytes() != shared.bundle:
            _write_file(bundle_path, shared.bundle, 0o644)
        due = (
            not self._issued
            or not cert.exists()
            or not issued_by(cert.read_bytes(), shared.ca.cert_pem)
            or needs_renewal(cert.read_bytes(), now, SERVING_RENEW_FRACTION)
        )
        if due:
            serving = issue(
                shared.ca,
                "topogate-webhook",
                dns_names=self.dns_names,
                ip_addresses=self.ips,
                validity=self.serving_validity,
            )
            serving.write(cert, key)
            self._issued = True
        return shared.bundle, due


def settle_heap() -> None:
    """Move every object made so far (the imports: kubernetes' models, pydantic, numpy; about
    78,000) out of the garbage collector's reach. A full collection walked them all, about
    100-150 ms with the event loop stopped, several times a minute under load, so that valid
    reviews beside a flood of malformed ones had a p99 of 160-600 ms; frozen, 18 ms
    (hack/bench_reliability.py). Objects made later are collected as before."""
    gc.collect()
    gc.freeze()


async def register(kube: KubeApi, url: str, ca_bundle: bytes) -> None:
    """Create or replace both configurations (idempotent)."""
    from .configuration import configurations

    mutating, validating = configurations(url=url, ca_bundle=ca_bundle)
    for resource, body in ((MUTATING_WEBHOOKS, mutating), (VALIDATING_WEBHOOKS, validating)):
        try:
            await kube.create(resource, body)
        except KubeError as error:
            if not error.conflict:
                raise
            # An update must name the version it replaces.
            current = await kube.get(resource, body["metadata"]["name"])
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await kube.replace(resource, body)


async def inject_ca(kube: KubeApi, name: str, ca_bundle: bytes) -> None:
    """Set every webhook's caBundle in the two configurations called ``name``."""
    encoded = base64.b64encode(ca_bundle).decode()
    for resource in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
        current = await kube.get(resource, name)
        # Each hook by its position, tested to still be the one read: the strategic merge the
        # API server offers (by name) is not a patch every KubeApi speaks.
        patch: list[dict[str, Any]] = []
        for index, hook in enumerate(current.get("webhooks") or []):
            at = f"/webhooks/{index}"
            patch.append({"op": "test", "path": f"{at}/name", "value": hook["name"]})
            patch.append({"op": "add", "path": f"{at}/clientConfig/caBundle", "value": encoded})
        await kube.patch(resource, name, patch, content_type=JSON_PATCH)


def _keeper(
    cert_dir: Path,
    dns_names: list[str],
    ips: list[str],
    kube: KubeApi | None,
    ca_secret: tuple[str, str] | None,
) -> CertificateKeeper | None:
    """The keeper of the certificates, or None when they are mounted (used as they are)."""
    if ca_secret is not None:
        if kube is None:
            raise ValueError("a CA Secret needs an API client")
        store = SecretStore(kube, OnLoop(asyncio.get_running_loop()), *ca_secret)
        return CertificateKeeper(store, cert_dir, dns_names, ips)
    mounted = (cert_dir / "tls.crt").exists() and (cert_dir / "tls.key").exists()
    if mounted and not (cert_dir / "ca" / "ca.key").exists():
        return None
    return CertificateKeeper(FileStore(cert_dir / "ca"), cert_dir, dns_names, ips)


# What a round of renewal may run into; the next round tries again.
RENEWAL_ERRORS: tuple[type[BaseException], ...] = (*API_ERRORS, CAUnavailable, OSError, ValueError)


async def _keep(
    keeper: CertificateKeeper,
    certificate: ServingCertificate,
    publish: Callable[[bytes], Awaitable[None]],
    bundle: bytes,
    interval: float,
) -> None:
    """Renew the CA and the serving certificate when due; a new bundle is published (injected
    or registered) before the serving certificate from a new CA is loaded."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(interval)
        try:
            current, issued = await loop.run_in_executor(None, keeper.check)
            if current != bundle:
                await publish(current)
                bundle = current
                log.info("published the renewed webhook CA bundle")
            if issued and certificate.reload():
                log.info("renewed the serving certificate in %s", certificate.directory)
        except RENEWAL_ERRORS as error:
            log.warning(
                "could not renew the webhook certificates (next try in %.0f s): %s", interval, error
            )


def _publisher(
    kube: KubeApi | None, register_url: str | None, inject_ca_into: str | None
) -> Callable[[bytes], Awaitable[None]]:
    async def publish(bundle: bytes) -> None:
        if kube is None:
            return
        if register_url:
            await register(kube, register_url, bundle)
        if inject_ca_into:
            await inject_ca(kube, inject_ca_into, bundle)

    return publish


@contextlib.asynccontextmanager
async def serving(
    host: str,
    port: int,
    cert_dir: Path,
    *,
    dns_names: list[str],
    ips: list[str],
    kube: KubeApi | None,
    view: ClusterView | ViewFor | None = None,
    register_url: str | None = None,
    inject_ca_into: str | None = None,
    reload_interval: float = 5.0,
    limits: Limits | None = None,
    ca_secret: tuple[str, str] | None = None,
    renew_interval: float = 3600.0,
    client_auth: ClientAuth | None = None,
    native_gangs: bool = False,
) -> AsyncIterator[None]:
    """The webhook server, its certificate (see the module's docstring; reloaded on change,
    renewed every ``renew_interval`` when due) and, with an API client (``kube``; the caller
    owns it), the webhook configurations' registration or CA injection. ``view`` answers the
    validating webhook's questions (`serve` passes its state); without one, and with an API
    client, a snapshot of the API server's queues answers (:class:`ApiView`, re-read at most
    every few seconds, never per review)."""
    from .catalog import ApiView
    from .server import running

    loop = asyncio.get_running_loop()
    keeper = _keeper(cert_dir, dns_names or ["localhost"], ips or ["127.0.0.1"], kube, ca_secret)
    bundle: bytes | None = None  # mounted files without ca.crt: nothing to publish
    if keeper is not None:
        bundle, _ = await loop.run_in_executor(None, keeper.check)
    elif (cert_dir / "ca.crt").exists():
        bundle = (cert_dir / "ca.crt").read_bytes()
    client_auth = client_auth or ClientAuth()
    certificate = ServingCertificate(cert_dir, client_auth)
    if client_auth.ca is None:
        log.warning(
            "no client CA: any client that reaches the webhook port gets refusal messages "
            "and warnings, which name queues' topologies and levels (give the CA of the API "
            "server's client certificate, or close the port with a NetworkPolicy; "
            "docs/serve.md)"
        )
    if view is None and kube is not None:
        view = ApiView(kube)
    publish = _publisher(kube, register_url, inject_ca_into)
    async with running(
        host, port, certificate, view, reload_interval, limits=limits, native_gangs=native_gangs
    ):
        if bundle is not None:
            await publish(bundle)
        renewing = None
        if keeper is not None and bundle is not None:
            renewing = asyncio.create_task(
                _keep(keeper, certificate, publish, bundle, renew_interval)
            )
        settle_heap()
        log.info("serving on %s:%d", host, port)
        try:
            yield
        finally:
            if renewing is not None:
                renewing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewing
