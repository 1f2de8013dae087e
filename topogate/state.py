"""The controller's state, and its one owner: everything `serve` knows between API calls.

:class:`ControllerState` holds the watched objects and the indexes over them, the capacity
cache, the usage held by admitted workloads, the admissions this process has written but not
yet seen come back through the watch, the parsed catalog of queues, flavors and topologies,
and the work signals. The reflectors feed it (``handler``); the shells (admitter, job sync,
ungater, webhooks) read it and change it only through its methods, never each other.

Handlers run on the event loop and never wait: they update state and mark work. Re-holding an
admitted workload after a restart reads only its status and a node index (no snapshot is
built per workload), so a restart with hundreds of admitted workloads does not block the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from topogate.admission.assignments import usage_from_admission
from topogate.admission.podsets import Catalog, build_catalog
from topogate.admission.queues import Usage, checked_admission, usage_of
from topogate.api.errors import InputError
from topogate.api.gpus import GpuAssignment
from topogate.api.hypernodes import HyperNode, parse_hypernode
from topogate.api.kinds import JOB_KINDS
from topogate.api.objects import (
    admission_of,
    as_mapping,
    gpu_assignment_of,
    is_admitted,
    is_finished,
    key_of,
    labels_changed,
    meta,
    owner_job,
    workload_of_pod,
)
from topogate.cache.hypernodes import HyperNodeForest, build_forest
from topogate.cache.nodes import NodeInfo, node_from_kube, pod_usage_from_kube
from topogate.cache.snapshot import CapacityCache, ClusterSnapshot
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    HYPERNODES,
    JOB_RESOURCES,
    KAI_TOPOLOGIES,
    LOCAL_QUEUES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
    Obj,
    Resource,
)

log = logging.getLogger("topogate.state")

WATCHED: tuple[Resource, ...] = (
    NODES,
    PODS,
    *JOB_RESOURCES.values(),
    WORKLOADS,
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    PRIORITY_CLASSES,
    HYPERNODES,
    KAI_TOPOLOGIES,
)
# Objects the catalog is parsed from: any change to them parses it again.
CATALOG_INPUTS = frozenset(
    r.key
    for r in (
        CLUSTER_QUEUES,
        LOCAL_QUEUES,
        RESOURCE_FLAVORS,
        TOPOLOGIES,
        HYPERNODES,
        KAI_TOPOLOGIES,
    )
)

Listener = Callable[[Obj | None, Obj | None], None]


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

    def take_jobs(self) -> set[tuple[str, str]]:
        self.jobs_event.clear()
        taken, self.jobs = self.jobs, set()
        return taken

    def take_ungates(self) -> set[str]:
        self.ungate_event.clear()
        taken, self.ungate = self.ungate, set()
        return taken


class ControllerState:
    def __init__(self) -> None:
        self._stores: dict[str, dict[str, Obj]] = {r.key: {} for r in WATCHED}
        self._capacity = CapacityCache()
        self.signals = Signals()
        self._pods_by_workload: dict[str, set[str]] = {}  # marked pods only
        self._subscribers: dict[str, list[Listener]] = {}
        self._held: set[str] = set()  # workloads whose usage the capacity cache holds
        # Admissions decided but whose write is still in flight: they hold capacity and quota
        # (so nothing else is admitted onto them meanwhile), but nothing acts on them yet.
        self._assumed: dict[str, Obj] = {}
        # Admissions written by this process, until the watch shows them (so the job sync
        # and the ungater never wait for the watch to act on an admission).
        self._written: dict[str, Obj] = {}
        self._forest: HyperNodeForest | None = None
        self._forest_stale = True
        self._hypernodes: dict[str, HyperNode] = {}  # parsed once per event
        self._catalog: Catalog | None = None
        self.catalog_generation = 0  # bumped whenever the catalog may have changed
        self._domains: dict[tuple[str, ...], dict[tuple[str, ...], list[str]]] = {}
        # Unfinished workloads, kept up to date on every change so no reader walks every
        # Workload ever seen (finished ones stay in the store): those waiting for an admission
        # (no admission written or being written) and those running (an admission written).
        self._waiting: set[str] = set()
        self._running: set[str] = set()
        self._waiting_feeds: list[set[str]] = []
        # The quota each unfinished workload with an admission (written or being written)
        # holds, parsed once per change rather than once per cycle.
        self._quota: dict[str, Usage] = {}

    # --- reading ---------------------------------------------------------------------------

    def store(self, resource: Resource) -> Mapping[str, Obj]:
        return self._stores[resource.key]

    def counts(self) -> dict[str, int]:
        return {plural: len(store) for plural, store in self._stores.items()}

    def pods_of(self, workload: str) -> list[Obj]:
        pods = self._stores[PODS.key]
        return [pods[k] for k in self._pods_by_workload.get(workload, ()) if k in pods]

    def workloads_with_pods(self) -> list[str]:
        return list(self._pods_by_workload)

    def admission_of(self, key: str) -> Obj | None:
        """The workload's admission once written: as this process last wrote it until the
        watch shows that write, else as stored. The job sync and the ungater act on this,
        never on an admission still being written."""
        written = self._written.get(key)
        return (
            written if written is not None else admission_of(self._stores[WORKLOADS.key].get(key))
        )

    def reserved(self, key: str) -> Obj | None:
        """The admission that holds quota and capacity: written, or decided and being written
        (the admitter's view, so a write in flight is never admitted twice)."""
        found = self.admission_of(key)
        return found if found is not None else self._assumed.get(key)

    def held(self) -> frozenset[str]:
        return frozenset(self._held)

    def waiting(self) -> frozenset[str]:
        """Unfinished workloads with no admission written or being written."""
        return frozenset(self._waiting)

    def is_waiting(self, key: str) -> bool:
        return key in self._waiting

    def running(self) -> frozenset[str]:
        """Unfinished workloads whose admission is written (stored, or written by us)."""
        return frozenset(self._running)

    def quota_of(self, key: str) -> Usage:
        """The quota the workload's admission holds ({} when it holds none)."""
        return self._quota.get(key, {})

    def quota_in_use(self) -> Usage:
        """Quota in use: every admitted (or being admitted), unfinished workload's admission
        whose capacity is held."""
        total: Usage = {}
        for key in self._held:
            for slot, amounts in self._quota.get(key, {}).items():
                into = total.setdefault(slot, {})
                for resource, amount in amounts.items():
                    into[resource] = into.get(resource, 0) + amount
        return total

    def waiting_changes(self) -> set[str]:
        """A feed for one reader: the set fills with the key of every workload that changed or
        started or stopped waiting (the reader empties it as it takes them)."""
        feed = set(self._waiting)
        self._waiting_feeds.append(feed)
        return feed

    def nodes(self) -> list[NodeInfo]:
        return self._capacity.nodes()

    def snapshot(self) -> ClusterSnapshot:
        return self._capacity.snapshot()

    def workload_gpus(self, key: str) -> GpuAssignment | None:
        return self._capacity.workload_gpus(key)

    def workload_usage(self, key: str) -> Mapping[str, Mapping[str, int]]:
        return self._capacity.workload_usage(key)

    def priority_of(self, name: str) -> int | None:
        obj = self._stores[PRIORITY_CLASSES.key].get(name)
        value = (obj or {}).get("value")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def forest(self) -> HyperNodeForest | None:
        """The HyperNode forest over the current nodes; rebuilt only after a HyperNode, or a
        node's name or labels, changed (not on every node status update)."""
        if self._forest_stale:
            self._forest_stale = False
            hypernodes = list(self._hypernodes.values())
            self._forest = build_forest(hypernodes, self._capacity.nodes()) if hypernodes else None
        return self._forest

    def catalog(self) -> Catalog:
        """Queues, flavors and topologies, parsed once per change (not once per cycle)."""
        forest = self.forest()
        if self._catalog is None:
            self._catalog, warnings = build_catalog(
                list(self._stores[CLUSTER_QUEUES.key].values()),
                list(self._stores[LOCAL_QUEUES.key].values()),
                list(self._stores[RESOURCE_FLAVORS.key].values()),
                list(self._stores[TOPOLOGIES.key].values()),
                forest,
                list(self._stores[KAI_TOPOLOGIES.key].values()),
            )
            for warning in warnings:
                log.warning("%s", warning)
        return self._catalog

    # The validating webhook's view (webhooks.review.ClusterView): answered from this state,
    # with no API call per review.
    def catalog_for(self, namespace: str, queue: str) -> Catalog | None:
        return self.catalog()

    def hypernodes(self) -> list[Mapping[str, Any]] | None:
        return list(self._stores[HYPERNODES.key].values())

    # --- admissions (the admitter's writes) ------------------------------------------------

    def assume_admission(
        self,
        key: str,
        admission: Obj,
        per_node: Mapping[str, Mapping[str, int]],
        gpus: GpuAssignment,
    ) -> None:
        """Hold an admission's capacity before it is written, so no cycle meanwhile gives it
        away (assume, then write; :meth:`confirm_admission` or :meth:`forget_admission`)."""
        self._hold(key, per_node, gpus)
        self._assumed[key] = admission
        self._classify(key)

    def confirm_admission(self, key: str) -> None:
        """The write succeeded: readers may act on it before the watch brings it back."""
        admission = self._assumed.pop(key, None)
        if admission is not None and key in self._held:
            self._written[key] = admission
        self._classify(key)

    def forget_admission(self, key: str) -> None:
        """The write failed: give the capacity back, unless the watch already shows the
        workload admitted (the write applied and only its answer was lost). Should the watch
        show it admitted later, the handler holds its usage again from its status."""
        self._assumed.pop(key, None)
        self._written.pop(key, None)
        self._classify(key)
        stored = self._stores[WORKLOADS.key].get(key)
        if is_admitted(stored) and not is_finished(stored):
            return
        self._release(key)

    def reassign(self, key: str, admission: Obj) -> None:
        """An admitted workload's pods move (failed-node replacement): hold the capacity of
        the new admission before it is written, and act on it once written
        (:meth:`confirm_admission`, or :meth:`forget_reassignment` when the write failed)."""
        stored = self._stores[WORKLOADS.key].get(key) or {}
        moved = {**stored, "status": {**as_mapping(stored.get("status")), "admission": admission}}
        per_node = usage_from_admission(moved, f"Workload {key}", self.nodes_in_domain)
        gpus = self._capacity.workload_gpus(key) or {}
        kept = {
            podset: {node: sets for node, sets in placed.items() if node in per_node}
            for podset, placed in gpus.items()
        }
        self._hold(key, per_node, kept)
        self._assumed[key] = admission
        self._classify(key)

    def forget_reassignment(self, key: str) -> None:
        """The new admission was not written: hold the stored one again."""
        self._assumed.pop(key, None)
        self._written.pop(key, None)
        self._classify(key)
        stored = self._stores[WORKLOADS.key].get(key)
        if stored is not None and is_admitted(stored) and not is_finished(stored):
            self._rehold(key, stored)

    def node_lost(self, name: str) -> bool:
        """The node is gone or not Ready: its pods will not confirm their end (no kubelet)."""
        node = self._capacity.node(name)
        return node is None or not node.ready

    def _hold(
        self, key: str, per_node: Mapping[str, Mapping[str, int]], gpus: GpuAssignment
    ) -> None:
        self._capacity.set_workload_usage(key, per_node)
        self._capacity.set_workload_gpus(key, gpus)
        self._held.add(key)

    def _release(self, key: str) -> None:
        self._held.discard(key)
        self._capacity.release_workload(key)

    def _classify(self, key: str) -> None:
        """Put a workload in the waiting or running set (or neither) after any change to it
        or to its admission, and tell the feeds."""
        stored = self._stores[WORKLOADS.key].get(key)
        live = stored is not None and not is_finished(stored)
        running = live and self.admission_of(key) is not None
        waiting = live and not running and key not in self._assumed
        reserved = self.reserved(key) if live else None
        self._quota.pop(key, None)
        if reserved is not None:
            try:
                self._quota[key] = usage_of([checked_admission(reserved)])
            except InputError as error:  # counted as no quota; the sets below still move
                log.warning("Workload %s: quota in use not counted: %s", key, error.describe())
        for members, belongs in ((self._running, running), (self._waiting, waiting)):
            if belongs:
                members.add(key)
            else:
                members.discard(key)
        for feed in self._waiting_feeds:
            feed.add(key)

    def nodes_in_domain(self, levels: Sequence[str], values: Sequence[str]) -> list[str]:
        """Names of the nodes whose labels match ``values`` on ``levels``, sorted; an index per
        level list, dropped when node labels change."""
        depth = tuple(levels[: len(values)])
        index = self._domains.get(depth)
        if index is None:
            index = {}
            for node in sorted(self._capacity.nodes(), key=lambda n: n.name):
                if all(level in node.labels for level in depth):  # unlabelled: in no domain
                    path = tuple(node.labels[level] for level in depth)
                    index.setdefault(path, []).append(node.name)
            self._domains[depth] = index
        return index.get(tuple(values[: len(depth)]), [])

    # --- watch events ----------------------------------------------------------------------

    def subscribe(self, resource: Resource, listener: Listener) -> None:
        """Call ``listener(old, new)`` after each event of ``resource`` has been applied."""
        self._subscribers.setdefault(resource.key, []).append(listener)

    def handler(self, resource: Resource) -> Listener:
        dispatch: dict[str, Listener] = {
            NODES.key: self._on_node,
            PODS.key: self._on_pod,
            WORKLOADS.key: self._on_workload,
            HYPERNODES.key: self._on_hypernode,
        }
        for kind in JOB_KINDS:
            dispatch[JOB_RESOURCES[kind.kind].key] = self._job_handler(kind.kind)
        on_event = dispatch.get(resource.key, self._on_queue_object)
        store = self._stores[resource.key]
        classify = resource.key == WORKLOADS.key

        def on_change(old: Obj | None, new: Obj | None) -> None:
            if new is None and old is not None:
                store.pop(key_of(old), None)
            elif new is not None:
                store[key_of(new)] = new
            if resource.key in CATALOG_INPUTS:
                self._catalog_changed()
            try:
                on_event(old, new)
            except InputError as error:
                log.warning("ignoring %s: %s", resource.key, error.describe())
            finally:
                if classify:
                    self._classify(key_of(new if new is not None else old or {}))
            for listener in self._subscribers.get(resource.key, ()):
                listener(old, new)

        return on_change

    def _catalog_changed(self) -> None:
        self._catalog = None
        self.catalog_generation += 1

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
            self._domains.clear()
            if self._hypernodes:
                self._catalog_changed()  # HyperNode tiers follow node labels
        if new is None:
            if old is not None:
                self._capacity.remove_node(meta(old).get("name", ""))
        else:
            self._capacity.upsert_node(node_from_kube(new))
        self.signals.admit()  # capacity or labels changed: pending workloads may fit now

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        key = key_of(obj)
        workload = workload_of_pod(obj)
        if workload is not None:
            # A marked pod's usage is held by its workload from admission on, never twice.
            members = self._pods_by_workload.setdefault(workload, set())
            if new is None:
                members.discard(key)
                if not members:
                    del self._pods_by_workload[workload]
            else:
                members.add(key)
                self.signals.ungate_workload(workload)
            return
        had = old is not None and pod_usage_from_kube(old) is not None
        usage = None if new is None else pod_usage_from_kube(new)
        self._capacity.upsert_pod(usage, key)
        if had and usage is None:
            self.signals.admit()  # a pod left its node: capacity was freed

    def _job_handler(self, kind: str) -> Listener:
        def on_job(old: Obj | None, new: Obj | None) -> None:
            obj = new if new is not None else old
            assert obj is not None
            self.signals.job(kind, key_of(obj))

        return on_job

    def _on_workload(self, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        key = key_of(obj)
        owner = owner_job(obj)
        if owner is not None:
            self.signals.job(*owner)
        if new is None or is_finished(new):
            self._assumed.pop(key, None)
            self._written.pop(key, None)
            if key in self._held:
                self._release(key)
            self.signals.admit()
            return
        if is_admitted(new):
            self._assumed.pop(key, None)  # the watch shows the admission now
            self._written.pop(key, None)
            if key not in self._held:  # after a restart: usage from status.admission
                self._rehold(key, new)
            self.signals.ungate_workload(key)
        else:
            if key in self._held and key not in self._assumed and key not in self._written:
                self._release(key)  # its admission was taken back (evicted, pods gone)
            self.signals.admit()

    def _rehold(self, key: str, workload: Obj) -> None:
        try:
            per_node = usage_from_admission(workload, f"Workload {key}", self.nodes_in_domain)
        except InputError as error:  # a hand-edited admission must not stop the watch
            log.warning("cannot hold the usage of an admitted workload: %s", error)
            per_node = {}
        self._hold(key, per_node, gpu_assignment_of(workload, key))

    def _on_queue_object(self, old: Obj | None, new: Obj | None) -> None:
        self.signals.admit()


def job_keys(state: ControllerState) -> Iterable[tuple[str, str]]:
    """(kind, key) of every job in the stores: the job sync's work after a (re)start."""
    for kind, resource in JOB_RESOURCES.items():
        for key in state.store(resource):
            yield kind, key
