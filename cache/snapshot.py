"""The capacity cache and its immutable, array-shaped snapshots.

A ``ClusterSnapshot`` holds every node as one row: allocatable and used resources as an
int64 matrix, labels as per-key integer codes, taints as an index into a small table of
distinct taint sets. Everything downstream (eligibility, counting, aggregation over the
topology tree) is vectorised over these rows, so 100,000 nodes stay cheap.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from topogate.api.gpus import GpuAssignment, Matrix
from topogate.api.podspec import Taint

from .nodes import PODS, NodeInfo, PodUsage

IntArray = npt.NDArray[np.int64]
PENDING_LIMIT = 1 << 16  # pod usage deltas held back at most (a snapshot adds them)
# Node changes patched into the rows at most between two snapshots, or one in PATCH_SHARE of the
# nodes if more (beyond: a rebuild, as when the caches first fill; 5,000 added nodes cost a
# sixth of a rebuild at 100,000), and entries patches may append to the taint set, GPU matrix
# and label value tables before a rebuild drops those no node uses any more.
PATCH_LIMIT = 256
PATCH_SHARE = 20
APPEND_LIMIT = 1024
CodeArray = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

log = logging.getLogger("topogate.cache")


@dataclass(frozen=True, slots=True)
class GpuState:
    """Per node: its GPU bandwidth matrix (as pair bandwidths: the slower direction, +inf on
    the diagonal; nodes with equal matrices share one) and the GPU indices already held."""

    code: CodeArray  # row -> index into ``pairs``; -1: no matrix
    pairs: list[FloatArray] = field(default_factory=list)
    taken: Mapping[int, frozenset[int]] = field(default_factory=dict)  # row -> GPU indices
    # Results of GPU-set searches keyed by (what, matrix code, free GPUs, ...), shared by the
    # copies that only take more GPUs (the matrices stay the same).
    memo: dict[tuple[object, ...], object] = field(default_factory=dict, compare=False)

    def pair(self, row: int) -> FloatArray | None:
        code = int(self.code[row])
        return self.pairs[code] if code >= 0 else None

    def free(self, row: int) -> list[int]:
        """GPU indices of the node not held by a pod or an admitted workload."""
        pair = self.pair(row)
        if pair is None:
            return []
        taken = self.taken.get(row, frozenset())
        return [g for g in range(len(pair)) if g not in taken]

    def without_taken(self, rows: Mapping[int, Iterable[int]]) -> GpuState:
        """A copy in which these GPUs (per row) are free again (what-if: their holder gone)."""
        taken = dict(self.taken)
        for row, gpus in rows.items():
            left = taken.get(row, frozenset()) - frozenset(gpus)
            if left:
                taken[row] = left
            else:
                taken.pop(row, None)
        return GpuState(self.code, self.pairs, taken, self.memo)

    def with_taken(self, rows: Mapping[int, Iterable[int]]) -> GpuState:
        taken = dict(self.taken)
        for row, gpus in rows.items():
            taken[row] = taken.get(row, frozenset()) | frozenset(gpus)
        return GpuState(self.code, self.pairs, taken, self.memo)

    @classmethod
    def build(
        cls,
        nodes: list[NodeInfo],
        usage: Iterable[PodUsage],
        extra: Mapping[str, Iterable[int]],
        index: Mapping[str, int],
    ) -> GpuState:
        codes = np.full(len(nodes), -1, dtype=np.int32)
        pairs: list[FloatArray] = []
        by_value: dict[Matrix, int] = {}
        by_id: dict[int, int] = {}  # profiles are shared objects: skip hashing them
        for row, node in enumerate(nodes):
            matrix = node.gpu_bandwidth
            if matrix is None:
                continue
            found = by_id.get(id(matrix))
            if found is None:
                found = by_value.get(matrix)
            if found is not None:
                code = found
            else:
                code = by_value[matrix] = len(pairs)
                values = np.asarray(matrix, dtype=np.float64)
                pair = np.minimum(values, values.T)
                np.fill_diagonal(pair, np.inf)
                pairs.append(pair)
            by_id[id(matrix)] = code
            codes[row] = code
        taken: dict[int, set[int]] = {}
        for pod in usage:
            at = index.get(pod.node_name)
            if at is not None and pod.gpus:
                taken.setdefault(at, set()).update(pod.gpus)
        for node_name, gpus in extra.items():
            at = index.get(node_name)
            if at is not None:
                taken.setdefault(at, set()).update(gpus)
        return cls(codes, pairs, {row: frozenset(g) for row, g in taken.items()})


@dataclass(frozen=True, slots=True)
class LabelColumn:
    """One label key over all nodes: ``codes[i]`` indexes ``values``; -1 where absent."""

    codes: CodeArray
    values: list[str]
    index: dict[str, int]

    def code(self, value: str) -> int:
        return self.index.get(value, -2)  # -2 never matches any node's code


class ClusterSnapshot:
    """All nodes and their free capacity at one moment; never mutated after construction."""

    __slots__ = (
        "_free",
        "_free_rows",
        "allocatable",
        "gpu",
        "labels",
        "node_index",
        "node_names",
        "ready",
        "resource_index",
        "resources",
        "taint_sets",
        "taints",
        "unschedulable",
        "used",
    )

    def __init__(
        self,
        node_names: list[str],
        resources: list[str],
        allocatable: IntArray,
        used: IntArray,
        ready: BoolArray,
        unschedulable: BoolArray,
        labels: dict[str, LabelColumn],
        taints: CodeArray,
        taint_sets: list[tuple[Taint, ...]],
        gpu: GpuState | None = None,
        node_index: dict[str, int] | None = None,
        resource_index: dict[str, int] | None = None,
    ) -> None:
        self.node_names = node_names
        # Shared by the copies (same rows and columns): a dict of 100,000 names is not free.
        self.node_index = node_index or {name: i for i, name in enumerate(node_names)}
        self.resources = resources
        self.resource_index = resource_index or {name: i for i, name in enumerate(resources)}
        self.allocatable = allocatable
        self.used = used
        self.ready = ready
        self.unschedulable = unschedulable
        self.labels = labels
        self.taints = taints
        self.taint_sets = taint_sets
        self._free: IntArray | None = None
        self._free_rows: tuple[IntArray, IntArray] | None = None
        self.gpu = gpu if gpu is not None else GpuState(np.full(len(node_names), -1, np.int32))

    @property
    def node_count(self) -> int:
        return len(self.node_names)

    @property
    def free(self) -> IntArray:
        """Allocatable minus used, never below zero (a node can be over-committed)."""
        if self._free is None:
            self._free = np.maximum(self.allocatable - self.used, 0)
        return self._free

    def free_rows(self, rows: IntArray) -> IntArray:
        """``free[rows]``, read-only and column-major, kept for the last ``rows`` array asked
        about (a domain tree's nodes: every placement on that tree asks again).

        Column-major because the core reads it a resource at a time (pods per node is a
        minimum over the requested columns); the snapshot never changes, so neither does
        this (as Kueue's snapshot holds each leaf's free capacity)."""
        kept = self._free_rows
        if kept is not None and kept[0] is rows:
            return kept[1]
        ordered = np.asfortranarray(self.free[rows])
        ordered.flags.writeable = False
        self._free_rows = (rows, ordered)
        return ordered

    def label(self, key: str) -> LabelColumn:
        column = self.labels.get(key)
        if column is None:
            return LabelColumn(np.full(self.node_count, -1, dtype=np.int32), [], {})
        return column

    def vector(self, amounts: Mapping[str, int]) -> tuple[IntArray, list[str]]:
        """A resource vector in this snapshot's column order, and the names it lacks."""
        vec = np.zeros(len(self.resources), dtype=np.int64)
        missing = []
        for name, amount in amounts.items():
            col = self.resource_index.get(name)
            if col is None:
                if amount > 0:
                    missing.append(name)
            else:
                vec[col] = amount
        return vec, missing

    def with_usage(
        self,
        per_node: Mapping[str, Mapping[str, int]],
        gpus: Mapping[str, Iterable[int]] | None = None,
    ) -> ClusterSnapshot:
        """A copy with more usage (e.g. workloads admitted earlier in this cycle); same rows.
        ``gpus``: GPU indices they hold, per node."""
        used = self.used.copy()
        columns = self.resource_index
        for node, amounts in per_node.items():
            row = self.node_index.get(node)
            if row is None:
                continue
            for name, amount in amounts.items():  # resources no node has are not counted
                column = columns.get(name)
                if column is not None:
                    used[row, column] += amount
        gpu = self.gpu
        if gpus:
            rows = {self.node_index[n]: g for n, g in gpus.items() if n in self.node_index}
            gpu = gpu.with_taken(rows)
        return ClusterSnapshot(
            self.node_names,
            self.resources,
            self.allocatable,
            used,
            self.ready,
            self.unschedulable,
            self.labels,
            self.taints,
            self.taint_sets,
            gpu,
            self.node_index,
            self.resource_index,
        )

    def without_usage(
        self,
        per_node: Mapping[str, Mapping[str, int]],
        gpus: Mapping[str, Iterable[int]] | None = None,
    ) -> ClusterSnapshot:
        """A copy with this usage (and these GPUs) given back: what the cluster would look
        like without some workloads, for preemption's simulation; same rows."""
        negated = {node: {k: -v for k, v in amounts.items()} for node, amounts in per_node.items()}
        copy = self.with_usage(negated)
        if not gpus:
            return copy
        rows = {self.node_index[n]: g for n, g in gpus.items() if n in self.node_index}
        return ClusterSnapshot(
            copy.node_names,
            copy.resources,
            copy.allocatable,
            copy.used,
            copy.ready,
            copy.unschedulable,
            copy.labels,
            copy.taints,
            copy.taint_sets,
            copy.gpu.without_taken(rows),
            copy.node_index,
            copy.resource_index,
        )

    def with_gpus(self, rows: Mapping[int, Iterable[int]]) -> ClusterSnapshot:
        """A copy whose nodes (by row) hold these GPU indices too; same usage otherwise."""
        return ClusterSnapshot(
            self.node_names,
            self.resources,
            self.allocatable,
            self.used,
            self.ready,
            self.unschedulable,
            self.labels,
            self.taints,
            self.taint_sets,
            self.gpu.with_taken(rows),
            self.node_index,
            self.resource_index,
        )

    def pod_vector(self, requests: Mapping[str, int]) -> tuple[IntArray, list[str]]:
        """One pod's requests plus the pod slot it takes (so allocatable pods is honoured)."""
        return self.vector({**requests, PODS: 1})

    @classmethod
    def build(
        cls,
        nodes: Iterable[NodeInfo],
        usage: Iterable[PodUsage] = (),
        extra_usage: Mapping[str, Mapping[str, int]] | None = None,
        extra_gpus: Mapping[str, Iterable[int]] | None = None,
    ) -> ClusterSnapshot:
        """Rows for ``nodes``; ``usage`` (pods) and ``extra_usage`` (per node) are subtracted.

        Each pod also takes one "pods" slot, so allocatable pods is honoured. GPU indices held
        by pods' allocation annotations and ``extra_gpus`` (per node) are taken.
        """
        node_list = list(nodes)
        names = [n.name for n in node_list]
        resources: dict[str, int] = {PODS: 0}
        for node in node_list:
            for name in node.allocatable:
                resources.setdefault(name, len(resources))
        usage_list = list(usage)
        for pod in usage_list:
            for name in pod.requests:
                resources.setdefault(name, len(resources))
        for per_node in (extra_usage or {}).values():
            for name in per_node:
                resources.setdefault(name, len(resources))
        n, r = len(node_list), len(resources)
        allocatable = np.zeros((n, r), dtype=np.int64)
        for i, node in enumerate(node_list):
            for name, amount in node.allocatable.items():
                allocatable[i, resources[name]] = amount
        index = {name: i for i, name in enumerate(names)}
        used = np.zeros((n, r), dtype=np.int64)
        pods_col = resources[PODS]
        for pod in usage_list:
            row = index.get(pod.node_name)
            if row is None:
                continue  # bound to a node we do not know (or that left): no capacity to hold
            for name, amount in pod.requests.items():
                used[row, resources[name]] += amount
            used[row, pods_col] += 1
        for node_name, amounts in (extra_usage or {}).items():
            row = index.get(node_name)
            if row is not None:
                for name, amount in amounts.items():
                    used[row, resources[name]] += amount
        ready = np.fromiter((n.ready for n in node_list), dtype=np.bool_, count=n)
        taint_codes, taint_sets = _taint_codes(node_list)
        unschedulable = np.fromiter((n.unschedulable for n in node_list), dtype=np.bool_, count=n)
        return cls(
            node_names=names,
            resources=list(resources),
            allocatable=allocatable,
            used=used,
            ready=ready,
            unschedulable=unschedulable,
            labels=_label_columns(node_list),
            taints=taint_codes,
            taint_sets=taint_sets,
            gpu=GpuState.build(node_list, usage_list, extra_gpus or {}, index),
            node_index=index,  # built once: a dict of 100,000 names is not free
        )


def _label_columns(nodes: list[NodeInfo]) -> dict[str, LabelColumn]:
    tables: dict[str, tuple[list[str], dict[str, int], list[int]]] = {}
    n = len(nodes)
    for i, node in enumerate(nodes):
        for key, value in node.labels.items():
            table = tables.get(key)
            if table is None:
                table = tables[key] = ([], {}, [-1] * n)
            values, lookup, codes = table
            code = lookup.get(value)
            if code is None:
                code = lookup[value] = len(values)
                values.append(value)
            codes[i] = code
    return {
        key: LabelColumn(np.array(codes, dtype=np.int32), values, lookup)
        for key, (values, lookup, codes) in tables.items()
    }


def _taint_codes(nodes: list[NodeInfo]) -> tuple[CodeArray, list[tuple[Taint, ...]]]:
    sets: dict[tuple[Taint, ...], int] = {(): 0}
    codes = np.zeros(len(nodes), dtype=np.int32)
    for i, node in enumerate(nodes):
        if node.taints:
            codes[i] = sets.setdefault(node.taints, len(sets))
    return codes, list(sets)


class CapacityCache:
    """The mutable cache the controller feeds from watches; hands out immutable snapshots.

    Pods of admitted topogate workloads must not be added as pods: their usage is held as
    workload usage from admission until the workload finishes, so it is never counted twice.

    Incremental: pod and workload usage is added to and taken from the used matrix in place.
    A snapshot shares that matrix until the next change, which copies it first (copy on
    write), so handing out a snapshot after 1% pod churn on 100,000 nodes costs a matrix copy,
    not a rebuild. Node changes are noted and patched into the rows when the next snapshot is
    taken (:meth:`_patch_nodes`): a changed node's row in copies of the arrays that changed, an
    added or removed node's row inserted or deleted in name order. Label columns no change
    touched stay the same objects, so domain trees built over them are kept. The node part is
    rebuilt only for a resource no column holds, many changes at once, or tables grown stale.
    """

    def __init__(self) -> None:
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, PodUsage] = {}
        self._workloads: dict[str, dict[str, dict[str, int]]] = {}
        self._gpu_assignments: dict[str, GpuAssignment] = {}
        self._snapshot: ClusterSnapshot | None = None
        self._base: ClusterSnapshot | None = None  # rows and columns; None: rebuild
        self._used: IntArray | None = None  # kept in step with pods and workloads
        self._used_shared = False  # a snapshot holds ``_used``: copy before writing
        # Pod usage not yet added to ``_used``: (row, column, amount), added in one numpy call
        # when the next snapshot is taken (sums commute, so workloads may be applied before).
        self._pending_rows: list[int] = []
        self._pending_columns: list[int] = []
        self._pending_amounts: list[int] = []
        self._gpu_pods: dict[str, PodUsage] = {}  # pods holding GPU indices
        self._gpu_stale = True
        # Nodes changed since ``_base`` was built, each as ``_base`` has it (None: not there).
        self._node_changes: dict[str, NodeInfo | None] = {}
        self._appended = 0  # table entries patches appended since the last rebuild
        # Pods bound to nodes ``_base`` has no row for, per node name (an added node's row
        # counts them); None: not known, the next added node looks through every pod once.
        self._strays: dict[str, dict[str, PodUsage]] | None = None
        self.rebuilds = 0  # full rebuilds (for the benchmark and tests)
        self.patches = 0  # snapshots that patched node rows instead

    def upsert_node(self, node: NodeInfo) -> None:
        previous = self._nodes.get(node.name)
        if previous != node:
            if node.gpu_problem and (previous is None or previous.gpu_problem != node.gpu_problem):
                log.warning("GPU topology of node %s ignored: %s", node.name, node.gpu_problem)
            self._nodes[node.name] = node
            self._node_changed(node.name, previous)

    def remove_node(self, name: str) -> None:
        previous = self._nodes.pop(name, None)
        if previous is not None:
            self._node_changed(name, previous)

    def _node_changed(self, name: str, previous: NodeInfo | None) -> None:
        if self._base is None:
            return  # the next snapshot rebuilds anyway
        self._node_changes.setdefault(name, previous)
        self._snapshot = None

    def nodes(self) -> list[NodeInfo]:
        return list(self._nodes.values())

    @property
    def built(self) -> bool:
        """The node part of a snapshot is built for the current nodes: the next snapshot
        costs a matrix copy or a patch of a few rows at most, never a rebuild, and keeps the
        label columns (so the domain trees over them). Changes of rows or labels are not."""
        if self._base is None or self._used is None:
            return False
        if len(self._node_changes) > _patch_limit(self._base):
            return False
        for name, before in self._node_changes.items():
            after = self._nodes.get(name)
            if before is None or after is None or before.labels != after.labels:
                return False
        return True

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def upsert_pod(self, pod: PodUsage | None, key: str) -> None:
        """Record a pod's usage; ``None`` (unbound or terminated) forgets it."""
        previous = self._pods.pop(key, None)
        if pod is not None:
            self._pods[key] = pod
            if previous is not None and previous == pod:
                return
        elif previous is None:
            return
        if previous is not None:
            self._apply_pod(previous, -1, key)
        if pod is not None:
            self._apply_pod(pod, 1, key)
        if (previous is not None and previous.gpus) or (pod is not None and pod.gpus):
            self._gpu_pods.pop(key, None)
            if pod is not None and pod.gpus:
                self._gpu_pods[key] = pod
            self._gpu_stale = True
        self._snapshot = None

    def set_workload_usage(self, key: str, per_node: Mapping[str, Mapping[str, int]]) -> None:
        """Hold an admitted workload's usage (idempotent: replaces what was held for ``key``)."""
        previous = self._workloads.get(key)
        if previous is not None:
            self._apply(previous, -1)
        self._workloads[key] = {node: dict(amounts) for node, amounts in per_node.items()}
        self._apply(self._workloads[key], 1)
        self._snapshot = None

    def release_workload(self, key: str) -> None:
        held = self._workloads.pop(key, None)
        gpus = self._gpu_assignments.pop(key, None)
        if held is not None:
            self._apply(held, -1)
        if gpus is not None:
            self._gpu_stale = True
        if held is not None or gpus is not None:
            self._snapshot = None

    def set_workload_gpus(self, key: str, assignment: GpuAssignment) -> None:
        """Hold the GPU sets an admitted workload was given (per PodSet and node); released
        with its usage. Empty: nothing held."""
        if assignment:
            self._gpu_assignments[key] = assignment
        elif self._gpu_assignments.pop(key, None) is None:
            return
        self._gpu_stale = True
        self._snapshot = None

    def workload_gpus(self, key: str) -> GpuAssignment | None:
        return self._gpu_assignments.get(key)

    def workload_usage(self, key: str) -> Mapping[str, Mapping[str, int]]:
        """What an admitted workload holds per node (empty when nothing is held)."""
        return self._workloads.get(key, {})

    def _invalidate(self) -> None:
        self._base = self._used = self._snapshot = None
        self._strays = None
        self._node_changes.clear()
        self._drop_pending()

    def _drop_pending(self) -> None:
        """A rebuild counts every pod from the dicts: the deltas not added yet go."""
        self._pending_rows.clear()
        self._pending_columns.clear()
        self._pending_amounts.clear()

    def _add_pending(self) -> None:
        """Add the pod usage noted since the last snapshot to the used matrix."""
        if not self._pending_rows or self._used is None:
            return
        if self._used_shared:
            self._used = self._used.copy()
            self._used_shared = False
        np.add.at(
            self._used,
            (np.array(self._pending_rows), np.array(self._pending_columns)),
            np.array(self._pending_amounts, dtype=self._used.dtype),
        )
        self._drop_pending()

    def _apply(self, per_node: Mapping[str, Mapping[str, int]], sign: int) -> None:
        """Add (``sign`` 1) or take (-1) usage in the used matrix, in place."""
        base, used = self._base, self._used
        if base is None or used is None:
            return  # the next snapshot rebuilds from the dicts
        columns, rows = base.resource_index, base.node_index
        for node, amounts in per_node.items():
            row = rows.get(node)
            if row is None:
                continue  # a node we do not know holds nothing (as in a rebuild)
            for name in amounts:
                if name not in columns:
                    self._invalidate()  # a new resource: a new column
                    return
        if self._used_shared:
            used = self._used = used.copy()
            self._used_shared = False
        for node, amounts in per_node.items():
            row = rows.get(node)
            if row is not None:
                for name, amount in amounts.items():
                    used[row, columns[name]] += sign * amount

    def _apply_pod(self, pod: PodUsage, sign: int, key: str) -> None:
        """:meth:`_apply` for one pod's requests and its slot: the path of every pod event,
        without the mappings built around it (a 1% churn at 100,000 nodes is 8,000 calls)."""
        base = self._base
        if base is None or self._used is None:
            return
        row = base.node_index.get(pod.node_name)
        if row is None:  # a node we do not know holds nothing (as in a rebuild)
            strays = self._strays
            if strays is not None:  # but it will once its node comes
                if sign > 0:
                    strays.setdefault(pod.node_name, {})[key] = pod
                else:
                    on_node = strays.get(pod.node_name, {})
                    on_node.pop(key, None)
                    if not on_node:
                        strays.pop(pod.node_name, None)
            return
        columns = base.resource_index
        rows, cols, amounts = self._pending_rows, self._pending_columns, self._pending_amounts
        for name, amount in pod.requests.items():
            column = columns.get(name)
            if column is None:
                self._invalidate()  # a new resource: a new column (and what was noted goes)
                return
            rows.append(row)
            cols.append(column)
            amounts.append(sign * amount)
        rows.append(row)
        cols.append(columns[PODS])
        amounts.append(sign)
        if len(rows) >= PENDING_LIMIT:  # no snapshot for long (a standby replica)
            self._add_pending()

    def _gpus_held(self) -> dict[str, set[int]]:
        gpus: dict[str, set[int]] = {}
        for assignment in self._gpu_assignments.values():
            for placed in assignment.values():
                for node, sets in placed.items():
                    gpus.setdefault(node, set()).update(g for one in sets for g in one)
        return gpus

    def _rebuild(self) -> ClusterSnapshot:
        extra: dict[str, dict[str, int]] = {}
        for per_node in self._workloads.values():
            for node, amounts in per_node.items():
                slot = extra.setdefault(node, {})
                for name, amount in amounts.items():
                    slot[name] = slot.get(name, 0) + amount
        self.rebuilds += 1
        snapshot = ClusterSnapshot.build(
            sorted(self._nodes.values(), key=lambda n: n.name),
            self._pods.values(),
            extra,
            self._gpus_held(),
        )
        self._base, self._used, self._gpu_stale = snapshot, snapshot.used, False
        self._node_changes.clear()
        self._appended = 0
        self._strays = None
        self._drop_pending()
        return snapshot

    def snapshot(self) -> ClusterSnapshot:
        if self._snapshot is not None:
            return self._snapshot
        if self._node_changes and self._base is not None and self._used is not None:
            self._add_pending()  # deltas are by row: added before rows move
            patched = self._patch_nodes(self._base, self._used)
            self._node_changes.clear()
            if patched is None:
                self._invalidate()
            else:
                self._base, self._used = patched, patched.used
                self._used_shared = True  # the old snapshots may share what was not copied
                self.patches += 1
        base, used = self._base, self._used
        if base is None or used is None:
            snapshot = self._rebuild()
        else:
            gpu = base.gpu
            if self._gpu_stale:
                taken = _taken(base.node_index, self._gpu_pods.values(), self._gpus_held())
                gpu = GpuState(base.gpu.code, base.gpu.pairs, taken)
                self._base = base = _with_gpu(base, gpu)
                self._gpu_stale = False
            self._add_pending()
            assert self._used is not None
            snapshot = _with_used(base, self._used)
        self._used_shared = True
        self._snapshot = snapshot
        return snapshot

    def _patch_nodes(self, base: ClusterSnapshot, used: IntArray) -> ClusterSnapshot | None:
        """``base`` with the noted node changes: the rows of changed nodes patched, those of
        added and removed nodes inserted and deleted, in new arrays where anything changed (a
        snapshot handed out never changes). None when a rebuild is needed instead."""
        changes = self._node_changes
        if len(changes) > _patch_limit(base):
            return None
        columns = base.resource_index
        changed: list[NodeInfo] = []
        added: list[NodeInfo] = []
        removed: list[str] = []
        for name, before in changes.items():
            after = self._nodes.get(name)
            if after is not None and any(r not in columns for r in after.allocatable):
                return None  # a new resource: a new column
            if before is None:
                if after is not None:
                    added.append(after)
            elif after is None:
                removed.append(name)
            elif after != before:
                changed.append(after)
        rows = _Rows(base, used)
        if removed or added:
            if added and self._strays is None:
                self._strays = {}
                for key, pod in self._pods.items():
                    if pod.node_name not in base.node_index:
                        self._strays.setdefault(pod.node_name, {})[key] = pod
            rows.reshape(removed, sorted(added, key=lambda n: n.name))
            self._gpu_stale = True  # taken GPUs are kept by row
            if added and not self._count_usage(rows, {n.name for n in added}):
                return None
            if removed:
                self._strays = None  # their pods are strays now: looked for when needed
        for node in changed:
            rows.write(node, changes[node.name])
        for node in added:
            rows.write(node, None)
        self._appended += rows.appended
        if self._appended > APPEND_LIMIT:
            return None
        return rows.snapshot()

    def _count_usage(self, rows: _Rows, names: set[str]) -> bool:
        """Add to the new rows of ``names`` the usage a rebuild would find there (pods and
        admitted workloads bound to them before they came). False: a resource no column
        holds (a rebuild adds the column)."""
        index, columns, used = rows.node_index, rows.base.resource_index, rows.used
        pods_col = columns[PODS]
        strays = self._strays if self._strays is not None else {}
        for node_name in names:
            row = index[node_name]
            for pod in strays.pop(node_name, {}).values():
                for name, amount in pod.requests.items():
                    column = columns.get(name)
                    if column is None:
                        return False
                    used[row, column] += amount
                used[row, pods_col] += 1
        for per_node in self._workloads.values():
            for node in names.intersection(per_node):
                for name, amount in per_node[node].items():
                    column = columns.get(name)
                    if column is None:
                        return False
                    used[index[node], column] += amount
        return True


def _patch_limit(base: ClusterSnapshot) -> int:
    return max(PATCH_LIMIT, base.node_count // PATCH_SHARE)


class _Rows:
    """The arrays of a snapshot being patched, each copied on its first write."""

    def __init__(self, base: ClusterSnapshot, used: IntArray) -> None:
        self.base = base
        self.names = base.node_names
        self.node_index = base.node_index
        self.allocatable, self.used = base.allocatable, used
        self.ready, self.unschedulable = base.ready, base.unschedulable
        self.taints, self.taint_sets = base.taints, base.taint_sets
        self.labels = base.labels
        self.gpu_code, self.gpu_pairs = base.gpu.code, base.gpu.pairs
        self.copied: set[str] = set()
        self.owned_tables: set[str] = set()  # label keys whose values and index are copies
        self.owned_codes: set[str] = set()  # label keys whose codes are copies
        self.appended = 0

    def _own(self, what: str) -> None:
        if what not in self.copied:
            self.copied.add(what)
            setattr(self, what, getattr(self, what).copy())

    def reshape(self, removed: list[str], added: list[NodeInfo]) -> None:
        """Delete the rows of ``removed``, insert empty rows for ``added`` (sorted by name),
        keeping the rows in name order as a rebuild has them."""
        gone = sorted(self.node_index[name] for name in removed)
        names = list(self.names)
        for row in reversed(gone):
            del names[row]
        arrays = ("allocatable", "used", "ready", "unschedulable", "taints", "gpu_code")
        columns = {k: c.codes for k, c in self.labels.items()}
        if gone:
            for what in arrays:
                setattr(self, what, np.delete(getattr(self, what), gone, axis=0))
            columns = {k: np.delete(codes, gone) for k, codes in columns.items()}
        at = [bisect.bisect_left(names, node.name) for node in added]
        if added:
            names = sorted([*names, *(node.name for node in added)])  # two sorted runs: a merge
            fills = {"taints": 0, "gpu_code": -1, "ready": False, "unschedulable": False}
            for what in arrays:
                array = getattr(self, what)
                setattr(self, what, np.insert(array, at, fills.get(what, 0), axis=0))
            columns = {k: np.insert(codes, at, -1) for k, codes in columns.items()}
        self.copied.update(arrays)
        self.labels = {
            key: LabelColumn(codes, self.labels[key].values, self.labels[key].index)
            for key, codes in columns.items()
        }
        self.copied.add("labels")
        self.owned_codes.update(columns)
        # Rows before the first one removed or added keep their numbers: only the rest are
        # numbered again (a copy: the old snapshots keep their index).
        start = min([*gone[:1], *at[:1], len(names)])
        index = self.node_index.copy()
        for name in removed:
            del index[name]
        index.update(zip(names[start:], range(start, len(names)), strict=True))
        self.names = names
        self.node_index = index

    def write(self, node: NodeInfo, before: NodeInfo | None) -> None:
        """Write ``node``'s row (allocatable, readiness, cordon, taints, labels, GPU matrix)
        where it differs from ``before`` (None: a new, empty row)."""
        row = self.node_index[node.name]
        if before is None or before.allocatable != node.allocatable:
            self._own("allocatable")
            self.allocatable[row] = 0
            columns = self.base.resource_index
            for name, amount in node.allocatable.items():
                self.allocatable[row, columns[name]] = amount
        if bool(self.ready[row]) != node.ready:
            self._own("ready")
            self.ready[row] = node.ready
        if bool(self.unschedulable[row]) != node.unschedulable:
            self._own("unschedulable")
            self.unschedulable[row] = node.unschedulable
        if self.taint_sets[int(self.taints[row])] != node.taints:
            try:
                code = self.taint_sets.index(node.taints)
            except ValueError:
                self._own("taint_sets")
                code = len(self.taint_sets)
                self.taint_sets.append(node.taints)
                self.appended += 1
            self._own("taints")
            self.taints[row] = code
        if before is None or before.gpu_bandwidth != node.gpu_bandwidth:
            self._write_gpu(row, node)
        old_labels = before.labels if before is not None else {}
        for key in old_labels.keys() | node.labels.keys():
            if old_labels.get(key) != node.labels.get(key):
                self._write_label(row, key, node.labels.get(key))

    def _write_gpu(self, row: int, node: NodeInfo) -> None:
        code = -1
        if node.gpu_bandwidth is not None:
            values = np.asarray(node.gpu_bandwidth, dtype=np.float64)
            pair = np.minimum(values, values.T)
            np.fill_diagonal(pair, np.inf)
            # Codes given keep their pairs (the GPU-set results kept per code stay true): an
            # equal pair's code (nodes share a few profiles), else a new entry.
            for known, other in enumerate(self.gpu_pairs):
                if other.shape == pair.shape and np.array_equal(other, pair):
                    code = known
                    break
            else:
                self._own("gpu_pairs")
                code = len(self.gpu_pairs)
                self.gpu_pairs.append(pair)
                self.appended += 1
        if int(self.gpu_code[row]) != code:
            self._own("gpu_code")
            self.gpu_code[row] = code

    def _write_label(self, row: int, key: str, value: str | None) -> None:
        column = self.labels.get(key)
        if column is None:
            column = LabelColumn(np.full(len(self.names), -1, dtype=np.int32), [], {})
        code = -1
        values, index = column.values, column.index
        if value is not None:
            found = index.get(value)
            if found is None:
                if key not in self.owned_tables:  # copied once per patch: 100,000 hostnames
                    self.owned_tables.add(key)
                    values, index = list(values), dict(index)
                found = index[value] = len(values)
                values.append(value)
                self.appended += 1
            code = found
        if int(column.codes[row]) == code and values is column.values:
            return
        codes = column.codes
        if key not in self.owned_codes:
            self.owned_codes.add(key)
            codes = codes.copy()
        codes[row] = code
        self._own("labels")
        self.labels[key] = LabelColumn(codes, values, index)

    def snapshot(self) -> ClusterSnapshot:
        base = self.base
        gpu = base.gpu
        if "gpu_code" in self.copied or "gpu_pairs" in self.copied:
            gpu = GpuState(self.gpu_code, self.gpu_pairs, gpu.taken)
        return ClusterSnapshot(
            self.names,
            base.resources,
            self.allocatable,
            self.used,
            self.ready,
            self.unschedulable,
            self.labels,
            self.taints,
            self.taint_sets,
            gpu,
            self.node_index,
            base.resource_index,
        )


def _taken(
    index: Mapping[str, int], pods: Iterable[PodUsage], held: Mapping[str, Iterable[int]]
) -> dict[int, frozenset[int]]:
    taken: dict[int, set[int]] = {}
    for pod in pods:
        row = index.get(pod.node_name)
        if row is not None:
            taken.setdefault(row, set()).update(pod.gpus)
    for node, gpus in held.items():
        row = index.get(node)
        if row is not None:
            taken.setdefault(row, set()).update(gpus)
    return {row: frozenset(g) for row, g in taken.items()}


def _with_used(base: ClusterSnapshot, used: IntArray) -> ClusterSnapshot:
    return ClusterSnapshot(
        base.node_names,
        base.resources,
        base.allocatable,
        used,
        base.ready,
        base.unschedulable,
        base.labels,
        base.taints,
        base.taint_sets,
        base.gpu,
        base.node_index,
        base.resource_index,
    )


def _with_gpu(base: ClusterSnapshot, gpu: GpuState) -> ClusterSnapshot:
    return ClusterSnapshot(
        base.node_names,
        base.resources,
        base.allocatable,
        base.used,
        base.ready,
        base.unschedulable,
        base.labels,
        base.taints,
        base.taint_sets,
        gpu,
        base.node_index,
        base.resource_index,
    )
