"""Kueue's scheduler cases with fair sharing, through topogate's admission cycle.

Source: kubernetes-sigs/kueue @ ff69552e, pkg/scheduler/scheduler_fs_test.go, its one test
function ``TestScheduleForFairSharing`` (22 cases). Five are ported elsewhere: the preempting
"with fair sharing: preempt workload from CQ with the highest share", "multiple preemptions
within cq when fair sharing", "with fair sharing: prefer reclamation over cq priority based
preemption; with preemption while borrowing" and "fair sharing: in-CQ preemption for CQ without
cohort" in tests/test_fair_preemption.py ("The cycle"), and "fair sharing schedule workload with
lowest drf after admission" in tests/test_fair_sharing.py. This file holds the other 17.

Each case is one call of :func:`admission_cycle` (fair sharing on unless Kueue's case turns it
off) over Kueue's ClusterQueues, Cohorts and workloads, quota only (no topology), with the fair
planner as the cycle's preemption hook. It asserts what Kueue's case expects: the workloads
holding quota after the cycle and their flavors, those left pending, and the victims of each
preemptor. Kueue's table shares a set of ClusterQueues (sales, eng-alpha, eng-beta, ...) across
its cases: they are in every cycle here too. Quantities are Kueue's (cpu in cores).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from topogate.admission.cycle import admission_cycle
from topogate.admission.fairpreemption import plan_fair_preemption
from topogate.admission.fungibility import DEFAULT as DEFAULT_FUNGIBILITY
from topogate.admission.fungibility import (
    PREEMPTION_OVER_BORROWING,
    TRY_NEXT_FLAVOR,
    FlavorFungibility,
)
from topogate.admission.lanes import PendingWorkload
from topogate.admission.preemption import Running
from topogate.admission.quota import (
    CohortSpec,
    CohortTree,
    FlavorQuota,
    PreemptionPolicy,
    QueueSpec,
    Usage,
)
from topogate.admission.request import PlacementDecision, PlacementRequest, PodSetRequest
from topogate.api.quantity import to_units

CPU = "cpu"
GPU = "example.com/gpu"
NOW = "2026-01-01T00:01:00Z"
MINUTE_AGO = "2026-01-01T00:00:00Z"
SECOND_LATER = "2026-01-01T00:01:01Z"
NO_PREEMPTION = PreemptionPolicy()
RECLAIM = PreemptionPolicy("Never", "Any")  # ReclaimWithinCohort Any
LOWER_AND_RECLAIM = PreemptionPolicy("LowerPriority", "Any")

# Differences (docs/differences-from-kueue.md, "Fair sharing in the cycle").
NEXT_FLAVOR = (
    "a workload that no longer fits the flavor it would take, after an earlier admission of the "
    "same cycle, tries its queue's next flavors at once (spot here); Kueue keeps the flavor "
    "assigned at the start of the cycle and requeues it, to admit it on spot next cycle"
)


def _units(values: Mapping[str, str]) -> dict[str, int]:
    return {r: to_units(r, v) for r, v in values.items()}


def _fq(
    flavor: str,
    nominal: Mapping[str, str],
    borrowing: Mapping[str, str] = {},
    lending: Mapping[str, str] = {},
) -> FlavorQuota:
    """Kueue's MakeFlavorQuotas(flavor).Resource(r, nominal, borrowingLimit, lendingLimit)."""
    return FlavorQuota(flavor, _units(nominal), _units(borrowing), _units(lending))


def _cq(
    name: str,
    cohort: str | None,
    *flavors: FlavorQuota,
    strategy: str = "BestEffortFIFO",
    policy: PreemptionPolicy = NO_PREEMPTION,
    weight: float | None = None,
    fungibility: FlavorFungibility = DEFAULT_FUNGIBILITY,
) -> QueueSpec:
    return QueueSpec(name, strategy, flavors, cohort, policy, weight, fungibility)


def _table_queues() -> list[QueueSpec]:
    """The ClusterQueues Kueue's table declares for every case."""
    return [
        _cq("sales", None, _fq("default", {CPU: "50"}, {CPU: "0"}), strategy="StrictFIFO"),
        _cq(
            "eng-alpha",
            "eng",
            _fq("on-demand", {CPU: "50"}, {CPU: "50"}),
            _fq("spot", {CPU: "100"}, {CPU: "0"}),
            strategy="StrictFIFO",
        ),
        _cq(
            "eng-beta",
            "eng",
            _fq("on-demand", {CPU: "50"}, {CPU: "10"}),
            _fq("spot", {CPU: "0"}, {CPU: "100"}),
            _fq("model-a", {GPU: "20"}, {GPU: "0"}),
            strategy="StrictFIFO",
            policy=LOWER_AND_RECLAIM,
        ),
        _cq(
            "flavor-nonexistent-cq",
            None,
            _fq("nonexistent-flavor", {CPU: "50"}),
            strategy="StrictFIFO",
        ),
        _cq("lend-a", "lend", _fq("default", {CPU: "3"}, lending={CPU: "2"})),
        _cq("lend-b", "lend", _fq("default", {CPU: "2"}, lending={CPU: "2"})),
    ]


def _wl(
    key: str,
    cq: str,
    requests: Mapping[str, str],
    count: int = 1,
    priority: int = 0,
    created: str = NOW,
) -> PendingWorkload:
    """A pending workload: one PodSet of ``count`` pods, each asking ``requests``."""
    podset = PodSetRequest(name="one", count=count, requests=_units(requests))
    return PendingWorkload(key, cq, priority, created, PlacementRequest(key, (podset,)))


def _run(key: str, cq: str, flavor: str, usage: Mapping[str, str], priority: int = 0) -> Running:
    """A workload holding quota (Kueue's ReserveQuotaAt): ``usage`` in ``flavor``."""
    return Running(key, cq, flavor, priority, MINUTE_AGO, _units(usage))


def _no_topology(flavor: str, removed: Sequence[Running]) -> PlacementDecision | None:
    return None


@dataclass
class Outcome:
    admitted: dict[str, str]  # every workload holding quota after the cycle -> its flavor
    pending: set[str]
    preempting: dict[str, set[tuple[str, str]]] = field(default_factory=dict)  # -> victims


def _cycle(
    queues: Sequence[QueueSpec],
    admitted: Sequence[Running],
    pending: Sequence[PendingWorkload],
    cohorts: Sequence[CohortSpec] = (),
    fair_sharing: bool = True,
) -> Outcome:
    specs = {q.name: q for q in [*_table_queues(), *queues]}
    trees = {c.name: c for c in cohorts}
    tree = CohortTree(specs, trees)
    usage: Usage = {}
    for w in admitted:
        slot = usage.setdefault((w.cluster_queue, w.flavor), {})
        for resource, amount in w.usage.items():
            slot[resource] = slot.get(resource, 0) + amount

    def preempt(workload: PendingWorkload, queue: QueueSpec, now: Usage, held: Any) -> Any:
        return plan_fair_preemption(workload, queue, specs, now, admitted, _no_topology, tree)

    result = admission_cycle(
        specs, pending, usage, lambda *_: None, preempt, trees, fair_sharing=fair_sharing
    )
    holding = {w.key: w.flavor for w in admitted}
    holding.update({a.key: a.flavor for a in result.admitted})
    return Outcome(
        holding,
        set(result.pending),
        {key: {(v.key, v.reason) for v in plan.victims} for key, plan in result.preemptions},
    )


# --- Ordering: which head the fair-sharing tournament takes -----------------------------


def _lowest_share_first() -> Outcome:
    queues = [_cq("eng-shared", "eng", _fq("on-demand", {CPU: "10"}, {CPU: "0"}))]
    admitted = [
        _run("eng-alpha/all_nominal", "eng-alpha", "on-demand", {CPU: "50"}),
        _run("eng-beta/borrowing", "eng-beta", "on-demand", {CPU: "55"}),
    ]
    pending = [
        _wl("eng-beta/older_new", "eng-beta", {CPU: "1"}, created=MINUTE_AGO),
        _wl("eng-alpha/new", "eng-alpha", {CPU: "1"}, count=5),
    ]
    return _cycle(queues, admitted, pending)


@pytest.mark.xfail(strict=True, reason=NEXT_FLAVOR)
def test_schedule_workload_with_lowest_share_first() -> None:
    """ "with fair sharing: schedule workload with lowest share first": in cohort eng,
    eng-alpha runs within nominal (50 on-demand), eng-beta borrows (55); the last 5 on-demand
    go to eng-alpha's "new" (lower share) although eng-beta's "older_new" is older; it no
    longer fits after that."""
    outcome = _lowest_share_first()
    assert outcome.admitted == {
        "eng-alpha/all_nominal": "on-demand",
        "eng-beta/borrowing": "on-demand",
        "eng-alpha/new": "on-demand",
    }
    assert outcome.pending == {"eng-beta/older_new"}


def test_lowest_share_first_then_older_new_on_spot_in_the_same_cycle() -> None:
    """topogate's outcome of the case above: the same order, and older_new, left without
    on-demand, borrows spot in the same cycle (where Kueue admits it next cycle)."""
    outcome = _lowest_share_first()
    assert outcome.admitted == {
        "eng-alpha/all_nominal": "on-demand",
        "eng-beta/borrowing": "on-demand",
        "eng-alpha/new": "on-demand",
        "eng-beta/older_new": "spot",
    }
    assert outcome.pending == set()


def _nominal_first() -> Outcome:
    queues = [
        _cq(
            "fs-nom-a",
            "fs-nom",
            _fq("on-demand", {CPU: "50"}, {CPU: "0"}),
            _fq("spot", {CPU: "50"}, {CPU: "50"}),
        ),
        _cq(
            "fs-nom-b",
            "fs-nom",
            _fq("on-demand", {CPU: "10"}, {CPU: "50"}),
            _fq("spot", {CPU: "50"}, {CPU: "0"}),
        ),
    ]
    admitted = [
        _run("eng-alpha/spot-heavy", "fs-nom-a", "spot", {CPU: "80"}),
        _run("eng-beta/light-usage", "fs-nom-b", "on-demand", {CPU: "5"}),
    ]
    pending = [
        _wl("eng-beta/borrow-wl", "fs-nom-b", {CPU: "1"}, count=15, created=MINUTE_AGO),
        _wl("eng-alpha/nom-wl", "fs-nom-a", {CPU: "1"}, count=45),
    ]
    return _cycle(queues, admitted, pending)


@pytest.mark.xfail(strict=True, reason=NEXT_FLAVOR)
def test_nominal_first_admits_workload_within_nominal_despite_higher_share() -> None:
    """ "with fair sharing: nominal-first ordering admits workload fitting within nominal
    despite higher CQ DRS": fs-nom-a borrows 30 spot (a higher share than fs-nom-b), yet its
    45 on-demand fit within its nominal quota and go before fs-nom-b's older borrow-wl,
    which then no longer fits on on-demand."""
    outcome = _nominal_first()
    assert outcome.admitted == {
        "eng-alpha/spot-heavy": "spot",
        "eng-beta/light-usage": "on-demand",
        "eng-alpha/nom-wl": "on-demand",
    }
    assert outcome.pending == {"eng-beta/borrow-wl"}


def test_nominal_first_then_borrow_wl_on_spot_in_the_same_cycle() -> None:
    """topogate's outcome of the case above: nom-wl first, then borrow-wl on spot (within
    fs-nom-b's nominal) in the same cycle."""
    outcome = _nominal_first()
    assert outcome.admitted == {
        "eng-alpha/spot-heavy": "spot",
        "eng-beta/light-usage": "on-demand",
        "eng-alpha/nom-wl": "on-demand",
        "eng-beta/borrow-wl": "spot",
    }
    assert outcome.pending == set()


def _root_a_b(a_quota: bool) -> list[CohortSpec]:
    on_demand_10 = (_fq("on-demand", {CPU: "10"}),)
    return [
        CohortSpec("root"),
        CohortSpec("Cohort-A", "root", on_demand_10 if a_quota else ()),
        CohortSpec("Cohort-B", "root"),
    ]


_SUBTREE_PENDING = [
    _wl("eng-alpha/wl-a", "cq-a", {CPU: "5"}),
    _wl("eng-alpha/wl-b", "cq-b", {CPU: "5"}),
]


def test_hierarchical_nominal_first_prefers_non_borrowing_subtree() -> None:
    """ "with fair sharing: hierarchical nominal-first prefers non-borrowing subtree": at the
    root, wl-a keeps Cohort-A within its subtree's quota (5/10) while wl-b takes Cohort-B
    beyond its own (15/5): wl-a goes first and wl-b no longer fits."""
    queues = [
        _cq("cq-a", "Cohort-A", _fq("on-demand", {CPU: "0"})),
        _cq("cq-b", "Cohort-B", _fq("on-demand", {CPU: "5"})),
        _cq("cq-c", "Cohort-B", _fq("on-demand", {CPU: "0"})),
    ]
    admitted = [_run("eng-alpha/c0", "cq-c", "on-demand", {CPU: "10"})]
    outcome = _cycle(queues, admitted, _SUBTREE_PENDING, _root_a_b(a_quota=True))
    assert outcome.admitted == {"eng-alpha/c0": "on-demand", "eng-alpha/wl-a": "on-demand"}
    assert outcome.pending == {"eng-alpha/wl-b"}


def test_hierarchical_nominal_first_with_deeper_nesting() -> None:
    """ "with fair sharing: hierarchical nominal-first with deeper nesting": as above, with
    Cohort-A's quota held one level lower, by SUB-A."""
    cohorts = [
        *_root_a_b(a_quota=False),
        CohortSpec("SUB-A", "Cohort-A", (_fq("on-demand", {CPU: "10"}),)),
    ]
    queues = [
        _cq("cq-a", "SUB-A", _fq("on-demand", {CPU: "0"})),
        _cq("cq-b", "Cohort-B", _fq("on-demand", {CPU: "5"})),
        _cq("cq-c", "Cohort-B", _fq("on-demand", {CPU: "0"})),
    ]
    admitted = [_run("eng-alpha/c0", "cq-c", "on-demand", {CPU: "10"})]
    outcome = _cycle(queues, admitted, _SUBTREE_PENDING, cohorts)
    assert outcome.admitted == {"eng-alpha/c0": "on-demand", "eng-alpha/wl-a": "on-demand"}
    assert outcome.pending == {"eng-alpha/wl-b"}


def test_hierarchical_nominal_first_with_mixed_cq_and_cohort_quotas() -> None:
    """ "with fair sharing: hierarchical nominal-first with mixed CQ and cohort quotas": each
    cohort's subtree holds 18; Cohort-A would use 13 with wl-a1, Cohort-B 24 with wl-b, so
    wl-a1 goes first; then the root's 36 leave too little for wl-b."""
    on_demand_10 = (_fq("on-demand", {CPU: "10"}),)
    cohorts = [
        CohortSpec("root"),
        CohortSpec("Cohort-A", "root", on_demand_10),
        CohortSpec("Cohort-B", "root", on_demand_10),
    ]
    queues = [
        _cq("cq-a1", "Cohort-A", _fq("on-demand", {CPU: "5"})),
        _cq("cq-a2", "Cohort-A", _fq("on-demand", {CPU: "3"})),
        _cq("cq-b", "Cohort-B", _fq("on-demand", {CPU: "5"})),
        _cq("cq-c", "Cohort-B", _fq("on-demand", {CPU: "3"})),
    ]
    admitted = [
        _run("eng-alpha/a2-admitted", "cq-a2", "on-demand", {CPU: "6"}),
        _run("eng-alpha/c-admitted", "cq-c", "on-demand", {CPU: "20"}),
    ]
    pending = [
        _wl("eng-alpha/wl-a1", "cq-a1", {CPU: "7"}),
        _wl("eng-alpha/wl-b", "cq-b", {CPU: "4"}),
    ]
    outcome = _cycle(queues, admitted, pending, cohorts)
    assert outcome.admitted == {
        "eng-alpha/a2-admitted": "on-demand",
        "eng-alpha/c-admitted": "on-demand",
        "eng-alpha/wl-a1": "on-demand",
    }
    assert outcome.pending == {"eng-alpha/wl-b"}


def _per_flavor() -> Outcome:
    cohorts = [
        CohortSpec("root"),
        CohortSpec("Cohort-A", "root", (_fq("on-demand", {CPU: "10"}),)),
        CohortSpec("Cohort-B", "root", (_fq("spot", {CPU: "10"}),)),
    ]
    queues = [
        _cq("cq-a", "Cohort-A", _fq("on-demand", {CPU: "0"}), _fq("spot", {CPU: "0"})),
        _cq("cq-b", "Cohort-B", _fq("on-demand", {CPU: "5"}), _fq("spot", {CPU: "0"})),
    ]
    admitted = [
        _run("eng-alpha/spot-admitted", "cq-a", "spot", {CPU: "5"}),
        _run("eng-alpha/od-admitted", "cq-b", "on-demand", {CPU: "8"}),
    ]
    pending = [
        _wl("eng-alpha/wl-a", "cq-a", {CPU: "4"}),
        _wl("eng-alpha/wl-b", "cq-b", {CPU: "4"}),
    ]
    return _cycle(queues, admitted, pending, cohorts)


@pytest.mark.xfail(strict=True, reason=NEXT_FLAVOR)
def test_hierarchical_nominal_first_per_flavor_ignores_cross_flavor_borrowing() -> None:
    """ "with fair sharing: hierarchical nominal-first per-flavor ignores cross-flavor
    borrowing": Cohort-A borrows spot but not on-demand, so its wl-a (on-demand) goes before
    Cohort-B's wl-b (which would borrow on-demand); 7 on-demand remain, so wl-b then no
    longer fits on on-demand."""
    outcome = _per_flavor()
    assert outcome.admitted == {
        "eng-alpha/spot-admitted": "spot",
        "eng-alpha/od-admitted": "on-demand",
        "eng-alpha/wl-a": "on-demand",
    }
    assert outcome.pending == {"eng-alpha/wl-b"}


def test_per_flavor_then_wl_b_on_spot_in_the_same_cycle() -> None:
    """topogate's outcome of the case above: wl-a first, then wl-b borrows Cohort-B's spot
    in the same cycle."""
    outcome = _per_flavor()
    assert outcome.admitted == {
        "eng-alpha/spot-admitted": "spot",
        "eng-alpha/od-admitted": "on-demand",
        "eng-alpha/wl-a": "on-demand",
        "eng-alpha/wl-b": "spot",
    }
    assert outcome.pending == set()


def test_hierarchical_fair_sharing_schedules_workload_which_wins_tournament() -> None:
    """ "hierarchical fair sharing schedule workload which wins tournament": d1 wins in B
    (d would hold 80, e 81 with e1), and B (100) beats C (101 with f1 or g1) at A; d1 takes
    A's last 70 and nothing else fits."""
    cohorts = [
        CohortSpec("A", None, (_fq("on-demand", {CPU: "200"}),)),
        CohortSpec("B", "A"),
        CohortSpec("C", "A"),
    ]
    queues = [
        _cq(name, cohort, _fq("on-demand", {CPU: "0"}))
        for name, cohort in (("d", "B"), ("e", "B"), ("f", "C"), ("g", "C"))
    ]
    admitted = [
        _run("eng-alpha/d0", "d", "on-demand", {CPU: "10"}),
        _run("eng-alpha/e0", "e", "on-demand", {CPU: "20"}),
        _run("eng-alpha/g0", "g", "on-demand", {CPU: "100"}),
    ]
    pending = [
        _wl("eng-alpha/d1", "d", {CPU: "70"}),
        _wl("eng-alpha/e1", "e", {CPU: "61"}),
        _wl("eng-alpha/f1", "f", {CPU: "1"}),
        _wl("eng-alpha/g1", "g", {CPU: "1"}),
    ]
    outcome = _cycle(queues, admitted, pending, cohorts)
    assert outcome.admitted == {
        "eng-alpha/d0": "on-demand",
        "eng-alpha/e0": "on-demand",
        "eng-alpha/g0": "on-demand",
        "eng-alpha/d1": "on-demand",
    }
    assert outcome.pending == {"eng-alpha/e1", "eng-alpha/f1", "eng-alpha/g1"}


@pytest.mark.parametrize(
    "weight",
    [
        pytest.param(0.0, id="two queues with weight 0 schedules workload which borrows less"),
        pytest.param(
            123456789.0, id="two queues with high weight schedules workload which borrows less"
        ),
    ],
)
def test_two_queues_with_equal_weight_schedule_the_one_borrowing_less(weight: float) -> None:
    """ "fair sharing two queues with weight 0 (and with high weight) schedules workload which
    borrows less": b already borrows 4 of A's 8; c1 goes before b's b1 despite b1's
    priority 9001, and b1 no longer fits (b has no nominal quota to reclaim)."""
    cohorts = [CohortSpec("A", None, (_fq("on-demand", {CPU: "8"}),))]
    queues = [
        _cq(name, "A", _fq("on-demand", {CPU: "0"}), policy=RECLAIM, weight=weight)
        for name in ("b", "c")
    ]
    admitted = [_run("eng-alpha/b0", "b", "on-demand", {CPU: "4"})]
    pending = [
        _wl("eng-alpha/b1", "b", {CPU: "4"}, priority=9001),
        _wl("eng-alpha/c1", "c", {CPU: "4"}, priority=0),
    ]
    outcome = _cycle(queues, admitted, pending, cohorts)
    assert outcome.admitted == {"eng-alpha/b0": "on-demand", "eng-alpha/c1": "on-demand"}
    assert outcome.pending == {"eng-alpha/b1"}
    assert outcome.preempting == {}


def test_singleton_cqs_and_cq_without_cohort() -> None:
    """ "fair sharing schedule singleton cqs and cq without cohort": a (quota held by its
    cohort A), b (its own quota, cohort B without quota) and c (no cohort) each admit."""
    cohorts = [CohortSpec("A", None, (_fq("on-demand", {CPU: "10"}),)), CohortSpec("B")]
    queues = [
        _cq("a", "A", _fq("on-demand", {CPU: "0"})),
        _cq("b", "B", _fq("on-demand", {CPU: "10"})),
        _cq("c", None, _fq("on-demand", {CPU: "10"})),
    ]
    pending = [_wl(f"eng-alpha/{q}1", q, {CPU: "10"}) for q in ("a", "b", "c")]
    outcome = _cycle(queues, [], pending, cohorts)
    assert outcome.admitted == {f"eng-alpha/{q}1": "on-demand" for q in ("a", "b", "c")}
    assert outcome.pending == set()


def _a_with_b_and_c() -> tuple[list[QueueSpec], list[CohortSpec]]:
    cohorts = [CohortSpec("A", None, (_fq("on-demand", {CPU: "10"}),)), CohortSpec("B")]
    queues = [_cq(name, "A", _fq("on-demand", {CPU: "0"})) for name in ("b", "c")]
    return queues, cohorts


def test_highest_priority_first() -> None:
    """ "fair sharing schedule highest priority first": equal shares; c1 (101) before b1
    (99), and A's 10 are then gone."""
    queues, cohorts = _a_with_b_and_c()
    pending = [
        _wl("eng-alpha/b1", "b", {CPU: "10"}, priority=99),
        _wl("eng-alpha/c1", "c", {CPU: "10"}, priority=101),
    ]
    outcome = _cycle(queues, [], pending, cohorts)
    assert outcome.admitted == {"eng-alpha/c1": "on-demand"}
    assert outcome.pending == {"eng-alpha/b1"}


def test_earliest_timestamp_first() -> None:
    """ "fair sharing schedule earliest timestamp first": equal shares and priorities; c1,
    created a second before b1, goes first."""
    queues, cohorts = _a_with_b_and_c()
    pending = [
        _wl("eng-alpha/b1", "b", {CPU: "10"}, priority=101, created=SECOND_LATER),
        _wl("eng-alpha/c1", "c", {CPU: "10"}, priority=101, created=NOW),
    ]
    outcome = _cycle(queues, [], pending, cohorts)
    assert outcome.admitted == {"eng-alpha/c1": "on-demand"}
    assert outcome.pending == {"eng-alpha/b1"}


def test_not_enough_resources() -> None:
    """ "not enough resources with fair sharing enabled": 100 CPUs asked of sales' 50."""
    outcome = _cycle([], [], [_wl("sales/new", "sales", {CPU: "1"}, count=100)])
    assert outcome.admitted == {}
    assert outcome.pending == {"sales/new"}
    assert outcome.preempting == {}


# --- Preemption -------------------------------------------------------------------------


def _overlapping_targets() -> Outcome:
    policy = LOWER_AND_RECLAIM
    queues = [
        _cq(f"other-{n}", "other", _fq("default", {CPU: "0", f"{n}-resource": "1"}), policy=policy)
        for n in ("alpha", "beta", "gamma")
    ]
    queues.append(_cq("resource-bank", "other", _fq("default", {CPU: "9"})))
    admitted = [
        _run("eng-alpha/a1", "other-alpha", "default", {"alpha-resource": "1"}),
        _run("eng-beta/b1", "other-beta", "default", {"beta-resource": "1"}),
        _run("eng-gamma/c1", "other-gamma", "default", {CPU: "9"}),
    ]
    pending = [
        _wl("eng-alpha/preemptor", "other-alpha", {CPU: "3", "alpha-resource": "1"}, priority=100),
        _wl(
            "eng-beta/pretending-preemptor",
            "other-beta",
            {CPU: "3", "beta-resource": "1"},
            priority=99,
        ),
    ]
    return _cycle(queues, admitted, pending)


OVERLAP = (
    "Kueue's case turns its feature gate RecomputeAssignmentUponPreemptionTargetsOverlap off "
    "(on by default since 0.20); topogate plans every preemptor as if the victims of the "
    "cycle's earlier plans were gone, as Kueue with the gate on: pretending-preemptor then "
    "needs only b1 and preempts it"
)


@pytest.mark.xfail(strict=True, reason=OVERLAP)
def test_multiple_preemptions_skip_overlapping_preemption_targets() -> None:
    """ "multiple preemptions skip overlapping preemption targets" (Kueue's feature gate
    RecomputeAssignmentUponPreemptionTargetsOverlap off): other-gamma borrows all 9 CPUs of
    the bank. The preemptor (priority 100) needs its queue's a1 (InClusterQueue) and c1 (by
    fair sharing); the pretending-preemptor (99) would need b1 and c1 too: c1 is already
    targeted, so it preempts nothing this cycle. Both wait."""
    outcome = _overlapping_targets()
    assert outcome.preempting == {
        "eng-alpha/preemptor": {
            ("eng-alpha/a1", "InClusterQueue"),
            ("eng-gamma/c1", "InCohortFairSharing"),
        }
    }
    assert outcome.admitted == {
        "eng-alpha/a1": "default",
        "eng-beta/b1": "default",
        "eng-gamma/c1": "default",
    }
    assert outcome.pending == {"eng-alpha/preemptor", "eng-beta/pretending-preemptor"}


def test_overlapping_targets_recomputed_as_kueue_by_default() -> None:
    """topogate's outcome of the case above, Kueue's with the gate on (its default):
    pretending-preemptor, planned without c1, needs only b1 (InClusterQueue)."""
    outcome = _overlapping_targets()
    assert outcome.preempting == {
        "eng-alpha/preemptor": {
            ("eng-alpha/a1", "InClusterQueue"),
            ("eng-gamma/c1", "InCohortFairSharing"),
        },
        "eng-beta/pretending-preemptor": {("eng-beta/b1", "InClusterQueue")},
    }
    assert outcome.pending == {"eng-alpha/preemptor", "eng-beta/pretending-preemptor"}


# Kueue's queue1 and fs-pob-cq look past a flavor where they would borrow or preempt.
TRY_NEXT = FlavorFungibility(TRY_NEXT_FLAVOR, TRY_NEXT_FLAVOR)
POB_FUNGIBILITY = FlavorFungibility(TRY_NEXT_FLAVOR, TRY_NEXT_FLAVOR, PREEMPTION_OVER_BORROWING)


def _most_local_capacity(fair_sharing: bool, fungibility: FlavorFungibility = TRY_NEXT) -> Outcome:
    cohorts = [
        CohortSpec(
            "root-cohort", None, (_fq("on-demand", {"gpu": "2"}), _fq("spot", {"gpu": "0"}))
        ),
        CohortSpec(
            "child-cohort",
            "root-cohort",
            (_fq("on-demand", {"gpu": "5"}), _fq("spot", {"gpu": "7"})),
        ),
    ]
    queues = [
        _cq(
            "queue1",
            "child-cohort",
            _fq("on-demand", {"gpu": "3"}),
            _fq("spot", {"gpu": "3"}),
            policy=LOWER_AND_RECLAIM,
            fungibility=fungibility,
        )
    ]
    admitted = [
        _run("default/a1", "queue1", "on-demand", {"gpu": "8"}),  # on-demand up to the root
        _run("default/a2", "queue1", "spot", {"gpu": "3"}),  # spot: the queue's own
    ]
    pending = [_wl("default/a3", "queue1", {"gpu": "1"})]
    return _cycle(queues, admitted, pending, cohorts, fair_sharing)


@pytest.mark.parametrize(
    "fair_sharing",
    [
        pytest.param(True, id="prefer flavor with most local capacity"),
        pytest.param(False, id="prefer flavor with most local capacity (FS=false)"),
    ],
)
def test_prefer_flavor_with_most_local_capacity(fair_sharing: bool) -> None:
    """ "prefer flavor with most local capacity" (with fair sharing, and without): queue1's
    whenCanBorrow: TryNextFlavor weighs both flavors; a3 is admitted on spot, borrowing from
    child-cohort (level 1) rather than on-demand from root-cohort (level 2)."""
    outcome = _most_local_capacity(fair_sharing)
    assert outcome.admitted == {
        "default/a1": "on-demand",
        "default/a2": "spot",
        "default/a3": "spot",
    }
    assert outcome.pending == set()


@pytest.mark.parametrize("fair_sharing", [True, False])
def test_default_fungibility_takes_the_first_flavor_that_fits(fair_sharing: bool) -> None:
    """The case above with Kueue's defaults (whenCanBorrow: MayStopSearch): the walk stops
    at the first flavor that fits, borrowing or not: a3 on on-demand."""
    outcome = _most_local_capacity(fair_sharing, FlavorFungibility())
    assert outcome.admitted["default/a3"] == "on-demand"


def _preemption_over_borrowing(fungibility: FlavorFungibility = POB_FUNGIBILITY) -> Outcome:
    queues = [
        _cq(
            "fs-pob-cq",
            "fs-pob-cohort",
            _fq("on-demand", {CPU: "5"}, {CPU: "0"}),
            _fq("spot", {CPU: "0"}, {CPU: "5"}),
            policy=PreemptionPolicy("LowerPriority"),
            weight=1,
            fungibility=fungibility,
        ),
        _cq(
            "fs-pob-lender",
            "fs-pob-cohort",
            _fq("on-demand", {CPU: "0"}),
            _fq("spot", {CPU: "5"}),
            weight=1,
        ),
    ]
    admitted = [_run("default/fs-low-pob", "fs-pob-cq", "on-demand", {CPU: "5"}, priority=-1)]
    pending = [_wl("default/fs-high-pob", "fs-pob-cq", {CPU: "5"}, priority=0)]
    return _cycle(queues, admitted, pending)


def test_preemption_over_borrowing_preempts_in_first_flavor() -> None:
    """ "PreemptionOverBorrowing with fair sharing: preempt in first flavor instead of
    borrowing in second": fs-high-pob preempts its queue's fs-low-pob on on-demand and waits
    for it."""
    outcome = _preemption_over_borrowing()
    assert outcome.preempting == {"default/fs-high-pob": {("default/fs-low-pob", "InClusterQueue")}}
    assert outcome.admitted == {"default/fs-low-pob": "on-demand"}
    assert outcome.pending == {"default/fs-high-pob"}


def test_default_fungibility_borrows_rather_than_preempts() -> None:
    """The case above with Kueue's defaults: a fit (borrowing spot) ends the walk before any
    preemption is weighed; fs-high-pob borrows spot, nobody is preempted."""
    outcome = _preemption_over_borrowing(FlavorFungibility())
    assert outcome.preempting == {}
    assert outcome.admitted["default/fs-high-pob"] == "spot"
