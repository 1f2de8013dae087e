"""The transport seam: what the controller asks of the API server, as a protocol.

The aiohttp client (``client.Kube``) implements it against a real server; the in-memory
``topogate.testing.fakekube.FakeKube`` implements it for unit tests of the shells, the way
httpx's ``MockTransport`` stands in for the network.
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
