"""What the controller knows: the watched objects, indexes over them and the capacity cache.

Reflectors call the ``on_*`` handlers on the event loop; handlers only update state and mark
work (a job to reconcile, a workload to ungate, an admission cycle to run), they never wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.gpus import ASSIGNMENT_ANNOTATION, Assignment, parse_assignment
from topogate.api.hypernodes import HyperNode, parse_hypernode
from topogate.cache.hypernodes import HyperNodeForest, build_forest
from topogate.cache.nodes import node_from_kube, pod_usage_from_kube
from topogate.cache.snapshot import CapacityCache
from topogate.kubeapi import (
    CLUSTER_QUEUES,
    HYPERNODES,
    JOBS,
    JOBSETS,
    LOCAL_QUEUES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
    Obj,
    Resource,
    key_of,
)

log = logging.getLogger("topogate.world")

WATCHED: tuple[Resource, ...] = (
    NODES,
    PODS,
    JOBS,
    JOBSETS,
    WORKLOADS,
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    PRIORITY_CLASSES,
    HYPERNODES,
)


def gpu_assignment_of(workload: Obj, key: str) -> Assignment:
    """The GPU sets an admitted Workload holds, from its annotation (a bad one is logged)."""
    text = (meta(workload).get("annotations") or {}).get(ASSIGNMENT_ANNOTATION)
    if not text:
        return {}
    try:
        return parse_assignment(str(text))
    except ValueError as error:
        log.warning("Workload %s: ignoring %s: %s", key, ASSIGNMENT_ANNOTATION, error)
        return {}


def labels_changed(old: Obj | None, new: Obj | None) -> bool:
    """An object appeared, went away, or changed its labels (status updates do not count)."""
    return old is None or new is None or meta(old).get("labels") != meta(new).get("labels")


def meta(obj: Obj) -> dict[str, Any]:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def condition(obj: Obj | None, kind: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def is_true(obj: Obj | None, kind: str) -> bool:
    cond = condition(obj, kind)
    return cond is not None and cond.get("status") == "True"


def is_admitted(workload: Obj | None) -> bool:
    return bool(((workload or {}).get("status") or {}).get("admission"))


def is_finished(workload: Obj | None) -> bool:
    return is_true(workload, "Finished")


def workload_of_pod(pod: Obj) -> str | None:
    """namespace/name of the Workload a marked pod belongs to."""
    m = meta(pod)
    name = (m.get("annotations") or {}).get(c.WORKLOAD_ANNOTATION)
    if not name or c.PODSET_LABEL not in (m.get("labels") or {}):
        return None
    return f"{m.get('namespace') or 'default'}/{name}"


def owner_job(workload: Obj) -> tuple[str, str] | None:
    """(kind, namespace/name) of the Job or JobSet that owns a Workload."""
    m = meta(workload)
    for ref in m.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") in ("Job", "JobSet"):
            return str(ref["kind"]), f"{m.get('namespace')}/{ref.get('name')}"
    return None


@dataclass
class Signals:
    """Work marked by handlers, taken by the loops."""

    jobs: set[tuple[str, str]] = field(default_factory=set)  # (kind, key)
    jobs_event: asyncio.Event = field(default_factory=asyncio.Event)
    admit_event: asyncio.Event = field(default_factory=asyncio.Event)
    ungate: set[str] = field(default_factory=set)  # workload keys
    ungate_event: asyncio.Event = field(default_factory=asyncio.Event)

    def job(self, kind: str, key: str) -> None:
        self.jobs.add((kind, key))
        self.jobs_event.set()

    def admit(self) -> None:
        self.admit_event.set()

    def ungate_workload(self, key: str) -> None:
        self.ungate.add(key)
        self.ungate_event.set()


class World:
    def __init__(self) -> None:
        self.stores: dict[str, dict[str, Obj]] = {r.plural: {} for r in WATCHED}
        self.capacity = CapacityCache()
        self.signals = Signals()
        # workload key -> pod keys (marked pods only), for the ungater and status.
        self.pods_by_workload: dict[str, set[str]] = {}
        # Extra listeners (the ungater's expectations, metrics) per resource plural.
        self.listeners: dict[str, list[Callable[[Obj | None, Obj | None], None]]] = {}
        # Workloads whose usage is held in the capacity cache.
        self.held: set[str] = set()
        self.hold_usage: Callable[[Obj], None] | None = None  # set by the admitter
        self._forest: HyperNodeForest | None = None
        self._forest_stale = True
        self._hypernodes: dict[str, HyperNode] = {}  # parsed once per event

    def forest(self) -> HyperNodeForest | None:
        """The HyperNode forest over the current nodes; rebuilt only after a HyperNode, or a
        node's name or labels, changed (not on every node status update)."""
        if self._forest_stale:
            self._forest_stale = False
            hypernodes = list(self._hypernodes.values())
            self._forest = build_forest(hypernodes, self.capacity.nodes()) if hypernodes else None
        return self._forest

    def hold(self, key: str, per_node: Mapping[str, Mapping[str, int]]) -> None:
        """Hold an admitted workload's capacity until it finishes or is deleted."""
        self.capacity.set_workload_usage(key, per_node)
        self.held.add(key)

    def release(self, key: str) -> None:
        self.held.discard(key)
        self.capacity.release_workload(key)

    def store(self, resource: Resource) -> dict[str, Obj]:
        return self.stores[resource.plural]

    def handler(self, resource: Resource) -> Callable[[Obj | None, Obj | None], None]:
        dispatch = {
            NODES.plural: self._on_node,
            PODS.plural: self._on_pod,
            JOBS.plural: lambda old, new: self._on_job("Job", old, new),
            JOBSETS.plural: lambda old, new: self._on_job("JobSet", old, new),
            WORKLOADS.plural: self._on_workload,
            HYPERNODES.plural: self._on_hypernode,
        }.get(resource.plural, self._on_queue_object)
        store = self.stores[resource.plural]

        def on_change(old: Obj | None, new: Obj | None) -> None:
            if new is None and old is not None:
                store.pop(key_of(old), None)
            elif new is not None:
                store[key_of(new)] = new
            try:
                dispatch(old, new)
            except InputError as error:
                log.warning("ignoring %s: %s", resource.plural, error.describe())
            for listener in self.listeners.get(resource.plural, ()):
                listener(old, new)

        return on_change

    # --- handlers ------------------------------------------------------------------------

    def _on_hypernode(self, old: Obj | None, new: Obj | None) -> None:
        # A HyperNode that does not parse is left out (the webhook refuses such objects; one
        # that predates it must not stall every other topology job, as it would in Volcano).
        if old is not None:
            self._hypernodes.pop(str(meta(old).get("name")), None)
        if new is not None:
            try:
                parsed = parse_hypernode(new)
                self._hypernodes[parsed.name] = parsed
            except InputError as error:
                log.warning("ignoring %s", error.describe())
        self._forest_stale = True
        self.signals.admit()

    def _on_node(self, old: Obj | None, new: Obj | None) -> None:
        if labels_changed(old, new):
            self._forest_stale = True
        if new is None:
            if old is not None:
                self.capacity.remove_node(meta(old).get("name", ""))
        else:
            self.capacity.upsert_node(node_from_kube(new))
        self.signals.admit()  # capacity or labels changed: pending workloads may fit now

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        key = key_of(obj)
        workload = workload_of_pod(obj)
        if workload is not None:
            # A marked pod's usage is held by its workload from admission on, never twice.
            members = self.pods_by_workload.setdefault(workload, set())
            if new is None:
                members.discard(key)
                if not members:
                    del self.pods_by_workload[workload]
            else:
                members.add(key)
                self.signals.ungate_workload(workload)
            return
        had = old is not None and pod_usage_from_kube(old) is not None
        usage = None if new is None else pod_usage_from_kube(new)
        self.capacity.upsert_pod(usage, key)
        if had and usage is None:
            self.signals.admit()  # a pod left its node: capacity was freed

    def _on_job(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        self.signals.job(kind, key_of(obj))

    def _on_workload(self, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        key = key_of(obj)
        owner = owner_job(obj)
        if owner is not None:
            self.signals.job(*owner)
        if new is None or is_finished(new):
            if key in self.held:
                self.release(key)
            self.signals.admit()
            return
        if is_admitted(new):
            if key not in self.held and self.hold_usage is not None:
                self.hold_usage(new)  # after a restart: usage from status.admission
            self.signals.ungate_workload(key)
        else:
            self.signals.admit()

    def _on_queue_object(self, old: Obj | None, new: Obj | None) -> None:
        self.signals.admit()
