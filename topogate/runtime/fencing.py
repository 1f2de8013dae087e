"""Writes fenced on the Lease: a replica writes only while it holds leadership.

The leader's writes go through :class:`FencedKube`, which refuses a create, replace, patch or
delete unless the leader elector says the Lease is still ours (:meth:`LeaderElector.holds_lease`:
renewed within the renew deadline, by this process's monotonic clock), checked at the moment
the request is sent: after the client's rate-limiter wait (``ratelimit.checked_before_send``),
which can outlast the Lease under a burst of writes. A leader paused past
its Lease (SIGSTOP, a starved event loop, a VM freeze) would otherwise write once on waking,
over the new leader's decisions, before its renew loop noticed. The refusal is a
:class:`KubeError` (503), which every shell already treats as a failed write: the admitter gives
the capacity back, the job sync and the ungater retry, and by then this replica has stepped
down. Reads and watches pass through; the Lease itself and the webhooks do not use this.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from topogate.kube.errors import KubeError
from topogate.kube.protocol import KubeApi
from topogate.kube.ratelimit import checked_before_send
from topogate.kube.resources import MERGE_PATCH, Obj, Resource


class NotLeading(KubeError):
    def __init__(self, method: str, resource: Resource) -> None:
        super().__init__(
            503, "NotLeading", f"{method} {resource.plural} refused: this replica's Lease lapsed"
        )


class FencedKube:
    """A KubeApi whose writes need ``holds_lease()`` to be true at the moment they are sent."""

    def __init__(self, kube: KubeApi, holds_lease: Callable[[], bool]) -> None:
        self._kube = kube
        self._holds_lease = holds_lease
        self.refused = 0

    def _check(self, method: str, resource: Resource) -> None:
        if not self._holds_lease():
            self.refused += 1
            raise NotLeading(method, resource)

    @contextlib.contextmanager
    def _fenced(self, method: str, resource: Resource) -> Iterator[None]:
        """Checked now (no token spent on a write already refused) and again by the
        transport right before sending, after its rate-limiter wait."""
        self._check(method, resource)
        with checked_before_send(lambda: self._check(method, resource)):
            yield

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj:
        return await self._kube.get(resource, name, namespace)

    async def list(self, resource: Resource, namespace: str | None = None, **params: Any) -> Obj:
        return await self._kube.list(resource, namespace, **params)

    async def create(self, resource: Resource, body: Obj, namespace: str | None = None) -> Obj:
        with self._fenced("create", resource):
            return await self._kube.create(resource, body, namespace)

    async def replace(self, resource: Resource, body: Obj, subresource: str = "") -> Obj:
        with self._fenced("replace", resource):
            return await self._kube.replace(resource, body, subresource)

    async def patch(
        self,
        resource: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        subresource: str = "",
        content_type: str = MERGE_PATCH,
    ) -> Obj:
        with self._fenced("patch", resource):
            return await self._kube.patch(
                resource, name, body, namespace, subresource, content_type
            )

    async def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None:
        with self._fenced("delete", resource):
            await self._kube.delete(resource, name, namespace)

    def watch(
        self,
        resource: Resource,
        resource_version: str,
        timeout_seconds: int = 300,
        **params: Any,
    ) -> AsyncIterator[Obj]:
        return self._kube.watch(resource, resource_version, timeout_seconds, **params)

    async def close(self) -> None:
        await self._kube.close()
