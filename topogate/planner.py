"""`topogate plan`: where would this workload land? Cluster files in, a Workload with status out.

This is the thin shell around the pure core: it picks the flavor and topology, turns each
PodSet into a ``PodSetRequest``, calls ``place`` and writes the answer as a Workload status.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from topogate.admission.assignments import pod_set_assignments
from topogate.admission.gpusets import bottleneck
from topogate.admission.placement import place
from topogate.admission.request import (
    Mode,
    PlacementDecision,
    PlacementRequest,
    PodSetRequest,
    SliceLayer,
)
from topogate.api import constants as c
from topogate.api.annotations import AnnotationError
from topogate.api.errors import InputError
from topogate.api.gpus import ASSIGNMENT_ANNOTATION, assignment_text, min_bandwidth
from topogate.api.jobs import WorkloadSource
from topogate.api.models import (
    Admission,
    Condition,
    PodSet,
    ResourceFlavor,
    WorkloadStatus,
)
from topogate.api.podspec import Toleration, node_constraints, parse_tolerations, pod_requests
from topogate.api.quantity import format_units
from topogate.api.times import now
from topogate.api.validation import join
from topogate.api.vocabularies import (
    BALANCED_PLACEMENT,
    KAI_PREFERRED,
    KAI_REQUIRED,
    NETWORK_TOPOLOGY,
    REPLICA_REQUIRED_TOPOLOGY,
    VOLCANO_SOFT,
    VocabularyRequest,
    vocabulary_request,
)
from topogate.cache.hypernodes import HyperNodeForest
from topogate.cache.snapshot import ClusterSnapshot, IntArray
from topogate.cache.sources import HYPERNODE_TOPOLOGY, TopologySource, topology_sources
from topogate.cache.topology import DomainTree

from .loader import ClusterInput

IMPLICIT_FLAVOR = "default"


@dataclass(frozen=True, slots=True)
class FlavorChoice:
    name: str
    source: TopologySource
    node_labels: dict[str, str]
    tolerations: tuple[Toleration, ...]


@dataclass(frozen=True, slots=True)
class DomainUsage:
    """One assigned domain for people: its path, the pods placed, free capacity left after."""

    values: tuple[str, ...]
    count: int
    free_after: dict[str, int]


@dataclass(frozen=True, slots=True)
class GpuRow:
    """The GPU sets of one PodSet's pods on one node, with the bottlenecks (GB/s) they reach:
    each pod's own set, and the whole group the workload holds there (its visibleGPUs)."""

    node: str
    sets: tuple[tuple[int, ...], ...]
    bottlenecks: tuple[float, ...]
    visible: tuple[int, ...]
    group: float


@dataclass(frozen=True, slots=True)
class PlanResult:
    source: WorkloadSource
    choice: FlavorChoice
    decision: PlacementDecision
    usage: dict[str, list[DomainUsage]]  # per PodSet, for the table
    warnings: list[str] = field(default_factory=list)  # e.g. HyperNodes left out, and why
    gpus: dict[str, list[GpuRow]] = field(default_factory=dict)  # per PodSet, for the table

    @property
    def fits(self) -> bool:
        return self.decision.fits


def pick_source(
    sources: Mapping[str, TopologySource], name: str, where: str, field: str
) -> TopologySource:
    source = sources.get(name)
    if source is None:
        known = ", ".join(sorted(sources)) or "none"
        raise InputError(
            f"names topology {name!r}, which is not in the cluster input (found: {known})",
            where=where,
            field=field,
        )
    return source


def flavor_named(cluster: ClusterInput, name: str) -> ResourceFlavor:
    """The ResourceFlavor --flavor names."""
    flavor = cluster.flavors.get(name)
    if flavor is None:
        known = ", ".join(sorted(cluster.flavors)) or "none"
        raise InputError(
            f"no ResourceFlavor {name!r} in the cluster input (found: {known})", where="--flavor"
        )
    return flavor


def choose_flavor(
    cluster: ClusterInput,
    wanted: str | None,
    named: str | None = None,
    volcano: bool = False,
    forest: HyperNodeForest | None = None,
) -> FlavorChoice:
    """The flavor and topology to plan on.

    The flavor: --flavor, the only topology flavor, or an implicit one over every node. The
    topology: the one the job names, else the flavor's, else (for Volcano's tier vocabulary)
    the HyperNode forest, else the only topology in the input.
    """
    sources = topology_sources(cluster.topologies, forest)
    tas = {name: f for name, f in cluster.flavors.items() if f.spec.topology_name}
    flavor: ResourceFlavor | None = None
    if wanted is not None:
        flavor = flavor_named(cluster, wanted)
        if not flavor.spec.topology_name and named is None and not volcano:
            raise InputError(
                "has no topologyName; plan needs a topology flavor",
                where=f"ResourceFlavor {wanted}",
                field="spec.topologyName",
            )
    elif len(tas) == 1:
        flavor = next(iter(tas.values()))
    elif len(tas) > 1:
        raise InputError(
            f"several topology ResourceFlavors ({', '.join(sorted(tas))}); pick one with --flavor",
            where="--cluster",
        )
    if named is not None:
        source = pick_source(sources, named, "the workload", "topology name annotation")
    elif flavor is not None and flavor.spec.topology_name:
        source = pick_source(
            sources,
            flavor.spec.topology_name,
            f"ResourceFlavor {flavor.metadata.name}",
            "spec.topologyName",
        )
    elif volcano and HYPERNODE_TOPOLOGY in sources:
        source = sources[HYPERNODE_TOPOLOGY]
    elif len(sources) == 1:
        source = next(iter(sources.values()))
    else:
        found = ", ".join(sorted(sources)) or "none"
        raise InputError(
            "without a ResourceFlavor the cluster input must hold exactly one topology (a "
            f"Topology or HyperNodes), or the job must name one (found: {found})",
            where="--cluster",
        )
    if flavor is None:
        # The implicit flavor: every node of the topology.
        return FlavorChoice(IMPLICIT_FLAVOR, source, {}, ())
    return FlavorChoice(
        flavor.metadata.name, source, dict(flavor.spec.node_labels), flavor_tolerations(flavor)
    )


def _annotation_field(podset: PodSet, path: str, name: str) -> str:
    annotations = (podset.template.get("metadata") or {}).get("annotations") or {}
    for prefix in c.ANNOTATION_PREFIXES:
        if prefix + name in annotations:
            return f"{join(path, 'metadata.annotations')}[{prefix + name}]"
    return f"{join(path, 'metadata.annotations')}[{c.KUEUE_GROUP}/{name}]"


def _vocabulary(podset: PodSet, path: str, where: str) -> VocabularyRequest | None:
    annotations = (podset.template.get("metadata") or {}).get("annotations") or {}
    try:
        return vocabulary_request(
            {str(k): str(v) for k, v in annotations.items()}, join(path, "metadata.annotations")
        )
    except AnnotationError as exc:
        raise InputError("; ".join(exc.problems), where=where) from None


def requested_topology(podsets: Sequence[PodSet], paths: Sequence[str], where: str) -> str | None:
    """The topology a workload names (KAI's or topogate's key), or None for its flavor's.

    Every PodSet that names one must name the same: a gang is placed on one topology.
    """
    named: dict[str, str] = {}
    for podset, path in zip(podsets, paths, strict=True):
        vocabulary = _vocabulary(podset, path, where)
        if vocabulary is not None and vocabulary.topology:
            named.setdefault(vocabulary.topology, path)
    if len(named) > 1:
        listed = ", ".join(f"{name!r} at {path}" for name, path in named.items())
        raise InputError(f"pod sets name different topologies ({listed})", where=where)
    return next(iter(named), None)


def uses_volcano_tiers(podsets: Sequence[PodSet], paths: Sequence[str], where: str) -> bool:
    return any(
        (v := _vocabulary(p, path, where)) is not None and v.volcano is not None
        for p, path in zip(podsets, paths, strict=True)
    )


def podset_request(podset: PodSet, path: str, source: TopologySource, where: str) -> PodSetRequest:
    """The core's request for one PodSet; level names are checked against ``source``.

    Kueue's annotations name levels; KAI's name levels too (required + preferred: start at the
    preferred level, climb no higher than the required one); Volcano's name tiers (hard: start
    at tier 1, climb no higher than highestTierAllowed; soft: start at tier 1, no limit).
    """
    spec = podset.template.get("spec") or {}
    levels = source.level_keys
    request = podset.topology_request
    vocabulary = _vocabulary(podset, path, where)
    mode, level, limit = Mode.UNCONSTRAINED, None, None
    slices: tuple[SliceLayer, ...] = ()
    exclusive = False
    annotations_path = join(path, "metadata.annotations")

    def resolve(value: str, field: str) -> int:
        index = source.level_index(value)
        if index is None:
            raise InputError(
                f"{value!r} is not a level of topology {source.name!r} "
                f"(levels: {source.describe_levels()})",
                where=where,
                field=field,
            )
        return index

    def check(value: str, name: str) -> int:
        return resolve(value, _annotation_field(podset, path, name))

    if request is not None:
        if request.required:
            mode, level = Mode.REQUIRED, levels[check(request.required, c.REQUIRED_TOPOLOGY)]
        elif request.preferred:
            mode, level = Mode.PREFERRED, levels[check(request.preferred, c.PREFERRED_TOPOLOGY)]
        if request.podset_slice_required_topology_constraints:
            name = c.SLICE_CONSTRAINTS
            slices = tuple(
                SliceLayer(levels[check(layer.topology, name)], layer.size)
                for layer in request.podset_slice_required_topology_constraints
            )
        elif request.pod_set_slice_required_topology and request.pod_set_slice_size:
            name = c.SLICE_REQUIRED_TOPOLOGY
            slices = (
                SliceLayer(
                    levels[check(request.pod_set_slice_required_topology, name)],
                    request.pod_set_slice_size,
                ),
            )
        previous = levels.index(level) if level else 0
        for i, layer in enumerate(slices):
            index = levels.index(layer.level)
            if index < previous or (i > 0 and index == previous):
                raise InputError(
                    f"slice level {layer.level!r} must be below "
                    f"{'the podset level ' + repr(level) if i == 0 else 'the previous layer'}",
                    where=where,
                    field=_annotation_field(podset, path, name),
                )
            previous = index
    if vocabulary is not None:
        try:
            mode, level, limit = _vocabulary_levels(
                vocabulary, source, mode, level, resolve, annotations_path
            )
        except InputError as error:
            raise InputError(error.message, where=where, field=error.field) from None
        if vocabulary.replica_level is not None:
            field = f"{annotations_path}[{REPLICA_REQUIRED_TOPOLOGY}]"
            replica_level = levels[resolve(vocabulary.replica_level, field)]
            replicas = (request.sub_group_count if request else None) or 1
            if level is not None and levels.index(replica_level) < levels.index(level):
                raise InputError(
                    f"replica level {replica_level!r} must not be above the pod set's level "
                    f"{level!r}",
                    where=where,
                    field=field,
                )
            slices = (SliceLayer(replica_level, podset.count // replicas),)
            exclusive = True
        if vocabulary.balanced and mode is not Mode.PREFERRED:
            raise InputError(
                "balanced placement applies to preferred requests only (Kueue's "
                "podset-preferred-topology, KAI's preferred placement or Volcano's tiers)",
                where=where,
                field=f"{annotations_path}[{BALANCED_PLACEMENT}]",
            )
    return PodSetRequest(
        name=podset.name,
        count=podset.count,
        requests=pod_requests(spec, where, join(path, "spec")),
        mode=mode,
        level=level,
        slices=slices,
        constraints=node_constraints(spec, where, join(path, "spec")),
        group=request.pod_set_group_name if request else None,
        limit=limit,
        exclusive_slices=exclusive,
        balanced=vocabulary is not None and vocabulary.balanced,
        gpu_min_bandwidth=min_bandwidth(podset.template, path, where),
    )


def _vocabulary_levels(
    vocabulary: VocabularyRequest,
    source: TopologySource,
    mode: Mode,
    level: str | None,
    resolve: Callable[[str, str], int],
    annotations_path: str,
) -> tuple[Mode, str | None, str | None]:
    """(mode, level, limit) for a KAI or Volcano request; Kueue's stay as they are."""
    levels = source.level_keys
    if vocabulary.kai_required or vocabulary.kai_preferred:
        required = preferred = None
        if vocabulary.kai_required:
            required = resolve(vocabulary.kai_required, f"{annotations_path}[{KAI_REQUIRED}]")
        if vocabulary.kai_preferred:
            preferred = resolve(vocabulary.kai_preferred, f"{annotations_path}[{KAI_PREFERRED}]")
        if preferred is None:
            return Mode.REQUIRED, levels[required or 0], None
        if required is None:
            return Mode.PREFERRED, levels[preferred], None
        if preferred < required:
            raise InputError(
                f"the preferred level {levels[preferred]!r} is above the required level "
                f"{levels[required]!r}",
                field=f"{annotations_path}[{KAI_PREFERRED}]",
            )
        if preferred == required:
            return Mode.REQUIRED, levels[required], None
        return Mode.PREFERRED, levels[preferred], levels[required]
    volcano = vocabulary.volcano
    if volcano is None:
        return mode, level, None
    field = f"{annotations_path}[{NETWORK_TOPOLOGY}]"
    start = source.lowest_tier_level()  # Volcano searches tier 1 first
    if volcano.mode == VOLCANO_SOFT:
        return Mode.PREFERRED, levels[start], None
    if volcano.highest_tier_name is not None:
        highest = source.level_index(volcano.highest_tier_name)
        if highest is None:
            # Volcano logs a warning and runs the job unconstrained; we refuse.
            raise InputError(
                f"highestTierName {volcano.highest_tier_name!r} names no tier of topology "
                f"{source.name!r} (levels: {source.describe_levels()})",
                field=field,
            )
    else:
        tier = volcano.highest_tier if volcano.highest_tier is not None else 0
        found = source.level_for_tier(tier)
        if found is None:
            raise InputError(
                f"highestTierAllowed {tier}: topology {source.name!r} has no level at tier "
                f"{tier} or below (levels: {source.describe_levels()})",
                field=field,
            )
        highest = found
    if highest >= start:
        return Mode.REQUIRED, levels[highest], None
    return Mode.PREFERRED, levels[start], levels[highest]


def flavor_tolerations(flavor: ResourceFlavor) -> tuple[Toleration, ...]:
    raw = [t.to_wire() for t in flavor.spec.tolerations]
    return parse_tolerations(raw, f"ResourceFlavor {flavor.metadata.name}", "spec.tolerations")


def plan(cluster: ClusterInput, source: WorkloadSource, flavor: str | None = None) -> PlanResult:
    forest = cluster.build_forest()
    # Structure problems leave the faulty part out and are reported; the sound part of the
    # forest still places jobs (one bad HyperNode must not stop everything, as in Volcano).
    warnings = [
        f"HyperNode {name}: {problem}"
        for name, problems in sorted((forest.problems if forest else {}).items())
        for problem in problems
    ]
    for node in cluster.nodes:  # serve skips a bad GPU annotation; plan refuses it
        if node.gpu_problem:
            raise InputError(node.gpu_problem)
    workload = source.workload
    podsets = workload.spec.pod_sets
    paths = [source.template_paths[p.name] for p in podsets]
    named = requested_topology(podsets, paths, source.where)
    volcano = uses_volcano_tiers(podsets, paths, source.where)
    choice = choose_flavor(cluster, flavor, named, volcano, forest)
    requests = tuple(
        podset_request(p, path, choice.source, source.where)
        for p, path in zip(podsets, paths, strict=True)
    )
    snapshot = ClusterSnapshot.build(cluster.nodes, cluster.pods)
    tree = choice.source.tree(snapshot, choice.node_labels)
    decision = place(
        tree,
        snapshot,
        PlacementRequest(workload.metadata.name, requests, named),
        topology_name=choice.source.name,
        flavor_tolerations=choice.tolerations,
    )
    workload.status = _status(decision, requests, choice)
    usage = _usage(decision, requests, snapshot, tree) if decision.fits else {}
    return PlanResult(source, choice, decision, usage, warnings, _gpu_rows(decision, snapshot))


def _gpu_rows(decision: PlacementDecision, snapshot: ClusterSnapshot) -> dict[str, list[GpuRow]]:
    out: dict[str, list[GpuRow]] = {}
    for placement in decision.placements:
        for node, sets in sorted(placement.gpu_sets.items()):
            pair = snapshot.gpu.pair(snapshot.node_index[node])
            assert pair is not None  # sets are only chosen on nodes with a matrix
            visible = tuple(placement.visible_gpus.get(node, ()))
            out.setdefault(placement.name, []).append(
                GpuRow(
                    node,
                    tuple(sets),
                    tuple(bottleneck(pair, s) for s in sets),
                    visible,
                    bottleneck(pair, visible),
                )
            )
    return out


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
                f"fits on flavor {choice.name!r}, topology {choice.source.name!r}",
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
        f"{result.choice.name!r} (topology {result.choice.source.name!r}: "
        f"{' > '.join(result.choice.source.level_keys)})"
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
        lines.extend(_gpu_table(result.gpus.get(placement.name, [])))
    return "\n".join(lines) + "\n"


def _gbps(value: float) -> str:
    return "-" if value == float("inf") else f"{value:g}"


def _gpu_table(rows: list[GpuRow]) -> list[str]:
    """Per node: each pod's GPUs and the slowest link inside them; the GPUs the workload's
    pods there see together (visibleGPUs) and the slowest link among those."""
    if not rows:
        return []
    header = ("NODE", "GPUS PER POD", "BOTTLENECK GB/S", "VISIBLE GPUS", "GROUP GB/S")
    table = [
        (
            row.node,
            " ".join("[" + ",".join(map(str, s)) + "]" for s in row.sets),
            " ".join(_gbps(b) for b in row.bottlenecks),
            ",".join(map(str, row.visible)),
            _gbps(row.group),
        )
        for row in rows
    ]
    widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
    lines = [""]
    for r in [header, *table]:
        lines.append("  ".join(f"{v:<{w}}" for v, w in zip(r, widths, strict=True)).rstrip())
    return lines


def workload_document(result: PlanResult) -> Mapping[str, Any]:
    document = result.source.workload.to_wire()
    gpus = {p.name: dict(p.gpu_sets) for p in result.decision.placements if p.gpu_sets}
    if gpus:  # the GPU sets, as the admitter records them on the Workload
        metadata = document.setdefault("metadata", {})
        metadata["annotations"] = {
            **(metadata.get("annotations") or {}),
            ASSIGNMENT_ANNOTATION: assignment_text(gpus),
        }
    return document
