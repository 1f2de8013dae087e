"""The admission ledger: which Workloads hold capacity and what they hold, and the capacity
cache it feeds (nodes, the usage of pods no Workload marked, and each held Workload's usage and
GPU sets).

An admission goes through it in steps (Kueue's assume, then write): :meth:`Ledger.assume`
holds its capacity before the write is sent; :meth:`Ledger.confirm` lets readers act on it
before the watch brings it back; :meth:`Ledger.forget` gives the capacity back when the write
failed. :meth:`Ledger.reassign` moves an admitted Workload's capacity (failed-node replacement).
After a restart a Workload's usage is held again from its ``status.admission`` alone, with a
node index and no snapshot per Workload, so hundreds of admitted Workloads do not block the loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from topogate.admission.assignments import usage_from_admission
from topogate.api.errors import InputError
from topogate.api.gpus import GpuAssignment
from topogate.api.objects import (
    admission_of,
    as_mapping,
    gpu_assignment_of,
    is_admitted,
    is_finished,
    meta,
)
from topogate.cache.nodes import NodeInfo, node_from_kube, pod_usage_from_kube
from topogate.cache.snapshot import CapacityCache, ClusterSnapshot
from topogate.kube.resources import WORKLOADS, Obj

from .store import Store

log = logging.getLogger("topogate.state")

NodesInDomain = Callable[[Sequence[str], Sequence[str]], list[str]]


class Ledger:
    def __init__(
        self, store: Store, capacity: CapacityCache, nodes_in_domain: NodesInDomain
    ) -> None:
        self._workloads = store.objects(WORKLOADS)
        self._store = store
        self._capacity = capacity
        self._nodes_in_domain = nodes_in_domain
        self._held: set[str] = set()  # workloads whose usage the capacity cache holds
        # Admissions decided but whose write is still in flight: they hold capacity and quota
        # (so nothing else is admitted onto them meanwhile), but nothing acts on them yet.
        self._assumed: dict[str, Obj] = {}
        # Admissions written by this process, until the watch shows them (so the job sync
        # and the ungater never wait for the watch to act on an admission).
        self._written: dict[str, Obj] = {}
        self._listeners: list[Callable[[str], None]] = []
        self.changes = 0  # bumped by every change of what is held, assumed or written
        self._feeds: list[set[str]] = []  # keys whose hold or admission changed, per reader

    def on_change(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(key)`` after a Workload's admission was assumed, confirmed,
        forgotten or reassigned (the watch's own changes are the watch handler's to tell)."""
        self._listeners.append(listener)

    def held_changes(self) -> set[str]:
        """A feed for one reader: the set fills with the key of every workload whose hold or
        admission (:meth:`reserved`) may have changed (the reader empties it as it takes
        them); it starts with those held now."""
        feed = set(self._held)
        self._feeds.append(feed)
        return feed

    def _tell(self, key: str) -> None:
        for feed in self._feeds:
            feed.add(key)

    # --- reading ---------------------------------------------------------------------------

    def admission_of(self, key: str) -> Obj | None:
        """The workload's admission once written: as this process last wrote it until the
        watch shows that write, else as stored. The job sync and the ungater act on this,
        never on an admission still being written."""
        written = self._written.get(key)
        return written if written is not None else admission_of(self._workloads.get(key))

    def is_written(self, key: str) -> bool:
        """As ``admission_of(key) is not None``, without its copy (every watch event)."""
        return key in self._written or is_admitted(self._workloads.get(key))

    def reserved_in_place(self, key: str) -> Obj | None:
        """As :meth:`reserved`, not a copy: for reading only (every watch event)."""
        written = self._written.get(key)
        if written is not None:
            return written
        stored = self._workloads.get(key)
        if is_admitted(stored):
            assert stored is not None
            return stored["status"]["admission"]  # type: ignore[no-any-return]
        return self._assumed.get(key)

    def reserved(self, key: str) -> Obj | None:
        """The admission that holds quota and capacity: written, or decided and being written
        (the admitter's view, so a write in flight is never admitted twice)."""
        found = self.admission_of(key)
        return found if found is not None else self._assumed.get(key)

    def is_assumed(self, key: str) -> bool:
        """Its admission is decided and being written."""
        return key in self._assumed

    def held(self) -> frozenset[str]:
        return frozenset(self._held)

    def holds(self, key: str) -> bool:
        """The workload's usage is held (``key in held()``, without the copy)."""
        return key in self._held

    def nodes(self) -> list[NodeInfo]:
        return self._capacity.nodes()

    def snapshot(self) -> ClusterSnapshot:
        return self._capacity.snapshot()

    def snapshot_built(self) -> bool:
        """A snapshot of the current nodes is built (:meth:`snapshot` will not rebuild, at
        most patch a few changed nodes' rows, and the domain trees over it stay)."""
        return self._capacity.built

    def workload_gpus(self, key: str) -> GpuAssignment | None:
        return self._capacity.workload_gpus(key)

    def workload_usage(self, key: str) -> Mapping[str, Mapping[str, int]]:
        return self._capacity.workload_usage(key)

    def node_lost(self, name: str) -> bool:
        """The node is gone or not Ready: its pods will not confirm their end (no kubelet)."""
        node = self._capacity.node(name)
        return node is None or not node.ready

    # --- admissions (the admitter's and the node-failure shell's writes) -------------------

    def assume(
        self,
        key: str,
        admission: Obj,
        per_node: Mapping[str, Mapping[str, int]],
        gpus: GpuAssignment,
    ) -> None:
        """Hold an admission's capacity before it is written, so no cycle meanwhile gives it
        away (assume, then write; :meth:`confirm` or :meth:`forget`)."""
        self._hold(key, per_node, gpus)
        self._assumed[key] = admission
        self._changed(key)

    def confirm(self, key: str) -> None:
        """The write succeeded: readers may act on it before the watch brings it back."""
        admission = self._assumed.pop(key, None)
        if admission is not None and key in self._held:
            self._written[key] = admission
        self._changed(key)

    def forget(self, key: str) -> None:
        """The write failed: give the capacity back, unless the watch already shows the
        workload admitted (the write applied and only its answer was lost). Should the watch
        show it admitted later, the handler holds its usage again from its status."""
        self._assumed.pop(key, None)
        self._written.pop(key, None)
        self._changed(key)
        stored = self._workloads.get(key)
        if is_admitted(stored) and not is_finished(stored):
            return
        self._release(key)

    def reassign(self, key: str, admission: Obj) -> None:
        """An admitted workload's pods move (failed-node replacement): hold the capacity of
        the new admission before it is written, and act on it once written
        (:meth:`confirm`, or :meth:`forget_reassignment` when the write failed)."""
        stored = self._workloads.get(key) or {}
        moved = {**stored, "status": {**as_mapping(stored.get("status")), "admission": admission}}
        per_node = usage_from_admission(moved, f"Workload {key}", self._nodes_in_domain)
        gpus = self._capacity.workload_gpus(key) or {}
        kept = {
            podset: {node: sets for node, sets in placed.items() if node in per_node}
            for podset, placed in gpus.items()
        }
        self._hold(key, per_node, kept)
        self._assumed[key] = admission
        self._changed(key)

    def forget_reassignment(self, key: str) -> None:
        """The new admission was not written: hold the stored one again."""
        self._assumed.pop(key, None)
        self._written.pop(key, None)
        self._changed(key)
        stored = self._workloads.get(key)
        if stored is not None and is_admitted(stored) and not is_finished(stored):
            self._rehold(key, stored)

    # --- what the watch handlers tell --------------------------------------------------------

    def workload_changed(self, key: str, new: Obj | None) -> None:
        """The watch brought a Workload's new version (None: deleted)."""
        if key in self._held:
            self._tell(key)  # its stored admission is what :meth:`reserved` reads
        if new is None or self._store.workload_finished(key, new):
            self._assumed.pop(key, None)
            self._written.pop(key, None)
            if key in self._held:
                self._release(key)
        elif is_admitted(new):
            self._assumed.pop(key, None)  # the watch shows the admission now
            self._written.pop(key, None)
            if key not in self._held:  # after a restart: usage from status.admission
                self._rehold(key, new)
        elif key in self._held and key not in self._assumed and key not in self._written:
            self._release(key)  # its admission was taken back (evicted, pods gone)

    def node_changed(self, old: Obj | None, new: Obj | None) -> None:
        if new is None:
            if old is not None:
                self._capacity.remove_node(meta(old).get("name", ""))
        else:
            self._capacity.upsert_node(node_from_kube(new))

    def unmarked_pod_changed(self, key: str, old: Obj | None, new: Obj | None) -> bool:
        """Count the usage of a pod no Workload marked (a marked pod's usage is held by its
        Workload from admission on, never twice). True when the pod left its node."""
        had = old is not None and pod_usage_from_kube(old) is not None
        usage = None if new is None else pod_usage_from_kube(new)
        self._capacity.upsert_pod(usage, key)
        return had and usage is None

    def _hold(
        self, key: str, per_node: Mapping[str, Mapping[str, int]], gpus: GpuAssignment
    ) -> None:
        self._capacity.set_workload_usage(key, per_node)
        self._capacity.set_workload_gpus(key, gpus)
        self._held.add(key)
        self._tell(key)
        self.changes += 1

    def _release(self, key: str) -> None:
        self._held.discard(key)
        self._capacity.release_workload(key)
        self._tell(key)
        self.changes += 1

    def _rehold(self, key: str, workload: Obj) -> None:
        try:
            per_node = usage_from_admission(workload, f"Workload {key}", self._nodes_in_domain)
        except InputError as error:  # a hand-edited admission must not stop the watch
            log.warning("cannot hold the usage of an admitted workload: %s", error)
            per_node = {}
        self._hold(key, per_node, gpu_assignment_of(workload, key))

    def _changed(self, key: str) -> None:
        self.changes += 1
        self._tell(key)
        for listener in self._listeners:
            listener(key)
