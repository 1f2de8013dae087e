"""Cluster dumps from files, as the commands read them: Nodes, Pods, Topologies, flavors and
HyperNodes into a :class:`ClusterInput`; the CLI arguments and output that go with it."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topogate.api.constants import API_VERSION
from topogate.api.errors import InputError
from topogate.api.hypernodes import HyperNode, parse_hypernode
from topogate.api.models import ClusterQueue, LocalQueue, ResourceFlavor, Topology
from topogate.api.objects import admission_of, is_finished
from topogate.api.validation import parse_model
from topogate.cache.hypernodes import HyperNodeForest, build_forest
from topogate.cache.nodes import NodeInfo, PodUsage, node_from_kube, pod_usage_from_kube
from topogate.files import Document, documents, load_single

__all__ = ["ClusterInput", "Document", "documents", "load_cluster", "load_single"]

HYPERNODE_GROUP = "topology.volcano.sh"


@dataclass(slots=True)
class ClusterInput:
    nodes: list[NodeInfo] = field(default_factory=list)
    pods: list[PodUsage] = field(default_factory=list)
    topologies: dict[str, Topology] = field(default_factory=dict)
    flavors: dict[str, ResourceFlavor] = field(default_factory=dict)
    hypernodes: dict[str, HyperNode] = field(default_factory=dict)
    cluster_queues: dict[str, ClusterQueue] = field(default_factory=dict)
    local_queues: dict[str, str] = field(default_factory=dict)  # "namespace/name" -> its CQ
    # status.admission of each admitted, unfinished Workload: the quota in use
    admissions: list[dict[str, Any]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)

    def build_forest(self) -> HyperNodeForest | None:
        """The HyperNode forest over the input's nodes, or None without HyperNodes (built
        anew on each call: call it once per command)."""
        if not self.hypernodes:
            return None
        return build_forest(list(self.hypernodes.values()), self.nodes)


def _group(api_version: Any) -> str:
    return str(api_version or "").rpartition("/")[0]


def load_cluster(paths: list[Path]) -> ClusterInput:
    """Nodes, bound pods, Topologies and ResourceFlavors from files; other kinds are counted."""
    cluster = ClusterInput()
    node_sources: dict[str, str] = {}
    for path in paths:
        for doc in documents(path):
            kind, group = doc.obj.get("kind"), _group(doc.obj.get("apiVersion"))
            try:
                if kind == "Node" and group == "":
                    node = node_from_kube(doc.obj)
                    if node.name in node_sources:
                        raise InputError(
                            f"node {node.name!r} is defined twice "
                            f"(also in {node_sources[node.name]})",
                            field="metadata.name",
                        )
                    node_sources[node.name] = doc.source
                    cluster.nodes.append(node)
                elif kind == "Pod" and group == "":
                    usage = pod_usage_from_kube(doc.obj)
                    if usage is not None:
                        cluster.pods.append(usage)
                elif kind == "Topology" and group in ("topogate.dev", "kueue.x-k8s.io"):
                    topology = parse_model(Topology, doc.obj, "")
                    _unique(cluster.topologies, topology.metadata.name, "Topology")
                    cluster.topologies[topology.metadata.name] = topology
                elif kind == "ResourceFlavor" and group in ("topogate.dev", "kueue.x-k8s.io"):
                    flavor = parse_model(ResourceFlavor, doc.obj, "")
                    _unique(cluster.flavors, flavor.metadata.name, "ResourceFlavor")
                    cluster.flavors[flavor.metadata.name] = flavor
                elif kind in _QUEUE_KINDS and group in ("topogate.dev", "kueue.x-k8s.io"):
                    _add_queue(cluster, doc.obj)
                elif kind == "Workload" and group in ("topogate.dev", "kueue.x-k8s.io"):
                    admission = admission_of(doc.obj)
                    if admission is not None and not is_finished(doc.obj):
                        cluster.admissions.append(admission)
                elif kind == "HyperNode" and group == HYPERNODE_GROUP:
                    hypernode = parse_hypernode(doc.obj)
                    _unique(cluster.hypernodes, hypernode.name, "HyperNode")
                    cluster.hypernodes[hypernode.name] = hypernode
                else:
                    cluster.skipped[f"{kind or '<no kind>'}"] += 1
            except InputError as exc:
                raise InputError(exc.message, where=doc.where, field=exc.field) from None
    return cluster


_QUEUE_KINDS = ("ClusterQueue", "LocalQueue")


def _add_queue(cluster: ClusterInput, obj: Mapping[str, Any]) -> None:
    """A ClusterQueue or LocalQueue, Kueue's read as topogate's (the same fields)."""
    same = {**obj, "apiVersion": API_VERSION}
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
        "ClusterQueues, LocalQueues, Workloads",
    )


def load_cluster_reporting(paths: list[Path], command: str) -> ClusterInput:
    """``load_cluster``, with one warning line on stderr for the kinds ``command`` skipped."""
    cluster = load_cluster(paths)
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
