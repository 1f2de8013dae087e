"""The validating webhook's view of queues and topologies, read from the API server.

A queued job's levels are checked against the topology of its LocalQueue's ClusterQueue's
topology flavor. Answers are cached for a few seconds; anything missing means "unknown", and
the job is then checked by the annotation rules alone (the admitter reports the rest).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, cast

from kubernetes import client

from topogate.api.constants import GROUP, VERSION


class ApiCatalog:
    def __init__(self, api: client.ApiClient, ttl: float = 5.0) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._ttl = ttl
        self._cache: dict[tuple[str, str], tuple[float, tuple[str, list[str]] | None]] = {}
        self._lock = threading.Lock()

    def _get(self, plural: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            if namespace is None:
                found = cast(
                    dict[str, Any],
                    self._custom.get_cluster_custom_object(GROUP, VERSION, plural, name),
                )
            else:
                found = cast(
                    dict[str, Any],
                    self._custom.get_namespaced_custom_object(
                        GROUP, VERSION, namespace, plural, name
                    ),
                )
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    def _lookup(self, namespace: str, queue: str) -> tuple[str, list[str]] | None:
        local = self._get("localqueues", queue, namespace)
        if local is None:
            return None
        cluster_queue = self._get("clusterqueues", str(local["spec"]["clusterQueue"]))
        if cluster_queue is None:
            return None
        for group in cluster_queue.get("spec", {}).get("resourceGroups", []):
            for flavor_ref in group.get("flavors", []):
                flavor = self._get("resourceflavors", str(flavor_ref["name"]))
                topology_name = (flavor or {}).get("spec", {}).get("topologyName")
                if not topology_name:
                    continue
                topology = self._get("topologies", str(topology_name))
                if topology is None:
                    return None
                levels = [str(level["nodeLabel"]) for level in topology["spec"]["levels"]]
                return str(topology_name), levels
        return None

    def hypernodes(self) -> list[Mapping[str, Any]] | None:
        """Listed fresh on every call: a stale list could let a cycle through."""
        try:
            listed = cast(
                dict[str, Any],
                self._custom.list_cluster_custom_object(
                    "topology.volcano.sh", "v1alpha1", "hypernodes"
                ),
            )
        except client.ApiException:
            return None  # no HyperNode CRD, or the API server is unhappy
        return [dict(item) for item in listed.get("items") or []]

    def queue_levels(self, namespace: str, queue: str) -> tuple[str, list[str]] | None:
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
