"""Which nodes a pod may use: readiness, taints/tolerations, nodeSelector, required affinity.

Evaluated once per (tree, pod template) over label codes, never node by node in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from topogate.api.podspec import NodeConstraints, Requirement, SelectorTerm, Taint, Toleration

from .snapshot import BoolArray, ClusterSnapshot, CodeArray, IntArray

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(slots=True)
class Exclusions:
    """How many of a tree's nodes were excluded for one pod, by the first reason that applied.

    The summary follows Kueue's wording ("Total nodes: N; excluded: ...", items sorted as
    strings) and adds nodes Kueue never shows: not ready and unschedulable ones.
    """

    total: int
    not_ready: int = 0
    unschedulable: int = 0
    taints: dict[str, int] = field(default_factory=dict)
    node_selector: int = 0
    affinity: int = 0
    resources: dict[str, int] = field(default_factory=dict)

    @property
    def any(self) -> bool:
        return bool(
            self.not_ready
            or self.unschedulable
            or self.taints
            or self.node_selector
            or self.affinity
            or self.resources
        )

    def describe(self) -> str:
        items = [
            f"{name}: {count}"
            for name, count in (
                ("notReady", self.not_ready),
                ("unschedulable", self.unschedulable),
                ("nodeSelector", self.node_selector),
                ("affinity", self.affinity),
            )
            if count
        ]
        items += [f'taint "{taint}": {n}' for taint, n in self.taints.items()]
        items += [f'resource "{name}": {n}' for name, n in self.resources.items()]
        return f"Total nodes: {self.total}; excluded: {', '.join(sorted(items))}"


def taint_text(taint: Taint) -> str:
    return (
        f"{taint.key}={taint.value}:{taint.effect}"
        if taint.value
        else f"{taint.key}:{taint.effect}"
    )


def _first_untolerated(
    snapshot: ClusterSnapshot, tolerations: Sequence[Toleration]
) -> tuple[CodeArray, list[str]]:
    """Per node, the index of its first blocking taint no toleration covers (-1: none)."""
    names: list[str] = []
    per_set = np.full(len(snapshot.taint_sets), -1, dtype=np.int32)
    for code, taints in enumerate(snapshot.taint_sets):
        for taint in taints:
            if taint.effect in _BLOCKING_EFFECTS and not any(
                t.tolerates(taint) for t in tolerations
            ):
                per_set[code] = len(names)
                names.append(taint_text(taint))
                break
    return per_set[snapshot.taints], names


def _requirement(snapshot: ClusterSnapshot, req: Requirement, rows: IntArray) -> BoolArray:
    column = snapshot.label(req.key)
    codes = column.codes[rows]
    present = codes >= 0
    if req.operator == "Exists":
        return present
    if req.operator == "DoesNotExist":
        return ~present
    if req.operator in ("In", "NotIn"):
        wanted = [column.code(v) for v in req.values]
        inside = np.isin(codes, wanted)
        return inside if req.operator == "In" else ~inside
    bound = int(req.values[0])
    table = np.zeros(len(column.values) + 1, dtype=np.bool_)  # last slot: absent (-1)
    for code, value in enumerate(column.values):
        try:
            number = int(value)
        except ValueError:
            continue
        table[code] = number > bound if req.operator == "Gt" else number < bound
    return table[codes]


def _field_requirement(snapshot: ClusterSnapshot, req: Requirement, rows: IntArray) -> BoolArray:
    names = {snapshot.node_index[n] for n in req.values if n in snapshot.node_index}
    inside = np.isin(rows, list(names))
    return inside if req.operator == "In" else ~inside


def _term(snapshot: ClusterSnapshot, term: SelectorTerm, rows: IntArray) -> BoolArray:
    if not term.labels and not term.fields:
        return np.zeros(len(rows), dtype=np.bool_)  # an empty term matches no node
    match = np.ones(len(rows), dtype=np.bool_)
    for req in term.labels:
        match &= _requirement(snapshot, req, rows)
    for req in term.fields:
        match &= _field_requirement(snapshot, req, rows)
    return match


def selector_mask(
    snapshot: ClusterSnapshot, constraints: NodeConstraints, rows: IntArray
) -> BoolArray:
    match = np.ones(len(rows), dtype=np.bool_)
    for key, value in constraints.node_selector.items():
        column = snapshot.label(key)
        match &= column.codes[rows] == column.code(value)
    if constraints.affinity_terms is not None:
        any_term = np.zeros(len(rows), dtype=np.bool_)
        for term in constraints.affinity_terms:
            any_term |= _term(snapshot, term, rows)
        match &= any_term
    return match


@dataclass(frozen=True, slots=True)
class NodeStates:
    """Per node of some rows, whether any pod with the given tolerations may land there.

    The one rule both ``plan`` (through :func:`eligible`) and ``topology`` apply: a node counts
    only when its Ready condition is True, it is not cordoned, and every NoSchedule/NoExecute
    taint is tolerated. Each unavailable node has one reason, the first that applies.
    """

    ready: BoolArray
    schedulable: BoolArray
    blocked: CodeArray  # per node, its first untolerated taint's index in taint_names; -1: none
    taint_names: list[str]

    @property
    def alive(self) -> BoolArray:
        return self.ready & self.schedulable

    @property
    def available(self) -> BoolArray:
        return self.alive & (self.blocked < 0)

    def reason(self, position: int) -> str:
        """Why the node at ``position`` is unavailable ("" when it is available)."""
        if not self.ready[position]:
            return "not ready"
        if not self.schedulable[position]:
            return "cordoned"
        taint = int(self.blocked[position])
        return f"taint {self.taint_names[taint]} not tolerated" if taint >= 0 else ""


def node_states(
    snapshot: ClusterSnapshot, rows: IntArray, tolerations: Sequence[Toleration]
) -> NodeStates:
    untolerated, taint_names = _first_untolerated(snapshot, tolerations)
    return NodeStates(
        snapshot.ready[rows], ~snapshot.unschedulable[rows], untolerated[rows], taint_names
    )


def eligible(
    snapshot: ClusterSnapshot, rows: IntArray, constraints: NodeConstraints
) -> tuple[BoolArray, Exclusions]:
    """Mask over ``rows`` of the nodes this pod may use, and the excluded counts by reason.

    Each excluded node is counted once, under the first check it fails, in Kueue's order
    (taint, nodeSelector, affinity) after readiness and cordoning.
    """
    states = node_states(snapshot, rows, constraints.tolerations)
    ready, schedulable, blocked = states.ready, states.schedulable, states.blocked
    selector = selector_mask(
        snapshot, NodeConstraints(node_selector=constraints.node_selector), rows
    )
    affinity = selector_mask(
        snapshot, NodeConstraints(affinity_terms=constraints.affinity_terms), rows
    )
    alive = states.alive
    passes_taints = states.available
    passes_selector = passes_taints & selector
    ok = passes_selector & affinity
    taints: dict[str, int] = {}
    taint_names = states.taint_names
    counted = np.bincount(blocked[alive & (blocked >= 0)], minlength=len(taint_names))
    for index, count in enumerate(counted.tolist()):
        if count:
            taints[taint_names[index]] = taints.get(taint_names[index], 0) + count
    exclusions = Exclusions(
        total=len(rows),
        not_ready=int((~ready).sum()),
        unschedulable=int((ready & ~schedulable).sum()),
        taints=taints,
        node_selector=int((passes_taints & ~selector).sum()),
        affinity=int((passes_selector & ~affinity).sum()),
    )
    return ok, exclusions
