"""The view of a topology: one ``DomainRow`` per domain of a ``DomainTree`` over a
``ClusterSnapshot`` (:func:`domain_rows`, :func:`build_view`), and the one unit each resource
is written in (:func:`resource_unit`). Pure: the renderers (``text``, ``page``) read it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from topogate.api.podspec import Toleration
from topogate.api.quantity import MILLI_RESOURCES
from topogate.cache.selectors import NodeStates, node_states
from topogate.cache.snapshot import ClusterSnapshot, IntArray
from topogate.cache.topology import DomainTree

# The level DomainTree appends below a topology whose lowest level is not the hostname.
NODE_LEVEL = "node"
GPU = "nvidia.com/gpu"
# Shown first and in this order when any node has them; extended resources follow, sorted.
STANDARD_RESOURCES = ("cpu", "memory", GPU, "pods")
ROOT_PATH_LABEL = "(all)"


# --- the model --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DomainRow:
    """One domain: its level key (``None`` for the synthetic root), path and sums per resource.

    ``free`` sums the free capacity (never below zero) of the domain's *available* nodes: a
    node that is not ready, cordoned or carries a taint the flavor does not tolerate holds
    nothing ``plan`` could use (the rule is ``plan``'s own, ``cache.selectors.node_states``).
    So it is capacity minus used except where a node is over-committed or unavailable.
    """

    depth: int  # 0 for the root, tree level + 1 below it
    level: str | None
    path: tuple[str, ...]
    nodes: int
    capacity: dict[str, int]
    used: dict[str, int]
    free: dict[str, int]
    parent: int | None  # index of the parent's row; rows come parents first (sorted by path)
    unavailable: int = 0  # nodes plan would not place on
    reason: str = ""  # a single node's: why it is unavailable ("" when it is available)

    @property
    def name(self) -> str:
        return self.path[-1] if self.path else ROOT_PATH_LABEL


@dataclass(frozen=True, slots=True)
class TopologyView:
    topology: str
    flavor: str | None
    levels: tuple[str, ...]  # the tree's levels, highest first (NODE_LEVEL when appended)
    resources: tuple[str, ...]
    rows: tuple[DomainRow, ...]  # sorted by path: the root, then each domain before its children
    unavailable: tuple[tuple[str, str], ...] = ()  # (node, reason), by node name

    @property
    def main_resource(self) -> str:
        """The resource the tree and the picture show: GPUs when there are any, else CPU."""
        return GPU if GPU in self.resources else "cpu"

    @property
    def root(self) -> DomainRow:
        return self.rows[0]

    def children(self) -> list[list[int]]:
        """Row indices of each row's children, in row (path) order."""
        out: list[list[int]] = [[] for _ in self.rows]
        for index, row in enumerate(self.rows):
            if row.parent is not None:
                out[row.parent].append(index)
        return out


def _is_extended(resource: str) -> bool:
    # Kubernetes' rule: a domain-prefixed name outside kubernetes.io (e.g. example.com/fpga).
    return "/" in resource and not resource.startswith(("kubernetes.io/", "requests."))


def shown_resources(tree: DomainTree, snapshot: ClusterSnapshot) -> tuple[str, ...]:
    """The standard resources any node of the tree has, then its extended resources, sorted."""
    present = np.asarray(snapshot.allocatable[tree.nodes] > 0).any(axis=0).astype(bool).tolist()
    has = {name for name, column in snapshot.resource_index.items() if present[column]}
    extended = sorted(name for name in has if _is_extended(name) and name not in STANDARD_RESOURCES)
    return tuple(name for name in STANDARD_RESOURCES if name in has) + tuple(extended)


def tree_levels(tree: DomainTree) -> tuple[str, ...]:
    appended = tree.depth > tree.topology_depth
    return tuple(tree.level_keys) + ((NODE_LEVEL,) if appended else ())


def domain_rows(
    tree: DomainTree,
    snapshot: ClusterSnapshot,
    resources: Sequence[str] | None = None,
    states: NodeStates | None = None,
) -> list[DomainRow]:
    """Every domain of every level plus a root over all the tree's nodes, sorted by path.

    ``states`` (default: no tolerations) says which nodes are available; the others count
    as nodes and capacity, never as free.
    """
    shown = tuple(resources) if resources is not None else shown_resources(tree, snapshot)
    states = states if states is not None else node_states(snapshot, tree.nodes, ())
    columns = [snapshot.resource_index[name] for name in shown]
    width = len(columns)
    unavailable = ~states.available
    free = snapshot.free[tree.nodes][:, columns] * states.available[:, None]
    # One matrix per node: capacity | used | free | unavailable side by side, summed per
    # domain in one pass.
    per_node: IntArray = np.concatenate(
        [
            snapshot.allocatable[tree.nodes][:, columns],
            snapshot.used[tree.nodes][:, columns],
            free,
            unavailable[:, None].astype(np.int64),
        ],
        axis=1,
    )
    levels = tree_levels(tree)

    def sums(totals: Sequence[int]) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        parts = [
            {name: int(totals[part * width + i]) for i, name in enumerate(shown)}
            for part in range(3)
        ]
        return parts[0], parts[1], parts[2]

    unsorted: list[tuple[tuple[str, ...], int, str | None, int, Sequence[int], str]] = [
        ((), 0, None, len(tree.nodes), per_node.sum(axis=0).tolist(), "")
    ]
    for level in range(tree.depth):
        size = tree.size(level)
        totals: IntArray = np.zeros((size, per_node.shape[1]), dtype=np.int64)
        np.add.at(totals, tree.member_domain[level], per_node)
        counts = np.bincount(tree.member_domain[level], minlength=size).tolist()
        last = level == tree.depth - 1  # one node per domain: domain i is tree.nodes[i]
        for domain, domain_totals in enumerate(totals.tolist()):
            path = tree.path(level, domain)
            reason = states.reason(domain) if last else ""
            unsorted.append((path, level + 1, levels[level], counts[domain], domain_totals, reason))
    unsorted.sort(key=lambda item: item[0])  # a path sorts right before its extensions
    index = {item[0]: i for i, item in enumerate(unsorted)}
    rows = []
    for path, depth, level_key, nodes, totals_list, reason in unsorted:
        capacity, used, free_sums = sums(totals_list)
        parent = index[path[:-1]] if path else None
        rows.append(
            DomainRow(
                depth,
                level_key,
                path,
                nodes,
                capacity,
                used,
                free_sums,
                parent,
                int(totals_list[3 * width]),
                reason,
            )
        )
    return rows


def build_view(
    topology: str,
    tree: DomainTree,
    snapshot: ClusterSnapshot,
    flavor: str | None = None,
    tolerations: Sequence[Toleration] = (),
) -> TopologyView:
    """The view of ``tree``; ``tolerations`` are the flavor's (a taint they cover does not
    make a node unavailable), as ``plan`` adds them to every pod's own."""
    resources = shown_resources(tree, snapshot)
    states = node_states(snapshot, tree.nodes, tolerations)
    rows = domain_rows(tree, snapshot, resources, states)
    unavailable = sorted(
        (snapshot.node_names[int(row)], states.reason(position))
        for position, row in enumerate(tree.nodes.tolist())
        if not states.available[position]
    )
    return TopologyView(
        topology, flavor, tree_levels(tree), resources, tuple(rows), tuple(unavailable)
    )


# --- units ------------------------------------------------------------------------------

_BINARY_UNITS = (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


@dataclass(frozen=True, slots=True)
class Unit:
    """How one resource is written in every cell of a view, so a column compares at a glance
    (never 16Ti next to 14080Gi). JSON and YAML keep exact quantities."""

    suffix: str  # "Gi" ...; "" for counts and CPU cores
    divisor: int  # cache units per shown unit
    decimals: int

    def number(self, units: int) -> str:
        if units % self.divisor == 0:
            return str(units // self.divisor)
        text = f"{units / self.divisor:.{self.decimals}f}".rstrip("0").rstrip(".")
        return text if text not in ("0", "-0") else f"<{10**-self.decimals:g}"

    def quantity(self, units: int) -> str:
        return self.number(units) + self.suffix

    def header(self, resource: str) -> str:
        return f"{resource} ({self.suffix})" if self.suffix else resource


def resource_unit(view: TopologyView, resource: str) -> Unit:
    """Memory and storage in Gi (Mi or Ki when everything is smaller), CPU in cores, others
    as counts: one unit per resource over the whole view."""
    if resource in MILLI_RESOURCES:
        return Unit("", 1000, 3)
    if "memory" in resource or "storage" in resource:
        largest = max((row.capacity.get(resource, 0) for row in view.rows), default=0)
        for suffix, size in _BINARY_UNITS:
            if largest >= size:
                return Unit(suffix, size, 1)
    return Unit("", 1, 0)


def resource_units(view: TopologyView) -> dict[str, Unit]:
    return {resource: resource_unit(view, resource) for resource in view.resources}
