"""Fair sharing (``serve --fair-sharing``): Kueue's dominant resource share, ported case by
case from kubernetes-sigs/kueue pkg/cache/scheduler/fair_sharing_test.go
(TestDominantResourceShare), and the fair-sharing tournament's order in the cycle (the cases
of pkg/scheduler/scheduler_test.go's fair-sharing table that concern ordering). Each test
asserts Kueue's expected outcome; usage and requests are written in Kueue's units (cpu in
millicores) and converted as the cache stores them."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from topogate.admission.cycle import admission_cycle
from topogate.admission.fairshare import MAX_INT64, FairShares, Share
from topogate.admission.lanes import PendingWorkload
from topogate.admission.quota import CohortSpec, CohortTree, FlavorQuota, QueueSpec, QuotaBook
from topogate.admission.request import PlacementRequest, PodSetRequest
from topogate.api.quantity import to_units

GPU = "example.com/gpu"


def _fq(flavor: str, nominal: Mapping[str, str], **limits: Mapping[str, str]) -> FlavorQuota:
    def units(values: Mapping[str, str]) -> dict[str, int]:
        return {r: to_units(r, v) for r, v in values.items()}

    return FlavorQuota(
        flavor, units(nominal), units(limits.get("borrowing", {})), units(limits.get("lending", {}))
    )


def _cq(name: str, cohort: str | None, *flavors: FlavorQuota, weight: float = 1) -> QueueSpec:
    return QueueSpec(name, "BestEffortFIFO", flavors, cohort, weight=weight)


def _shares(
    queues: list[QueueSpec],
    usage: Mapping[tuple[str, str], int],
    cohorts: tuple[CohortSpec, ...] = (),
    request: Mapping[tuple[str, str], int] | None = None,
) -> dict[str, tuple[int, str, bool]]:
    """Every node's (rounded weighted share, dominant resource, borrowing), with ``usage`` on
    queue "cq" (Kueue's units: cpu in millicores) and ``request`` added to it."""
    specs = {q.name: q for q in queues}
    book = QuotaBook(specs, {}, CohortTree(specs, {c.name: c for c in cohorts}))
    for (flavor, resource), amount in usage.items():
        book.add("cq", flavor, {resource: amount})
    fair = FairShares(book)
    found: dict[str, tuple[int, str, bool]] = {}

    def word(share: Share) -> tuple[int, str, bool]:
        return (share.rounded, share.dominant, bool(share.borrowed))

    for queue in queues:
        extra = request or {} if queue.name == "cq" else {}
        found[queue.name] = word(fair.queue_share(queue, extra))
    for cohort in book.tree.cohorts:
        found[cohort] = word(fair.cohort_share(cohort))
    return found


def _two(
    cq: FlavorQuota, lending: FlavorQuota, cq_weight: float = 1, lw: float = 1
) -> list[QueueSpec]:
    return [
        _cq("cq", "test-cohort", cq, weight=cq_weight),
        _cq("lending-cq", "test-cohort", lending, weight=lw),
    ]


ZERO = (0, "", False)
D = "default"


def test_no_cohort() -> None:
    queue = _cq("cq", None, _fq(D, {"cpu": "2000", GPU: "5"}))
    assert _shares([queue], {(D, "cpu"): 1_000, (D, GPU): 2}) == {"cq": ZERO}


@pytest.mark.parametrize(
    ("usage", "request_", "want"),
    [
        # "usage below nominal"
        ({(D, "cpu"): 1_000, (D, GPU): 2}, {}, ZERO),
        # "usage above nominal": (7-5)*1000/10
        ({(D, "cpu"): 3_000, (D, GPU): 7}, {}, (200, GPU, True)),
        # "one resource above nominal": (3-2)*1000/10
        ({(D, "cpu"): 3_000, (D, GPU): 3}, {}, (100, "cpu", True)),
        # "usage with workload above nominal": (1+4-2)*1000/10
        ({(D, "cpu"): 1_000, (D, GPU): 2}, {(D, "cpu"): 4_000, (D, GPU): 4}, (300, "cpu", True)),
    ],
)
def test_two_queues(
    usage: dict[tuple[str, str], int],
    request_: dict[tuple[str, str], int],
    want: tuple[int, str, bool],
) -> None:
    queues = _two(_fq(D, {"cpu": "2", GPU: "5"}), _fq(D, {"cpu": "8", GPU: "5"}))
    found = _shares(queues, usage, request=request_)
    assert found == {"cq": want, "lending-cq": ZERO, "test-cohort": ZERO}


@pytest.mark.parametrize(
    ("usage", "cq_weight", "want"),
    [
        (501, 1, 1),  # "usage slightly above nominal in a cohort with large quotas"
        (800, 300, 1),  # "usage way above nominal in a cohort with large quotas and weights"
    ],
)
def test_large_quotas(usage: int, cq_weight: float, want: int) -> None:
    queues = _two(_fq(D, {GPU: "500"}), _fq(D, {GPU: "1000"}), cq_weight, 300)
    found = _shares(queues, {(D, GPU): usage})
    assert found == {"cq": (want, GPU, True), "lending-cq": ZERO, "test-cohort": ZERO}


def test_a_resource_with_zero_lendable() -> None:
    queues = _two(
        _fq(D, {"cpu": "2", GPU: "2"}, lending={GPU: "0"}),
        _fq(D, {"cpu": "8", GPU: "64"}, lending={GPU: "0"}),
    )
    found = _shares(
        queues, {(D, "cpu"): 1_000, (D, GPU): 1}, request={(D, "cpu"): 4_000, (D, GPU): 4}
    )
    assert found == {"cq": (300, "cpu", True), "lending-cq": ZERO, "test-cohort": ZERO}


def test_multiple_flavors() -> None:
    queues = [
        _cq("cq", "test-cohort", _fq("on-demand", {"cpu": "20"}), _fq("spot", {"cpu": "80"})),
        _cq("lending-cq", "test-cohort", _fq(D, {"cpu": "100"})),
    ]
    found = _shares(
        queues,
        {("on-demand", "cpu"): 15_000, ("spot", "cpu"): 5_000},
        request={("on-demand", "cpu"): 10_000},
    )
    # ((15+10-20)+0)*1000/200: spot under nominal
    assert found == {"cq": (25, "cpu", True), "lending-cq": ZERO, "test-cohort": ZERO}


@pytest.mark.parametrize(
    ("weight", "lender", "want"),
    [
        (2, "5", 100),  # "above nominal with integer weight": ((7-5)*1000/10)/2
        (0.5, "5", 400),  # "above nominal with decimal weight": ((7-5)*1000/10)/(1/2)
        (0, "10", MAX_INT64),  # "above nominal with zero weight": math.MaxInt
    ],
)
def test_weights(weight: float, lender: str, want: int) -> None:
    queues = _two(_fq(D, {GPU: "5"}), _fq(D, {GPU: lender}), weight)
    found = _shares(queues, {(D, GPU): 7})
    assert found == {"cq": (want, GPU, True), "lending-cq": ZERO, "test-cohort": ZERO}


@pytest.mark.parametrize(
    ("cq_nominal", "root_nominal", "want_cq", "want_child"),
    [
        ("5", "45", 100, 50),  # "cohort has resource share"
        ("0", "50", 200, 100),  # "... resources only available at the root cohort"
    ],
)
def test_cohort_shares(cq_nominal: str, root_nominal: str, want_cq: int, want_child: int) -> None:
    queues = [_cq("cq", "child-cohort", _fq(D, {GPU: cq_nominal}))]
    cohorts = (
        CohortSpec("child-cohort", "root", weight=2),
        CohortSpec("root", None, (_fq(D, {GPU: root_nominal}),)),
    )
    found = _shares(queues, {(D, GPU): 10}, cohorts)
    assert found == {
        "cq": (want_cq, GPU, True),
        "child-cohort": (want_child, GPU, True),
        "root": ZERO,
    }


def test_resource_share_affected_by_borrowing_limit() -> None:
    """What the cohort may lend the queue is capped by the child cohort's borrowing limit
    (10), while the child cohort is measured against the root's 50."""
    queues = [_cq("cq", "child-cohort", _fq(D, {GPU: "0"}))]
    cohorts = (
        CohortSpec("child-cohort", "root", (_fq(D, {GPU: "0"}, borrowing={GPU: "10"}),)),
        CohortSpec("root", None, (_fq(D, {GPU: "50"}),)),
    )
    found = _shares(queues, {(D, GPU): 10}, cohorts)
    assert found == {"cq": (1000, GPU, True), "child-cohort": (200, GPU, True), "root": ZERO}


@pytest.mark.parametrize(
    ("share", "want"),
    [
        (Share(0, 10), math.inf),  # "zero weight returning Inf"
        (Share(0, 0), 0.0),  # "zero unweighted ratio returns 0"
        (Share(2, 100), 50.0),  # "regular integer division"
        (Share(3, 100), 100 / 3),  # "decimal division"
    ],
)
def test_precise_weighted_share(share: Share, want: float) -> None:
    assert share.value == want


def test_zero_weight_borrowers_rank_last_by_ratio() -> None:
    """Kueue's CompareDRS: a zero-weight borrower after any finite share; among themselves,
    by unweighted ratio."""
    assert Share(1, 900).order < Share(0, 1).order < Share(0, 2).order
    assert Share(0, 0).order == Share(1, 0).order


# The tournament's order in the cycle.


def _wl(key: str, queue: str, gpus: int, priority: int = 0, created: str = "") -> PendingWorkload:
    request = PlacementRequest(
        workload=key, podsets=(PodSetRequest(name="main", count=1, requests={GPU: gpus}),)
    )
    return PendingWorkload(key, queue, priority, created or key, request)


def _quota_only(flavor: str, request: PlacementRequest, held: object) -> None:
    return None


def _order(
    queues: list[QueueSpec],
    pending: list[PendingWorkload],
    usage: dict[tuple[str, str], dict[str, int]],
    cohorts: tuple[CohortSpec, ...] = (),
    fair: bool = True,
) -> list[str]:
    specs = {q.name: q for q in queues}
    in_use = {k: dict(v) for k, v in usage.items()}  # the cycle adds its admissions
    result = admission_cycle(
        specs, pending, in_use, _quota_only, cohorts={c.name: c for c in cohorts}, fair_sharing=fair
    )
    return [a.key for a in result.admitted]


def test_lower_share_first_where_priority_would_not() -> None:
    """Two borrowers in one cohort: fair sharing serves the queue whose share after admitting
    is lower, where the classical order takes the higher priority."""
    queues = [
        _cq("a", "c", _fq(D, {GPU: "0"})),
        _cq("b", "c", _fq(D, {GPU: "0"})),
        _cq("lender", "c", _fq(D, {GPU: "10"})),
    ]
    usage = {("a", D): {GPU: 4}}
    pending = [_wl("a1", "a", 2, priority=10), _wl("b1", "b", 4)]
    # a would hold 6 (600 per mille of 10), b 4 (400): b goes first.
    assert _order(queues, pending, usage) == ["b1", "a1"]
    assert _order(queues, pending, usage, fair=False) == ["a1", "b1"]


def test_weights_decide_the_turn() -> None:
    queues = [
        _cq("a", "c", _fq(D, {GPU: "0"}), weight=3),
        _cq("b", "c", _fq(D, {GPU: "0"})),
        _cq("lender", "c", _fq(D, {GPU: "8"})),
    ]
    pending = [_wl(f"a{i}", "a", 1, created=f"0{i}") for i in range(8)]
    pending += [_wl(f"b{i}", "b", 1, created=f"1{i}") for i in range(8)]
    admitted = _order(queues, pending, {})
    # Weight 3 against 1: a gets three for each of b's (6 and 2 of the 8).
    assert sorted(admitted) == [*(f"a{i}" for i in range(6)), "b0", "b1"]


def test_non_borrowing_child_first() -> None:
    """FairSharingPrioritizeNonBorrowing (on by default): a head within its queue's nominal
    quota wins over a borrower with a lower share."""
    queues = [
        _cq("a", "c", _fq(D, {GPU: "5"})),
        _cq("b", "c", _fq(D, {GPU: "0"})),
        _cq("lender", "c", _fq(D, {GPU: "100"})),
    ]
    usage = {("a", D): {GPU: 0}}
    pending = [_wl("b1", "b", 1, created="0"), _wl("a1", "a", 5, created="1")]
    assert _order(queues, pending, usage) == ["a1", "b1"]


def test_tournament_at_each_level() -> None:
    """Each cohort forwards the winner of its subtree; at the root, the child cohorts are
    compared by their own shares after admitting their candidate."""
    queues = [
        _cq("a1", "org-a", _fq(D, {GPU: "0"})),
        _cq("a2", "org-a", _fq(D, {GPU: "0"})),
        _cq("b1", "org-b", _fq(D, {GPU: "0"})),
    ]
    cohorts = (
        CohortSpec("org-a", "root"),
        CohortSpec("org-b", "root"),
        CohortSpec("root", None, (_fq(D, {GPU: "10"}),)),
    )
    # org-a already borrows 4 (through a1): b1 wins at the root although a2's own share
    # would be lower.
    usage = {("a1", D): {GPU: 4}}
    pending = [_wl("a2-1", "a2", 1, created="0"), _wl("b1-1", "b1", 2, created="1")]
    assert _order(queues, pending, usage, cohorts) == ["b1-1", "a2-1"]
    assert _order(queues, pending, usage, cohorts, fair=False) == ["a2-1", "b1-1"]


def test_kueue_schedule_workload_with_lowest_drf_after_admission() -> None:
    """scheduler_fs_test.go "fair sharing schedule workload with lowest drf after admission":
    cohort A holds 100 cpu; b (0 nominal) already uses 10; b1 asks 50 (b would hold 60:
    600), c1 asks 75 (750). b1 is admitted; c1 then no longer fits and waits."""
    cpu = "cpu"
    queues = [
        _cq("b", "A", _fq("on-demand", {cpu: "0"})),
        _cq("c", "A", _fq("on-demand", {cpu: "0"})),
    ]
    cohorts = (CohortSpec("A", None, (_fq("on-demand", {cpu: "100"}),)),)
    usage = {("b", "on-demand"): {cpu: to_units(cpu, "10")}}

    def wl(key: str, queue: str, amount: str) -> PendingWorkload:
        podset = PodSetRequest(name="one", count=1, requests={cpu: to_units(cpu, amount)})
        return PendingWorkload(key, queue, 0, "", PlacementRequest(workload=key, podsets=(podset,)))

    pending = [wl("eng-alpha/b1", "b", "50"), wl("eng-alpha/c1", "c", "75")]
    assert _order(queues, pending, usage, cohorts) == ["eng-alpha/b1"]
