"""The standalone webhook's view of the cluster, read from the API server.

`topogate serve` does not use this: there the controller's watched state answers. Alone, the
webhook lists LocalQueues, ClusterQueues, ResourceFlavors and Topologies and builds from them
the same :class:`Catalog` the admitter uses, so both decide a job's topology the same way.

No API call per review: the lists are one snapshot, re-read at most every ``ttl`` seconds by
one refresh at a time, and reviews meanwhile are answered from the snapshot they find (only
the first review waits for the first snapshot). Before, each review asked for its LocalQueue,
ClusterQueue, flavors and topologies, and a review naming a queue not seen in the last few
seconds (an attacker can name a new one each time) cost four GETs. A queue created less
than ``ttl`` ago may be unknown: the job is then checked by the annotation rules alone, and the
admitter reports the rest, as when the API server cannot be asked. HyperNode reviews, rare,
share one LIST started after they arrived, as in `serve` (``stateview.FreshList``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from topogate.admission.podsets import Catalog, build_catalog
from topogate.kube.errors import API_ERRORS
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    HYPERNODES,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
)

from .review import ClusterView, NoView, Review
from .stateview import HYPERNODE_GROUP, FreshList, WithHyperNodes

log = logging.getLogger("topogate.webhooks")


class _Known(NoView):
    """Every queue of the snapshot: the review looks its own up in the catalog."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    def catalog_for(self, namespace: str, queue: str) -> Catalog | None:
        return self._catalog


class ApiView:
    """A per-review view provider (``server.ViewFor``) over the API server, cached."""

    def __init__(
        self, kube: KubeApi, ttl: float = 5.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._kube, self._ttl, self._clock = kube, ttl, clock
        self._catalog: Catalog | None = None
        self._at = -float("inf")
        self._refreshing: asyncio.Task[None] | None = None
        self._hypernodes = FreshList(kube, HYPERNODES)
        self.refreshes = 0  # snapshots read, for tests

    async def __call__(self, review: Review) -> ClusterView:
        catalog = await self.catalog()
        view: ClusterView = _Known(catalog) if catalog is not None else NoView()
        if review.group != HYPERNODE_GROUP:
            return view
        return WithHyperNodes(view, await self._hypernodes.get())

    async def catalog(self) -> Catalog | None:
        """The snapshot; refreshed in the background once ``ttl`` has passed."""
        if self._clock() - self._at >= self._ttl and self._refreshing is None:
            self._refreshing = asyncio.create_task(self._refresh())
        if self._at == -float("inf") and self._refreshing is not None:
            await asyncio.shield(self._refreshing)  # the first snapshot: nothing to answer from
        return self._catalog

    async def _refresh(self) -> None:
        try:
            self.refreshes += 1
            cluster_queues, local_queues, flavors, topologies = [
                list((await self._kube.list(resource)).get("items") or [])
                for resource in (CLUSTER_QUEUES, LOCAL_QUEUES, RESOURCE_FLAVORS, TOPOLOGIES)
            ]
            self._catalog, _ = build_catalog(
                cluster_queues, local_queues, flavors, topologies, None
            )
        except API_ERRORS as error:
            # Kept as it was (nothing known at first): the next try waits out the TTL, so an
            # unhappy API server is not asked once per review.
            log.warning(
                "could not read the queues for the webhook (next try in %.0f s): %s",
                self._ttl,
                error,
            )
        finally:
            self._at = self._clock()
            self._refreshing = None
