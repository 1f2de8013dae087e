"""The watched objects, as the reflectors last delivered them, and the index of marked pods
per Workload (the pods the ungater plans and the job sync counts)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from topogate.api.kinds import COMPOSED_KINDS, Gated, job_kind, podgroup
from topogate.api.objects import is_finished, key_of, workload_of_pod
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    COHORTS,
    HYPERNODES,
    JOB_RESOURCES,
    KAI_TOPOLOGIES,
    KUEUE_COHORTS,
    LOCAL_QUEUES,
    NATIVE_PODGROUPS_KEY,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    READ_RESOURCES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
    Obj,
    Resource,
)

WATCHED: tuple[Resource, ...] = (
    NODES,
    PODS,
    *JOB_RESOURCES.values(),
    WORKLOADS,
    CLUSTER_QUEUES,
    COHORTS,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    PRIORITY_CLASSES,
    HYPERNODES,
    KAI_TOPOLOGIES,
    KUEUE_COHORTS,
    *READ_RESOURCES.values(),
)


class Store:
    def __init__(self) -> None:
        self._objects: dict[str, dict[str, Obj]] = {r.key: {} for r in WATCHED}
        # Watched only with native gangs on (its version is discovered then).
        self._objects[NATIVE_PODGROUPS_KEY] = {}
        self._pods_by_workload: dict[str, set[str]] = {}  # marked pods only
        # Whether each Workload's stored version is finished, by the version's identity (a
        # watch event replaces the object): one event asks three owners, and the ledger's
        # assume and confirm ask again, and reading the conditions each time showed.
        self._finished: dict[str, tuple[Obj, bool]] = {}

    def apply(self, resource: Resource, old: Obj | None, new: Obj | None) -> None:
        """Keep the object as a watch event left it (``new`` None: deleted)."""
        objects = self._objects[resource.key]
        if new is None and old is not None:
            objects.pop(key_of(old), None)
            if resource.key == WORKLOADS.key:
                self._finished.pop(key_of(old), None)
        elif new is not None:
            objects[key_of(new)] = new

    def workload_finished(self, key: str, workload: Obj) -> bool:
        """``is_finished(workload)`` for the Workload stored at ``key`` (or about to be)."""
        known = self._finished.get(key)
        if known is not None and known[0] is workload:
            return known[1]
        finished = is_finished(workload)
        self._finished[key] = (workload, finished)
        return finished

    def index_pod(self, old: Obj | None, new: Obj | None) -> str | None:
        """Index a marked pod under its Workload and return the Workload's key; None for a
        pod no Workload marked (its usage is the capacity cache's business)."""
        obj = new if new is not None else old
        assert obj is not None
        workload = workload_of_pod(obj)
        if workload is None:
            return None
        key = key_of(obj)
        members = self._pods_by_workload.setdefault(workload, set())
        if new is None:
            members.discard(key)
            if not members:
                del self._pods_by_workload[workload]
        else:
            members.add(key)
        return workload

    def objects(self, resource: Resource) -> Mapping[str, Obj]:
        return self._objects[resource.key]

    def job(self, kind: str, key: str) -> Obj | None:
        """The job of ``kind`` at ``key``: as watched, or, for a kind with no object of its
        own (a pod group, keyed by its Workload), composed from its marked pods; None when
        there is none."""
        registered = job_kind(kind)
        if isinstance(registered, Gated) and registered.composed:
            pods = self.pods_of(key)
            namespace, name = key.split("/", 1)
            native = self._objects[NATIVE_PODGROUPS_KEY].get(key)
            return podgroup.compose(namespace, name, pods, native) if pods else None
        resource = JOB_RESOURCES.get(kind)
        return self._objects[resource.key].get(key) if resource is not None else None

    def lookup(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """An object a job kind reads (``api.kinds.Lookup``: a TrainJob's runtime), as
        watched; None when it is not (or its kind is not one the kinds read)."""
        resource = READ_RESOURCES.get(kind)
        if resource is None:
            return None
        key = f"{namespace}/{name}" if namespace is not None else name
        return self._objects[resource.key].get(key)

    def counts(self) -> dict[str, int]:
        return {plural: len(objects) for plural, objects in self._objects.items()}

    def pods_of(self, workload: str) -> list[Obj]:
        pods = self._objects[PODS.key]
        return [pods[k] for k in self._pods_by_workload.get(workload, ()) if k in pods]

    def workloads_with_pods(self) -> list[str]:
        return list(self._pods_by_workload)

    def priority_of(self, name: str) -> int | None:
        """A PriorityClass's value (None: no such class, or no integer value)."""
        obj = self._objects[PRIORITY_CLASSES.key].get(name)
        value = (obj or {}).get("value")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def job_keys(self) -> Iterator[tuple[str, str]]:
        """(kind, key) of every job stored: the job sync's work after a (re)start."""
        for kind, resource in JOB_RESOURCES.items():
            for key in self._objects[resource.key]:
                yield kind, key
        for composed in COMPOSED_KINDS:  # pod groups, by the Workload their pods name
            for workload in self._pods_by_workload:
                pods = self.pods_of(workload)
                if pods and composed.pod_owner(pods[0]) == workload:
                    yield composed.kind, workload
