"""The standalone webhook's view of the cluster, read from the API server (blocking GETs).

`topogate serve` does not use this: there the controller's watched state answers. Alone, the
webhook reads the LocalQueue, its ClusterQueue, that queue's flavors and the topologies they
name, and builds the same :class:`Catalog` the admitter uses, so both decide a job's topology
the same way. Answers are cached for a few seconds; anything missing means "unknown", and the
job is then checked by the annotation rules alone (the admitter reports the rest).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, cast

from kubernetes import client

from topogate.admission.podsets import Catalog, build_catalog
from topogate.api.constants import GROUP, VERSION


class ApiView:
    """A :class:`~topogate.webhooks.review.ClusterView` over the API server."""

    def __init__(self, api: client.ApiClient, ttl: float = 5.0) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._ttl = ttl
        self._cache: dict[tuple[str, str], tuple[float, Catalog | None]] = {}
        self._lock = threading.Lock()

    def _get(self, plural: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            if namespace is None:
                found = self._custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
            else:
                found = self._custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, name
                )
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return cast(dict[str, Any], found)

    def _lookup(self, namespace: str, queue: str) -> Catalog | None:
        local = self._get("localqueues", queue, namespace)
        target = ((local or {}).get("spec") or {}).get("clusterQueue")
        cluster_queue = self._get("clusterqueues", str(target)) if target else None
        if local is None or cluster_queue is None:
            return None
        flavors: list[Mapping[str, Any]] = []
        topologies: list[Mapping[str, Any]] = []
        for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
            for ref in group.get("flavors") or []:
                flavor = self._get("resourceflavors", str(ref.get("name")))
                if flavor is None:
                    continue
                flavors.append(flavor)
                name = (flavor.get("spec") or {}).get("topologyName")
                topology = self._get("topologies", str(name)) if name else None
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
        except client.ApiException:
            answer = None  # the API server is unhappy: validate by the annotation rules alone
        with self._lock:
            self._cache[key] = (now, answer)
        return answer

    def hypernodes(self) -> list[Mapping[str, Any]] | None:
        """Listed fresh on every call: a stale list could let a cycle through."""
        try:
            listed = self._custom.list_cluster_custom_object(
                "topology.volcano.sh", "v1alpha1", "hypernodes"
            )
        except client.ApiException:
            return None  # no HyperNode CRD, or the API server is unhappy
        return [dict(item) for item in cast(dict[str, Any], listed).get("items") or []]
