"""A placement decision in the two forms the rest needs: the Workload's podSetAssignments (what
is written) and the usage per node (what is held in the capacity cache), also rebuilt from a
written admission after a restart. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from topogate.api.constants import HOSTNAME_LABEL
from topogate.api.errors import InputError
from topogate.api.models import PodSetAssignment, TopologyAssignment
from topogate.api.objects import as_mapping
from topogate.api.podspec import pod_requests
from topogate.api.quantity import format_units
from topogate.api.topology_assignment import AssignedDomain, decode
from topogate.cache.nodes import PODS

from .request import PlacementDecision, PlacementRequest


def pod_set_assignments(
    request: PlacementRequest, decision: PlacementDecision | None, flavor: str
) -> list[PodSetAssignment]:
    """One assignment per PodSet: flavor and usage per resource, and the topology assignment
    when the decision placed it (none for an empty PodSet or a flavor without topology)."""
    placements = {p.name: p for p in decision.placements} if decision else {}
    out = []
    for podset in request.podsets:
        resources = sorted(podset.requests)
        placement = placements.get(podset.name)
        topology = None
        if placement is not None and podset.count:
            topology = TopologyAssignment.encoded(
                placement.levels,
                [AssignedDomain(tuple(d.values), d.count) for d in placement.domains],
            )
        out.append(
            PodSetAssignment(
                name=podset.name,
                count=podset.count,
                flavors=dict.fromkeys(resources, flavor),
                resource_usage={
                    r: format_units(r, podset.requests[r] * podset.count) for r in resources
                },
                topology_assignment=topology,
            )
        )
    return out


def node_usage(
    request: PlacementRequest, decision: PlacementDecision | None
) -> dict[str, dict[str, int]]:
    """What the placed pods take on each node: their requests plus one pod slot each."""
    per_node: dict[str, dict[str, int]] = {}
    if decision is None:
        return per_node
    by_name = {p.name: p for p in request.podsets}
    for placement in decision.placements:
        requests = {**by_name[placement.name].requests, PODS: 1}
        for node, count in placement.node_counts.items():
            slot = per_node.setdefault(node, {})
            for name, amount in requests.items():
                slot[name] = slot.get(name, 0) + amount * count
    return per_node


# nodes_in_domain(levels, values) -> the names of the nodes in that domain, sorted.
DomainNodes = Callable[[Sequence[str], Sequence[str]], Sequence[str]]


def usage_from_admission(
    workload: Mapping[str, Any], where: str, nodes_in_domain: DomainNodes
) -> dict[str, dict[str, int]]:
    """What an admitted Workload holds per node, from its ``status.admission`` alone (the
    restart path: no decision is at hand). With a hostname level the node is exact; above
    it, pods are spread over the domain's nodes in name order, one per node per round (the
    scheduler picks within the domain anyway). A PodSet whose template cannot be read holds
    nothing (it was validated at admission; a later bad edit must not stop the restart).
    The assignment may be in either form (``slices`` or ``domains``); a malformed one raises
    :class:`InputError` naming the Workload and the field."""
    status = as_mapping(workload.get("status"))
    admission = as_mapping(status.get("admission"))
    spec = as_mapping(workload.get("spec"))
    templates = {
        p.get("name"): p.get("template") or {}
        for p in spec.get("podSets") or []
        if isinstance(p, Mapping)
    }
    per_node: dict[str, dict[str, int]] = {}
    for index, assignment in enumerate(admission.get("podSetAssignments") or []):
        topology = assignment.get("topologyAssignment")
        if not topology:
            continue
        field = f"status.admission.podSetAssignments[{index}].topologyAssignment"
        decoded = decode(topology, where, field)
        template = templates.get(assignment.get("name")) or {}
        try:
            requests = {**pod_requests(template.get("spec") or {}, where), PODS: 1}
        except InputError:
            continue
        for domain in decoded.domains:
            for node, count in _spread(
                decoded.levels, domain.values, domain.count, nodes_in_domain
            ):
                slot = per_node.setdefault(node, {})
                for name, amount in requests.items():
                    slot[name] = slot.get(name, 0) + amount * count
    return per_node


def _spread(
    levels: Sequence[str], values: Sequence[str], count: int, nodes_in_domain: DomainNodes
) -> list[tuple[str, int]]:
    if levels and levels[-1] == HOSTNAME_LABEL and values:
        return [(values[-1], count)]
    nodes = nodes_in_domain(levels, values)
    if not nodes:
        return []
    share, extra = divmod(count, len(nodes))
    return [(n, share + (1 if i < extra else 0)) for i, n in enumerate(nodes) if share or i < extra]
