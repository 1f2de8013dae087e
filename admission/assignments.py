"""A placement decision in the two forms the rest needs: the Workload's podSetAssignments (what
is written) and the usage per node (what is held in the capacity cache). Pure."""

from __future__ import annotations

from topogate.api.models import PodSetAssignment, TopologyAssignment, TopologyDomainAssignment
from topogate.api.quantity import format_units
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
            topology = TopologyAssignment(
                levels=list(placement.levels),
                domains=[
                    TopologyDomainAssignment(values=list(d.values), count=d.count)
                    for d in placement.domains
                ],
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
