"""The validating webhook's view inside `serve`: the controller's own state.

Queues, flavors and topologies come from the watched state, with no API call per review. A
HyperNode review is the exception: whether a new HyperNode closes a cycle must be judged
against the HyperNodes that exist now, and the watch may lag a create made a moment ago (a
stale list could let a cycle through), so those reviews list HyperNodes fresh, asynchronously.
A job that reads another object (a TrainJob its runtime) is judged against that object as the
API server has it: one the watch has not brought yet is read with a GET, so a runtime and its
TrainJob applied together are not refused as missing.
Concurrent reviews share one list that started after they arrived (:class:`FreshList`), so a
flood of HyperNode reviews costs one LIST per round trip, not one per review.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from topogate.admission.podsets import Catalog
from topogate.api.kinds import Lookup, Referring, job_kind
from topogate.kube.errors import API_ERRORS, KubeError
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import HYPERNODES, READ_RESOURCES, Obj, Resource
from topogate.state import ControllerState
from topogate.state.catalogs import Catalogs

from .review import ClusterView, Review
from .server import ViewFor

HYPERNODE_GROUP = HYPERNODES.api_version.split("/")[0]

log = logging.getLogger("topogate.webhooks")


class WithHyperNodes:
    def __init__(
        self, catalogs: Catalogs | ClusterView, hypernodes: Sequence[Mapping[str, Any]] | None
    ) -> None:
        self._catalogs, self._hypernodes = catalogs, hypernodes

    def catalog_for(self, namespace: str, queue: str) -> Catalog | None:
        return self._catalogs.catalog_for(namespace, queue)

    def hypernodes(self) -> list[Mapping[str, Any]] | None:
        return None if self._hypernodes is None else list(self._hypernodes)


class WithReadObjects(WithHyperNodes):
    """The state's view, with the objects a review's job reads found fresh where the watch
    has not brought them (``review.ObjectView``)."""

    def __init__(self, catalogs: Catalogs, fetched: Mapping[tuple[str, str | None, str], Obj]):
        super().__init__(catalogs, None)
        self._lookup, self._fetched = catalogs.read_objects(), fetched

    def read_objects(self) -> Lookup:
        def lookup(kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
            return self._fetched.get((kind, namespace, name)) or self._lookup(kind, namespace, name)

        return lookup


async def _read_fresh(
    kube: KubeApi, catalogs: Catalogs, refs: list[tuple[str, str | None, str]]
) -> ClusterView:
    """The view for a review of a job reading ``refs``: what the watch lacks is read with a
    GET; when the API server cannot answer, a view that knows no such object (the job's
    PodSets are then left to the controller, never refused as missing)."""
    fetched: dict[tuple[str, str | None, str], Obj] = {}
    known = catalogs.read_objects()
    for ref in refs:
        kind, namespace, name = ref
        if known(*ref) is not None or kind not in READ_RESOURCES:
            continue
        try:
            fetched[ref] = await kube.get(READ_RESOURCES[kind], name, namespace)
        except KubeError as error:
            if not error.not_found:
                return WithHyperNodes(catalogs, None)
        except API_ERRORS:
            return WithHyperNodes(catalogs, None)
    return WithReadObjects(catalogs, fetched)


class FreshList:
    """Single-flight LISTs: every caller gets the result of a LIST that started after it
    called; callers that arrive while one is running share the next one. None: the API
    server could not be asked (the caller then knows nothing)."""

    def __init__(self, kube: KubeApi, resource: Resource) -> None:
        self._kube, self._resource = kube, resource
        self._next: asyncio.Future[list[Obj] | None] | None = None
        self._running = False
        self.lists = 0  # LISTs made, for tests and metrics

    async def get(self) -> list[Obj] | None:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        waiting = self._next
        if not self._running:
            self._running = True
            asyncio.get_running_loop().create_task(self._run())
        return await asyncio.shield(waiting)

    async def _run(self) -> None:
        try:
            while self._next is not None:
                serving, self._next = self._next, None
                self.lists += 1
                try:
                    listed = await self._kube.list(self._resource)
                    serving.set_result(_with_kind(listed, self._resource))
                except API_ERRORS:
                    serving.set_result(None)
                except Exception:  # a garbled answer: unknown, and never a hung review
                    log.exception("listing %s failed", self._resource.plural)
                    serving.set_result(None)
        finally:
            self._running = False


def _with_kind(listed: Obj, resource: Resource) -> list[Obj]:
    """The items of a list answer; items of built-in kinds come without kind and apiVersion,
    which the object checks want (as the reflectors add them)."""
    kind = str(listed.get("kind") or "").removesuffix("List")
    items = [dict(item) for item in listed.get("items") or []]
    for item in items:
        item.setdefault("kind", kind)
        item.setdefault("apiVersion", listed.get("apiVersion") or resource.api_version)
    return items


def state_view(state: ControllerState, kube: KubeApi) -> ViewFor:
    """A per-review view provider for the webhook server (see ``server.ViewFor``)."""
    fresh = FreshList(kube, HYPERNODES)

    async def view_for(review: Review) -> ClusterView:
        kind = job_kind(review.kind)
        if isinstance(kind, Referring) and kind.group == review.group:
            return await _read_fresh(kube, state.catalogs, kind.references(review.obj))
        if review.group != HYPERNODE_GROUP:
            return state.catalogs
        # None (unknown): the object alone is checked.
        return WithHyperNodes(state.catalogs, await fresh.get())

    return view_for
