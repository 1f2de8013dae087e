"""Flavor fungibility in the admission cycle: which flavor a workload takes, and when a
preemption is weighed, by a ClusterQueue's ``spec.flavorFungibility`` (Kueue's rules).

Ported from kubernetes-sigs/kueue v0.19.0, pkg/scheduler/flavorassigner/flavorassigner_test.go
(cases of ``TestAssignFlavors`` named in each test). Kueue's cases there mock the preemption
oracle; here a running workload of lower priority is the victim that makes "preemption
possible", through the classical planner. Quota only (no topology).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from tests.test_preemption_memo import Harness
from tests.test_preemption_memo import queue as memo_queue
from tests.test_preemption_memo import workload as memo_workload
from topogate.admission.cycle import CycleResult, admission_cycle
from topogate.admission.fungibility import MAY_STOP_SEARCH, TRY_NEXT_FLAVOR, FlavorFungibility
from topogate.admission.lanes import PendingWorkload
from topogate.admission.podsets import build_placer
from topogate.admission.preemption import Running, plan_preemption
from topogate.admission.quota import CohortTree, FlavorQuota, PreemptionPolicy, QueueSpec, Usage
from topogate.admission.request import PlacementDecision, PlacementRequest, PodSetRequest
from topogate.controllers import evictions

CPU = "cpu"
ADMITTED = "2026-01-01T00:00:00Z"
CREATED = "2026-01-01T00:01:00Z"
DEFAULT = FlavorFungibility()
TRY_NEXT = FlavorFungibility(TRY_NEXT_FLAVOR, TRY_NEXT_FLAVOR)
STOP_ON_PREEMPT = FlavorFungibility(MAY_STOP_SEARCH, MAY_STOP_SEARCH)
IN_QUEUE = PreemptionPolicy("LowerPriority")


def _fq(flavor: str, nominal: int, borrowing: int | None = None) -> FlavorQuota:
    return FlavorQuota(
        flavor, {CPU: nominal * 1000}, {CPU: borrowing * 1000} if borrowing is not None else {}
    )


def _wl(key: str, cq: str, cpu: int, priority: int = 0) -> PendingWorkload:
    podset = PodSetRequest(name="main", count=1, requests={CPU: cpu * 1000})
    return PendingWorkload(key, cq, priority, CREATED, PlacementRequest(key, (podset,)))


def _run(key: str, cq: str, flavor: str, cpu: int, priority: int = 0) -> Running:
    return Running(key, cq, flavor, priority, ADMITTED, {CPU: cpu * 1000})


def _no_topology(flavor: str, removed: Sequence[Running]) -> PlacementDecision | None:
    return None


def _cycle(
    queues: Sequence[QueueSpec], running: Sequence[Running], pending: Sequence[PendingWorkload]
) -> tuple[CycleResult, list[tuple[str | None, str]]]:
    """One cycle; also what the preemption hook was asked (flavors, or None for the queue
    as the catalog holds it), to show when preemptions are weighed at all."""
    specs = {q.name: q for q in queues}
    usage: Usage = {}
    for w in running:
        slot = usage.setdefault((w.cluster_queue, w.flavor), {})
        slot[CPU] = slot.get(CPU, 0) + w.usage[CPU]
    asked: list[tuple[str | None, str]] = []

    def preempt(workload: PendingWorkload, queue: QueueSpec, now: Usage, held: Any) -> Any:
        whole = queue is specs[queue.name]
        asked.append((None if whole else ",".join(f.flavor for f in queue.flavors), workload.key))
        return plan_preemption(
            workload, queue, queue.preemption, specs, now, running, _no_topology, CohortTree(specs)
        )

    result = admission_cycle(specs, pending, usage, lambda *_: None, preempt)
    return result, asked


def _two_flavors(
    fungibility: FlavorFungibility, running_priority: int = -1
) -> tuple[CycleResult, list[Any]]:
    """Kueue's "preempt before try next flavor" / "preempt try next flavor": flavors one and
    two of 10 CPUs, 2 used on one by a lower-priority workload; a 9-CPU workload fits two
    now, or one once the low one goes."""
    queue = QueueSpec(
        "cq", "BestEffortFIFO", (_fq("one", 10), _fq("two", 10)), None, IN_QUEUE, None, fungibility
    )
    running = [_run("low", "cq", "one", 2, running_priority)]
    return _cycle([queue], running, [_wl("high", "cq", 9)])


def test_with_nobody_to_preempt_in_the_first_flavor_the_walk_goes_on_to_a_fit() -> None:
    """ "cannot preempt in cohort (oracle returns None) for the first flavor, tries the second
    flavor (which fits)" (whenCanPreempt: MayStopSearch): the workload on one is of higher
    priority, so one has no victims and the walk takes two."""
    result, asked = _two_flavors(STOP_ON_PREEMPT, running_priority=10)
    assert [(a.key, a.flavor) for a in result.admitted] == [("high", "two")]
    assert result.preemptions == [] and asked == [("one", "high")]


def test_when_can_preempt_may_stop_search_preempts_in_the_first_flavor() -> None:
    """ "preempt before try next flavor" (whenCanPreempt: MayStopSearch, and the v1beta1 name
    Preempt): preemption would make it fit in flavor one, so the walk stops there."""
    result, _ = _two_flavors(STOP_ON_PREEMPT)
    assert result.admitted == []
    assert [(k, p.flavor, [v.key for v in p.victims]) for k, p in result.preemptions] == [
        ("high", "one", ["low"])
    ]


def test_default_fungibility_tries_the_next_flavor_before_preempting() -> None:
    """ "preempt try next flavor" (Kueue's defaults): flavor two fits, nobody is preempted,
    and no preemption is even planned (a fit ends the walk first)."""
    result, asked = _two_flavors(DEFAULT)
    assert [(a.key, a.flavor) for a in result.admitted] == [("high", "two")]
    assert result.preemptions == [] and asked == []


def _borrow_in_one(fungibility: FlavorFungibility) -> CycleResult:
    """Kueue's "when borrowing while preemption is needed for flavor one": the queue has no
    quota of its own in flavor one (borrowing limit 12) and 12 CPUs in two; its cohort mate
    lends 12 in one. A 12-CPU workload fits both: one by borrowing, two within nominal."""
    policy = PreemptionPolicy("Never", "LowerPriority", "LowerPriority")
    queue = QueueSpec(
        "cq",
        "BestEffortFIFO",
        (_fq("one", 0, 12), _fq("two", 12)),
        "cohort",
        policy,
        None,
        fungibility,
    )
    mate = QueueSpec("mate", "BestEffortFIFO", (_fq("one", 12),), "cohort")
    result, _ = _cycle([queue, mate], [], [_wl("wl", "cq", 12)])
    return result


@pytest.mark.parametrize(
    "fungibility",
    [FlavorFungibility(TRY_NEXT_FLAVOR, MAY_STOP_SEARCH), TRY_NEXT],
    ids=["WhenCanBorrow=TryNextFlavor", "WhenCanBorrow=TryNextFlavor,WhenCanPreempt=TryNext"],
)
def test_when_can_borrow_try_next_flavor_takes_a_later_flavor_that_does_not_borrow(
    fungibility: FlavorFungibility,
) -> None:
    """ "when borrowing while preemption is needed for flavor one; WhenCanBorrow=TryNextFlavor":
    one would borrow (level 1), so the walk goes on to two, within nominal quota."""
    result = _borrow_in_one(fungibility)
    assert [(a.key, a.flavor) for a in result.admitted] == [("wl", "two")]


def test_when_can_borrow_may_stop_search_borrows_in_the_first_flavor() -> None:
    """The same with Kueue's default whenCanBorrow (MayStopSearch): a borrowing fit ends the
    walk, as topogate did before it read the field."""
    result = _borrow_in_one(DEFAULT)
    assert [(a.key, a.flavor) for a in result.admitted] == [("wl", "one")]


def test_with_no_flavor_fitting_reclaiming_is_preferred_to_preempting_in_the_queue() -> None:
    """Kueue's defaults weigh every flavor's preemption when none fits: one needs the queue's
    own lower-priority workload gone, two can reclaim what a cohort mate borrows; two wins.
    The hook is asked for the whole queue first (the one search of before), then for the
    flavors after the one it chose."""
    policy = PreemptionPolicy("LowerPriority", "Any")
    queue = QueueSpec("cq", "BestEffortFIFO", (_fq("one", 4), _fq("two", 4)), "co", policy)
    mate = QueueSpec("mate", "BestEffortFIFO", (_fq("one", 0), _fq("two", 0)), "co")
    running = [_run("own", "cq", "one", 4, -1), _run("borrower", "mate", "two", 4)]
    result, asked = _cycle([queue, mate], running, [_wl("wl", "cq", 4)])
    assert [(k, p.flavor, [v.key for v in p.victims]) for k, p in result.preemptions] == [
        ("wl", "two", ["borrower"])
    ]
    assert asked == [(None, "wl"), ("two", "wl")]


def test_a_single_flavor_queue_asks_the_hook_once() -> None:
    policy = PreemptionPolicy("LowerPriority")
    queue = QueueSpec("cq", "BestEffortFIFO", (_fq("one", 4),), None, policy)
    result, asked = _cycle([queue], [_run("own", "cq", "one", 4, -1)], [_wl("wl", "cq", 4)])
    assert [k for k, _ in result.preemptions] == ["wl"] and asked == [(None, "wl")]


def test_a_search_on_part_of_the_flavors_is_not_kept_for_the_whole_queue() -> None:
    """serve's memo of searches that found nothing answers whole-queue searches only: a
    search the fungibility asks about some flavors (here none) that finds nothing must not
    stop the next whole-queue search from finding its victims."""
    h = Harness([memo_queue("a", "one", 2), memo_queue("b", "one", 2)])
    h.seed(memo_workload("borrower", "b", 3, 10, admitted=True))
    catalog = h.state.catalogs.catalog()
    memo = evictions.NoPlanMemo()
    placer = build_placer(h.state.ledger.snapshot(), catalog)
    plan = evictions.preemptor(h.state, catalog.queues, placer, catalog.cohorts, memo=memo)
    request = PlacementRequest("a/waits", (PodSetRequest("main", 1, {CPU: 2000}),))
    waits = PendingWorkload("a/waits", "a", 50, CREATED, request)
    spec = catalog.queues["a"]
    usage: Usage = {("b", "rf"): {CPU: 3000}}
    assert plan(waits, dataclasses.replace(spec, flavors=()), usage, []) is None
    found = plan(waits, spec, usage, [])
    assert found is not None and [v.key for v in found.victims] == ["b/borrower"]
