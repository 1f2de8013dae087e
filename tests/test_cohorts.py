"""Cohorts: queues lend unused quota to each other, within borrowing and lending limits, by
Kueue's rules (pkg/cache/scheduler/resource_node.go: local quota, the cohort's pool, the
borrowing cap). Pure: QuotaBook and admission_cycle."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topogate.admission.cycle import CycleResult, admission_cycle
from topogate.admission.lanes import PendingWorkload
from topogate.admission.quota import FlavorQuota, QueueSpec, QuotaBook, Usage
from topogate.admission.request import Mode, PlacementRequest, PodSetRequest
from topogate.api.errors import InputError
from topogate.api.models import ClusterQueue
from topogate.api.validation import parse_model

CPU = "nvidia.com/gpu"  # counted in whole units


def queue(
    name: str,
    nominal: int,
    cohort: str | None = "c",
    borrowing: int | None = None,
    lending: int | None = None,
) -> QueueSpec:
    quota = FlavorQuota(
        "f",
        {CPU: nominal},
        {} if borrowing is None else {CPU: borrowing},
        {} if lending is None else {CPU: lending},
    )
    return QueueSpec(name, "BestEffortFIFO", (quota,), cohort)


def book(*queues: QueueSpec, **used: int) -> QuotaBook:
    usage: Usage = {(name, "f"): {CPU: amount} for name, amount in used.items()}
    return QuotaBook({q.name: q for q in queues}, usage)


def available(b: QuotaBook, name: str) -> int:
    q = b.queues[name]
    return b.available(q, q.flavors[0], CPU)


def test_without_a_cohort_a_queue_has_its_nominal_quota() -> None:
    b = book(queue("a", 4, cohort=None), queue("b", 4, cohort=None), a=3)
    assert available(b, "a") == 1
    assert available(b, "b") == 4


def test_an_idle_cohort_member_lends_all_its_quota() -> None:
    b = book(queue("a", 4), queue("b", 4), a=6)
    assert available(b, "a") == 2  # 8 in the pool, 6 used
    assert available(b, "b") == 2  # b's own quota is partly lent out
    assert b.borrowed(b.queues["a"], b.queues["a"].flavors[0], CPU) == 2


def test_a_borrowing_limit_caps_what_a_queue_takes_beyond_its_nominal() -> None:
    b = book(queue("a", 4, borrowing=1), queue("b", 4))
    assert available(b, "a") == 5
    b = book(queue("a", 4, borrowing=1), queue("b", 4), a=5)
    assert available(b, "a") == 0
    assert available(b, "b") == 3


def test_a_lending_limit_keeps_the_rest_for_the_lender() -> None:
    # b lends at most 1: it keeps 3 for itself whatever a does.
    b = book(queue("a", 4), queue("b", 4, lending=1))
    assert available(b, "a") == 5
    b = book(queue("a", 4), queue("b", 4, lending=1), a=5)
    assert available(b, "b") == 3
    b = book(queue("a", 4), queue("b", 4, lending=1), a=5, b=3)
    assert available(b, "a") == 0 and available(b, "b") == 0


def test_a_lender_using_its_local_quota_does_not_touch_the_pool() -> None:
    b = book(queue("a", 4), queue("b", 4, lending=2), b=2)
    assert available(b, "a") == 6  # b's 2 used come from its local 2
    b = book(queue("a", 4), queue("b", 4, lending=2), b=3)
    assert available(b, "a") == 5  # the third one comes from the pool


def test_separate_cohorts_do_not_share() -> None:
    b = book(queue("a", 4, cohort="x"), queue("b", 4, cohort="y"), a=4)
    assert available(b, "a") == 0 and available(b, "b") == 4


def pending(key: str, cq: str, cpus: int, priority: int = 0) -> PendingWorkload:
    podset = PodSetRequest(name="main", count=cpus, requests={CPU: 1}, mode=Mode.UNCONSTRAINED)
    return PendingWorkload(
        key, cq, priority, "2026-01-01T00:00:00Z", PlacementRequest(key, (podset,))
    )


def no_topology(flavor: str, request: PlacementRequest, held: Any) -> None:
    return None


def test_the_cycle_admits_within_nominal_before_borrowing_and_sees_its_own_usage() -> None:
    """Kueue's order across queues: the workload that fits its queue's nominal quota goes
    first, even from a later queue; the borrower then finds the pool smaller."""
    queues = {q.name: q for q in (queue("a", 4), queue("b", 4))}
    usage: Usage = {}
    result = admission_cycle(
        queues, [pending("ml/big", "a", 6), pending("ml/small", "b", 3)], usage, no_topology
    )
    assert [a.key for a in result.admitted] == ["ml/small"]
    assert result.pending == {
        "ml/big": "insufficient quota for nvidia.com/gpu in flavor f: needs 6, 5 available"
    }
    assert usage == {("b", "f"): {CPU: 3}}
    # With room for both, the borrower is admitted after the other, and counts against it.
    usage = {}
    result = admission_cycle(
        queues, [pending("ml/big", "a", 5), pending("ml/small", "b", 3)], usage, no_topology
    )
    assert [a.key for a in result.admitted] == ["ml/small", "ml/big"]
    assert usage == {("b", "f"): {CPU: 3}, ("a", "f"): {CPU: 5}}


def test_a_queue_model_gives_its_cohort_and_limits() -> None:
    model = parse_model(
        ClusterQueue,
        {
            "metadata": {"name": "a"},
            "spec": {
                "cohortName": "team",
                "resourceGroups": [
                    {
                        "coveredResources": [CPU],
                        "flavors": [
                            {
                                "name": "f",
                                "resources": [
                                    {
                                        "name": CPU,
                                        "nominalQuota": "4",
                                        "borrowingLimit": "500m",
                                        "lendingLimit": 2,
                                    }
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        "ClusterQueue a",
    )
    spec = QueueSpec.from_model(model)
    assert spec.cohort == "team"
    assert spec.flavors[0].borrowing == {CPU: 1} and spec.flavors[0].lending == {CPU: 2}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"resources": [{"name": CPU, "nominalQuota": 4, "borrowingLimit": 1}]},
            "ClusterQueue a: spec: flavor 'f', resource 'nvidia.com/gpu': borrowingLimit and lendingLimit need a cohort",
        ),
        (
            {"cohort": "c", "resources": [{"name": CPU, "nominalQuota": 4, "lendingLimit": 5}]},
            "ClusterQueue a: spec.resourceGroups[0].flavors[0].resources[0]: lendingLimit 5 of nvidia.com/gpu must not exceed its nominalQuota 4",
        ),
        (
            {"cohort": "c", "cohortName": "d", "resources": [{"name": CPU, "nominalQuota": 4}]},
            "ClusterQueue a: spec: cohort 'c' and cohortName 'd' must agree",
        ),
    ],
)
def test_bad_cohort_settings_are_refused_with_the_field(spec: dict[str, Any], message: str) -> None:
    resources = spec.pop("resources")
    body = {
        "metadata": {"name": "a"},
        "spec": {
            **spec,
            "resourceGroups": [
                {"coveredResources": [CPU], "flavors": [{"name": "f", "resources": resources}]}
            ],
        },
    }
    with pytest.raises(InputError) as refused:
        parse_model(ClusterQueue, body, "ClusterQueue a")
    assert refused.value.describe() == message


members = st.lists(
    st.tuples(
        st.integers(0, 8),  # nominal
        st.none() | st.integers(0, 8),  # borrowing limit
        st.none() | st.integers(0, 8),  # lending limit
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(spec=members, demands=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), max_size=20))
def test_admitting_within_available_never_oversubscribes(
    spec: list[tuple[int, int | None, int | None]], demands: list[tuple[int, int]]
) -> None:
    queues = [
        queue(f"q{i}", n, borrowing=bl, lending=None if ll is None else min(ll, n))
        for i, (n, bl, ll) in enumerate(spec)
    ]
    b = book(*queues)
    for index, amount in demands:
        q = queues[index % len(queues)]
        if amount <= b.available(q, q.flavors[0], CPU):
            b.add(q.name, "f", {CPU: amount})
        total = sum(b.used(x.name, "f", CPU) for x in queues)
        assert total <= sum(x.flavors[0].nominal[CPU] for x in queues)  # the cohort's quota
        for x in queues:
            quota = x.flavors[0]
            used = b.used(x.name, "f", CPU)
            assert used <= quota.nominal[CPU] + quota.borrowing.get(CPU, used)
            # A lender can always reach what it keeps for itself.
            kept = quota.nominal[CPU] - quota.lending[CPU] if CPU in quota.lending else 0
            assert used + b.available(x, quota, CPU) >= kept


def cycle_on_four_nodes(
    nominals: list[int], gangs: list[tuple[int, int, int]]
) -> tuple[CycleResult, Usage, list[PendingWorkload]]:
    """Queues of one cohort on 2 racks x 2 nodes of 8 units; gangs of 4-unit pods that each
    require a rack: (queue index, pods, priority)."""
    from tests.kit import HOST, RACK, node, podset
    from topogate.admission.cycle import FlavorTopology, SnapshotPlacer
    from topogate.cache.snapshot import ClusterSnapshot
    from topogate.cache.topology import DomainTree

    nodes = [node(f"n{i}", rack=f"r{i // 2}", host=f"n{i}", extra={CPU: 8}) for i in range(4)]
    snapshot = ClusterSnapshot.build(nodes, [])
    tree = DomainTree.from_labels(snapshot, (RACK, HOST))
    placer = SnapshotPlacer(snapshot, {"f": FlavorTopology(tree, "t")})
    queues = {f"q{i}": queue(f"q{i}", n) for i, n in enumerate(nominals)}
    pending_ = [
        PendingWorkload(
            f"ml/w{i}",
            f"q{q % len(nominals)}",
            priority,
            f"2026-01-01T00:0{i}:00Z",
            PlacementRequest(f"ml/w{i}", (podset(pods, requests={CPU: 4}, required=RACK),)),
        )
        for i, (q, pods, priority) in enumerate(gangs)
    ]
    usage: Usage = {}
    return admission_cycle(queues, pending_, usage, placer), usage, pending_


def test_the_four_node_cycle_admits_what_fits() -> None:
    result, usage, _ = cycle_on_four_nodes([8, 8], [(0, 2, 0), (1, 2, 0), (0, 2, 0)])
    assert [a.key for a in result.admitted] == ["ml/w0", "ml/w1"]
    assert usage == {("q0", "f"): {CPU: 8}, ("q1", "f"): {CPU: 8}}


@settings(max_examples=150, deadline=None)
@given(
    nominals=st.lists(st.integers(0, 24), min_size=2, max_size=3),
    gangs=st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 4), st.integers(0, 3)), min_size=1, max_size=8
    ),
)
def test_no_cycle_overfills_a_node_or_a_cohort(
    nominals: list[int], gangs: list[tuple[int, int, int]]
) -> None:
    """Whatever queues of one cohort ask for, what a cycle admits fits every node and stays
    within the cohort's quota."""
    result, usage, pending_ = cycle_on_four_nodes(nominals, gangs)
    per_node: dict[str, int] = {}
    for admitted in result.admitted:
        assert admitted.decision is not None and admitted.decision.fits
        for placement in admitted.decision.placements:
            for name, count in placement.node_counts.items():
                per_node[name] = per_node.get(name, 0) + 4 * count
    assert all(v <= 8 for v in per_node.values()), per_node
    total = sum(sum(v.values()) for v in usage.values())
    assert total <= sum(nominals)
    pods = {p.key: sum(s.count for s in p.request.podsets) for p in pending_}
    assert total == sum(4 * pods[a.key] for a in result.admitted)
