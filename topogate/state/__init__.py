"""The controller's state: everything `serve` knows between API calls, kept by owners with one
job each, and :class:`ControllerState`, which composes them and wires the watch handlers.

- :attr:`~ControllerState.store` (:mod:`.store`): the watched objects, and the marked pods
  per Workload;
- :attr:`~ControllerState.catalogs` (:mod:`.catalogs`): the catalog of queues, flavors and
  topologies, the HyperNode forest and the nodes per domain, parsed once per change; the
  validating webhook's view;
- :attr:`~ControllerState.ledger` (:mod:`.ledger`): the admission ledger (assume, confirm,
  forget, reassign) and the capacity cache it feeds;
- :attr:`~ControllerState.workloads` and :attr:`~ControllerState.pending`
  (:mod:`.waiting`): the waiting and running Workloads with the quota each admission holds,
  and the pending queue (the admission cycle's lanes);
- :attr:`~ControllerState.signals` (:mod:`.signals`): the work the handlers mark.

The reflectors feed it (:meth:`~ControllerState.handler`); the shells (admitter, job sync,
node failures, ungater, HyperNode discovery, the webhook server's view) read it and change it
only through the owners' public methods, never each other's fields.

Handlers run on the event loop and never wait: they update state and mark work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from topogate.api.errors import InputError
from topogate.api.kinds import GATED_KINDS, JOB_KINDS, POD_GROUP, Referring
from topogate.api.objects import (
    is_admitted,
    key_of,
    labels_changed,
    labels_of,
    only_waiting_words_changed,
    owner_job,
)
from topogate.api.podgroups import MANAGED_LABEL
from topogate.cache.snapshot import CapacityCache
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    COHORTS,
    HYPERNODES,
    JOB_RESOURCES,
    KUEUE_COHORTS,
    NATIVE_PODGROUPS_KEY,
    NODES,
    PODS,
    READ_RESOURCES,
    WORKLOADS,
    Obj,
    Resource,
)

from .catalogs import CATALOG_INPUTS, Catalogs
from .ledger import Ledger
from .signals import Signals
from .store import Store
from .waiting import PendingQueue, WorkloadIndex

log = logging.getLogger("topogate.state")

Listener = Callable[[Obj | None, Obj | None], None]


class ControllerState:
    def __init__(self) -> None:
        capacity = CapacityCache()
        self.signals = Signals()
        self.store = Store()
        self.catalogs = Catalogs(self.store, capacity.nodes)
        self.ledger = Ledger(self.store, capacity, self.catalogs.nodes_in_domain)
        self.workloads = WorkloadIndex(self.store, self.ledger)
        self.ledger.on_change(self.workloads.classify)
        self.pending = PendingQueue(self.store, self.workloads, self.catalogs)
        self._subscribers: dict[str, list[Listener]] = {}
        # Workload events that may change a decision (not a pending message written back):
        # a cycle with this, the catalog, the capacity and the quota unchanged is skipped.
        self.workload_changes = 0

    def subscribe(self, resource: Resource, listener: Listener) -> None:
        """Call ``listener(old, new)`` after each event of ``resource`` has been applied."""
        self._subscribers.setdefault(resource.key, []).append(listener)

    def handler(self, resource: Resource) -> Listener:
        """What the reflector of ``resource`` calls with each event."""
        dispatch: dict[str, Listener] = {
            NODES.key: self._on_node,
            PODS.key: self._on_pod,
            WORKLOADS.key: self._on_workload,
            HYPERNODES.key: self._on_hypernode,
            NATIVE_PODGROUPS_KEY: self._on_native_podgroup,
        }
        for kind in JOB_KINDS:
            dispatch[JOB_RESOURCES[kind.kind].key] = self._job_handler(kind.kind)
        for name, read in READ_RESOURCES.items():
            dispatch[read.key] = self._read_handler(name)
        on_event = dispatch.get(resource.key, self._on_queue_object)
        classify = resource.key == WORKLOADS.key

        status_written = resource.key in STATUS_WRITTEN

        def on_change(old: Obj | None, new: Obj | None) -> None:
            self.store.apply(resource, old, new)
            # Our own status writes: nothing the catalog or a cycle reads changed.
            read = not (status_written and status_only(old, new))
            if read and resource.key in CATALOG_INPUTS:
                self.catalogs.inputs_changed(resource.key, new if new is not None else old)
            try:
                if read:
                    on_event(old, new)
            except InputError as error:
                log.warning("ignoring %s: %s", resource.key, error.describe())
            finally:
                if classify:
                    self.workloads.classify(key_of(new if new is not None else old or {}))
            for listener in self._subscribers.get(resource.key, ()):
                listener(old, new)

        return on_change

    def _on_hypernode(self, old: Obj | None, new: Obj | None) -> None:
        self.catalogs.hypernode_changed(old, new)
        self.signals.admit()

    def _on_node(self, old: Obj | None, new: Obj | None) -> None:
        if labels_changed(old, new):
            self.catalogs.node_labels_changed()
        self.ledger.node_changed(old, new)
        self.signals.admit()  # capacity or labels changed: pending workloads may fit now

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        workload = self.store.index_pod(old, new)
        if workload is not None:
            if new is not None:
                self.signals.ungate_workload(workload)
            # A pod of a gated kind is its job's business too: a group completes, finishes or
            # is gone after an eviction only through its pods.
            gated = gated_pod_owner(new if new is not None else old or {})
            if gated is not None:
                self.signals.job(*gated)
            elif new is None or (new.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                # An evicted job is requeued once its pods have ended; a controller that
                # writes nothing on its object then (Kubeflow's training-operator), or whose
                # pods belong to another object (a RayJob's, to the RayCluster it made), would
                # leave it waiting, so the pod's end brings its job back.
                stored = self.store.objects(WORKLOADS).get(workload)
                owner = owner_job(stored) if stored is not None else None
                if owner is not None:
                    self.signals.job(*owner)
            return
        obj = new if new is not None else old
        assert obj is not None
        if self.ledger.unmarked_pod_changed(key_of(obj), old, new):
            self.signals.admit()  # a pod left its node: capacity was freed

    def _job_handler(self, kind: str) -> Listener:
        def on_job(old: Obj | None, new: Obj | None) -> None:
            obj = new if new is not None else old
            assert obj is not None
            self.signals.job(kind, key_of(obj))

        return on_job

    def _read_handler(self, read_kind: str) -> Listener:
        """An object jobs read (a TrainJob's runtime): the jobs that name it are looked at
        again (one waiting for it gets its Workload now)."""

        def on_read(old: Obj | None, new: Obj | None) -> None:
            obj = new if new is not None else old
            assert obj is not None
            m = obj.get("metadata") or {}
            namespace = m.get("namespace") if READ_RESOURCES[read_kind].namespaced else None
            for kind in JOB_KINDS:
                if not isinstance(kind, Referring):
                    continue
                for key, job in self.store.objects(JOB_RESOURCES[kind.kind]).items():
                    if (read_kind, namespace, str(m.get("name"))) in kind.references(job):
                        self.signals.job(kind.kind, key)

        return on_read

    def _on_workload(self, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        key = key_of(obj)
        owner = owner_job(obj)
        if owner is not None:
            self.signals.job(*owner)
        self.ledger.workload_changed(key, new)
        words_only = only_waiting_words_changed(old, new)  # a pending message decides nothing
        if new is not None and not self.store.workload_finished(key, new) and is_admitted(new):
            self.signals.ungate_workload(key)
        elif not words_only:
            self.signals.admit()
        if not words_only:
            self.workload_changes += 1

    def _on_native_podgroup(self, old: Obj | None, new: Obj | None) -> None:
        """A user's PodGroup: its pods' group (keyed by the group's name) is composed again.
        topogate's own groups (named as their Workloads, of any kind) are no one's pods."""
        obj = new if new is not None else old
        assert obj is not None
        if MANAGED_LABEL not in labels_of(obj):
            self.signals.job(POD_GROUP.kind, key_of(obj))

    def _on_queue_object(self, old: Obj | None, new: Obj | None) -> None:
        self.signals.admit()


# Queue objects whose status `serve` writes (fair sharing's shares).
STATUS_WRITTEN = frozenset(r.key for r in (CLUSTER_QUEUES, COHORTS, KUEUE_COHORTS))
_VOLATILE_META = ("resourceVersion", "managedFields", "generation")


def status_only(old: Obj | None, new: Obj | None) -> bool:
    """An update that changed the object's status (and bookkeeping metadata) alone."""
    if old is None or new is None:
        return False
    rest = ("status", "metadata")
    if {k: v for k, v in old.items() if k not in rest} != {
        k: v for k, v in new.items() if k not in rest
    }:
        return False
    old_meta, new_meta = (
        {k: v for k, v in (o.get("metadata") or {}).items() if k not in _VOLATILE_META}
        for o in (old, new)
    )
    return old_meta == new_meta


def gated_pod_owner(pod: Obj) -> tuple[str, str] | None:
    """(kind, key) of the gated job a marked pod belongs to, or None."""
    for kind in GATED_KINDS:
        owner = kind.pod_owner(pod)
        if owner is not None:
            return kind.kind, owner
    return None
