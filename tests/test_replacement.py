"""Failed-node replacement, the pure decision: where the lost pods of an admitted workload go."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tests.kit import BLOCK, GPU, HOST, L3, RACK, node, podset, written_domains
from topogate.admission.cycle import FlavorTopology, SnapshotPlacer
from topogate.admission.replacement import ReplacementPlan, plan_replacement
from topogate.admission.request import PlacementRequest, PodSetRequest
from topogate.api.topology_assignment import AssignedDomain, decode, encode, encode_domains
from topogate.cache.nodes import NodeInfo
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree


def racks(per_rack: int = 3, gpus: int = 8) -> list[NodeInfo]:
    """Two blocks x two racks x ``per_rack`` hosts, named b<i>-r<j>-x<k>."""
    return [
        node(f"b{b}-r{r}-x{x}", f"b{b}", f"r{r}", f"b{b}-r{r}-x{x}", gpu=gpus)
        for b in (1, 2)
        for r in (1, 2)
        for x in range(1, per_rack + 1)
    ]


def admission(
    hosts: Mapping[str, int],
    name: str = "main",
    levels: Sequence[str] = (HOST,),
    *,
    old_form: bool = False,
) -> dict[str, Any]:
    """A written admission: in the slices form topogate writes, or (``old_form``) in the
    ``domains`` form of earlier releases and Kueue v1beta1, which must read the same."""
    domains = [
        AssignedDomain((h,) if len(levels) == 1 else tuple(h.split("/")), n)
        for h, n in hosts.items()
    ]
    topology = (encode_domains if old_form else encode)(levels, domains)
    return {
        "clusterQueue": "cq",
        "podSetAssignments": [
            {
                "name": name,
                "count": sum(hosts.values()),
                "flavors": {GPU: "f"},
                "resourceUsage": {GPU: str(8 * sum(hosts.values()))},
                "topologyAssignment": topology,
            }
        ],
    }


def replan(
    nodes: list[NodeInfo],
    request: PodSetRequest,
    written: dict[str, Any],
    failed: Sequence[str],
    *,
    levels: Sequence[str] = L3,
    others: Mapping[str, int] | None = None,
    bound: Mapping[str, Mapping[str, int]] | None = None,
) -> ReplacementPlan:
    """The decision as `serve` makes it: failed nodes not Ready, the workload's own pods (on
    the nodes it keeps) and ``others`` (node -> GPUs) held on the snapshot."""
    down = set(failed)
    labels = {n.name: dict(n.labels) for n in nodes}
    live = [
        NodeInfo(n.name, n.labels, n.allocatable, n.taints, n.name not in down, n.unschedulable)
        for n in nodes
    ]
    held: dict[str, dict[str, int]] = {}
    for a in written["podSetAssignments"]:
        for d in decode(a["topologyAssignment"]).domains:
            host = d.values[-1]
            if host not in down and host in labels:
                slot = held.setdefault(host, {GPU: 0, "pods": 0})
                slot[GPU] += 8 * d.count
                slot["pods"] += d.count
    for host, gpus in (others or {}).items():
        slot = held.setdefault(host, {GPU: 0, "pods": 0})
        slot[GPU] += gpus
        slot["pods"] += 1
    snapshot = ClusterSnapshot.build(live, [], held)
    tree = DomainTree.from_labels(snapshot, levels)
    placer = SnapshotPlacer(snapshot, {"f": FlavorTopology(tree, "default", ())})

    def domain_nodes(scope: Sequence[str], values: Sequence[str]) -> list[str]:
        return sorted(n.name for n in nodes if [n.labels.get(k) for k in scope] == list(values))

    return plan_replacement(
        PlacementRequest("ns/wl", (request,)),
        written,
        {f: labels[f] for f in failed},
        bound or {},
        levels,
        domain_nodes,
        lambda one, held_: placer("f", one, held_),
    )


def domains(plan: ReplacementPlan, podset: int = 0) -> list[tuple[str, int]]:
    assert plan.admission is not None, plan.message
    topology = plan.admission["podSetAssignments"][podset]["topologyAssignment"]
    return [("/".join(d["values"]), d["count"]) for d in written_domains(topology)]


def test_a_lost_pod_stays_in_its_required_rack_and_takes_the_failed_nodes_place() -> None:
    written = admission({"b1-r1-x1": 1, "b1-r1-x2": 1})
    plan = replan(racks(), podset(2, gpu=8, required=RACK), written, ["b1-r1-x1"])
    assert domains(plan) == [("b1-r1-x3", 1), ("b1-r1-x2", 1)]  # rank 0 keeps its slot
    assert [m.describe() for m in plan.moves] == ["1 pod(s) of main from b1-r1-x1 to b1-r1-x3 x1"]


def test_an_admission_in_the_older_domains_form_is_replaced_alike() -> None:
    # Written by an earlier topogate (or Kueue v1beta1): read, and written back as slices.
    written = admission({"b1-r1-x1": 1, "b1-r1-x2": 1}, old_form=True)
    assert "domains" in written["podSetAssignments"][0]["topologyAssignment"]
    plan = replan(racks(), podset(2, gpu=8, required=RACK), written, ["b1-r1-x1"])
    assert domains(plan) == [("b1-r1-x3", 1), ("b1-r1-x2", 1)]


def test_a_malformed_admission_is_no_replacement_and_says_where() -> None:
    written = admission({"b1-r1-x1": 1, "b1-r1-x2": 1})
    (only,) = written["podSetAssignments"][0]["topologyAssignment"]["slices"]
    only["valuesPerLevel"][0]["individual"]["roots"].pop()
    failed = {"b1-r1-x1": {RACK: "r1"}}
    request = PlacementRequest("ns/wl", (podset(2, gpu=8, required=RACK),))
    plan = plan_replacement(request, written, failed, {}, L3, lambda s, v: [], lambda o, h: None)
    assert not plan.fits
    assert plan.message.startswith(
        "cannot read the admission: status.admission.podSetAssignments[0].topologyAssignment"
        ".slices[0].valuesPerLevel[0].individual.roots: has 1 entries"
    ), plan.message


def test_no_room_in_the_required_rack_is_no_replacement_though_another_rack_is_free() -> None:
    written = admission({"b1-r1-x1": 1, "b1-r1-x2": 1})
    busy = {"b1-r1-x3": 8}
    plan = replan(racks(), podset(2, gpu=8, required=RACK), written, ["b1-r1-x1"], others=busy)
    assert not plan.fits
    assert plan.message.startswith(
        f"no replacement for 1 pod(s) of PodSet main lost on node b1-r1-x1: {RACK}=r1: "
    ), plan.message


def test_a_preferred_rack_climbs_to_the_nearest_block_not_the_other_one() -> None:
    written = admission({"b1-r1-x1": 1, "b1-r1-x2": 1})
    busy = {"b1-r1-x3": 8}
    plan = replan(racks(), podset(2, gpu=8, preferred=RACK), written, ["b1-r1-x1"], others=busy)
    [(moved, count)] = plan.moves[0].to
    assert moved[-1].startswith("b1-r2-") and count == 1


def test_a_required_block_lets_the_pod_leave_its_rack_but_not_its_block() -> None:
    written = admission({"b1-r1-x1": 1})
    busy = {"b1-r1-x2": 8, "b1-r1-x3": 8, "b1-r2-x1": 8, "b1-r2-x2": 8}
    plan = replan(racks(), podset(1, gpu=8, required=BLOCK), written, ["b1-r1-x1"], others=busy)
    assert domains(plan) == [("b1-r2-x3", 1)]
    busy["b1-r2-x3"] = 8
    plan = replan(racks(), podset(1, gpu=8, required=BLOCK), written, ["b1-r1-x1"], others=busy)
    assert not plan.fits and f"{BLOCK}=b1" in plan.message


def test_two_failed_nodes_at_once_never_share_one_spare() -> None:
    written = admission({"b1-r1-x1": 1, "b1-r1-x2": 1})
    nodes = racks(per_rack=4)
    plan = replan(nodes, podset(2, gpu=8, required=RACK), written, ["b1-r1-x1", "b1-r1-x2"])
    assert sorted(domains(plan)) == [("b1-r1-x3", 1), ("b1-r1-x4", 1)]
    assert len(plan.moves) == 2
    busy = {"b1-r1-x4": 8}  # one spare left for two lost pods
    plan = replan(
        nodes, podset(2, gpu=8, required=RACK), written, ["b1-r1-x1", "b1-r1-x2"], others=busy
    )
    assert not plan.fits and "lost on node b1-r1-x2" in plan.message


def test_a_pod_required_on_one_host_cannot_be_replaced() -> None:
    written = admission({"b1-r1-x1": 2})
    plan = replan(racks(gpus=16), podset(2, gpu=8, required=HOST), written, ["b1-r1-x1"])
    assert not plan.fits
    assert plan.message.endswith(f"the PodSet requires one {HOST} and it is the failed node itself")


def test_a_slice_keeps_its_rack_under_a_required_block() -> None:
    # Slices of 2 pods per rack; the slice on r1 lost one pod: it must come back to r1 even
    # though rack r2 of the same block is empty.
    written = admission({"b1-r1-x1": 1, "b1-r1-x2": 1, "b1-r2-x1": 1, "b1-r2-x2": 1})
    request = podset(4, gpu=8, required=BLOCK, slice=(RACK, 2))
    plan = replan(racks(), request, written, ["b1-r1-x1"])
    assert domains(plan)[0] == ("b1-r1-x3", 1)
    plan = replan(racks(), request, written, ["b1-r1-x1"], others={"b1-r1-x3": 8})
    assert not plan.fits and f"{RACK}=r1" in plan.message


def test_above_the_host_level_the_lost_pods_come_from_the_bound_pods() -> None:
    # The assignment names racks only: the pods bound to the failed node are the lost ones,
    # and their rack keeps its count when the rack has room.
    written = admission({"b1/r1": 2}, levels=(BLOCK, RACK))
    request = podset(2, gpu=8, required=RACK)
    plan = replan(
        racks(),
        request,
        written,
        ["b1-r1-x1"],
        levels=(BLOCK, RACK),
        bound={"main": {"b1-r1-x1": 1}},
    )
    assert domains(plan) == [("b1/r1", 2)]
    assert plan.moves[0].count == 1
    untouched = replan(racks(), request, written, ["b1-r1-x1"], levels=(BLOCK, RACK))
    assert untouched.fits and not untouched.moves  # no pod was there
