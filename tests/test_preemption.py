"""Preemption, topology-aware (admission/preemption.py): Kueue's candidate rules and order, the
fewest victims, and the fit simulated on the capacity snapshot without the victims."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.kit import GPU, HOST, RACK, node, podset
from topogate.admission.lanes import PendingWorkload
from topogate.admission.placement import place
from topogate.admission.preemption import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    IN_COHORT_RECLAMATION,
    Running,
    Simulate,
    plan_preemption,
)
from topogate.admission.quota import (
    ANY,
    LOWER_OR_NEWER_EQUAL,
    LOWER_PRIORITY,
    FlavorQuota,
    PreemptionPolicy,
    QueueSpec,
    Usage,
)
from topogate.admission.request import PlacementDecision, PlacementRequest, PodSetRequest
from topogate.cache.nodes import NodeInfo
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree

LEVELS = (RACK, HOST)


class Cluster:
    """Nodes, and where each running workload holds GPUs."""

    def __init__(self, nodes: Sequence[NodeInfo], held: Mapping[str, Mapping[str, int]]) -> None:
        self.nodes = list(nodes)
        self.held = {k: dict(v) for k, v in held.items()}  # workload -> node -> GPUs

    def located(self, workloads: Sequence[Running]) -> list[Running]:
        """The workloads with the nodes they run on, as serve knows them."""
        return [
            dataclasses.replace(w, nodes=frozenset(self.held.get(w.key, {}))) for w in workloads
        ]

    def simulate(self, request: PlacementRequest) -> Simulate:
        def run(flavor: str, removed: Sequence[Running]) -> PlacementDecision | None:
            gone = {r.key for r in removed}
            extra: dict[str, dict[str, int]] = {}
            for key, per_node in self.held.items():
                if key in gone:
                    continue
                for name, gpus in per_node.items():
                    slot = extra.setdefault(name, {GPU: 0, "pods": 0})
                    slot[GPU] += gpus
                    slot["pods"] += 1
            snapshot = ClusterSnapshot.build(self.nodes, [], extra)
            tree = DomainTree.from_labels(snapshot, LEVELS)
            return place(tree, snapshot, request, topology_name="default")

        return run


def queue(name: str, gpus: int, cohort: str | None = None) -> QueueSpec:
    return QueueSpec(name, "BestEffortFIFO", (FlavorQuota("f", {GPU: gpus}),), cohort)


def gang(
    key: str, cq: str, pods: int, priority: int, created: str = "2026-01-02"
) -> PendingWorkload:
    request: PodSetRequest = podset(pods, gpu=8, required=RACK)
    return PendingWorkload(key, cq, priority, created, PlacementRequest(key, (request,)))


def running(
    key: str, cq: str, gpus: int, priority: int = 0, admitted: str = "2026-01-01T00:00:00Z"
) -> Running:
    return Running(key, cq, "f", priority, admitted, {GPU: gpus})


def usage_of(workloads: Sequence[Running]) -> Usage:
    usage: Usage = {}
    for w in workloads:
        slot = usage.setdefault((w.cluster_queue, w.flavor), {})
        slot[GPU] = slot.get(GPU, 0) + w.usage[GPU]
    return usage


def two_racks() -> list[NodeInfo]:
    return [
        node("a", rack="r1", host="a", gpu=8),
        node("b", rack="r1", host="b", gpu=8),
        node("c", rack="r2", host="c", gpu=8),
        node("d", rack="r2", host="d", gpu=8),
    ]


def test_within_the_queue_the_newest_lower_priority_workload_goes_first() -> None:
    victims = [
        running("ml/old", "q", 8, admitted="2026-01-01T00:00:00Z"),
        running("ml/new", "q", 8, admitted="2026-01-01T01:00:00Z"),
        running("ml/high", "q", 8, priority=100, admitted="2026-01-01T02:00:00Z"),
    ]
    cluster = Cluster(two_racks(), {"ml/old": {"a": 8}, "ml/new": {"b": 8}, "ml/high": {"c": 8}})
    preemptor = gang("ml/urgent", "q", 1, priority=50)
    plan = plan_preemption(
        preemptor,
        queue("q", 24),
        PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY),
        {"q": queue("q", 24)},
        usage_of(victims),
        cluster.located(victims),
        cluster.simulate(preemptor.request),
    )
    assert plan is not None
    assert [(v.key, v.reason) for v in plan.victims] == [("ml/new", IN_CLUSTER_QUEUE)]
    assert plan.decision is not None and plan.decision.placements[0].node_counts == {"b": 1}


def test_a_victim_that_frees_nothing_in_the_preemptor_rack_is_put_back() -> None:
    """Kueue #10497's shape: the newest candidate sits in a rack too small for the gang; the
    search takes it first, then puts it back because the fit does not need it."""
    nodes = [*two_racks()[:2], node("c", rack="r2", host="c", gpu=8)]
    victims = [
        running("ml/in-r1", "q", 8, admitted="2026-01-01T00:00:00Z"),
        running("ml/in-r2", "q", 8, admitted="2026-01-01T05:00:00Z"),
    ]
    cluster = Cluster(nodes, {"ml/in-r1": {"a": 8}, "ml/in-r2": {"c": 8}})
    preemptor = gang("ml/urgent", "q", 2, priority=50)
    plan = plan_preemption(
        preemptor,
        queue("q", 64),
        PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY),
        {"q": queue("q", 64)},
        usage_of(victims),
        cluster.located(victims),
        cluster.simulate(preemptor.request),
    )
    assert plan is not None
    assert [v.key for v in plan.victims] == ["ml/in-r1"]
    assert plan.decision is not None and plan.decision.placements[0].node_counts == {"a": 1, "b": 1}


def test_nothing_is_preempted_when_nothing_would_fit() -> None:
    victims = [running(f"ml/w{i}", "q", 8) for i in range(4)]
    held = {f"ml/w{i}": {n: 8} for i, n in enumerate("abcd")}
    preemptor = gang("ml/huge", "q", 3, priority=50)  # no rack has 3 nodes
    plan = plan_preemption(
        preemptor,
        queue("q", 64),
        PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY),
        {"q": queue("q", 64)},
        usage_of(victims),
        Cluster(two_racks(), held).located(victims),
        Cluster(two_racks(), held).simulate(preemptor.request),
    )
    assert plan is None


def test_policies_never_and_lower_priority_protect_equal_priorities() -> None:
    victims = [running("ml/peer", "q", 8, priority=50)]
    cluster = Cluster(two_racks()[:1], {"ml/peer": {"a": 8}})
    preemptor = gang("ml/p", "q", 1, priority=50)
    for policy in (PreemptionPolicy(), PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY)):
        assert (
            plan_preemption(
                preemptor,
                queue("q", 8),
                policy,
                {"q": queue("q", 8)},
                usage_of(victims),
                cluster.located(victims),
                cluster.simulate(preemptor.request),
            )
            is None
        )


def test_lower_or_newer_equal_priority_takes_a_newer_peer() -> None:
    peer = Running("ml/peer", "q", "f", 50, "2026-01-01T00:00:00Z", {GPU: 8}, created="2026-01-05")
    cluster = Cluster(two_racks()[:1], {"ml/peer": {"a": 8}})
    preemptor = gang("ml/p", "q", 1, priority=50, created="2026-01-02")
    plan = plan_preemption(
        preemptor,
        queue("q", 8),
        PreemptionPolicy(within_cluster_queue=LOWER_OR_NEWER_EQUAL),
        {"q": queue("q", 8)},
        usage_of([peer]),
        [peer],
        cluster.simulate(preemptor.request),
    )
    assert plan is not None and [v.key for v in plan.victims] == ["ml/peer"]


def test_a_lender_reclaims_from_a_borrower_but_not_from_one_within_nominal() -> None:
    queues = {"lender": queue("lender", 16, "c"), "borrower": queue("borrower", 16, "c")}
    victims = [
        running("ml/b1", "borrower", 8, priority=100, admitted="2026-01-01T00:00:00Z"),
        running("ml/b2", "borrower", 8, priority=100, admitted="2026-01-01T01:00:00Z"),
        running("ml/b3", "borrower", 8, priority=100, admitted="2026-01-01T02:00:00Z"),
        running("ml/b4", "borrower", 8, priority=100, admitted="2026-01-01T03:00:00Z"),
    ]
    held = {v.key: {n: 8} for v, n in zip(victims, "abcd", strict=True)}
    preemptor = gang("ml/mine", "lender", 2, priority=0)
    plan = plan_preemption(
        preemptor,
        queues["lender"],
        PreemptionPolicy(reclaim_within_cohort=ANY),
        queues,
        usage_of(victims),
        Cluster(two_racks(), held).located(victims),
        Cluster(two_racks(), held).simulate(preemptor.request),
    )
    assert plan is not None
    # Its own nominal quota back (16 GPUs): two victims, a whole rack, newest first; once the
    # borrower is within its nominal 16 nothing more of it may be taken.
    assert [(v.key, v.reason) for v in plan.victims] == [
        ("ml/b4", IN_COHORT_RECLAMATION),
        ("ml/b3", IN_COHORT_RECLAMATION),
    ]


def test_borrowing_to_fit_needs_borrow_within_cohort() -> None:
    """a needs 16 with a nominal 8: it must borrow, and the pool has room only once b gives
    back what it borrowed. b is never taken below its own nominal quota (Kueue's rule)."""
    queues = {"a": queue("a", 8, "c"), "b": queue("b", 8, "c"), "idle": queue("idle", 8, "c")}
    victims = [
        running("ml/b1", "b", 8, admitted="2026-01-01T00:00:00Z"),
        running("ml/b2", "b", 8, admitted="2026-01-01T01:00:00Z"),
    ]
    held = {"ml/b1": {"a": 8}, "ml/b2": {"b": 8}}
    preemptor = gang("ml/a", "a", 2, priority=10)
    cluster = Cluster(two_racks(), held)
    simulate = cluster.simulate(preemptor.request)
    never = PreemptionPolicy(reclaim_within_cohort=ANY)
    usage = usage_of(victims)
    assert (
        plan_preemption(
            preemptor, queues["a"], never, queues, usage, cluster.located(victims), simulate
        )
        is None
    )
    allowed = PreemptionPolicy(reclaim_within_cohort=ANY, borrow_within_cohort=LOWER_PRIORITY)
    plan = plan_preemption(
        preemptor, queues["a"], allowed, queues, usage, cluster.located(victims), simulate
    )
    assert plan is not None
    assert [(v.key, v.reason) for v in plan.victims] == [
        ("ml/b2", IN_COHORT_RECLAIM_WHILE_BORROWING)
    ]


@settings(max_examples=150, deadline=None)
@given(
    layout=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 8)), min_size=2, max_size=8),
    priorities=st.lists(st.integers(0, 3), min_size=8, max_size=8),
    pods=st.integers(1, 4),
)
def test_victims_are_minimal_and_the_fit_is_real(
    layout: list[tuple[int, int]], priorities: list[int], pods: int
) -> None:
    """Whatever the layout: the plan fits on the snapshot without its victims, every victim is
    needed (putting any one back breaks the fit), and only lower priorities are taken."""
    nodes = [node(f"n{i}", rack=f"r{r}", host=f"n{i}", gpu=8) for i, (r, _) in enumerate(layout)]
    victims = [
        running(f"ml/w{i}", "q", gpus, priority=priorities[i], admitted=f"2026-01-01T0{i}:00:00Z")
        for i, (_, gpus) in enumerate(layout)
        if gpus
    ]
    held = {f"ml/w{i}": {f"n{i}": gpus} for i, (_, gpus) in enumerate(layout) if gpus}
    cluster = Cluster(nodes, held)
    preemptor = PendingWorkload(
        "ml/p",
        "q",
        2,
        "2026-01-02",
        PlacementRequest("ml/p", (podset(pods, gpu=8, required=RACK),)),
    )
    simulate = cluster.simulate(preemptor.request)
    already = simulate("f", [])
    assume(already is not None and not already.fits)  # preemption is for what does not fit
    plan = plan_preemption(
        preemptor,
        queue("q", 1000),
        PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY),
        {"q": queue("q", 1000)},
        usage_of(victims),
        cluster.located(victims),
        simulate,
    )
    by_key = {v.key: v for v in victims}
    lower = [v for v in victims if v.priority < 2]
    fits_with_all_lower = (decision := simulate("f", lower)) is not None and decision.fits
    if plan is None:
        assert not fits_with_all_lower
        return
    removed = [by_key[v.key] for v in plan.victims]
    assert all(v.priority < 2 for v in removed)
    assert plan.decision is not None and plan.decision.fits
    again = simulate("f", removed)
    assert again is not None and again.fits
    if len(removed) > 1:
        for kept in removed:
            without = simulate("f", [r for r in removed if r is not kept])
            assert without is not None and not without.fits, f"{kept.key} was not needed"


# Kueue's TestScheduleForTASPreemption, two of its scenarios in our terms (one scalar
# resource; what matters is who is chosen, and why).


def test_kueue_low_priority_is_preempted_mid_priority_survives() -> None:
    nodes = [node("x1", rack="r", host="x1", gpu=5)]
    running_ = [
        running("default/mid", "tas-main", 2, priority=2),
        running("default/low", "tas-main", 2, priority=1),
    ]
    cluster = Cluster(nodes, {"default/mid": {"x1": 2}, "default/low": {"x1": 2}})
    request = PlacementRequest("default/foo", (podset(1, gpu=2, preferred=HOST),))
    preemptor = PendingWorkload("default/foo", "tas-main", 3, "2026-01-02", request)
    plan = plan_preemption(
        preemptor,
        queue("tas-main", 100),
        PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY),
        {"tas-main": queue("tas-main", 100)},
        usage_of(running_),
        cluster.located(running_),
        cluster.simulate(preemptor.request),
    )
    assert plan is not None
    assert [(v.key, v.reason) for v in plan.victims] == [("default/low", IN_CLUSTER_QUEUE)]


def test_kueue_low_priority_is_preempted_though_free_capacity_is_fragmented() -> None:
    """Two nodes 4/5 full leave 2 free units, enough for the gang's 2 pods one per node, but
    the gang requires one node: the low-priority workload goes, its node takes both pods."""
    nodes = [node("x1", rack="r", host="x1", gpu=5), node("x2", rack="r", host="x2", gpu=5)]
    running_ = [
        running("default/low", "tas-main", 4, priority=1),
        running("default/mid", "tas-main", 4, priority=2),
    ]
    cluster = Cluster(nodes, {"default/low": {"x1": 4}, "default/mid": {"x2": 4}})
    request = PlacementRequest("default/wl3", (podset(2, gpu=1, required=HOST),))
    preemptor = PendingWorkload("default/wl3", "tas-main", 3, "2026-01-02", request)
    assert not cluster.simulate(request)("f", []).fits  # type: ignore[union-attr]
    plan = plan_preemption(
        preemptor,
        queue("tas-main", 100),
        PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY),
        {"tas-main": queue("tas-main", 100)},
        usage_of(running_),
        cluster.located(running_),
        cluster.simulate(preemptor.request),
    )
    assert plan is not None and [v.key for v in plan.victims] == ["default/low"]
    assert plan.decision is not None and plan.decision.placements[0].node_counts == {"x1": 2}


def test_a_lower_workload_never_takes_what_a_preemptor_frees() -> None:
    """Kueue's rule: a preemptor holds its quota and placement for the rest of the cycle. Here
    the urgent gang needs the whole rack and evicts the old job; the small job, next in line,
    would fit on the free node, but then the gang could not fit once the old job is gone and
    would evict the small one in turn (the thrash the Kueue scenario showed)."""
    from topogate.admission.cycle import FlavorTopology, SnapshotPlacer, admission_cycle

    nodes = [node("a", rack="r1", host="a", gpu=8), node("b", rack="r1", host="b", gpu=8)]
    old = [running("ml/old", "q", 8)]
    cluster = Cluster(nodes, {"ml/old": {"a": 8}})
    policy = PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY)
    q = dataclasses.replace(queue("q", 16), preemption=policy)
    snapshot = ClusterSnapshot.build(nodes, [], {"a": {GPU: 8, "pods": 1}})
    placer = SnapshotPlacer(
        snapshot, {"f": FlavorTopology(DomainTree.from_labels(snapshot, LEVELS), "default", ())}
    )

    def preempt(workload: PendingWorkload, _q: QueueSpec, usage: Usage, held: Any) -> Any:
        return plan_preemption(
            workload,
            q,
            policy,
            {"q": q},
            usage,
            cluster.located(old),
            cluster.simulate(workload.request),
        )

    urgent = gang("ml/urgent", "q", 2, priority=100)
    small = gang("ml/small", "q", 1, priority=10)
    result = admission_cycle({"q": q}, [urgent, small], usage_of(old), placer, preempt)
    assert [a.key for a in result.admitted] == []
    assert [(k, [v.key for v in p.victims]) for k, p in result.preemptions] == [
        ("ml/urgent", ["ml/old"])
    ]
    assert "preempting 1 workload(s)" in result.pending["ml/urgent"]
    assert "ml/small" in result.pending
