"""`topogate plan`: where would this workload land? Cluster files in, a Workload with status out.

This is the thin shell around the pure core: it picks the flavor and topology, turns each
PodSet into a ``PodSetRequest``, calls ``place`` and writes the answer as a Workload status.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml

from topogate.admission.assignments import pod_set_assignments
from topogate.admission.cycle import Admitted, SnapshotPlacer, admission_cycle
from topogate.admission.gpusets import bottleneck
from topogate.admission.partial import can_shrink, largest_fit
from topogate.admission.placement import place
from topogate.admission.podsets import (
    Catalog,
    build_placer,
    podset_requests,
    translate,
    wanted_by,
)
from topogate.admission.queuetree import tree_warnings
from topogate.admission.quota import CohortSpec, CohortTree, QueueSpec, Usage, usage_of
from topogate.admission.request import (
    Mode,
    PlacementDecision,
    PlacementRequest,
    PodSetRequest,
)
from topogate.api.constants import QUEUE_LABELS
from topogate.api.errors import InputError
from topogate.api.gpus import ASSIGNMENT_ANNOTATION, assignment_text
from topogate.api.jobs import WorkloadSource, workload_from_object
from topogate.api.keywarnings import key_warnings
from topogate.api.kinds import podgroup, queue_name
from topogate.api.models import Admission, Condition, WorkloadStatus
from topogate.api.podspec import api_server_problems
from topogate.api.quantity import format_units
from topogate.api.validation import join, object_name
from topogate.cache.hypernodes import HyperNodeForest
from topogate.cache.snapshot import ClusterSnapshot, IntArray
from topogate.cache.sources import topology_sources
from topogate.cache.topology import DomainTree
from topogate.clock import exact_budget, now
from topogate.files import STDIN, Document, documents

from .choose import FlavorChoice, choose_flavor
from .loader import (
    ClusterInput,
    add_cluster_argument,
    hypernode_warnings,
    load_cluster_reporting,
    load_single,
)

EXIT_FITS, EXIT_NO_FIT = 0, 1


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
    requests: tuple[PodSetRequest, ...] = ()  # what each PodSet asked, as the core read it
    # Partial admission (job-min-parallelism): PodSet -> (pods placed, pods asked for).
    partial: dict[str, tuple[int, int]] = field(default_factory=dict)
    borrowing: str = ""  # with queues: the quota borrowed from the cohort, in words

    @property
    def fits(self) -> bool:
        return self.decision.fits


def _input_warnings(cluster: ClusterInput, forest: HyperNodeForest | None) -> list[str]:
    """The HyperNode forest's problems, as warnings; a bad GPU annotation, as an error."""
    for node in cluster.nodes:  # serve skips a bad GPU annotation; plan refuses it
        if node.gpu_problem:
            raise InputError(node.gpu_problem)
    # Structure problems leave the faulty part out and are reported; the sound part of the
    # forest still places jobs (one bad HyperNode must not stop everything, as in Volcano).
    return hypernode_warnings(forest)


def domain_hint(cluster: ClusterInput, choice: FlavorChoice) -> str | None:
    """Why a flavor's topology has no domains, naming the label its nodes lack: Kueue's
    "no topology domains at level" says which level, not which label was missing."""
    selected = [
        n for n in cluster.nodes if all(n.labels.get(k) == v for k, v in choice.node_labels.items())
    ]
    flavor = f"ResourceFlavor {choice.name}"
    if not selected:
        if not cluster.nodes:
            return "--cluster holds no Nodes"
        for key, value in choice.node_labels.items():
            if not any(n.labels.get(key) == value for n in cluster.nodes):
                return (
                    f"no node of --cluster has the label {key}={value} that {flavor} selects "
                    "(spec.nodeLabels)"
                )
        labels = ", ".join(f"{k}={v}" for k, v in choice.node_labels.items())
        return f"no node of --cluster has all the labels {flavor} selects: {labels}"
    if choice.source.paths is not None:  # HyperNodes: the forest names its own members
        return None
    for key in choice.source.level_keys:
        if not any(key in n.labels for n in selected):
            return (
                f"none of the {len(selected)} node(s) of {flavor} has the label {key}, a level "
                f"of topology {choice.source.name}"
            )
    return None


def _hints(cluster: ClusterInput, choice: FlavorChoice, message: str) -> list[str]:
    if "no topology domains at level" not in message:
        return []
    hint = domain_hint(cluster, choice)
    return [hint] if hint else []


def plan(cluster: ClusterInput, source: WorkloadSource, flavor: str | None = None) -> PlanResult:
    forest = cluster.build_forest()
    warnings = _input_warnings(cluster, forest)
    workload = source.workload
    wanted = wanted_by(source)
    choice = choose_flavor(cluster, flavor, wanted, forest)
    requests = podset_requests(source, choice.source)
    snapshot = cluster.snapshot()
    tree = choice.source.tree(snapshot, choice.node_labels)
    request = PlacementRequest(workload.metadata.name, requests, wanted.named)

    def placed(smaller: PlacementRequest) -> PlacementDecision:
        return place(
            tree,
            snapshot,
            smaller,
            topology_name=choice.source.name,
            flavor_tolerations=choice.tolerations,
            exact=exact_budget(),
        )

    decision = placed(request)
    warnings += _hints(cluster, choice, decision.message)
    if not decision.fits and can_shrink(request):  # as the admitter: fewer pods, same rules
        found = largest_fit(request, lambda r: d if (d := placed(r)).fits else None)
        if found is not None:
            smaller, decision = found
            return _result(
                source, choice, decision, smaller.podsets, snapshot, tree, warnings, requests
            )
    return _result(source, choice, decision, requests, snapshot, tree, warnings)


def _partial(
    admitted: tuple[PodSetRequest, ...], asked: tuple[PodSetRequest, ...]
) -> dict[str, tuple[int, int]]:
    """PodSet -> (pods placed, pods asked for), for the PodSets a partial admission lowered."""
    return {
        a.name: (s.count, a.count)
        for a, s in zip(asked, admitted, strict=True)
        if s.count != a.count
    }


def _result(
    source: WorkloadSource,
    choice: FlavorChoice,
    decision: PlacementDecision,
    requests: tuple[PodSetRequest, ...],
    snapshot: ClusterSnapshot,
    tree: DomainTree,
    warnings: list[str],
    asked: tuple[PodSetRequest, ...] | None = None,
) -> PlanResult:
    """The plan's result; ``asked``: the PodSets as asked, when ``requests`` are a partial
    admission's lowered counts."""
    partial = _partial(requests, asked) if asked is not None else {}
    source.workload.status = _status(decision, requests, choice, partial)
    usage = _usage(decision, requests, snapshot, tree) if decision.fits else {}
    gpus = _gpu_rows(decision, snapshot)
    return PlanResult(source, choice, decision, usage, warnings, gpus, requests, partial)


# --- queues: the admitter's own decision, on the cluster files ------------------------------


@dataclass(frozen=True, slots=True)
class QueueVerdict:
    """What the queue check decides without a placement to show: the workload waits (a
    missing queue, no quota, no room), or it gets quota on a flavor without a topology."""

    source: WorkloadSource
    queue: str
    fits: bool
    message: str
    warnings: list[str] = field(default_factory=list)


def queue_of(source: WorkloadSource, obj: Mapping[str, Any]) -> str | None:
    """The LocalQueue a workload is submitted to: its queue label, or a Workload's queueName."""
    return queue_name(obj) or source.workload.spec.queue_name or None


def _catalog(cluster: ClusterInput, forest: HyperNodeForest | None) -> Catalog:
    queues: dict[str, QueueSpec] = {}
    for name, model in cluster.cluster_queues.items():
        try:
            queues[name] = QueueSpec.from_model(model)
        except ValueError as error:  # a quota the cache cannot count
            raise InputError(str(error), where=f"ClusterQueue {name}") from None
    cohorts: dict[str, CohortSpec] = {}
    for name, cohort in cluster.cohorts.items():
        try:
            cohorts[name] = CohortSpec.from_model(cohort)
        except ValueError as error:
            raise InputError(str(error), where=f"Cohort {name}") from None
    sources = topology_sources(cluster.topologies, forest)
    return Catalog(queues, dict(cluster.local_queues), cluster.flavors, sources, cohorts)


def _only_flavor(catalog: Catalog, cluster_queue: str, flavor: str) -> Catalog | str:
    """The catalog with the queue reduced to --flavor, or why it cannot be."""
    spec = catalog.queues.get(cluster_queue)
    if spec is None:
        return catalog  # the cycle says the queue is missing
    kept = tuple(f for f in spec.flavors if f.flavor == flavor)
    if not kept:
        return f"ClusterQueue {cluster_queue} has no flavor {flavor} (--flavor)"
    queues = {**catalog.queues, cluster_queue: replace(spec, flavors=kept)}
    return replace(catalog, queues=queues)


def plan_on_queue(
    cluster: ClusterInput, source: WorkloadSource, queue: str, flavor: str | None = None
) -> PlanResult | QueueVerdict:
    """The workload through its queue as ``serve``'s admitter takes it: LocalQueue ->
    ClusterQueue (:meth:`Catalog.cluster_queue`, :func:`translate`), then one admission cycle
    (:func:`admission_cycle`: quota per flavor, in the queue's order, with the quota the
    admitted Workloads in the input use, and the placement on the flavor's topology)."""
    forest = cluster.build_forest()
    warnings = _input_warnings(cluster, forest)
    catalog = _catalog(cluster, forest)
    warnings += tree_warnings(CohortTree(catalog.queues, catalog.cohorts), catalog.cohorts)
    workload = source.workload
    workload.spec.queue_name = queue
    namespace = workload.metadata.namespace or "default"
    key = f"{namespace}/{workload.metadata.name}"
    cluster_queue, _ = catalog.cluster_queue(namespace, queue)
    if flavor is not None and cluster_queue is not None:
        narrowed = _only_flavor(catalog, cluster_queue, flavor)
        if isinstance(narrowed, str):
            return QueueVerdict(source, queue, False, narrowed, warnings)
        catalog = narrowed
    wire = workload.to_wire()
    translation = translate(wire, key, catalog, origin=source)
    if translation.invalid is not None:
        raise translation.invalid  # the job's own mistake, naming the job's own field
    if translation.pending is None:
        # Why it waits, in the admitter's words (which name the Workload's fields).
        translation = translate(wire, key, catalog)
    if translation.pending is None:
        return QueueVerdict(source, queue, False, translation.problem, warnings)
    pending = translation.pending
    snapshot = cluster.snapshot()
    named = [pending.request.topology] if pending.request.topology else []
    placer = build_placer(snapshot, catalog, named, exact_budget())
    in_use = usage_of(cluster.admissions)
    before = {slot: dict(amounts) for slot, amounts in in_use.items()}  # the cycle adds to it
    cycle = admission_cycle(catalog.queues, [pending], in_use, placer, cohorts=catalog.cohorts)
    if not cycle.admitted:
        message = cycle.pending.get(key, "")
        hints = _queue_hints(cluster, catalog, placer, pending.request.topology, message)
        return QueueVerdict(source, queue, False, message, [*warnings, *hints])
    admitted = cycle.admitted[0]
    if admitted.decision is None:
        return QueueVerdict(
            source,
            queue,
            True,
            f"quota reserved in ClusterQueue {admitted.cluster_queue} on flavor "
            f"{admitted.flavor}, which has no topology: nothing to place",
            warnings,
        )
    topology = (
        placer.named[(admitted.flavor, pending.request.topology)]
        if pending.request.topology
        else placer.flavors[admitted.flavor]
    )
    model = catalog.flavors[admitted.flavor]
    choice = FlavorChoice(
        admitted.flavor,
        catalog.sources[topology.topology_name],
        dict(model.spec.node_labels),
        topology.tolerations,
    )
    lowered = admitted.request.podsets if admitted.request is not None else None
    result = _result(
        source,
        choice,
        admitted.decision,
        lowered or pending.request.podsets,
        snapshot,
        topology.tree,
        warnings,
        pending.request.podsets if lowered else None,
    )
    if workload.status is not None and workload.status.admission is not None:
        workload.status.admission.cluster_queue = admitted.cluster_queue
    borrowing = borrowing_text(catalog.queues[admitted.cluster_queue], admitted, before)
    if borrowing and workload.status is not None:
        workload.status.conditions[0].message += f", {borrowing}"
    return replace(result, borrowing=borrowing)


def borrowing_text(queue: QueueSpec, admitted: Admitted, before: Usage) -> str:
    """What the admission takes beyond the queue's nominal quota (from its cohort), in words,
    or "" when it stays within: a fit that lasts only while the cohort lends."""
    quota = next((f for f in queue.flavors if f.flavor == admitted.flavor), None)
    if quota is None:
        return ""
    used = before.get((queue.name, admitted.flavor), {})
    borrowed = {
        resource: min(amount, used.get(resource, 0) + amount - quota.nominal[resource])
        for resource, amount in sorted(admitted.usage.items())
        if resource in quota.nominal and used.get(resource, 0) + amount > quota.nominal[resource]
    }
    if not borrowed:
        return ""
    amounts = ", ".join(f"{r}={format_units(r, n)}" for r, n in borrowed.items())
    return (
        f"borrowing {amounts} beyond ClusterQueue {queue.name}'s nominal quota in flavor "
        f"{admitted.flavor} from cohort {queue.cohort}"
    )


def _queue_hints(
    cluster: ClusterInput,
    catalog: Catalog,
    placer: SnapshotPlacer,
    named: str | None,
    message: str,
) -> list[str]:
    """:func:`domain_hint` for each flavor of the queue whose topology had no domains."""
    hints = []
    for reason in message.split("; "):  # one per flavor: "flavor gpu: main: no topo..."
        flavor_name = reason.removeprefix("flavor ").split(":", 1)[0]
        topology = placer.named.get((flavor_name, named)) if named else None
        topology = topology or placer.flavors.get(flavor_name)
        if topology is not None and flavor_name in catalog.flavors:
            labels = dict(catalog.flavors[flavor_name].spec.node_labels)
            choice = FlavorChoice(flavor_name, catalog.sources[topology.topology_name], labels, ())
            hints += _hints(cluster, choice, reason)
    return hints


def render_verdict(verdict: QueueVerdict) -> str:
    workload = verdict.source.workload
    name = f"{workload.metadata.namespace}/{workload.metadata.name}"
    head = f"Workload {name} on queue {verdict.queue!r}"
    return f"{head}\n{'FITS' if verdict.fits else 'DOES NOT FIT'}: {verdict.message}\n"


def verdict_document(verdict: QueueVerdict) -> Mapping[str, Any]:
    """The Workload with the QuotaReserved condition the admitter would write."""
    status = "True" if verdict.fits else "False"
    reason = "QuotaReserved" if verdict.fits else "Pending"
    verdict.source.workload.status = WorkloadStatus(
        conditions=[
            Condition(
                type="QuotaReserved",
                status=status,
                reason=reason,
                message=verdict.message,
                last_transition_time=now(),
            )
        ]
    )
    return verdict.source.workload.to_wire()


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
    decision: PlacementDecision,
    requests: tuple[PodSetRequest, ...],
    choice: FlavorChoice,
    partial: Mapping[str, tuple[int, int]],
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
                f"fits on flavor {choice.name!r}, topology {choice.source.name!r}"
                + (f" {partial_text(partial)}" if partial else ""),
            )
        ],
        admission=Admission(pod_set_assignments=assignments),
    )


def partial_text(partial: Mapping[str, tuple[int, int]]) -> str:
    """How a partial plan differs from the request, for its condition message."""
    counts = ", ".join(f"{name} {placed} of {asked}" for name, (placed, asked) in partial.items())
    return f"with fewer pods (partial admission; the whole gang does not fit): {counts}"


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


def describe_request(request: PodSetRequest) -> str:
    """The topology request of one PodSet, in the level keys it was resolved to (whatever
    vocabulary the job used: Kueue's, KAI's or Volcano's tiers)."""
    parts = []
    if request.mode is Mode.UNCONSTRAINED:
        if not request.slices:  # slices alone say all there is
            parts.append("unconstrained")
    elif request.level is not None:
        words = f"{request.mode.value} {request.level}"
        if request.limit is not None:
            words += f", climbing no higher than {request.limit}"
        parts.append(words + (", balanced" if request.balanced else ""))
    for layer in request.slices:
        own = ", each its own" if request.exclusive_slices else ""
        parts.append(f"slices of {layer.size} pod(s) in one {layer.level}{own}")
    if request.gpu_min_bandwidth is not None:
        parts.append(f"GPU sets of at least {request.gpu_min_bandwidth:g} GB/s")
    return "; ".join(parts) or request.mode.value


def render_table(result: PlanResult) -> str:
    workload = result.source.workload
    lines = [
        f"Workload {workload.metadata.namespace}/{workload.metadata.name} on flavor "
        f"{result.choice.name!r} (topology {result.choice.source.name!r}: "
        f"{' > '.join(result.choice.source.level_keys)})"
    ]
    if result.borrowing:
        lines.append(f"quota: {result.borrowing}")
    asked = {request.name: describe_request(request) for request in result.requests}
    if not result.fits:
        lines.append(f"DOES NOT FIT: {result.decision.podset}: {result.decision.message}")
        lines.extend(f"podset {name} asked: {text}" for name, text in asked.items())
        return "\n".join(lines) + "\n"
    for placement, podset in zip(result.decision.placements, workload.spec.pod_sets, strict=True):
        lines.append("")
        described = asked[placement.name]
        if placement.name in result.partial:
            placed, wanted = result.partial[placement.name]
            lines.append(
                f"podset {placement.name}: {placed} of {wanted} pod(s), {described} (partial "
                f"admission: all {wanted} do not fit, minCount {podset.min_count})"
            )
        elif podset.count == 0:  # parallelism 0: an empty table would look like a failure
            lines.append(f"podset {placement.name}: 0 pods, nothing to place")
            continue
        else:
            lines.append(f"podset {placement.name}: {podset.count} pod(s), {described}")
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


def check_as_api_server(source: WorkloadSource) -> None:
    """Refuse, as the API server would, a workload that could not be created (InputError)."""
    problems = [
        problem
        for podset in source.workload.spec.pod_sets
        for problem in api_server_problems(
            podset.template.get("spec"), join(source.template_paths[podset.name], "spec")
        )
    ]
    if problems:
        raise InputError("; ".join(problems), where=source.where)


def example_paths() -> tuple[Path, Path]:
    base = Path(str(resources.files("topogate") / "examples"))
    return base / "cluster.yaml", base / "training-job.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_argument(parser)
    parser.add_argument(
        "--workload",
        type=Path,
        metavar="PATH",
        help="one batch/v1 Job, JobSet, LeaderWorkerSet, PyTorchJob, MPIJob, RayCluster, RayJob, "
        "TrainJob (its runtime in --cluster), v1 Pod, topogate Workload, or the Pods of one "
        "pod group",
    )
    parser.add_argument("--flavor", metavar="NAME", help="the ResourceFlavor to plan on")
    parser.add_argument("--output", "-o", choices=("json", "yaml", "table"), default="table")
    parser.add_argument(
        "--ignore-queues",
        action="store_true",
        help="plan on the topology alone, without the ClusterQueues/LocalQueues in --cluster",
    )
    parser.add_argument(
        "--example",
        action="store_true",
        help="plan the built-in example (a block/rack/host GPU cluster)",
    )


def _workload_document(path: Path) -> Document:
    """The one object in ``path``, or a plain pod group: Pods that all carry one
    ``kueue.x-k8s.io/pod-group-name``, composed into one group as ``serve`` composes them."""
    docs = list(documents(path))
    names = {podgroup.group_name(d.obj) if d.obj.get("kind") == "Pod" else None for d in docs}
    if docs and len(names) == 1 and None not in names:
        name = str(next(iter(names)))
        namespace = str((docs[0].obj.get("metadata") or {}).get("namespace") or "default")
        return Document(docs[0].source, podgroup.compose(namespace, name, [d.obj for d in docs]))
    return load_single(path)


def run(args: argparse.Namespace) -> int:
    if args.example:
        if args.cluster or args.workload:
            raise InputError("--example cannot be combined with --cluster or --workload")
        cluster_path, workload_path = example_paths()
        args.cluster, args.workload = [cluster_path], workload_path
    if not args.cluster or args.workload is None:
        raise InputError("needs --cluster PATH and --workload PATH (or --example)")
    if args.workload == STDIN and STDIN in args.cluster:
        raise InputError(
            "- reads stdin, which --cluster - already reads; give the workload as a file",
            where="--workload",
        )
    cluster = load_cluster_reporting(args.cluster, "plan")
    document = _workload_document(args.workload)
    for warning in key_warnings(document.obj):  # before any refusal: a typo may explain it
        print(f"topogate plan: warning: {object_name(document.obj)}: {warning}", file=sys.stderr)
    source = workload_from_object(document.obj, document.source, lookup=cluster.lookup)
    check_as_api_server(source)
    queue = queue_of(source, document.obj)
    queued = (cluster.cluster_queues or cluster.local_queues) and not args.ignore_queues
    if queued and queue is None:
        print(
            "topogate plan: warning: the workload names no queue (label "
            f"{QUEUE_LABELS[1]}); planned without the queues' quota",
            file=sys.stderr,
        )
    if queued and queue is not None:
        outcome = plan_on_queue(cluster, source, queue, args.flavor)
    else:
        outcome = plan(cluster, source, args.flavor)
    for warning in outcome.warnings:
        print(f"topogate plan: warning: {warning}", file=sys.stderr)
    if isinstance(outcome, QueueVerdict):
        return _write_verdict(outcome, args.output)
    result = outcome
    if args.output == "json":
        sys.stdout.write(json.dumps(workload_document(result), indent=2) + "\n")
    elif args.output == "yaml":
        sys.stdout.write(yaml.safe_dump(dict(workload_document(result)), sort_keys=False))
    else:
        sys.stdout.write(render_table(result))
    return EXIT_FITS if result.fits else EXIT_NO_FIT


def _write_verdict(verdict: QueueVerdict, output: str) -> int:
    if output == "json":
        sys.stdout.write(json.dumps(verdict_document(verdict), indent=2) + "\n")
    elif output == "yaml":
        sys.stdout.write(yaml.safe_dump(dict(verdict_document(verdict)), sort_keys=False))
    else:
        sys.stdout.write(render_verdict(verdict))
    return EXIT_FITS if verdict.fits else EXIT_NO_FIT
