"""Failed-node replacement: new places for the pods an admitted workload lost with its nodes.

Pure. Given a workload's written admission, the nodes that failed (with the labels they last
had, since a deleted node's are gone from the cache) and a placement function on the current
snapshot (the workload's other usage held), it finds room for the lost pods inside the domain
the workload's request confines them to, and returns the admission with those pods moved.

Where Kueue replaces one node and evicts on a second, any number of nodes is handled: the lost
pods of each node are placed in turn, each seeing the ones placed before. The search starts in
the failed node's own lowest domain above the host (its rack) and climbs no higher than the
PodSet's required level (or a slice's level, whichever is lower), so a required rack stays one
rack. The moved pods take the failed node's place in the assignment's domain order, so the
ranks of the pods that kept their nodes still map to the same domains.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from topogate.api.constants import HOSTNAME_LABEL
from topogate.api.errors import InputError
from topogate.api.objects import as_mapping
from topogate.api.podspec import NodeConstraints, Requirement, SelectorTerm
from topogate.api.topology_assignment import AssignedDomain, Assignment, decode, encode

from .assignments import DomainNodes
from .cycle import Held
from .request import Mode, PlacementDecision, PlacementRequest, PodSetPlacement, PodSetRequest

# place(request, held) -> a decision on the current snapshot, earlier held placements counted.
Place = Callable[[PlacementRequest, Held], PlacementDecision | None]

Values = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Move:
    """The pods of one PodSet lost on one node, and where they go."""

    podset: str
    node: str
    count: int
    to: tuple[tuple[Values, int], ...]

    def describe(self) -> str:
        where = ", ".join(f"{'/'.join(v)} x{n}" for v, n in self.to)
        return f"{self.count} pod(s) of {self.podset} from {self.node} to {where}"


@dataclass(frozen=True, slots=True)
class ReplacementPlan:
    """``admission`` is the new admission when every lost pod found a place (``moves`` says
    where); otherwise it is None and ``message`` says which pods did not fit and why."""

    admission: dict[str, Any] | None
    moves: tuple[Move, ...] = ()
    message: str = ""

    @property
    def fits(self) -> bool:
        return self.admission is not None


@dataclass(frozen=True, slots=True)
class _Loss:
    podset: str
    node: str
    count: int
    index: int  # the assignment domain it is taken from


def plan_replacement(
    request: PlacementRequest,
    admission: Mapping[str, Any],
    failed: Mapping[str, Mapping[str, str]],
    bound: Mapping[str, Mapping[str, int]],
    level_keys: Sequence[str],
    domain_nodes: DomainNodes,
    place: Place,
) -> ReplacementPlan:
    """Move the pods ``admission`` placed on ``failed`` nodes (node -> its last labels).

    ``bound`` (PodSet -> failed node -> live pods bound there) counts the lost pods where the
    assignment's lowest level is above the host and so does not name the node.
    ``level_keys`` are the topology's levels, highest first.
    """
    podsets = {p.name: p for p in request.podsets}
    held: Held = []
    moves: list[Move] = []
    assignments = []
    for index, raw in enumerate(as_mapping(admission).get("podSetAssignments") or []):
        assignment = dict(raw)
        topology = assignment.get("topologyAssignment")
        if not topology:
            assignments.append(assignment)
            continue
        name = str(assignment.get("name"))
        field = f"status.admission.podSetAssignments[{index}].topologyAssignment"
        try:
            parsed = decode(topology, "", field)
        except InputError as error:
            return ReplacementPlan(None, tuple(moves), f"cannot read the admission: {error}")
        losses = _losses(name, parsed, failed, bound.get(name, {}))
        podset = podsets.get(name)
        if losses and podset is None:
            return ReplacementPlan(None, message=f"PodSet {name} is no longer in the workload")
        placed: dict[int, list[tuple[Values, int]]] = {}
        for loss in losses:
            assert podset is not None
            found = _replace(request, podset, loss, failed, level_keys, domain_nodes, place, held)
            if isinstance(found, str):
                return ReplacementPlan(None, tuple(moves), found)
            if found.levels != tuple(parsed.levels):
                return ReplacementPlan(
                    None, tuple(moves), f"the topology of PodSet {name} changed since admission"
                )
            to = tuple((d.values, d.count) for d in found.domains)
            placed.setdefault(loss.index, []).extend(to)
            moves.append(Move(name, loss.node, loss.count, to))
        if losses:
            merged = _merged(parsed, losses, placed)
            assignment["topologyAssignment"] = encode(merged.levels, merged.domains)
        assignments.append(assignment)
    new = {**admission, "podSetAssignments": assignments}
    return ReplacementPlan(new, tuple(moves))


def _losses(
    podset: str,
    topology: Assignment,
    failed: Mapping[str, Mapping[str, str]],
    bound: Mapping[str, int],
) -> list[_Loss]:
    levels = topology.levels
    if levels and levels[-1] == HOSTNAME_LABEL:
        return [
            _Loss(podset, d.values[-1], d.count, i)
            for i, d in enumerate(topology.domains)
            if d.values and d.values[-1] in failed and d.count > 0
        ]
    index = {tuple(d.values): i for i, d in enumerate(topology.domains)}
    out = []
    for node, labels in sorted(failed.items()):
        count = bound.get(node, 0)
        values = tuple(str(labels.get(level, "")) for level in levels)
        i = index.get(values)
        if count > 0 and i is not None:
            out.append(_Loss(podset, node, min(count, topology.domains[i].count), i))
    return out


def _replace(
    request: PlacementRequest,
    podset: PodSetRequest,
    loss: _Loss,
    failed: Mapping[str, Mapping[str, str]],
    level_keys: Sequence[str],
    domain_nodes: DomainNodes,
    place: Place,
    held: Held,
) -> PodSetPlacement | str:
    """The placement of one loss, or why there is none."""
    labels = failed[loss.node]
    keys = list(level_keys)
    start = len(keys) - 2 if keys and keys[-1] == HOSTNAME_LABEL else len(keys) - 1
    bound = _bound_level(podset, keys)
    why = f"no level above the host to look in (levels {keys})"
    for depth in range(start, bound - 1, -1):
        scope = keys[: depth + 1]
        if any(level not in labels for level in scope):
            why = f"node {loss.node} had no label {next(k for k in scope if k not in labels)}"
            break
        values = [labels[level] for level in scope]
        nodes = [n for n in domain_nodes(scope, values) if n not in failed]
        where = f"{scope[-1]}={values[-1]}"
        if not nodes:
            why = f"no healthy node left in {where}"
            continue
        sub = _confined(podset, loss.count, scope[-1], nodes)
        one = PlacementRequest(request.workload, (sub,), request.topology)
        decision = place(one, held)
        if decision is not None and decision.fits and decision.placements:
            held.append((one, decision))
            return decision.placements[0]
        why = f"{where}: {decision.message if decision is not None else 'no topology'}"
    if bound > start:
        why = f"the PodSet requires one {keys[bound]} and it is the failed node itself"
    return (
        f"no replacement for {loss.count} pod(s) of PodSet {loss.podset} "
        f"lost on node {loss.node}: {why}"
    )


def _bound_level(podset: PodSetRequest, keys: Sequence[str]) -> int:
    """The index of the lowest level the lost pods must stay inside (0: anywhere)."""
    required = []
    if podset.mode is Mode.REQUIRED and podset.level is not None:
        required.append(podset.level)
    if podset.mode is Mode.PREFERRED and podset.limit is not None:
        required.append(podset.limit)
    required.extend(layer.level for layer in podset.slices)
    indexes = [keys.index(level) for level in required if level in keys]
    return max(indexes, default=0)


def _confined(podset: PodSetRequest, count: int, level: str, nodes: Sequence[str]) -> PodSetRequest:
    """The PodSet's pods, ``count`` of them, required in one domain of ``level`` and allowed
    only on ``nodes`` (that domain's healthy nodes)."""
    only = Requirement("metadata.name", "In", tuple(nodes))
    terms = podset.constraints.affinity_terms
    confined = (
        (SelectorTerm(fields=(only,)),)
        if terms is None
        else tuple(dataclasses.replace(t, fields=(*t.fields, only)) for t in terms)
    )
    return dataclasses.replace(
        podset,
        count=count,
        mode=Mode.REQUIRED,
        level=level,
        slices=(),
        group=None,
        limit=None,
        exclusive_slices=False,
        balanced=False,
        gpu_min_bandwidth=None,
        constraints=NodeConstraints(
            podset.constraints.tolerations, podset.constraints.node_selector, confined
        ),
    )


def _merged(
    topology: Assignment,
    losses: Sequence[_Loss],
    placed: Mapping[int, Sequence[tuple[Values, int]]],
) -> Assignment:
    """The assignment with each loss taken from its domain and its replacement put in that
    domain's place (a domain already listed gets the count added instead)."""
    taken: dict[int, int] = {}
    for loss in losses:
        taken[loss.index] = taken.get(loss.index, 0) + loss.count
    ordered: list[tuple[Values, int]] = []
    for i, domain in enumerate(topology.domains):
        left = domain.count - taken.get(i, 0)
        if left > 0:
            ordered.append((tuple(domain.values), left))
        ordered.extend(placed.get(i, ()))
    counts: dict[Values, int] = {}
    for values, count in ordered:
        counts[values] = counts.get(values, 0) + count
    return Assignment(topology.levels, tuple(AssignedDomain(v, n) for v, n in counts.items()))
