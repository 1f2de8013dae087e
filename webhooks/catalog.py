"""The standalone webhook's view of the cluster, read from the API server.

`topogate serve` does not use this: there the controller's watched state answers. Alone, the
webhook reads the LocalQueue, its ClusterQueue, that queue's flavors and the topologies they
name, and builds the same :class:`Catalog` the admitter uses, so both decide a job's topology
the same way. Answers are cached for a few seconds; anything missing means "unknown", and the
job is then checked by the annotation rules alone (the admitter reports the rest).

The view is blocking (validation runs in a worker thread); its GETs go through the async
client on the client's loop (:class:`~topogate.kube.blocking.OnLoop`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from topogate.admission.podsets import Catalog, build_catalog
from topogate.kube.blocking import OnLoop
from topogate.kube.errors import KubeError
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    HYPERNODES,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    Resource,
)


class ApiView:
    """A :class:`~topogate.webhooks.review.ClusterView` over the API server."""

    def __init__(self, kube: KubeApi, on_loop: OnLoop, ttl: float = 5.0) -> None:
        self._kube, self._on_loop = kube, on_loop
        self._ttl = ttl
        self._cache: dict[tuple[str, str], tuple[float, Catalog | None]] = {}
        self._lock = threading.Lock()

    def _get(self, resource: Resource, name: str, namespace: str | None = None) -> Any:
        try:
            return self._on_loop(self._kube.get(resource, name, namespace))
        except KubeError as error:
            if error.not_found:
                return None
            raise

    def _lookup(self, namespace: str, queue: str) -> Catalog | None:
        local = self._get(LOCAL_QUEUES, queue, namespace)
        target = ((local or {}).get("spec") or {}).get("clusterQueue")
        cluster_queue = self._get(CLUSTER_QUEUES, str(target)) if target else None
        if local is None or cluster_queue is None:
            return None
        flavors: list[Mapping[str, Any]] = []
        topologies: list[Mapping[str, Any]] = []
        for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
            for ref in group.get("flavors") or []:
                flavor = self._get(RESOURCE_FLAVORS, str(ref.get("name")))
                if flavor is None:
                    continue
                flavors.append(flavor)
                name = (flavor.get("spec") or {}).get("topologyName")
                topology = self._get(TOPOLOGIES, str(name)) if name else None
                if topology is not None:
                    topologies.append(topology)
        catalog, _ = build_catalog([cluster_queue], [local], flavors, topologies, None)
        return catalog

    def catalog_for(self, namespace: str, queue: str) -> Catalog | None:
        key = (namespace, queue)
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and now - cached[0] < self._ttl:
                return cached[1]
        try:
            answer = self._lookup(namespace, queue)
        except KubeError:
            answer = None  # the API server is unhappy: validate by the annotation rules alone
        with self._lock:
            self._cache[key] = (now, answer)
        return answer

    def hypernodes(self) -> list[Mapping[str, Any]] | None:
        """Listed fresh on every call: a stale list could let a cycle through."""
        try:
            listed = self._on_loop(self._kube.list(HYPERNODES))
        except KubeError:
            return None  # no HyperNode CRD, or the API server is unhappy
        return [dict(item) for item in listed.get("items") or []]
