"""cache/: snapshot usage, readiness, taints, selectors, the domain tree and label scoping."""

from __future__ import annotations

import numpy as np

from tests.kit import BLOCK, L3, RACK, node, podset, running
from topogate.admission.placement import place
from topogate.admission.request import PlacementRequest
from topogate.api.podspec import NodeConstraints, Requirement, SelectorTerm, Taint, Toleration
from topogate.cache.nodes import node_from_kube, pod_usage_from_kube
from topogate.cache.selectors import eligible
from topogate.cache.snapshot import CapacityCache, ClusterSnapshot
from topogate.cache.topology import DomainTree


def _free(snapshot: ClusterSnapshot, name: str, resource: str) -> int:
    return int(snapshot.free[snapshot.node_index[name], snapshot.resource_index[resource]])


def test_usage_of_bound_pods_and_one_pod_slot_each() -> None:
    snapshot = ClusterSnapshot.build(
        [node("a", cpu=4000, pods=3), node("b", cpu=4000)],
        [running("a", "p1", cpu=1500), running("a", "p2"), running("gone", "p3", cpu=1)],
    )
    assert _free(snapshot, "a", "cpu") == 2500 and _free(snapshot, "a", "pods") == 1
    assert _free(snapshot, "b", "cpu") == 4000


def test_pod_phases_and_binding() -> None:
    def pod(phase: str | None, node_name: str | None) -> dict[str, object]:
        spec: dict[str, object] = {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
        }
        if node_name:
            spec["nodeName"] = node_name
        return {
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n"},
            "spec": spec,
            "status": {"phase": phase},
        }

    assert pod_usage_from_kube(pod("Running", "a")) is not None
    assert (
        pod_usage_from_kube(pod("Pending", "a")) is not None
    )  # bound, not yet running: holds room
    assert pod_usage_from_kube(pod("Succeeded", "a")) is None
    assert pod_usage_from_kube(pod("Failed", "a")) is None
    assert pod_usage_from_kube(pod("Pending", None)) is None


def test_node_readiness_from_conditions_and_allocatable_fallback() -> None:
    base = {"kind": "Node", "metadata": {"name": "n"}, "status": {"capacity": {"cpu": "2"}}}
    assert not node_from_kube(base).ready  # no Ready condition: not ready, as Kueue
    ready = {
        **base,
        "status": {"capacity": {"cpu": "2"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    info = node_from_kube(ready)
    assert info.ready and info.allocatable == {"cpu": 2000}


def test_same_rack_name_under_two_blocks_is_two_domains() -> None:
    snapshot = ClusterSnapshot.build(
        [
            node("n1", "block-1", "rack-1", "n1"),
            node("n2", "block-2", "rack-1", "n2"),
            node("n3", "block-1", "rack-1", "n3"),
        ]
    )
    tree = DomainTree.from_labels(snapshot, L3)
    assert tree.size(0) == 2 and tree.size(1) == 2 and tree.size(2) == 3
    racks = sorted(tree.path(1, d) for d in range(tree.size(1)))
    assert racks == [("block-1", "rack-1"), ("block-2", "rack-1")]


def test_tree_membership_flavor_labels_and_level_labels() -> None:
    snapshot = ClusterSnapshot.build(
        [
            node("a", "b1", "r1", "a", labels={"pool": "gpu"}),
            node("b", "b1", "r1", "b", labels={"pool": "cpu"}),
            node("c", "b1", None, "c", labels={"pool": "gpu"}),  # lacks the rack label
        ]
    )
    tree = DomainTree.from_labels(snapshot, L3, {"pool": "gpu"})
    assert [snapshot.node_names[i] for i in tree.nodes] == ["a"]


def test_non_hostname_tree_gets_a_node_level_and_lexicographic_paths() -> None:
    snapshot = ClusterSnapshot.build(
        [node("z", "b1", "r10"), node("y", "b1", "r9"), node("x", "b1", "r9")]
    )
    tree = DomainTree.from_labels(snapshot, (BLOCK, RACK))
    assert tree.depth == 3 and tree.output_level == 1 and not tree.hostname_lowest
    order = [tree.path(1, int(d)) for d in np.argsort(tree.lexrank[1])]
    assert order == [("b1", "r10"), ("b1", "r9")]  # element-wise string order, as Kueue
    # The node level is internal: node i of the tree is domain i there.
    assert list(tree.member_domain[2]) == [0, 1, 2]


def test_hostname_level_is_the_node_level_in_domain_order() -> None:
    snapshot = ClusterSnapshot.build([node("n2", "b", "r", "x2"), node("n1", "b", "r", "x1")])
    tree = DomainTree.from_labels(snapshot, L3)
    assert tree.depth == 3
    for domain in range(tree.size(2)):
        # Invariant the core relies on: node-level domain i is tree.nodes[i].
        name = snapshot.node_names[int(tree.nodes[domain])]
        assert tree.value(2, domain) == {"n2": "x2", "n1": "x1"}[name]


def test_shared_hostname_values_fall_back_to_a_node_level() -> None:
    snapshot = ClusterSnapshot.build([node("n1", "b", "r", "same"), node("n2", "b", "r", "same")])
    tree = DomainTree.from_labels(snapshot, L3)
    assert tree.size(2) == 1 and tree.depth == 4


def test_eligibility_and_exclusion_reasons() -> None:
    gpu_taint = Taint("gpu", "yes", "NoSchedule")
    nodes = [
        node("ok", labels={"zone": "a", "n": "5"}),
        node("down", ready=False),
        node("cordoned", unschedulable=True),
        node("tainted", taints=[gpu_taint], labels={"zone": "a", "n": "5"}),
        node("soft", taints=[Taint("x", "", "PreferNoSchedule")], labels={"zone": "a", "n": "5"}),
        node("elsewhere", labels={"zone": "b", "n": "5"}),
        node("small", labels={"zone": "a", "n": "1"}),
    ]
    snapshot = ClusterSnapshot.build(nodes)
    rows = np.arange(len(nodes))
    constraints = NodeConstraints(
        node_selector={"zone": "a"},
        affinity_terms=(SelectorTerm(labels=(Requirement("n", "Gt", ("3",)),)),),
    )
    mask, exclusions = eligible(snapshot, rows, constraints)
    assert [n.name for n, ok in zip(nodes, mask, strict=True) if ok] == ["ok", "soft"]
    assert (
        exclusions.not_ready,
        exclusions.unschedulable,
        exclusions.node_selector,
        exclusions.affinity,
    ) == (1, 1, 1, 1)
    assert exclusions.taints == {"gpu=yes:NoSchedule": 1}
    assert exclusions.describe() == (
        'Total nodes: 7; excluded: affinity: 1, nodeSelector: 1, notReady: 1, taint "gpu=yes:NoSchedule": 1, unschedulable: 1'
    )
    tolerant = NodeConstraints(tolerations=(Toleration("gpu", "Exists"),))
    mask, _ = eligible(snapshot, rows, tolerant)
    assert mask[3]


def test_affinity_operators_and_match_fields() -> None:
    nodes = [node("a", labels={"k": "1"}), node("b", labels={"k": "x"}), node("c")]
    snapshot = ClusterSnapshot.build(nodes)
    rows = np.arange(3)

    def matching(*terms: SelectorTerm) -> list[str]:
        mask, _ = eligible(snapshot, rows, NodeConstraints(affinity_terms=terms))
        return [n.name for n, ok in zip(nodes, mask, strict=True) if ok]

    def term(op: str, *values: str) -> SelectorTerm:
        return SelectorTerm(labels=(Requirement("k", op, values),))

    assert matching(term("In", "1", "x")) == ["a", "b"]
    assert matching(term("NotIn", "1")) == ["b", "c"]  # absent label matches NotIn
    assert matching(term("Exists")) == ["a", "b"]
    assert matching(term("DoesNotExist")) == ["c"]
    assert matching(term("Lt", "5")) == ["a"]  # non-integer values never match Gt/Lt
    assert matching(term("In", "x"), term("DoesNotExist")) == ["b", "c"]  # terms are ORed
    assert matching(SelectorTerm(fields=(Requirement("metadata.name", "In", ("c",)),))) == ["c"]
    assert matching(SelectorTerm()) == []  # an empty term matches nothing
    assert matching() == []


def test_capacity_cache_holds_workload_usage_idempotently() -> None:
    cache = CapacityCache()
    cache.upsert_node(node("a", cpu=8000))
    cache.upsert_pod(running("a", "p", cpu=1000), "ns/p")
    cache.set_workload_usage("ns/wl", {"a": {"cpu": 2000, "pods": 2}})
    cache.set_workload_usage("ns/wl", {"a": {"cpu": 2000, "pods": 2}})  # replaced, not added
    assert _free(cache.snapshot(), "a", "cpu") == 5000
    cache.release_workload("ns/wl")
    cache.upsert_pod(None, "ns/p")
    assert _free(cache.snapshot(), "a", "cpu") == 8000


def test_explicit_tree_feeds_the_same_core_as_labels() -> None:
    nodes = [node(f"n{i}", cpu=1000) for i in range(6)]
    snapshot = ClusterSnapshot.build(nodes)
    paths = {
        "n0": ("s6", "s4", "s0"),
        "n1": ("s6", "s4", "s0"),
        "n2": ("s6", "s4", "s1"),
        "n3": ("s6", "s5", "s2"),
        "n4": ("s6", "s5", "s2"),
        "n5": ("s6", "s5", "s3"),
        "unknown": ("a", "b", "c"),
    }
    tree = DomainTree.from_paths(snapshot, ("tier3", "tier2", "tier1"), paths)
    assert tree.size(0) == 1 and tree.size(1) == 2 and tree.size(2) == 4 and tree.depth == 4
    decision = place(
        tree,
        snapshot,
        PlacementRequest("w", (podset(3, cpu=1000, required="tier2"),)),
        topology_name="hn",
    )
    assert decision.fits
    (placement,) = decision.placements
    assert {d.values: d.count for d in placement.domains} == {
        ("s6", "s4", "s0"): 2,
        ("s6", "s4", "s1"): 1,
    }
    assert sorted(placement.node_counts) == ["n0", "n1", "n2"]
