"""Kueue conformance: every case of Kueue's ``TestFindTopologyAssignments`` (T01-T90).

Source: kubernetes-sigs/kueue @ ff69552e, ``pkg/cache/scheduler/tas_cache_test.go``, transcribed
as data in the notes (case ids T01-T90; the Kueue case name is in each test's docstring).
Every expectation is Kueue's, verbatim, except where a comment says ``DIFFERENCE n`` — one of
topogate's deliberate, documented differences (see ``admission/placement.py``):

1. "Total nodes" (and resource exclusions) count nodes, not leaf domains, when the lowest
   level is not hostname;
2. not-ready and cordoned nodes stay in the tree with zero capacity and are reported in the
   failure message instead of the tree losing its domains;
3. capacity is counted per node at non-hostname leaves;
4. taints, nodeSelector and affinity are honoured at non-hostname lowest levels too.

Kueue reports per PodSet; topogate's decision is all or nothing (the first PodSet that does not
fit ends it, with no placements). Where Kueue returns an assignment for an earlier PodSet and a
reason for a later one, the test checks the reason on the whole request and the earlier PodSet's
assignment on a request holding it alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.kit import (
    BLOCK,
    HOST,
    L1,
    L2,
    L3,
    RACK,
    assigned,
    binary_tree_nodes,
    default_nodes,
    multipod_nodes,
    node,
    podset,
    run,
    scattered_nodes,
)
from topogate.admission.request import PlacementDecision
from topogate.api.podspec import Taint, Toleration
from topogate.cache.nodes import NodeInfo, PodUsage, node_from_kube, pod_usage_from_kube

GI = 1024**3
ZONE = "cloud.com/topology-zone"
DC = "cloud.com/datacenter"
AZ = "cloud.com/aizone"
NVIDIA = "nvidia.com/gpu"

HostList = list[tuple[str, int]]
DomainList = list[tuple[tuple[str, ...], int]]


# --- helpers -------------------------------------------------------------------------------


def placement_levels(decision: PlacementDecision, name: str) -> tuple[str, ...]:
    for placement in decision.placements:
        if placement.name == name:
            return placement.levels
    raise KeyError(name)


def expect_hosts(decision: PlacementDecision, expected: HostList, name: str = "main") -> None:
    """Kueue's assignment for a hostname topology: levels [hostname], domains in order."""
    got = [(values[-1], count) for values, count in assigned(decision, name).items()]
    assert got == expected
    assert placement_levels(decision, name) == (HOST,)


def expect_domains(
    decision: PlacementDecision,
    levels: Sequence[str],
    expected: DomainList,
    name: str = "main",
) -> None:
    """Kueue's assignment for a non-hostname topology: all levels, full paths, in order."""
    assert list(assigned(decision, name).items()) == expected
    assert placement_levels(decision, name) == tuple(levels)


def expect_failure(decision: PlacementDecision, message: str, podset: str = "main") -> None:
    assert not decision.fits
    assert decision.message == message
    assert decision.placements == ()
    assert decision.podset == podset


def not_fit(pods: int, suffix: str = "", unit: str = "pod") -> str:
    message = f'topology "default" doesn\'t allow to fit any of {pods} {unit}(s)'
    return f"{message}. {suffix}" if suffix else message


def fit_only(fit: int, total: int, suffix: str = "", unit: str = "pod") -> str:
    message = f'topology "default" allows to fit only {fit} out of {total} {unit}(s)'
    return f"{message}. {suffix}" if suffix else message


def kube_pod(
    name: str,
    *,
    node_name: str | None = None,
    phase: str | None = None,
    cpu: str | None = None,
) -> dict[str, Any]:
    """A minimal v1 Pod in namespace test-ns, with one container."""
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    if cpu is not None:
        container["resources"] = {"requests": {"cpu": cpu}}
    spec: dict[str, Any] = {"containers": [container]}
    if node_name is not None:
        spec["nodeName"] = node_name
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "test-ns"},
        "spec": spec,
    }
    if phase is not None:
        pod["status"] = {"phase": phase}
    return pod


def usages(*pods: dict[str, Any]) -> list[PodUsage]:
    """Pods as the cache sees them: unbound and terminated pods are dropped by the parser."""
    parsed = [pod_usage_from_kube(p) for p in pods]
    return [p for p in parsed if p is not None]


def zone_node(name: str, host: str, **kwargs: Any) -> NodeInfo:
    return node(name, host=host, cpu=1000, memory="1Gi", labels={"zone": "zone-a"}, **kwargs)


# --- 2. Basic placement ----------------------------------------------------------------------


def test_t01_minimize_racks_before_nodes() -> None:
    """minimize the number of used racks before optimizing the number of nodes; BestFit"""
    nodes = [
        node("b1-r1-x3", "b1", "r1", "x3", cpu=2000),
        node("b1-r2-x5", "b1", "r2", "x5", cpu=2000, pods=20),
        node("b1-r3-x1", "b1", "r3", "x1", cpu=1000),
        node("b1-r3-x6", "b1", "r3", "x6", cpu=1000),
        node("b1-r3-x2", "b1", "r3", "x2", cpu=1000),
        node("b1-r3-x4", "b1", "r3", "x4", cpu=1000),
    ]
    decision = run(nodes, L3, podset(4, cpu=1000, required=BLOCK))
    expect_hosts(decision, [("x1", 1), ("x2", 1), ("x4", 1), ("x6", 1)])


def test_t02_choose_node_that_fits_all() -> None:
    """choose the node that can accommodate all Pods"""
    nodes = [
        node("b1-r1-x3", "b1", "r1", "x3", cpu=2000),
        node("b1-r1-x5", "b1", "r1", "x5", cpu=1000),
        node("b1-r1-x1", "b1", "r1", "x1", cpu=1000),
    ]
    decision = run(nodes, L3, podset(2, cpu=1000, required=BLOCK))
    expect_hosts(decision, [("x3", 2)])


SCATTERED_6: HostList = [("x1", 1), ("x3", 1), ("x5", 1), ("x2", 1), ("x6", 2)]


def test_t03_implied_unconstrained_scattered() -> None:
    """no annotation; implied default to unconstrained; 6 pods fit into hosts scattered across
    the whole datacenter even they could fit into single rack; BestFit"""
    decision = run(scattered_nodes(), L3, podset(6, cpu=1000))
    expect_hosts(decision, SCATTERED_6)


def test_t04_unconstrained_scattered() -> None:
    """unconstrained; 6 pods fit into hosts scattered across the whole datacenter even they
    could fit into single rack; BestFit"""
    # The kit's podset() without required/preferred is an explicit unconstrained request.
    decision = run(scattered_nodes(), L3, podset(6, cpu=1000))
    expect_hosts(decision, SCATTERED_6)


@pytest.mark.parametrize(
    "kueue_case",
    [
        "unconstrained; a single pod fits into each host; BestFit",
        "unconstrained; a single pod fits into each host; LeastFreeCapacity; TASProfileMixed",
    ],
)
def test_t05_unconstrained_single_pod(kueue_case: str) -> None:
    """unconstrained; a single pod fits into each host (BestFit / TASProfileMixed variants)"""
    decision = run(default_nodes(), L3, podset(1, cpu=1000))
    expect_hosts(decision, [("x3", 1)])


def test_t06_block_required_binary_tree() -> None:
    """block required; 4 pods fit into one host each; BestFit"""
    decision = run(binary_tree_nodes(), L3, podset(4, cpu=1000, required=BLOCK))
    expect_hosts(decision, [("x3", 1), ("x5", 1), ("x1", 1), ("x6", 1)])


@pytest.mark.parametrize(
    "kueue_case",
    [
        "host required; single Pod fits in the host; BestFit",
        "host required; single Pod fits in the host; TASProfileMixed",
        "host preferred; single Pod fits in the host; TASProfileMixed",  # really uses required
    ],
)
def test_t07_host_required_single_pod(kueue_case: str) -> None:
    """host required; single Pod fits in the host (three Kueue variants, same input)"""
    decision = run(default_nodes(), L3, podset(1, cpu=1000, required=HOST))
    expect_hosts(decision, [("x3", 1)])


def test_t08_rack_required_single_pod() -> None:
    """rack required; single Pod fits in a rack; BestFit"""
    decision = run(default_nodes(), L2, podset(1, cpu=1000, required=RACK))
    expect_domains(decision, L2, [(("b1", "r1"), 1)])


def test_t09_rack_required_multiple_pods() -> None:
    """rack required; multiple Pods fit in a rack; BestFit"""
    decision = run(default_nodes(), L2, podset(3, cpu=1000, required=RACK))
    expect_domains(decision, L2, [(("b1", "r2"), 3)])


def test_t10_rack_required_fit_some_racks() -> None:
    """rack required; multiple Pods fit in some racks; BestFit"""
    decision = run(default_nodes(), L2, podset(2, cpu=1000, required=RACK))
    expect_domains(decision, L2, [(("b2", "r2"), 2)])


def test_t11_rack_required_too_many() -> None:
    """rack required; too many pods to fit in any rack; BestFit"""
    decision = run(default_nodes(), L2, podset(4, cpu=1000, required=RACK))
    expect_failure(decision, fit_only(3, 4))


def test_t12_block_preferred_two_blocks() -> None:
    """block preferred; Pods fit in 2 blocks; BestFit"""
    nodes = [
        node("b1", "b1", cpu=2000, pods=20),
        node("b2", "b2", cpu=1000, pods=10),
        node("b3", "b3", cpu=4000, pods=40),
    ]
    decision = run(nodes, [BLOCK], podset(5, cpu=1000, preferred=BLOCK))
    expect_domains(decision, [BLOCK], [(("b2",), 1), (("b3",), 4)])


def test_t13_block_required_single_pod() -> None:
    """block required; single Pod fits in a block and a single rack; BestFit"""
    decision = run(default_nodes(), L2, podset(1, cpu=1000, required=BLOCK))
    expect_domains(decision, L2, [(("b2", "r1"), 1)])


@pytest.mark.parametrize(
    "kueue_case",
    [
        "block required; single Pod fits in a block spread across two racks; BestFit",
        "block required; Pods fit in a block spread across two racks; BestFit",
    ],
)
def test_t14_block_required_two_racks(kueue_case: str) -> None:
    """block required; Pods fit in a block spread across two racks (two identical cases)"""
    decision = run(default_nodes(), L2, podset(4, cpu=1000, required=BLOCK))
    expect_domains(decision, L2, [(("b1", "r1"), 1), (("b1", "r2"), 3)])


def test_t15_block_required_pod_cannot_be_split() -> None:
    """block required; single Pod which cannot be split; BestFit"""
    decision = run(default_nodes(), L2, podset(1, cpu=4000, required=BLOCK))
    # DIFFERENCE 1: Kueue counts the 4 rack leaves:
    #   '... Total nodes: 4; excluded: resource "cpu": 4'; topogate counts the 6 nodes.
    expect_failure(decision, not_fit(1, 'Total nodes: 6; excluded: resource "cpu": 6'))


def test_t16_block_required_too_many() -> None:
    """block required; too many Pods to fit requested; BestFit"""
    decision = run(default_nodes(), L2, podset(5, cpu=1000, required=BLOCK))
    expect_failure(decision, fit_only(4, 5))


def test_t17_rack_required_memory() -> None:
    """rack required; single Pod requiring memory; BestFit"""
    decision = run(default_nodes(), L2, podset(4, memory=1024, required=RACK))
    expect_domains(decision, L2, [(("b1", "r1"), 4)])


def test_t18_rack_preferred_block_fits() -> None:
    """rack preferred; but only block can accommodate the workload; BestFit"""
    decision = run(default_nodes(), L2, podset(4, cpu=1000, preferred=RACK))
    expect_domains(decision, L2, [(("b1", "r1"), 1), (("b1", "r2"), 3)])


SIX_OVER_BLOCKS: DomainList = [(("b1", "r1"), 1), (("b1", "r2"), 3), (("b2", "r2"), 2)]


def test_t19_rack_preferred_multiple_blocks() -> None:
    """rack preferred; but only multiple blocks can accommodate the workload; BestFit"""
    decision = run(default_nodes(), L2, podset(6, cpu=1000, preferred=RACK))
    expect_domains(decision, L2, SIX_OVER_BLOCKS)


def test_t20_block_preferred_multiple_blocks() -> None:
    """block preferred; but only multiple blocks can accommodate the workload; BestFit"""
    decision = run(default_nodes(), L2, podset(6, cpu=1000, preferred=BLOCK))
    expect_domains(decision, L2, SIX_OVER_BLOCKS)


def test_t21_block_preferred_does_not_fit() -> None:
    """block preferred; but the workload cannot be accommodate in entire topology; BestFit"""
    decision = run(default_nodes(), L2, podset(10, cpu=1000, preferred=BLOCK))
    expect_failure(decision, fit_only(7, 10))


# --- 3. Node filtering, non-TAS usage, exclusion messages ------------------------------------


def test_t22_no_node_with_matching_labels() -> None:
    """only nodes with matching labels are considered; no matching node; BestFit"""
    nodes = [
        node("b1-r1-x3", host="x3", cpu=1000, memory="1Gi", labels={"zone": "zone-a"}, ready=False)
    ]
    decision = run(nodes, L1, podset(1, cpu=1000, required=HOST), node_labels={"zone": "zone-b"})
    # The node fails the flavor's nodeLabels, so it is outside the tree in topogate as well.
    expect_failure(decision, "no topology domains at level: kubernetes.io/hostname")


def test_t23_node_with_matching_labels() -> None:
    """only nodes with matching labels are considered; matching node is found; BestFit"""
    nodes = [zone_node("b1-r1-x3", "x3")]
    decision = run(nodes, L1, podset(1, cpu=1000, required=HOST), node_labels={"zone": "zone-a"})
    expect_hosts(decision, [("x3", 1)])


def test_t24_node_without_level_label() -> None:
    """only nodes with matching levels are considered; no host label on node; BestFit"""
    nodes = [node("b1-r1-x3", "b1", "r1", cpu=1000, memory="1Gi")]
    decision = run(nodes, L3, podset(1, cpu=1000, required=RACK))
    expect_failure(decision, "no topology domains at level: cloud.com/topology-rack")


def test_t25_unscheduled_pods_ignored() -> None:
    """don't consider unscheduled Pods when computing capacity; BestFit"""
    pending = kube_pod("test-unscheduled", cpu="600m")
    assert pod_usage_from_kube(pending) is None  # no nodeName: holds nothing
    nodes = [node("x3", host="x3", cpu=1000, memory="1Gi")]
    decision = run(nodes, L1, podset(1, cpu=600, required=HOST), pods=usages(pending))
    expect_hosts(decision, [("x3", 1)])


def test_t26_terminal_pods_ignored() -> None:
    """don't consider terminal pods when computing the capacity; BestFit"""
    failed = kube_pod("test-failed", node_name="x3", phase="Failed", cpu="600m")
    succeeded = kube_pod("test-succeeded", node_name="x3", phase="Succeeded", cpu="600m")
    assert usages(failed, succeeded) == []  # terminal phases: dropped by the parser
    nodes = [node("x3", host="x3", cpu=1000, memory="1Gi")]
    decision = run(nodes, L1, podset(1, cpu=600, required=HOST), pods=usages(failed, succeeded))
    expect_hosts(decision, [("x3", 1)])


@pytest.mark.parametrize(
    ("phase", "kueue_case"),
    [
        ("Pending", "include usage from pending scheduled non-TAS pods, blocked assignment"),
        ("Running", "include usage from running non-TAS pods, blocked assignment"),
    ],
)
def test_t27_t28_non_tas_pod_usage_blocks(phase: str, kueue_case: str) -> None:
    """T27/T28: include usage from pending/running scheduled non-TAS pods, blocked assignment"""
    pod = kube_pod(f"test-{phase.lower()}", node_name="x3", phase=phase, cpu="600m")
    nodes = [node("x3", host="x3", cpu=1000, memory="1Gi")]
    decision = run(nodes, L1, podset(1, cpu=600, required=HOST), pods=usages(pod))
    expect_failure(decision, not_fit(1, 'Total nodes: 1; excluded: resource "cpu": 1'))


def test_t29_allocatable_used_up_by_non_tas_pod() -> None:
    """node allocatable capacity completely used by non-TAS pod; empty remainingCapacity"""
    pod = kube_pod("running1", node_name="x3", phase="Running", cpu="1")
    nodes = [node("x3", host="x3", cpu=1000, pods=1)]
    decision = run(nodes, L1, podset(1, cpu=100, required=HOST), pods=usages(pod))
    # cpu and pods both fit 0 pods: the tie goes to the smaller name, "cpu".
    expect_failure(decision, not_fit(1, 'Total nodes: 1; excluded: resource "cpu": 1'))


def test_t30_non_tas_pods_use_pod_slots() -> None:
    """include usage from non-TAS pods; pod usage"""
    pods = usages(
        kube_pod("running1", node_name="x3", phase="Running"),
        kube_pod("running2", node_name="x3", phase="Running"),
    )
    nodes = [node("x3", host="x3", pods=10)]
    decision = run(nodes, L1, podset(9, cpu=0, required=HOST), pods=pods)
    expect_failure(decision, fit_only(8, 9))


def test_t31_free_capacity_on_another_node() -> None:
    """include usage from running non-TAS pods, found free capacity on another node; BestFit"""
    pod = kube_pod("test-pod", node_name="x3", cpu="600m")  # no phase: still counts
    nodes = [
        node("x3", host="x3", cpu=1000, memory="1Gi"),
        node("x5", host="x5", cpu=1000, memory="1Gi"),
    ]
    decision = run(nodes, L1, podset(1, cpu=600, required=HOST), pods=usages(pod))
    expect_hosts(decision, [("x5", 1)])


def _kube_node(*, conditions: list[dict[str, str]], unschedulable: bool = False) -> NodeInfo:
    return node_from_kube(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "b1-r1-x3",
                "labels": {"zone": "zone-a", HOST: "x3"},
            },
            "spec": {"unschedulable": unschedulable},
            "status": {
                "allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"},
                "conditions": conditions,
            },
        }
    )


def test_t32_node_not_ready() -> None:
    """no assignment as node is not ready; BestFit"""
    not_ready = _kube_node(
        conditions=[
            {"type": "Ready", "status": "False"},
            {"type": "NetworkUnavailable", "status": "True"},
        ]
    )
    assert not not_ready.ready
    decision = run(
        [not_ready], L1, podset(1, cpu=1000, required=HOST), node_labels={"zone": "zone-a"}
    )
    # DIFFERENCE 2: Kueue drops the node: "no topology domains at level: kubernetes.io/hostname".
    expect_failure(decision, not_fit(1, "Total nodes: 1; excluded: notReady: 1"))


def test_t33_node_unschedulable() -> None:
    """no assignment as node is unschedulable; BestFit"""
    cordoned = _kube_node(conditions=[{"type": "Ready", "status": "True"}], unschedulable=True)
    assert cordoned.ready and cordoned.unschedulable
    decision = run(
        [cordoned], L1, podset(1, cpu=1000, required=HOST), node_labels={"zone": "zone-a"}
    )
    # DIFFERENCE 2: Kueue drops the node: "no topology domains at level: kubernetes.io/hostname".
    expect_failure(decision, not_fit(1, "Total nodes: 1; excluded: unschedulable: 1"))


GPU_TAINT = Taint("example.com/gpu", "present", "NoSchedule")


def test_t34_untolerated_taint() -> None:
    """skip node which has untolerated taint; BestFit"""
    nodes = [zone_node("x3", "x3", taints=[GPU_TAINT])]
    decision = run(nodes, L1, podset(1, cpu=1000, required=HOST), node_labels={"zone": "zone-a"})
    expect_failure(
        decision,
        not_fit(1, 'Total nodes: 1; excluded: taint "example.com/gpu=present:NoSchedule": 1'),
    )


def test_t35_tolerated_taint() -> None:
    """allow to schedule on node with tolerated taint; BestFit"""
    nodes = [zone_node("b1-r1-x3", "x3", taints=[GPU_TAINT])]
    toleration = Toleration("example.com/gpu", "Equal", "present")  # no effect: all effects
    request = podset(1, cpu=1000, required=HOST, tolerations=[toleration])
    decision = run(nodes, L1, request, node_labels={"zone": "zone-a"})
    expect_hosts(decision, [("x3", 1)])


def test_t36_detailed_exclusion_stats() -> None:
    """detailed failure message with exclusion stats"""
    nodes = [
        node("x1", host="x1", cpu=1000, taints=[Taint("key", "value", "NoSchedule")]),
        node("x2", host="x2", cpu=1000, labels={"zone": "zone-b"}),
        node("x3", host="x3", cpu=2000, labels={"zone": "zone-b"}),
        node("x4", host="x4", cpu=100, labels={"zone": "zone-a"}),
    ]
    request = podset(1, cpu=1000, required=HOST, node_selector={"zone": "zone-a"})
    decision = run(nodes, L1, request)
    expect_failure(
        decision,
        not_fit(
            1,
            'Total nodes: 4; excluded: nodeSelector: 2, resource "cpu": 1, '
            'taint "key=value:NoSchedule": 1',
        ),
    )


def test_t37_most_restrictive_resource() -> None:
    """resource exclusion picks most restrictive resource"""
    nodes = [node("dual-shortage", host="dual-shortage", cpu=500, gpu=0)]
    decision = run(nodes, L1, podset(1, cpu=1000, gpu=1, required=HOST))
    expect_failure(decision, not_fit(1, 'Total nodes: 1; excluded: resource "cpu": 1'))


def test_t38_allocatable_pods_exhausted() -> None:
    """no assignment as node does not have enough allocatable pods
    (.status.allocatable['pods']); BestFit"""
    pod = kube_pod("test-running", node_name="b1-r1-x3", phase="Running", cpu="300m")
    nodes = [node("b1-r1-x3", host="x3", cpu=1000, pods=1, labels={"zone": "zone-a"})]
    decision = run(
        nodes,
        L1,
        podset(1, cpu=300, required=HOST),
        pods=usages(pod),
        node_labels={"zone": "zone-a"},
    )
    expect_failure(decision, not_fit(1, 'Total nodes: 1; excluded: resource "pods": 1'))


def test_t39_assumed_usage_counts_pod_slots() -> None:
    """multiple PodSets account assumed pod usage against allocatable pods; BestFit"""
    nodes = [node("x1", host="x1", cpu=2000, pods=1)]
    one = podset(1, "one", cpu=1000, required=HOST)
    two = podset(1, "two", cpu=1000, required=HOST)
    # Kueue: "one" -> [x1:1]; "two" -> the reason below. topogate is all or nothing.
    expect_hosts(run(nodes, L1, one), [("x1", 1)], "one")
    expect_failure(
        run(nodes, L1, one, two),
        not_fit(1, 'Total nodes: 1; excluded: resource "pods": 1'),
        podset="two",
    )


def test_t40_node_selector_missing_label() -> None:
    """skip node which doesn't match node selector, missing label; BestFit"""
    nodes = [zone_node("x3", "x3")]
    request = podset(1, cpu=300, required=HOST, node_selector={"custom-label-1": "custom-value-1"})
    decision = run(nodes, L1, request, node_labels={"zone": "zone-a"})
    expect_failure(decision, not_fit(1, "Total nodes: 1; excluded: nodeSelector: 1"))


def test_t41_node_selector_value_mismatch() -> None:
    """skip node which doesn't match node selector, label exists, value doesn't match; BestFit"""
    nodes = [
        node(
            "x3",
            host="x3",
            cpu=1000,
            memory="1Gi",
            labels={"zone": "zone-a", "custom-label-1": "value-1"},
        )
    ]
    request = podset(1, cpu=300, required=HOST, node_selector={"custom-label-1": "value-2"})
    decision = run(nodes, L1, request, node_labels={"zone": "zone-a"})
    expect_failure(decision, not_fit(1, "Total nodes: 1; excluded: nodeSelector: 1"))


def test_t42_node_selector_match() -> None:
    """allow to schedule on node which matches node; BestFit"""
    nodes = [
        node(
            "b1-r1-x3",
            host="x3",
            cpu=1000,
            memory="1Gi",
            labels={"zone": "zone-a", "custom-label-1": "value-1"},
        ),
        node(
            "b1-r1-x5",
            host="x5",
            cpu=1000,
            memory="1Gi",
            labels={"zone": "zone-a", "custom-label-1": "value-2"},
        ),
    ]
    request = podset(1, cpu=1000, required=HOST, node_selector={"custom-label-1": "value-2"})
    decision = run(nodes, L1, request, node_labels={"zone": "zone-a"})
    expect_hosts(decision, [("x5", 1)])


def test_t43_no_state_leak_across_podsets() -> None:
    """temporary state cleanup prevents leakage across PodSets"""
    nodes = [
        node("n1", host="x1", cpu=4000, memory="4Gi"),
        node("n2", host="x2", cpu=4000, memory="4Gi"),
    ]
    ps1 = podset(1, "ps1", cpu=1000, memory=1000)
    ps2 = podset(1, "ps2", cpu=1000, memory=1000, node_selector={"never": "match"})
    # Kueue: "ps1" -> [x1:1]; "ps2" -> the reason below. topogate is all or nothing.
    expect_hosts(run(nodes, L1, ps1), [("x1", 1)], "ps1")
    expect_failure(
        run(nodes, L1, ps1, ps2),
        not_fit(1, "Total nodes: 2; excluded: nodeSelector: 2"),
        podset="ps2",
    )


# --- 4. Slices ---------------------------------------------------------------------------


def _b1r1(cpus: Sequence[tuple[str, int]]) -> list[NodeInfo]:
    return [node(f"b1-r1-{h}", "b1", "r1", h, cpu=cpu) for h, cpu in cpus]


def test_t44_block_required_host_slices() -> None:
    """block required for podset; host required for slices; BestFit"""
    nodes = _b1r1([("x3", 3000), ("x5", 3000), ("x1", 3000)])
    decision = run(nodes, L3, podset(6, cpu=1000, required=BLOCK, slice=(HOST, 2)))
    expect_hosts(decision, [("x1", 2), ("x3", 2), ("x5", 2)])


def test_t45_more_slice_capacity_first_then_tight_fit() -> None:
    """block required for podset; host required for slices; prioritize more free slice
    capacity first and then tight fit; BestFit"""
    nodes = _b1r1([("x3", 6000), ("x5", 5000), ("x1", 4000), ("x6", 2000)])
    decision = run(nodes, L3, podset(12, cpu=1000, required=BLOCK, slice=(HOST, 2)))
    expect_hosts(decision, [("x1", 4), ("x3", 6), ("x6", 2)])


def test_t46_host_slices_tight_fit() -> None:
    """block required for podset; host required for slices; select domains with tight fit;
    BestFit"""
    nodes = _b1r1([("x3", 3000), ("x5", 2000), ("x1", 2000)])
    decision = run(nodes, L3, podset(4, cpu=1000, required=BLOCK, slice=(HOST, 2)))
    expect_hosts(decision, [("x1", 2), ("x5", 2)])


def test_t47_block_required_rack_slices() -> None:
    """block required for podset; rack required for slices; BestFit"""
    layout = [
        ("b1", "r1", "x3"),
        ("b1", "r1", "x5"),
        ("b1", "r2", "x1"),
        ("b1", "r2", "x6"),
        ("b1", "r2", "x2"),
        ("b2", "r1", "x4"),
        ("b2", "r1", "x7"),
    ]
    nodes = [node(f"{b}-{r}-{h}", b, r, h, cpu=1000) for b, r, h in layout]
    decision = run(nodes, L3, podset(4, cpu=1000, required=BLOCK, slice=(RACK, 2)))
    expect_hosts(decision, [("x3", 1), ("x5", 1), ("x1", 1), ("x2", 1)])


def test_t48_block_preferred_rack_slices() -> None:
    """block preferred for podset; rack required for slices; BestFit"""
    decision = run(default_nodes(), L3, podset(4, cpu=1000, preferred=BLOCK, slice=(RACK, 2)))
    expect_hosts(decision, [("x1", 1), ("x5", 1), ("x4", 2)])


def test_t49_host_slices_optimize_last_domain() -> None:
    """block required for podset; host required for slices; optimize last domain; BestFit"""
    nodes = _b1r1([("x3", 4000), ("x5", 3000), ("x1", 2000)])
    decision = run(nodes, L3, podset(6, cpu=1000, required=BLOCK, slice=(HOST, 2)))
    expect_hosts(decision, [("x1", 2), ("x3", 4)])


def test_t50_unbalanced_blocks_host_slices() -> None:
    """block preferred for podset; host required for slices; 2 blocks with unbalanced
    subdomains; BestFit"""
    nodes = [
        *_b1r1([("x3", 3000), ("x5", 3000), ("x1", 3000)]),
        node("b2-r1-x6", "b2", "r1", "x6", cpu=6000),
    ]
    decision = run(nodes, L3, podset(12, cpu=1000, preferred=BLOCK, slice=(HOST, 3)))
    expect_hosts(decision, [("x1", 3), ("x3", 3), ("x6", 6)])


def test_t51_block_fits_but_rack_slices_do_not() -> None:
    """block required for podset; rack required for slices; podset fits in a block, but slices
    do not fit in racks"""
    nodes = [
        node("b1-r1-x3", "b1", "r1", "x3", cpu=2000),
        node("b1-r2-x5", "b1", "r2", "x5", cpu=2000),
        node("b1-r3-x1", "b1", "r3", "x1", cpu=2000),
    ]
    decision = run(nodes, L3, podset(6, cpu=1000, required=BLOCK, slice=(RACK, 3)))
    expect_failure(decision, not_fit(2, unit="slice"))


def test_t52_only_one_of_two_slices_fits() -> None:
    """block required for podset; rack required for slices; only 1 out of 2 slices fit the
    topology"""
    nodes = [
        node("b1-r1-x3", "b1", "r1", "x3", cpu=3000),
        node("b1-r2-x5", "b1", "r2", "x5", cpu=1000),
        node("b1-r3-x1", "b1", "r3", "x1", cpu=1000),
        node("b1-r4-x6", "b1", "r4", "x6", cpu=1000),
    ]
    decision = run(nodes, L3, podset(6, cpu=1000, required=BLOCK, slice=(RACK, 3)))
    expect_failure(decision, fit_only(1, 2, unit="slice"))


def test_t53_slices_fit_in_only_one_block() -> None:
    """block required for podset; rack required for slices; podset fits in both blocks, but
    slices fit in only one block"""
    nodes = [
        node("b1-r1-x3", "b1", "r1", "x3", cpu=2000),
        node("b1-r2-x5", "b1", "r2", "x5", cpu=2000),
        node("b1-r3-x1", "b1", "r3", "x1", cpu=2000),
        node("b2-r4-x6", "b2", "r4", "x6", cpu=3000),
        node("b2-r5-x2", "b2", "r5", "x2", cpu=3000),
    ]
    decision = run(nodes, L3, podset(6, cpu=1000, required=BLOCK, slice=(RACK, 3)))
    expect_hosts(decision, [("x6", 3), ("x2", 3)])


def test_t54_slice_level_above_podset_level() -> None:
    """slice required topology level cannot be above the main required topology level"""
    decision = run(default_nodes(), L3, podset(1, cpu=1000, required=HOST, slice=(BLOCK, 1)))
    expect_failure(
        decision,
        "podset slice topology cloud.com/topology-block is above the podset topology "
        "kubernetes.io/hostname",
    )


def test_t55_slice_size_required() -> None:
    """slice size is required when slice topology is requested"""
    # An unset podSetSliceSize reaches the core as size 0.
    decision = run(default_nodes(), L3, podset(1, cpu=1000, required=BLOCK, slice=(HOST, 0)))
    expect_failure(decision, "slice topology requested, but slice size not provided")


def test_t56_unknown_slice_level() -> None:
    """cannot request not existing slice topology"""
    request = podset(1, cpu=1000, required=BLOCK, slice=("not-existing-topology-level", 1))
    decision = run(default_nodes(), L3, request)
    expect_failure(decision, "no requested topology level for slices: not-existing-topology-level")


def test_t57_slice_only_host_slices() -> None:
    """no topology for podset; host required for slices; BestFit"""
    nodes = _b1r1([("x3", 3000), ("x5", 3000), ("x1", 3000)])
    decision = run(nodes, L3, podset(6, cpu=1000, slice=(HOST, 2)))
    expect_hosts(decision, [("x1", 2), ("x3", 2), ("x5", 2)])


def test_t58_slice_only_host_slices_multiple_blocks() -> None:
    """no topology for podset; host required for slices; multiple blocks; BestFit"""
    decision = run(scattered_nodes(), L3, podset(6, cpu=1000, slice=(HOST, 2)))
    expect_hosts(decision, [("x3", 4), ("x6", 2)])


def test_t59_slice_only_rack_slices_multiple_blocks() -> None:
    """no topology for podset; rack required for slices; multiple blocks; BestFit"""
    decision = run(default_nodes(), L3, podset(4, cpu=1000, slice=(RACK, 2)))
    expect_hosts(decision, [("x1", 1), ("x5", 1), ("x4", 2)])


# --- 5. Multiple PodSets and leader/worker groups ------------------------------------------


def test_t60_two_podsets_overlapping_domain() -> None:
    """find topology assignment for two podsets with overlapping domain"""
    nodes = [node(b, b, cpu=2000) for b in ("b1", "b2", "b3")]
    decision = run(
        nodes,
        [BLOCK],
        podset(3, "podset1", cpu=1000, preferred=BLOCK),
        podset(3, "podset2", cpu=1000, preferred=BLOCK),
    )
    expect_domains(decision, [BLOCK], [(("b1",), 2), (("b2",), 1)], "podset1")
    expect_domains(decision, [BLOCK], [(("b2",), 1), (("b3",), 2)], "podset2")


def test_t61_two_podsets_rack_required() -> None:
    """multiple podsets: rack required for both, different resource requests; BestFit"""
    decision = run(
        multipod_nodes(),
        L2,
        podset(2, "podset1", cpu=1000, required=RACK),
        podset(1, "podset2", memory=1024, required=RACK),
    )
    expect_domains(decision, L2, [(("b1", "r1"), 2)], "podset1")
    expect_domains(decision, L2, [(("b1", "r1"), 1)], "podset2")


def test_t62_block_required_then_unconstrained() -> None:
    """multiple podsets: block required for one, unconstrained for another; TASProfileMixed"""
    decision = run(
        multipod_nodes(),
        L3,
        podset(8, "podset1", cpu=1000, required=BLOCK),
        podset(2, "podset2", cpu=1000),
    )
    expect_hosts(decision, [("x2", 8)], "podset1")
    expect_hosts(decision, [("x2", 2)], "podset2")


def test_t63_same_group() -> None:
    """find topology assignment for two podsets with the same group"""
    nodes = [
        node("b1", "b1", cpu=2000, gpu=2, memory="2Gi"),
        node("b2", "b2", cpu=5000, gpu=4),
        node("b3", "b3", cpu=2000, gpu=2),
    ]
    decision = run(
        nodes,
        [BLOCK],
        podset(1, "leader", cpu=1000, required=BLOCK, group="sameGroup"),
        podset(4, "workers", cpu=1000, gpu=1, required=BLOCK, group="sameGroup"),
    )
    expect_domains(decision, [BLOCK], [(("b2",), 1)], "leader")
    expect_domains(decision, [BLOCK], [(("b2",), 4)], "workers")


def _rack_hosts() -> list[NodeInfo]:
    return [
        node("h1", rack="r1", host="h1", cpu=2000),
        node("h2", rack="r1", host="h2", cpu=4000),
        node("h3", rack="r1", host="h3", cpu=3000),
    ]


def test_t64_group_preserves_worker_capacity() -> None:
    """find topology assignment for grouped podsets preserves worker capacity when placing
    leader"""
    decision = run(
        _rack_hosts(),
        [RACK, HOST],
        podset(1, "leader", cpu=1000, required=RACK, group="g"),
        podset(4, "workers", cpu=2000, required=RACK, group="g"),
    )
    expect_hosts(decision, [("h3", 1)], "leader")
    expect_hosts(decision, [("h1", 1), ("h2", 2), ("h3", 1)], "workers")


def test_t65_sliced_group_preserves_worker_capacity() -> None:
    """find topology assignment for sliced grouped podsets preserves worker capacity when
    placing leader"""
    decision = run(
        _rack_hosts(),
        [RACK, HOST],
        podset(1, "leader", cpu=1000, required=RACK, group="g"),
        podset(8, "workers", cpu=1000, required=RACK, slice=(HOST, 2), group="g"),
    )
    expect_hosts(decision, [("h3", 1)], "leader")
    expect_hosts(decision, [("h1", 2), ("h2", 4), ("h3", 2)], "workers")


def test_t66_preferred_group_across_domains() -> None:
    """find topology assignment for preferred grouped podsets preserves capacity across
    domains"""
    nodes = [node("h1", host="h1", cpu=8000), node("h2", host="h2", cpu=3000)]
    decision = run(
        nodes,
        L1,
        podset(1, "leader", cpu=1000, preferred=HOST, group="g"),
        podset(5, "workers", cpu=2000, preferred=HOST, group="g"),
    )
    expect_hosts(decision, [("h2", 1)], "leader")
    expect_hosts(decision, [("h1", 4), ("h2", 1)], "workers")


def test_t67_unconstrained_group_spreads() -> None:
    """find topology assignment for unconstrained grouped podsets spreads leader and worker
    across domains with TASProfileMixed"""
    nodes = [node("h1", host="h1", cpu=1000), node("h2", host="h2", gpu=1)]
    decision = run(
        nodes,
        L1,
        podset(1, "leader", cpu=1000, group="g"),
        podset(1, "workers", gpu=1, group="g"),
    )
    expect_hosts(decision, [("h1", 1)], "leader")
    expect_hosts(decision, [("h2", 1)], "workers")


def test_t68_group_leader_below_slice_level() -> None:
    """find topology assignment for grouped podsets preserves leader below the slice level"""
    nodes = [
        node("leader-host", rack="r1", host="leader-host", cpu=1000),
        node("worker-host", rack="r1", host="worker-host", gpu=1),
    ]
    # Equal counts: internally the second PodSet ("workers") is the group's leader.
    decision = run(
        nodes,
        [RACK, HOST],
        podset(1, "leader", cpu=1000, required=RACK, slice=(RACK, 1), group="g"),
        podset(1, "workers", gpu=1, required=RACK, slice=(RACK, 1), group="g"),
    )
    expect_hosts(decision, [("leader-host", 1)], "leader")
    expect_hosts(decision, [("worker-host", 1)], "workers")


def test_t69_group_tight_fit() -> None:
    """find topology assignment for two podsets with the same group with domains that can
    tightly fit leader and workers"""
    nodes = [
        node("b1", "b1", cpu=2000, gpu=2),
        node("b2", "b2", cpu=8000, gpu=8),
        node("b3", "b3", cpu=2000, gpu=2),
    ]
    decision = run(
        nodes,
        [BLOCK],
        podset(1, "leader", cpu=1000, required=BLOCK, group="sameGroup"),
        podset(4, "workers", cpu=1000, gpu=2, required=BLOCK, group="sameGroup"),
    )
    expect_domains(decision, [BLOCK], [(("b2",), 1)], "leader")
    expect_domains(decision, [BLOCK], [(("b2",), 4)], "workers")


def _small_large() -> tuple[list[NodeInfo], list[PodUsage]]:
    nodes = [
        node("small-used", "b1", "small", "small-used", cpu=2800),
        node("small-free", "b1", "small", "small-free", cpu=2800),
        node("large-free", "b1", "large", "large-free", cpu=6000),
    ]
    filler = kube_pod("filler", node_name="small-used", phase="Running", cpu="2500m")
    return nodes, usages(filler)


def test_t70_group_skips_domain_fitting_only_workers() -> None:
    """find topology assignment for grouped podsets skips domain where only workers fit
    without leader"""
    nodes, pods = _small_large()
    decision = run(
        nodes,
        L3,
        podset(1, "leader", cpu=2500, required=RACK, group="g"),
        podset(1, "workers", cpu=2500, required=RACK, group="g"),
        pods=pods,
    )
    expect_hosts(decision, [("large-free", 1)], "leader")
    expect_hosts(decision, [("large-free", 1)], "workers")


def test_t71_group_skips_domain_mixed_size_workers() -> None:
    """find topology assignment for grouped podsets skips domain where mixed-size workers only
    fit without leader"""
    nodes, pods = _small_large()
    decision = run(
        nodes,
        L3,
        podset(1, "leader", cpu=2500, required=RACK, group="g"),
        podset(2, "workers", cpu=500, required=RACK, group="g"),
        pods=pods,
    )
    expect_hosts(decision, [("large-free", 1)], "leader")
    expect_hosts(decision, [("large-free", 2)], "workers")


def test_t72_group_keeps_tight_domain() -> None:
    """find topology assignment for grouped podsets keeps tight domain when leader and workers
    fit together"""
    nodes, pods = _small_large()
    decision = run(
        nodes,
        L3,
        podset(1, "leader", cpu=1000, required=RACK, group="g"),
        podset(1, "workers", cpu=1000, required=RACK, group="g"),
        pods=pods,
    )
    expect_hosts(decision, [("small-free", 1)], "leader")
    expect_hosts(decision, [("small-free", 1)], "workers")


def test_t73_group_no_fit() -> None:
    """find topology assignment for two podsets with the same group - no fit"""
    nodes = [node("b1", "b1", cpu=1000, gpu=0), node("b2", "b2", cpu=4000, gpu=4)]
    decision = run(
        nodes,
        [BLOCK],
        podset(1, "leader", cpu=1000, required=BLOCK, group="sameGroup"),
        podset(4, "workers", cpu=1000, gpu=1, required=BLOCK, group="sameGroup"),
    )
    # Kueue gives this reason to both PodSets of the group.
    expect_failure(
        decision,
        fit_only(4, 4, 'Total nodes: 2; excluded: resource "example.com/gpu": 1'),
        podset="leader+workers",
    )


def test_t74_group_optimizes_domain_for_both() -> None:
    """find topology assignment for two podsets with the same group - optimizes domain for both
    leader and workers"""
    nodes = [node("b1", "b1", cpu=11000, gpu=8), node("b2", "b2", cpu=4000, gpu=4)]
    decision = run(
        nodes,
        [BLOCK],
        podset(1, "leader", cpu=1000, required=BLOCK, group="sameGroup"),
        podset(4, "workers", cpu=1000, gpu=1, required=BLOCK, group="sameGroup"),
    )
    expect_domains(decision, [BLOCK], [(("b1",), 1)], "leader")
    expect_domains(decision, [BLOCK], [(("b1",), 4)], "workers")


def test_t75_group_workers_spread_across_hosts() -> None:
    """BestFit: podset group workers spread across hosts"""
    nodes = [
        node(f"b1-r1-{h}", "b1", "r1", h, cpu=20000, gpu=gpu)
        for h, gpu in (("x1", 4), ("x2", 2), ("x3", 2), ("x4", 2))
    ]
    decision = run(
        nodes,
        L3,
        podset(1, "leader", cpu=1000, preferred=BLOCK, group="g"),
        podset(6, "workers", cpu=1000, gpu=1, preferred=BLOCK, slice=(HOST, 2), group="g"),
    )
    expect_hosts(decision, [("x1", 1)], "leader")
    expect_hosts(decision, [("x1", 4), ("x2", 2)], "workers")


def test_t76_group_leader_fits_nowhere() -> None:
    """find topology assignment for two podsets with the same group - leader does not fit
    anywhere"""
    nodes = [node("b1", "b1", cpu=4000, gpu=4), node("b2", "b2", cpu=4000, gpu=4)]
    decision = run(
        nodes,
        [BLOCK],
        podset(1, "leader", cpu=10000, required=BLOCK, group="sameGroup"),
        podset(4, "workers", cpu=1000, gpu=1, required=BLOCK, group="sameGroup"),
    )
    # Kueue gives this reason to both PodSets of the group.
    expect_failure(decision, fit_only(4, 4), podset="leader+workers")


def test_t77_group_multiple_hosts() -> None:
    """find topology assignment for two podsets with the same group - multiple hosts"""
    layout = [
        ("b1", "r1", "x3", 2000),
        ("b1", "r1", "x5", 2000),
        ("b1", "r1", "x1", 2000),
        ("b2", "r4", "x6", 1000),
        ("b2", "r5", "x2", 2000),
        ("b2", "r6", "x4", 2000),
    ]
    nodes = [node(f"{b}-{r}-{h}", b, r, h, cpu=cpu, gpu=1) for b, r, h, cpu in layout]
    decision = run(
        nodes,
        L3,
        podset(1, "leader", cpu=2000, required=BLOCK, group="sameGroup"),
        podset(2, "workers", cpu=1000, gpu=1, required=BLOCK, group="sameGroup"),
    )
    expect_hosts(decision, [("x1", 1)], "leader")
    expect_hosts(decision, [("x3", 1), ("x5", 1)], "workers")


def test_t78_group_same_resources_same_rack() -> None:
    """find topology assignment for two podsets with the same group requesting same resources
    and nodes in the same rack"""
    layout = [
        ("b1", "r1", "x3"),
        ("b1", "r1", "x5"),
        ("b1", "r2", "x1"),
        ("b1", "r2", "x6"),
        ("b2", "r3", "x2"),
        ("b2", "r3", "x4"),
        ("b2", "r4", "x7"),
        ("b2", "r4", "x8"),
    ]
    nodes = [node(f"{b}-{r}-{h}", b, r, h, cpu=1000, gpu=1) for b, r, h in layout]
    decision = run(
        nodes,
        L3,
        podset(1, "leader", cpu=1000, gpu=1, required=BLOCK, group="sameGroup"),
        podset(2, "workers", cpu=1000, gpu=1, required=BLOCK, group="sameGroup"),
    )
    expect_hosts(decision, [("x3", 1)], "leader")
    # Ordered by full path: (b1, r1, x5) before (b1, r2, x1).
    expect_hosts(decision, [("x5", 1), ("x1", 1)], "workers")


def test_t79_lws_optimize_last_domain() -> None:
    """optimize the last domain for LWS using BestFit"""
    nodes = [
        node(
            "dom1-node",
            rack="rack1",
            host="dom1-node",
            cpu=10000,
            memory="10Gi",
            labels={ZONE: "dom1"},
        ),
        node(
            "dom2-node",
            rack="rack2",
            host="dom2-node",
            cpu=6000,
            memory="10Gi",
            labels={ZONE: "dom2"},
        ),
    ]
    decision = run(
        nodes,
        [ZONE, RACK, HOST],
        podset(1, "leader", cpu=1000, memory=GI, required=ZONE, slice=(RACK, 1), group="lws"),
        podset(5, "workers", cpu=1000, memory=GI, required=ZONE, slice=(RACK, 1), group="lws"),
    )
    expect_hosts(decision, [("dom2-node", 1)], "leader")
    expect_hosts(decision, [("dom2-node", 5)], "workers")


# --- 6. Multi-layer constraints ------------------------------------------------------------


def _multi_layer_nodes() -> list[NodeInfo]:
    return [
        node("b1-r1-x1", "b1", "r1", "x1", cpu=1000),
        node("b1-r1-x2", "b1", "r1", "x2", cpu=4000),
        node("b1-r2-x3", "b1", "r2", "x3", cpu=3000),
        node("b1-r2-x4", "b1", "r2", "x4", cpu=4000),
    ]


def test_t80_multi_layer_rack_and_host_slices() -> None:
    """multi-layer topology: block required; rack slices of 4; host slices of 2;
    TASMultiLayerTopology"""
    request = podset(8, cpu=1000, required=BLOCK, layers=[(RACK, 4), (HOST, 2)])
    decision = run(_multi_layer_nodes(), L3, request)
    expect_hosts(decision, [("x2", 4), ("x3", 2), ("x4", 2)])


def test_t81_single_layer_legacy_fields() -> None:
    """multi-layer topology: no feature gate; additional layers ignored"""
    decision = run(_multi_layer_nodes(), L3, podset(8, cpu=1000, required=BLOCK, slice=(RACK, 4)))
    expect_hosts(decision, [("x1", 1), ("x2", 3), ("x3", 3), ("x4", 1)])


GB200_RACKS = [
    ("dc0", "aizone0", "block0", "r0"),
    ("dc0", "aizone0", "block0", "r1"),
    ("dc0", "aizone0", "block1", "r2"),
    ("dc0", "aizone0", "block1", "r3"),
    ("dc0", "aizone1", "block2", "r4"),
    ("dc0", "aizone1", "block2", "r5"),
    ("dc0", "aizone1", "block3", "r6"),
    ("dc0", "aizone1", "block3", "r7"),
]


def test_t82_multi_layer_gb200() -> None:
    """multi-layer topology: mimic a real-world GB200 cluster ..."""
    nodes = [
        node(
            f"{b}-{r}-{az}-n{i}",
            pods=110,
            labels={DC: dc, AZ: az, BLOCK: b, RACK: r},
            extra={NVIDIA: 2},
        )
        for dc, az, b, r in GB200_RACKS
        for i in range(18)
    ]
    levels = [DC, AZ, BLOCK, RACK]
    request = podset(96, requests={NVIDIA: 2}, required=DC, layers=[(AZ, 48), (RACK, 16)])
    decision = run(nodes, levels, request)
    expect_domains(
        decision,
        levels,
        [
            (("dc0", "aizone0", "block0", "r0"), 16),
            (("dc0", "aizone0", "block0", "r1"), 16),
            (("dc0", "aizone0", "block1", "r2"), 16),
            (("dc0", "aizone1", "block2", "r4"), 16),
            (("dc0", "aizone1", "block2", "r5"), 16),
            (("dc0", "aizone1", "block3", "r6"), 16),
        ],
    )


def test_t83_host_rounding_kills_rack_slice() -> None:
    """multi-layer topology: host slice rounding makes rack slice impossible"""
    nodes = _b1r1([("x1", 3000), ("x2", 3000), ("x3", 0)])
    request = podset(6, cpu=1000, required=BLOCK, layers=[(RACK, 6), (HOST, 2)])
    decision = run(nodes, L3, request)
    expect_failure(
        decision,
        'topology "default" doesn\'t allow to fit; 0/1 slice(s) fit on level '
        "cloud.com/topology-rack; 2/3 slice(s) fit on level kubernetes.io/hostname. "
        'Total nodes: 3; excluded: resource "cpu": 1',
    )


def test_t84_small_host_kills_rack_slices() -> None:
    """multi-layer topology: small host kills rack slices despite enough total capacity"""
    nodes = [
        node("b1-r1-x1", "b1", "r1", "x1", cpu=7000),
        node("b1-r1-x2", "b1", "r1", "x2", cpu=4000),
        node("b1-r2-x3", "b1", "r2", "x3", cpu=7000),
        node("b1-r2-x4", "b1", "r2", "x4", cpu=3000),
    ]
    request = podset(16, cpu=1000, required=BLOCK, layers=[(RACK, 8), (HOST, 4)])
    decision = run(nodes, L3, request)
    expect_failure(
        decision,
        'topology "default" doesn\'t allow to fit; 1/2 slice(s) fit on level '
        "cloud.com/topology-rack; 3/4 slice(s) fit on level kubernetes.io/hostname",
    )


def test_t85_enough_host_slices_not_rack_slices() -> None:
    """multi-layer topology: enough hostname slices but not enough rack slices"""
    nodes = [node(f"b1-{r}-{h}", "b1", r, h, cpu=4000) for r, h in (("r1", "x1"), ("r2", "x2"))]
    nodes.append(node("b1-r3-x3", "b1", "r3", "x3", cpu=4000))
    request = podset(12, cpu=1000, required=BLOCK, layers=[(RACK, 6), (HOST, 2)])
    decision = run(nodes, L3, request)
    expect_failure(
        decision,
        'topology "default" doesn\'t allow to fit; 0/2 slice(s) fit on level '
        "cloud.com/topology-rack; 6/6 slice(s) fit on level kubernetes.io/hostname",
    )


def test_t86_three_layers_small_hosts_cascade() -> None:
    """multi-layer topology: 3-layer negative case with small hosts cascading up"""
    layout = [
        ("b1", "r1", "x1", 4000),
        ("b1", "r1", "x2", 4000),
        ("b1", "r2", "x3", 4000),
        ("b1", "r2", "x4", 4000),
        ("b2", "r3", "x5", 4000),
        ("b2", "r3", "x6", 4000),
        ("b2", "r4", "x7", 1000),
        ("b2", "r4", "x8", 1000),
    ]
    nodes = [node(f"{b}-{r}-{h}", b, r, h, cpu=cpu, labels={DC: "dc1"}) for b, r, h, cpu in layout]
    request = podset(24, cpu=1000, required=DC, layers=[(BLOCK, 12), (RACK, 6), (HOST, 3)])
    decision = run(nodes, [DC, BLOCK, RACK, HOST], request)
    expect_failure(
        decision,
        'topology "default" doesn\'t allow to fit; 1/2 slice(s) fit on level '
        "cloud.com/topology-block; 3/4 slice(s) fit on level cloud.com/topology-rack; "
        "6/8 slice(s) fit on level kubernetes.io/hostname",
    )


# --- 7. Existing TAS usage, non-hostname lowest level, tie-breaks --------------------------


def test_t87_sibling_usage_on_shared_hostname() -> None:
    """sibling-flavor usage on the shared hostname reduces remaining capacity"""
    nodes = [
        node("b1-x1", "b1", host="x1", cpu=1000),
        node("b1-x2", "b1", host="x2", cpu=1000),
    ]
    decision = run(
        nodes,
        [BLOCK, HOST],
        podset(1, cpu=1000, required=HOST),
        held={"b1-x1": {"cpu": 1000, "pods": 1}},
    )
    expect_hosts(decision, [("x2", 1)])


def test_t88_non_hostname_leaf_no_prior_usage() -> None:
    """non-hostname-leaf topology: nil aggregatedDomainUsages preserves per-flavor behavior"""
    decision = run(default_nodes(), L2, podset(1, cpu=1000, required=RACK))
    expect_domains(decision, L2, [(("b1", "r1"), 1)])


def test_t89_non_hostname_leaf_prior_usage() -> None:
    """non-hostname-leaf topology: prior c.usage must be applied even when
    aggregatedDomainUsages is non-nil empty"""
    nodes = [node(f"{b}-{r}", b, r, cpu=1000) for b in ("b1", "b2") for r in ("r1", "r2")]
    held = {"b1-r1": {"cpu": 1000, "pods": 1}, "b1-r2": {"cpu": 1000, "pods": 1}}
    decision = run(nodes, L2, podset(1, cpu=1000, required=RACK), held=held)
    expect_domains(decision, L2, [(("b2", "r1"), 1)])


@pytest.mark.parametrize("balanced", [False, True], ids=["balanced-off", "balanced-on"])
@pytest.mark.parametrize("hosts_in_order", [("x2", "x1"), ("x1", "x2")], ids=["x2-x1", "x1-x2"])
def test_t90_stable_tie_break(hosts_in_order: tuple[str, str], balanced: bool) -> None:
    """stable tie break on identical nodes: TASBalancedPlacement disabled (and its "reversed
    order" / TASBalancedPlacement-enabled variants; balanced placement only applies to
    preferred requests, so the required request here places the same either way)"""
    nodes = [node(h, "b1", "r1", h, cpu=1000) for h in hosts_in_order]
    decision = run(nodes, L3, podset(1, cpu=1000, required=HOST))
    expect_hosts(decision, [("x1", 1)])
