"""`topogate plan`: where would this workload land? Cluster files in, a Workload with status out.

This is the thin shell around the pure core: it picks the flavor and topology, turns each
PodSet into a ``PodSetRequest``, calls ``place`` and writes the answer as a Workload status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from topogate.admission.assignments import pod_set_assignments
from topogate.admission.placement import place
from topogate.admission.request import (
    Mode,
    PlacementDecision,
    PlacementRequest,
    PodSetRequest,
    SliceLayer,
)
from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.jobs import WorkloadSource
from topogate.api.models import (
    Admission,
    Condition,
    PodSet,
    ResourceFlavor,
    Topology,
    WorkloadStatus,
)
from topogate.api.podspec import Toleration, node_constraints, parse_tolerations, pod_requests
from topogate.api.quantity import format_units
from topogate.api.times import now
from topogate.api.validation import join
from topogate.cache.snapshot import ClusterSnapshot, IntArray
from topogate.cache.topology import DomainTree

from .loader import ClusterInput

IMPLICIT_FLAVOR = "default"


@dataclass(frozen=True, slots=True)
class FlavorChoice:
    name: str
    topology: Topology
    node_labels: dict[str, str]
    tolerations: tuple[Toleration, ...]


@dataclass(frozen=True, slots=True)
class DomainUsage:
    """One assigned domain for people: its path, the pods placed, free capacity left after."""

    values: tuple[str, ...]
    count: int
    free_after: dict[str, int]


@dataclass(frozen=True, slots=True)
class PlanResult:
    source: WorkloadSource
    choice: FlavorChoice
    decision: PlacementDecision
    usage: dict[str, list[DomainUsage]]  # per PodSet, for the table

    @property
    def fits(self) -> bool:
        return self.decision.fits


def choose_flavor(cluster: ClusterInput, wanted: str | None) -> FlavorChoice:
    """The topology flavor to plan on: --flavor, the only one, or the implicit one."""
    tas = {name: f for name, f in cluster.flavors.items() if f.spec.topology_name}
    if wanted is not None:
        flavor = cluster.flavors.get(wanted)
        if flavor is None:
            known = ", ".join(sorted(cluster.flavors)) or "none"
            raise InputError(
                f"no ResourceFlavor {wanted!r} in the cluster input (found: {known})",
                where="--flavor",
            )
        if not flavor.spec.topology_name:
            raise InputError(
                "has no topologyName; plan needs a topology flavor",
                where=f"ResourceFlavor {wanted}",
                field="spec.topologyName",
            )
        chosen = flavor
    elif len(tas) == 1:
        chosen = next(iter(tas.values()))
    elif len(tas) > 1:
        raise InputError(
            f"several topology ResourceFlavors ({', '.join(sorted(tas))}); pick one with --flavor",
            where="--cluster",
        )
    else:
        if len(cluster.topologies) != 1:
            found = ", ".join(sorted(cluster.topologies)) or "none"
            raise InputError(
                "without a ResourceFlavor the cluster input must hold exactly one Topology "
                f"(found: {found})",
                where="--cluster",
            )
        # The implicit flavor: every node that carries all the topology's level labels.
        return FlavorChoice(IMPLICIT_FLAVOR, next(iter(cluster.topologies.values())), {}, ())
    topology_name = chosen.spec.topology_name or ""
    named = cluster.topologies.get(topology_name)
    if named is None:
        raise InputError(
            f"names Topology {topology_name!r}, which is not in the cluster input",
            where=f"ResourceFlavor {chosen.metadata.name}",
            field="spec.topologyName",
        )
    return FlavorChoice(
        chosen.metadata.name, named, dict(chosen.spec.node_labels), _flavor_tolerations(chosen)
    )


def _annotation_field(podset: PodSet, path: str, name: str) -> str:
    annotations = (podset.template.get("metadata") or {}).get("annotations") or {}
    for prefix in c.ANNOTATION_PREFIXES:
        if prefix + name in annotations:
            return f"{join(path, 'metadata.annotations')}[{prefix + name}]"
    return f"{join(path, 'metadata.annotations')}[{c.KUEUE_GROUP}/{name}]"


def podset_request(podset: PodSet, path: str, topology: Topology, where: str) -> PodSetRequest:
    """The core's request for one PodSet; levels are checked against ``topology``."""
    spec = podset.template.get("spec") or {}
    levels = topology.level_labels
    request = podset.topology_request
    mode, level = Mode.UNCONSTRAINED, None
    slices: tuple[SliceLayer, ...] = ()

    def check(value: str, name: str) -> int:
        if value not in levels:
            raise InputError(
                f"{value!r} is not a level of topology {topology.metadata.name!r} "
                f"(levels: {', '.join(levels)})",
                where=where,
                field=_annotation_field(podset, path, name),
            )
        return levels.index(value)

    if request is not None:
        if request.required:
            mode, level = Mode.REQUIRED, request.required
            check(level, c.REQUIRED_TOPOLOGY)
        elif request.preferred:
            mode, level = Mode.PREFERRED, request.preferred
            check(level, c.PREFERRED_TOPOLOGY)
        if request.podset_slice_required_topology_constraints:
            slices = tuple(
                SliceLayer(layer.topology, layer.size)
                for layer in request.podset_slice_required_topology_constraints
            )
            name = c.SLICE_CONSTRAINTS
        elif request.pod_set_slice_required_topology and request.pod_set_slice_size:
            slices = (
                SliceLayer(request.pod_set_slice_required_topology, request.pod_set_slice_size),
            )
            name = c.SLICE_REQUIRED_TOPOLOGY
        previous = levels.index(level) if level else 0
        for i, layer in enumerate(slices):
            index = check(layer.level, name)
            if index < previous or (i > 0 and index == previous):
                raise InputError(
                    f"slice level {layer.level!r} must be below "
                    f"{'the podset level ' + repr(level) if i == 0 else 'the previous layer'}",
                    where=where,
                    field=_annotation_field(podset, path, name),
                )
            previous = index
    return PodSetRequest(
        name=podset.name,
        count=podset.count,
        requests=pod_requests(spec, where, join(path, "spec")),
        mode=mode,
        level=level,
        slices=slices,
        constraints=node_constraints(spec, where, join(path, "spec")),
        group=request.pod_set_group_name if request else None,
    )


def _flavor_tolerations(flavor: ResourceFlavor) -> tuple[Toleration, ...]:
    raw = [t.to_wire() for t in flavor.spec.tolerations]
    return parse_tolerations(raw, f"ResourceFlavor {flavor.metadata.name}", "spec.tolerations")


def plan(cluster: ClusterInput, source: WorkloadSource, flavor: str | None = None) -> PlanResult:
    choice = choose_flavor(cluster, flavor)
    workload = source.workload
    requests = tuple(
        podset_request(p, source.template_paths[p.name], choice.topology, source.where)
        for p in workload.spec.pod_sets
    )
    snapshot = ClusterSnapshot.build(cluster.nodes, cluster.pods)
    tree = DomainTree.from_labels(snapshot, choice.topology.level_labels, choice.node_labels)
    decision = place(
        tree,
        snapshot,
        PlacementRequest(workload.metadata.name, requests),
        topology_name=choice.topology.metadata.name,
        flavor_tolerations=choice.tolerations,
    )
    workload.status = _status(decision, requests, choice)
    usage = _usage(decision, requests, snapshot, tree) if decision.fits else {}
    return PlanResult(source, choice, decision, usage)


def _condition(status: Literal["True", "False"], reason: str, message: str) -> Condition:
    return Condition(
        type="TopologyAssigned",
        status=status,
        reason=reason,
        message=message,
        last_transition_time=now(),
    )


def _status(
    decision: PlacementDecision, requests: tuple[PodSetRequest, ...], choice: FlavorChoice
) -> WorkloadStatus:
    if not decision.fits:
        return WorkloadStatus(
            conditions=[
                _condition(
                    "False",
                    "Pending",
                    f"couldn't assign flavors to pod set {decision.podset}: {decision.message}",
                )
            ]
        )
    assignments = pod_set_assignments(PlacementRequest("", requests), decision, choice.name)
    return WorkloadStatus(
        conditions=[
            _condition(
                "True",
                "Assigned",
                f"fits on flavor {choice.name!r}, topology {choice.topology.metadata.name!r}",
            )
        ],
        admission=Admission(pod_set_assignments=assignments),
    )


def _usage(
    decision: PlacementDecision,
    requests: tuple[PodSetRequest, ...],
    snapshot: ClusterSnapshot,
    tree: DomainTree,
) -> dict[str, list[DomainUsage]]:
    """Free capacity per assigned domain after the whole workload is placed."""
    free = snapshot.free[tree.nodes].copy()
    position = {int(row): i for i, row in enumerate(tree.nodes.tolist())}
    for request, placement in zip(requests, decision.placements, strict=True):
        vec, _ = snapshot.pod_vector(request.requests)
        for node, count in placement.node_counts.items():
            free[position[snapshot.node_index[node]]] -= vec * count
    level = tree.output_level
    per_domain: IntArray = np.zeros((tree.size(level), free.shape[1]), dtype=np.int64)
    np.add.at(per_domain, tree.member_domain[level], free)
    shown = [
        i
        for i, name in enumerate(snapshot.resources)
        if any(name in r.requests for r in requests) or name == "pods"
    ]
    out: dict[str, list[DomainUsage]] = {}
    for placement in decision.placements:
        out[placement.name] = [
            DomainUsage(
                tree.path(level, d.domain),  # the full path, for people
                d.count,
                {snapshot.resources[i]: int(per_domain[d.domain, i]) for i in shown},
            )
            for d in placement.domains
        ]
    return out


def render_table(result: PlanResult) -> str:
    workload = result.source.workload
    lines = [
        f"Workload {workload.metadata.namespace}/{workload.metadata.name} on flavor "
        f"{result.choice.name!r} (topology {result.choice.topology.metadata.name!r}: "
        f"{' > '.join(result.choice.topology.level_labels)})"
    ]
    if not result.fits:
        lines.append(f"DOES NOT FIT: {result.decision.podset}: {result.decision.message}")
        return "\n".join(lines) + "\n"
    for placement, podset in zip(result.decision.placements, workload.spec.pod_sets, strict=True):
        lines.append("")
        lines.append(f"podset {placement.name}: {podset.count} pod(s)")
        rows = result.usage.get(placement.name, [])
        header = ("DOMAIN", "PODS", "FREE AFTER")
        table = [
            (
                "/".join(row.values),
                str(row.count),
                " ".join(f"{k}={format_units(k, v)}" for k, v in sorted(row.free_after.items())),
            )
            for row in rows
        ]
        widths = [max(len(r[i]) for r in [header, *table]) for i in range(2)]
        for r in [header, *table]:
            lines.append(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]}".rstrip())
    return "\n".join(lines) + "\n"


def workload_document(result: PlanResult) -> Mapping[str, Any]:
    return result.source.workload.to_wire()
