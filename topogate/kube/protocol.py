"""The transport seam: what the package asks of the API server, as a protocol.

It is the package's one Kubernetes client. The controller's shells, the webhook server (the
shared CA's Secret, the webhook configurations, the standalone webhook's view of the queues)
and `topogate status` all take a ``KubeApi``; nothing outside ``topogate.testing`` imports
the official ``kubernetes.client``. Implementations:

* ``client.Kube``: aiohttp against a real server; the one place a kubeconfig is loaded
  (``Kube.connect``, ``client.context_namespace``);
* ``topogate.testing.fakekube.FakeKube``: in memory, for unit tests, the way httpx's
  ``MockTransport`` stands in for the network;
* `serve`'s fenced wrapper around ``Kube``, which refuses writes once the Lease lapsed.

Failures are ``errors.API_ERRORS``: ``KubeError`` for an answer (its HTTP status), the
transport's own errors otherwise. Blocking code in a worker thread calls it through
``blocking.OnLoop``. Commands run it under ``asyncio.run``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from .resources import MERGE_PATCH, Obj, Resource


class KubeApi(Protocol):
    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj: ...

    async def list(
        self, resource: Resource, namespace: str | None = None, **params: Any
    ) -> Obj: ...

    async def create(self, resource: Resource, body: Obj, namespace: str | None = None) -> Obj: ...

    async def replace(self, resource: Resource, body: Obj, subresource: str = "") -> Obj: ...

    async def patch(
        self,
        resource: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        subresource: str = "",
        content_type: str = MERGE_PATCH,
    ) -> Obj: ...

    async def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None: ...

    def watch(
        self,
        resource: Resource,
        resource_version: str,
        timeout_seconds: int = 300,
        **params: Any,
    ) -> AsyncIterator[Obj]: ...

    async def close(self) -> None: ...
