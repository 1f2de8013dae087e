"""Small builders for tests: nodes, pods and PodSets in a line each, and a placement runner."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from topogate.admission.exact import EXACT_BUDGET
from topogate.admission.placement import place
from topogate.admission.request import (
    Mode,
    PlacementDecision,
    PlacementRequest,
    PodSetRequest,
    SliceLayer,
)
from topogate.api.podspec import NodeConstraints, SelectorTerm, Taint, Toleration
from topogate.api.quantity import to_units
from topogate.api.topology_assignment import decode
from topogate.cache.nodes import NodeInfo, PodUsage
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree
from topogate.clock import exact_budget as exact_budget_of

BLOCK = "cloud.com/topology-block"
RACK = "cloud.com/topology-rack"
HOST = "kubernetes.io/hostname"
GPU = "example.com/gpu"
L1 = (HOST,)
L2 = (BLOCK, RACK)
L3 = (BLOCK, RACK, HOST)


def node(
    name: str,
    block: str | None = None,
    rack: str | None = None,
    host: str | None = None,
    *,
    cpu: int | str | None = None,
    memory: int | str | None = None,
    pods: int | None = 10,
    gpu: int | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    ready: bool = True,
    unschedulable: bool = False,
    extra: Mapping[str, int] | None = None,
) -> NodeInfo:
    """A node; ``cpu`` in millicores when an int, else a quantity string."""
    all_labels: dict[str, str] = {}
    if block is not None:
        all_labels[BLOCK] = block
    if rack is not None:
        all_labels[RACK] = rack
    if host is not None:
        all_labels[HOST] = host
    all_labels.update(labels or {})
    allocatable: dict[str, int] = {}
    if cpu is not None:
        allocatable["cpu"] = cpu if isinstance(cpu, int) else to_units("cpu", cpu)
    if memory is not None:
        allocatable["memory"] = memory if isinstance(memory, int) else to_units("memory", memory)
    if pods is not None:
        allocatable["pods"] = pods
    if gpu is not None:
        allocatable[GPU] = gpu
    allocatable.update(extra or {})
    return NodeInfo(name, all_labels, allocatable, tuple(taints), ready, unschedulable)


def running(node_name: str, key: str = "p", **requests: int) -> PodUsage:
    return PodUsage(key=f"ns/{key}", node_name=node_name, requests=dict(requests))


def podset(
    count: int,
    name: str = "main",
    *,
    cpu: int | None = None,
    memory: int | None = None,
    gpu: int | None = None,
    requests: Mapping[str, int] | None = None,
    required: str | None = None,
    preferred: str | None = None,
    slice: tuple[str, int] | None = None,
    layers: Sequence[tuple[str, int]] = (),
    group: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Toleration] = (),
    affinity: Sequence[SelectorTerm] | None = None,
) -> PodSetRequest:
    reqs: dict[str, int] = dict(requests or {})
    if cpu is not None:
        reqs["cpu"] = cpu
    if memory is not None:
        reqs["memory"] = memory
    if gpu is not None:
        reqs[GPU] = gpu
    mode, level = Mode.UNCONSTRAINED, None
    if required:
        mode, level = Mode.REQUIRED, required
    elif preferred:
        mode, level = Mode.PREFERRED, preferred
    slices = tuple(SliceLayer(lv, size) for lv, size in layers)
    if slice is not None:
        slices = (SliceLayer(*slice),)
    return PodSetRequest(
        name=name,
        count=count,
        requests=reqs,
        mode=mode,
        level=level,
        slices=slices,
        constraints=NodeConstraints(
            tolerations=tuple(tolerations),
            node_selector=dict(node_selector or {}),
            affinity_terms=tuple(affinity) if affinity is not None else None,
        ),
        group=group,
    )


def run(
    nodes: Iterable[NodeInfo],
    levels: Sequence[str],
    *podsets: PodSetRequest,
    pods: Iterable[PodUsage] = (),
    node_labels: Mapping[str, str] | None = None,
    held: Mapping[str, Mapping[str, int]] | None = None,
    flavor_tolerations: Sequence[Toleration] = (),
    exact_budget: float = EXACT_BUDGET,
) -> PlacementDecision:
    """Place ``podsets`` on a snapshot of ``nodes`` under topology "default"
    (``exact_budget=0``: the greedy pass alone, Kueue's)."""
    snapshot = ClusterSnapshot.build(nodes, pods, held)
    tree = DomainTree.from_labels(snapshot, levels, node_labels)
    return place(
        tree,
        snapshot,
        PlacementRequest("wl", tuple(podsets)),
        topology_name="default",
        flavor_tolerations=flavor_tolerations,
        exact=exact_budget_of(exact_budget),
    )


def assigned(decision: PlacementDecision, name: str = "main") -> dict[tuple[str, ...], int]:
    """The assignment of one PodSet as {values: count}, in assignment order."""
    assert decision.fits, decision.message
    for placement in decision.placements:
        if placement.name == name:
            return {d.values: d.count for d in placement.domains}
    raise KeyError(name)


def hosts(decision: PlacementDecision, name: str = "main") -> dict[str, int]:
    """For hostname topologies: {hostname: count}."""
    return {values[-1]: count for values, count in assigned(decision, name).items()}


def default_nodes() -> list[NodeInfo]:
    """Kueue's defaultNodes (note: b2-r2-x2 really sits in rack r1)."""
    return [
        node("b1-r1-x3", "b1", "r1", "x3", cpu=1000, memory="1Gi"),
        node("b1-r2-x5", "b1", "r2", "x5", cpu=1000, memory="1Gi"),
        node("b1-r2-x1", "b1", "r2", "x1", cpu=1000, memory="1Gi"),
        node("b1-r2-x6", "b1", "r2", "x6", cpu=1000, memory="1Gi"),
        node("b2-r2-x2", "b2", "r1", "x2", cpu=1000, memory="1Gi"),
        node("b2-r2-x4", "b2", "r2", "x4", cpu=2000, memory="4Gi", pods=40),
    ]


def scattered_nodes() -> list[NodeInfo]:
    return [
        node("b1-r1-x3", "b1", "r1", "x3", cpu=4000, memory="1Gi"),
        node("b1-r1-x5", "b1", "r1", "x5", cpu=1000, memory="1Gi"),
        node("b1-r1-x1", "b1", "r1", "x1", cpu=1000, memory="1Gi"),
        node("b2-r1-x6", "b2", "r1", "x6", cpu=2000, memory="1Gi"),
        node("b2-r1-x2", "b2", "r1", "x2", cpu=1000, memory="1Gi"),
    ]


def multipod_nodes() -> list[NodeInfo]:
    return [
        node("b1-r1-x3", "b1", "r1", "x3", cpu=10000, memory="1Gi"),
        node("b1-r2-x5", "b1", "r2", "x5", cpu=10000, memory="1Gi"),
        node("b1-r2-x1", "b1", "r2", "x1", cpu=10000, memory="1Gi"),
        node("b1-r2-x6", "b1", "r2", "x6", cpu=10000, memory="1Gi"),
        node("b2-r1-x2", "b2", "r1", "x2", cpu=10000, memory="1Gi"),
        node("b2-r2-x4", "b2", "r2", "x4", cpu=20000, memory="4Gi", pods=40),
    ]


def binary_tree_nodes() -> list[NodeInfo]:
    layout = [
        ("b1", "r1", "x3"),
        ("b1", "r1", "x5"),
        ("b1", "r2", "x1"),
        ("b1", "r2", "x6"),
        ("b2", "r1", "x2"),
        ("b2", "r1", "x4"),
        ("b2", "r2", "x7"),
        ("b2", "r2", "x8"),
    ]
    return [node(f"{b}-{r}-{h}", b, r, h, cpu=1000, memory="1Gi") for b, r, h in layout]


def hypernode_object(
    name: str,
    tier: int,
    nodes: Sequence[str] = (),
    children: Sequence[str] = (),
    tier_name: str | None = None,
) -> dict[str, Any]:
    """A Volcano HyperNode as the API server sees it; members by exact name."""
    members = [{"type": "Node", "selector": {"exactMatch": {"name": n}}} for n in nodes]
    members += [{"type": "HyperNode", "selector": {"exactMatch": {"name": c}}} for c in children]
    spec: dict[str, Any] = {"tier": tier, "members": members}
    if tier_name is not None:
        spec["tierName"] = tier_name
    return {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": spec,
    }


def review_for(
    obj: dict[str, Any],
    kind: str,
    group: str = "",
    operation: str = "CREATE",
    namespace: str = "default",
) -> dict[str, Any]:
    """An AdmissionReview request as the API server sends it."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-000000000000",
            "kind": {"group": group, "version": "v1", "kind": kind},
            "operation": operation,
            "namespace": namespace,
            "object": obj,
            "dryRun": False,
        },
    }


def written_domains(topology: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The domains of a topologyAssignment topogate wrote, decoded: it is always written in
    Kueue v1beta2's ``slices`` form, never the older ``domains``."""
    assert "slices" in topology and "domains" not in topology, topology
    return [{"values": list(d.values), "count": d.count} for d in decode(topology).domains]
