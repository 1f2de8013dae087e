"""Cluster dumps from files, as the commands read them: Nodes, Pods, Topologies, flavors and
HyperNodes into a :class:`ClusterInput`; the CLI arguments and output that go with it."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topogate.admission.assignments import usage_from_admission
from topogate.admission.quota import checked_admission
from topogate.api.constants import API_VERSION, KAI_API_VERSION, KUEUE_API_VERSIONS, KUEUE_GROUP
from topogate.api.errors import InputError
from topogate.api.hypernodes import API_VERSION as HYPERNODE_API_VERSION
from topogate.api.hypernodes import NODE, HyperNode, parse_hypernode
from topogate.api.kinds import READ_KINDS
from topogate.api.models import ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Topology
from topogate.api.objects import admission_of, gpu_assignment_of, is_finished, workload_of_pod
from topogate.api.validation import parse_model
from topogate.cache.hypernodes import HyperNodeForest, build_forest
from topogate.cache.nodes import NodeInfo, PodUsage, node_from_kube, pod_usage_from_kube
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.sources import merge_kai_topologies
from topogate.files import STDIN, Document, documents, load_single

__all__ = ["ClusterInput", "Document", "documents", "load_cluster", "load_single"]

# What load_cluster reads, kind by kind, and as which apiVersions. The same kind under any
# other apiVersion (another project's Topology, an unknown version) is not guessed at: it is
# skipped, and the warning names its apiVersion and what topogate reads instead.
READ_AS: dict[str, tuple[str, ...]] = {
    "Node": ("v1",),
    "Pod": ("v1",),
    "Topology": (API_VERSION, *sorted(KUEUE_API_VERSIONS), KAI_API_VERSION),
    "ResourceFlavor": (API_VERSION, *sorted(KUEUE_API_VERSIONS)),
    "HyperNode": (HYPERNODE_API_VERSION,),
    "ClusterQueue": (API_VERSION, *sorted(KUEUE_API_VERSIONS)),
    "LocalQueue": (API_VERSION, *sorted(KUEUE_API_VERSIONS)),
    "Cohort": (API_VERSION, *sorted(KUEUE_API_VERSIONS)),
    "Workload": (API_VERSION, *sorted(KUEUE_API_VERSIONS)),
}


@dataclass(slots=True)
class ClusterInput:
    nodes: list[NodeInfo] = field(default_factory=list)
    pods: list[PodUsage] = field(default_factory=list)
    # each bound pod with the Workload that marked it (namespace/name), if any
    pod_owners: list[tuple[PodUsage, str | None]] = field(default_factory=list)
    topologies: dict[str, Topology] = field(default_factory=dict)
    flavors: dict[str, ResourceFlavor] = field(default_factory=dict)
    hypernodes: dict[str, HyperNode] = field(default_factory=dict)
    cluster_queues: dict[str, ClusterQueue] = field(default_factory=dict)
    local_queues: dict[str, str] = field(default_factory=dict)  # "namespace/name" -> its CQ
    cohorts: dict[str, Cohort] = field(default_factory=dict)  # the cohort tree's nodes
    # status.admission of each admitted, unfinished Workload: the quota in use
    admissions: list[dict[str, Any]] = field(default_factory=list)
    # the same Workloads by namespace/name: what they hold on the nodes of their assignment
    admitted: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)  # kinds read in no apiVersion
    # (kind, apiVersion) -> object names: a kind READ_AS knows, under an apiVersion it does not
    unread: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    # Objects job kinds read (a TrainJob's runtimes), by (kind, namespace or None, name).
    read_objects: dict[tuple[str, str | None, str], Mapping[str, Any]] = field(default_factory=dict)

    def lookup(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """``api.kinds.Lookup`` over the files: how `plan` reads a TrainJob's runtime."""
        return self.read_objects.get((kind, namespace, name))

    def snapshot(self) -> ClusterSnapshot:
        """The capacity as ``serve`` counts it: bound pods, and what each admitted Workload
        holds on the nodes of its topologyAssignment (as Kueue's scheduler counts both). A
        pod of an admitted Workload (marked with its name) is counted once, in the
        Workload's usage."""
        usage: dict[str, dict[str, int]] = {}
        gpus: dict[str, set[int]] = {}
        for key, workload in self.admitted.items():
            for node, amounts in usage_from_admission(
                workload, f"Workload {key}", self.nodes_in_domain
            ).items():
                slot = usage.setdefault(node, {})
                for name, amount in amounts.items():
                    slot[name] = slot.get(name, 0) + amount
            for placed in gpu_assignment_of(workload, key).values():
                for node, sets in placed.items():
                    gpus.setdefault(node, set()).update(i for s in sets for i in s)
        pods = [pod for pod, owner in self.pod_owners if owner not in self.admitted]
        return ClusterSnapshot.build(self.nodes, pods, usage, gpus)

    def nodes_in_domain(self, levels: Sequence[str], values: Sequence[str]) -> list[str]:
        """Names of the nodes whose labels are ``values`` on ``levels``, sorted."""
        pairs = list(zip(levels, values, strict=False))
        return sorted(n.name for n in self.nodes if all(n.labels.get(k) == v for k, v in pairs))

    def build_forest(self) -> HyperNodeForest | None:
        """The HyperNode forest over the input's nodes, or None without HyperNodes (built
        anew on each call: call it once per command)."""
        if not self.hypernodes:
            return None
        return build_forest(list(self.hypernodes.values()), self.nodes)


def hypernode_warnings(forest: HyperNodeForest | None) -> list[str]:
    """What is wrong in the HyperNodes (left out of the forest; the rest still places jobs),
    one line per problem: ``plan`` and ``topology`` both print these."""
    problems = {name: list(found) for name, found in (forest.problems if forest else {}).items()}
    for name, hypernode in (forest.hypernodes if forest else {}).items():
        assert forest is not None
        members = [m for m in hypernode.members if m.type == NODE]
        missing = [
            m.exact
            for m in members
            if m.exact is not None
            and m.exact not in forest.nodes.get(name, ())
            and m.exact not in forest.node_hypernode  # a node claimed twice: said apart
        ]
        if missing:
            shown = ", ".join(missing[:3]) + (
                f" and {len(missing) - 3} more" if missing[3:] else ""
            )
            problems.setdefault(name, []).append(
                f"{len(missing)} of its {len(members)} member node(s) are not in --cluster: {shown}"
            )
        elif members and not forest.nodes.get(name):
            problems.setdefault(name, []).append("its members select no node of --cluster")
    return [
        f"HyperNode {name}: {problem}"
        for name, found in sorted(problems.items())
        for problem in found
    ]


def unread_warnings(cluster: ClusterInput) -> list[str]:
    """One line per (kind, apiVersion) that was skipped although topogate reads the kind."""
    out = []
    for (kind, api_version), names in sorted(cluster.unread.items()):
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        noun = "object" if len(names) == 1 else "objects"
        known = READ_AS[kind]
        read = ", ".join(known[:-1]) + f" or {known[-1]}" if len(known) > 1 else known[0]
        out.append(
            f"{kind} {api_version} is not read ({len(names)} {noun}: {shown}); "
            f"topogate reads {kind} as {read}"
        )
    return out


def load_cluster(paths: list[Path]) -> ClusterInput:
    """Nodes, bound pods, Topologies (Kueue's and KAI's) and ResourceFlavors from files; other
    kinds are counted."""
    cluster = ClusterInput()
    node_sources: dict[str, str] = {}
    if paths.count(STDIN) > 1:
        raise InputError("stdin can be read once; give --cluster - once", where="--cluster")
    kai: dict[str, Topology] = {}  # KAI-Scheduler's Topologies, merged in at the end
    kai_where: dict[str, str] = {}
    for path in paths:
        for doc in documents(path):
            kind, api_version = doc.obj.get("kind"), doc.obj.get("apiVersion")
            if isinstance(kind, str) and kind in READ_AS and api_version not in READ_AS[kind]:
                key = (kind, str(api_version) if api_version else "(no apiVersion)")
                meta = doc.obj.get("metadata")
                name = meta.get("name") if isinstance(meta, Mapping) else None
                cluster.unread.setdefault(key, []).append(str(name or "<no name>"))
                continue
            try:
                if kind == "Node":
                    node = node_from_kube(doc.obj)
                    _check_label_values(node)
                    if node.name in node_sources:
                        raise InputError(
                            f"node {node.name!r} is defined twice "
                            f"(also in {node_sources[node.name]})",
                            field="metadata.name",
                        )
                    node_sources[node.name] = doc.source
                    cluster.nodes.append(node)
                elif kind == "Pod":
                    usage = pod_usage_from_kube(doc.obj)
                    if usage is not None:
                        cluster.pods.append(usage)
                        cluster.pod_owners.append((usage, _owner(doc.obj)))
                elif kind == "Topology" and api_version == KAI_API_VERSION:
                    topology = parse_model(Topology, doc.obj, "")
                    _unique(kai, topology.metadata.name, f"Topology ({KAI_API_VERSION})")
                    kai[topology.metadata.name] = topology
                    kai_where[topology.metadata.name] = doc.where
                elif kind == "Topology":
                    topology = parse_model(Topology, doc.obj, "")
                    _unique(cluster.topologies, topology.metadata.name, "Topology")
                    cluster.topologies[topology.metadata.name] = topology
                elif kind == "ResourceFlavor":
                    flavor = parse_model(ResourceFlavor, doc.obj, "")
                    _unique(cluster.flavors, flavor.metadata.name, "ResourceFlavor")
                    cluster.flavors[flavor.metadata.name] = flavor
                elif kind in _QUEUE_KINDS:
                    _add_queue(cluster, doc.obj)
                elif kind == "Workload":
                    admission = admission_of(doc.obj)
                    if admission is not None and not is_finished(doc.obj):
                        checked_admission(admission)
                        cluster.admissions.append(admission)
                        meta = doc.obj.get("metadata") or {}
                        owner = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
                        cluster.admitted[owner] = doc.obj
                elif any((kind, api_version) == (r.kind, r.api_version) for r in READ_KINDS):
                    _add_read_object(cluster, doc.obj)
                elif kind == "HyperNode":
                    hypernode = parse_hypernode(doc.obj)
                    _unique(cluster.hypernodes, hypernode.name, "HyperNode")
                    cluster.hypernodes[hypernode.name] = hypernode
                else:
                    cluster.skipped[f"{kind or '<no kind>'}"] += 1
            except InputError as exc:
                raise InputError(exc.message, where=doc.where, field=exc.field) from None
    cluster.topologies, clashes = merge_kai_topologies(cluster.topologies, kai)
    if clashes:
        name = min(clashes)
        raise InputError(clashes[name].message, where=kai_where[name], field=clashes[name].field)
    return cluster


_QUEUE_KINDS = ("ClusterQueue", "LocalQueue", "Cohort")


def _add_read_object(cluster: ClusterInput, obj: Mapping[str, Any]) -> None:
    kind = str(obj["kind"])
    read = next(r for r in READ_KINDS if r.kind == kind)
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InputError("is required", field="metadata.name")
    namespace = str(meta.get("namespace") or "default") if read.namespaced else None
    key = (kind, namespace, name)
    if key in cluster.read_objects:
        raise InputError(f"{kind} {name!r} is defined twice", field="metadata.name")
    cluster.read_objects[key] = obj


KUEUE_WORKLOAD, KUEUE_PODSET = f"{KUEUE_GROUP}/workload", f"{KUEUE_GROUP}/podset"
MAX_LABEL_VALUE = 63  # the API server's limit; an assignment could not carry a longer value


def _owner(pod: Mapping[str, Any]) -> str | None:
    """namespace/name of the Workload a pod belongs to: topogate's marks, or Kueue's (a dump
    of a Kueue cluster: the same kueue.x-k8s.io/podset label and workload annotation)."""
    owner = workload_of_pod(pod)
    meta = pod.get("metadata")
    if owner is not None or not isinstance(meta, Mapping):
        return owner
    labels, annotations = meta.get("labels"), meta.get("annotations")
    name = annotations.get(KUEUE_WORKLOAD) if isinstance(annotations, Mapping) else None
    if not name or not isinstance(labels, Mapping) or KUEUE_PODSET not in labels:
        return None
    return f"{meta.get('namespace') or 'default'}/{name}"


def _check_label_values(node: NodeInfo) -> None:
    """Refuse what the API server would: a label value over 63 characters (a hostname label
    that long stopped plan with a traceback when it wrote the assignment)."""
    for key, value in node.labels.items():
        if len(value) > MAX_LABEL_VALUE:
            shown = value if len(value) <= 80 else value[:77] + "..."
            raise InputError(
                f'Invalid value: "{shown}": must be no more than {MAX_LABEL_VALUE} characters',
                field=f"metadata.labels[{key}]",
            )


def _add_queue(cluster: ClusterInput, obj: Mapping[str, Any]) -> None:
    """A ClusterQueue, LocalQueue or Cohort, Kueue's read as topogate's (the same fields)."""
    same = {**obj, "apiVersion": API_VERSION}
    if obj.get("kind") == "Cohort":
        cohort = parse_model(Cohort, same, "")
        _unique(cluster.cohorts, cohort.metadata.name, "Cohort")
        cluster.cohorts[cohort.metadata.name] = cohort
        return
    if obj.get("kind") == "ClusterQueue":
        queue = parse_model(ClusterQueue, same, "")
        _unique(cluster.cluster_queues, queue.metadata.name, "ClusterQueue")
        cluster.cluster_queues[queue.metadata.name] = queue
        return
    local = parse_model(LocalQueue, same, "")
    key = f"{local.metadata.namespace or 'default'}/{local.metadata.name}"
    _unique(cluster.local_queues, key if local.metadata.name else "", "LocalQueue")
    cluster.local_queues[key] = local.spec.cluster_queue


def _unique(existing: Mapping[str, Any], name: str, kind: str) -> None:
    if not name:
        raise InputError("is required", field="metadata.name")
    if name in existing:
        raise InputError(f"{kind} {name!r} is defined twice", field="metadata.name")


def add_cluster_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="file or directory of Nodes, Pods, Topologies, ResourceFlavors, HyperNodes, "
        "ClusterQueues, LocalQueues, Cohorts, Workloads; - reads stdin "
        "(kubectl get nodes,pods -A -o yaml | topogate ... --cluster -)",
    )


def load_cluster_reporting(paths: list[Path], command: str) -> ClusterInput:
    """``load_cluster``, with warning lines on stderr for what ``command`` skipped: one per
    known kind under an apiVersion it does not read, one for all other kinds."""
    cluster = load_cluster(paths)
    for warning in unread_warnings(cluster):
        print(f"topogate {command}: warning: {warning}", file=sys.stderr)
    if cluster.skipped:
        kinds = ", ".join(f"{kind} x{n}" for kind, n in sorted(cluster.skipped.items()))
        print(
            f"topogate {command}: warning: skipped {sum(cluster.skipped.values())} object(s) "
            f"of kinds {command} does not use: {kinds}",
            file=sys.stderr,
        )
    return cluster


def write_output(text: str, out: Path | None) -> None:
    """To stdout, or to ``out``; a file that cannot be written is the user's error."""
    if out is None:
        sys.stdout.write(text)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot write: {error.strerror or error}", where=str(out)) from None
