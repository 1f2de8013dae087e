"""Fair-sharing preemption (admission/fairpreemption.py): Kueue's own cases, and the fit
simulated on the capacity snapshot without the victims.

Kueue's cases: kubernetes-sigs/kueue @ ff69552e, pkg/scheduler/preemption/preemption_fair_test.go
``TestFairPreemptions``, every case, transcribed as data in ``data/kueue_preemption_fair.json``
(queues, cohorts, admitted workloads, the incoming one, its queue, the strategies, and the
victims with their reasons Kueue expects). Each test asserts Kueue's expected victims and
reasons. Kueue admits every workload at the same instant and sets each UID to its name, so ties
fall to the name: topogate's key. Cases are quota-only (no topology), as Kueue's are.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.kit import GPU, HOST, RACK, node, podset
from topogate.admission.cycle import admission_cycle
from topogate.admission.fairpreemption import (
    IN_COHORT_FAIR_SHARING,
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
    plan_fair_preemption,
)
from topogate.admission.lanes import PendingWorkload
from topogate.admission.placement import place
from topogate.admission.preemption import Running, Simulate
from topogate.admission.quota import (
    CohortSpec,
    CohortTree,
    FlavorQuota,
    PreemptionPolicy,
    QueueSpec,
    Usage,
)
from topogate.admission.request import PlacementDecision, PlacementRequest, PodSetRequest
from topogate.api.quantity import parse_quantity, to_units
from topogate.cache.nodes import NodeInfo
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "kueue_preemption_fair.json").read_text()
)
ADMITTED = "2026-01-01T00:00:00Z"


def _flavors(raw: Sequence[Any]) -> tuple[FlavorQuota, ...]:
    return tuple(
        FlavorQuota(name, {r: to_units(r, v) for r, v in resources.items()})
        for name, resources in raw
    )


def _weight(raw: str | None) -> float | None:
    return None if raw is None else float(parse_quantity(raw))


def _queue(raw: Mapping[str, Any]) -> QueueSpec:
    policy = raw["policy"]
    return QueueSpec(
        raw["name"],
        "BestEffortFIFO",
        _flavors(raw["flavors"]),
        raw["cohort"],
        PreemptionPolicy(
            policy.get("within", "Never"),
            policy.get("reclaim", "Never"),
            policy.get("borrow", "Never"),
            policy.get("threshold"),
        ),
        _weight(raw["weight"]),
    )


def _cpu(key: str, cq: str, amount: str, priority: int = 0) -> PendingWorkload:
    one = PodSetRequest(name="main", count=1, requests={"cpu": to_units("cpu", amount)})
    return PendingWorkload(key, cq, priority, ADMITTED, PlacementRequest(key, (one,)))


def _quota_only(flavor: str, removed: Sequence[Running]) -> PlacementDecision | None:
    return None


def _usage(running: Sequence[Running]) -> Usage:
    usage: Usage = {}
    for w in running:
        slot = usage.setdefault((w.cluster_queue, w.flavor), {})
        for resource, amount in w.usage.items():
            slot[resource] = slot.get(resource, 0) + amount
    return usage


def _plan_case(case: Mapping[str, Any]) -> set[tuple[str, str]]:
    queues = {q["name"]: _queue(q) for q in case["queues"]}
    cohorts = {
        c["name"]: CohortSpec(c["name"], c["parent"], _flavors(c["flavors"]), _weight(c["weight"]))
        for c in case["cohorts"]
    }
    running = [
        Running(
            w["name"],
            w["cq"],
            w["flavor"],
            w["priority"],
            ADMITTED,
            {"cpu": to_units("cpu", w["cpu"])},
        )
        for w in case["admitted"]
    ]
    incoming = case["incoming"]
    queue = queues[case["target"]]
    if case["flavor"] is not None:  # Kueue's test names the flavor its assignment chose
        chosen = [f for f in queue.flavors if f.flavor == case["flavor"]]
        queue = dataclasses.replace(queue, flavors=tuple(chosen))
    preemptor = _cpu(incoming["name"], queue.name, incoming["cpu"], incoming["priority"])
    plan = plan_fair_preemption(
        preemptor,
        queue,
        queues,
        _usage(running),
        running,
        _quota_only,
        CohortTree(queues, cohorts),
        case["strategies"] or ("LessThanOrEqualToFinalShare", "LessThanInitialShare"),
    )
    return set() if plan is None else {(v.key, v.reason) for v in plan.victims}


# Cases whose outcome differs from Kueue's: name -> (topogate's victims, why). Listed in
# docs/differences-from-kueue.md.
NO_QUOTA_USAGE = (
    "queue b has no quota at all and Kueue's test reserves usage on it directly; Kueue counts "
    "that usage in its cohort RIGHT, topogate's quota book counts a queue's usage only where it "
    "has quota (a queue cannot admit elsewhere), so RIGHT looks idle"
)
DIFFERENCES: dict[str, tuple[set[tuple[str, str]], str]] = {
    "borrowing cq in non-borrowing cohort is protected": (
        {("a1", "InClusterQueue"), ("a2", "InClusterQueue")},
        NO_QUOTA_USAGE,
    ),
    "forced to preempt within clusterqueue because borrowing workload too important": (
        {("a1", "InClusterQueue")},
        NO_QUOTA_USAGE,
    ),
}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_kueue_fair_preemptions(case: Mapping[str, Any]) -> None:
    want = {(k, r) for k, r in case["want"]}
    if case["name"] in DIFFERENCES:
        want = DIFFERENCES[case["name"]][0]
    assert _plan_case(case) == want


def test_every_kueue_case_is_transcribed() -> None:
    """TestFairPreemptions has 35 cases at ff69552e; the table must not silently shrink."""
    assert len(CASES) == 35
    assert len({c["name"] for c in CASES}) == 35


def test_unknown_strategy_is_refused_naming_it() -> None:
    queue = QueueSpec("a", "BestEffortFIFO", (FlavorQuota("f", {"cpu": 1}),), "all")
    with pytest.raises(ValueError, match="LessThanFinal"):
        plan_fair_preemption(
            _cpu("x", "a", "1"), queue, {"a": queue}, {}, [], _quota_only, None, ["LessThanFinal"]
        )


# Topology: two racks of two 8-GPU nodes; queues "team-a" (idle, nominal 16) and "team-b"
# (nominal 0, borrowing all 32 GPUs with four 8-GPU workloads, two per rack).

LEVELS = (RACK, HOST)
HELD = {  # workload -> node -> GPUs
    "b/r1-old": {"a": 8},
    "b/r1-new": {"b": 8},
    "b/r2-old": {"c": 8},
    "b/r2-new": {"d": 8},
}


def _nodes() -> list[NodeInfo]:
    return [
        node("a", rack="r1", host="a", gpu=8),
        node("b", rack="r1", host="b", gpu=8),
        node("c", rack="r2", host="c", gpu=8),
        node("d", rack="r2", host="d", gpu=8),
    ]


def _simulate(request: PlacementRequest, calls: list[int]) -> Simulate:
    def run(flavor: str, removed: Sequence[Running]) -> PlacementDecision | None:
        calls.append(len(removed))
        gone = {r.key for r in removed}
        extra: dict[str, dict[str, int]] = {}
        for key, per_node in HELD.items():
            if key in gone:
                continue
            for name, gpus in per_node.items():
                slot = extra.setdefault(name, {GPU: 0, "pods": 0})
                slot[GPU] += gpus
                slot["pods"] += 1
        snapshot = ClusterSnapshot.build(_nodes(), [], extra)
        tree = DomainTree.from_labels(snapshot, LEVELS)
        return place(tree, snapshot, request, topology_name="default")

    return run


def _teams() -> dict[str, QueueSpec]:
    reclaim = PreemptionPolicy("LowerPriority", "Any")
    return {
        "team-a": QueueSpec(
            "team-a", "BestEffortFIFO", (FlavorQuota("f", {GPU: 16}),), "org", reclaim
        ),
        "team-b": QueueSpec(
            "team-b", "BestEffortFIFO", (FlavorQuota("f", {GPU: 16}),), "org", reclaim
        ),
        "team-c": QueueSpec("team-c", "BestEffortFIFO", (FlavorQuota("f", {GPU: 0}),), "org"),
    }


def _borrowers(priorities: Mapping[str, int] | None = None) -> list[Running]:
    admitted = {"b/r1-old": "01", "b/r2-old": "02", "b/r1-new": "03", "b/r2-new": "04"}
    return [
        Running(
            key,
            "team-c",
            "f",
            (priorities or {}).get(key, 0),
            f"2026-01-01T00:00:{admitted[key]}Z",
            {GPU: 8},
            nodes=frozenset(per_node),
        )
        for key, per_node in HELD.items()
    ]


def test_a_returning_team_takes_back_one_rack_not_a_victim_in_each() -> None:
    """Quota alone would take the newest borrower of each rack (r2-new, then r1-new): 16 GPUs
    back, but a rack-bound gang of two 8-GPU pods fits in neither rack. Simulated, the fit
    needs a whole rack: the two r2 workloads go, the r1 ones stay."""
    queues = _teams()
    running = _borrowers()
    gang = PendingWorkload(
        "a/gang",
        "team-a",
        0,
        ADMITTED,
        PlacementRequest("a/gang", (podset(2, gpu=8, required=RACK),)),
    )
    calls: list[int] = []
    plan = plan_fair_preemption(
        gang, queues["team-a"], queues, _usage(running), running, _simulate(gang.request, calls)
    )
    assert plan is not None and plan.decision is not None and plan.decision.fits
    assert {v.key for v in plan.victims} == {"b/r2-new", "b/r2-old"}
    placed = {n for p in plan.decision.placements for n in p.node_counts}
    assert placed == {"c", "d"}


def test_the_lowest_priority_borrower_goes_first() -> None:
    """Within the borrowing queue, candidates come lowest priority first: a one-pod gang
    takes the low-priority workload even though it is not the newest."""
    queues = _teams()
    running = _borrowers({"b/r1-old": -5})
    one = PendingWorkload(
        "a/one",
        "team-a",
        0,
        ADMITTED,
        PlacementRequest("a/one", (podset(1, gpu=8, required=RACK),)),
    )
    plan = plan_fair_preemption(
        one, queues["team-a"], queues, _usage(running), running, _simulate(one.request, [])
    )
    assert plan is not None
    assert [(v.key, v.reason) for v in plan.victims] == [("b/r1-old", "InCohortReclamation")]


def test_fair_sharing_reason_when_the_preemptor_borrows() -> None:
    """team-b (nominal 16, idle) asks for 24: beyond its nominal quota it may only take
    from team-c while its own share stays below team-c's: InCohortFairSharing."""
    queues = _teams()
    running = _borrowers()
    big = PendingWorkload(
        "b2/big", "team-b", 0, ADMITTED, PlacementRequest("b2/big", (podset(3, gpu=8),))
    )
    plan = plan_fair_preemption(
        big, queues["team-b"], queues, _usage(running), running, _quota_only
    )
    assert plan is not None
    assert {v.reason for v in plan.victims} == {IN_COHORT_FAIR_SHARING}
    assert len(plan.victims) == 3


def test_placements_grow_with_the_log_of_the_victims() -> None:
    """700 one-GPU borrowers on 100 nodes of a rack; the preemptor needs a whole node of 8
    inside a rack. The victims are found with a few placements, not one per victim."""
    nodes = [node(f"n{i}", rack=f"r{i // 10}", host=f"n{i}", gpu=8) for i in range(100)]
    running, held = [], {}
    for i in range(700):
        key = f"b/w{i:03d}"
        running.append(
            Running(
                key,
                "team-c",
                "f",
                0,
                f"2026-01-01T{i // 60:02d}:{i % 60:02d}:00Z",
                {GPU: 1},
                nodes=frozenset({f"n{i % 100}"}),
            )
        )
        held[key] = f"n{i % 100}"
    queues = {
        "team-a": QueueSpec(
            "team-a",
            "BestEffortFIFO",
            (FlavorQuota("f", {GPU: 800}),),
            "org",
            PreemptionPolicy("Never", "Any"),
        ),
        "team-c": QueueSpec("team-c", "BestEffortFIFO", (FlavorQuota("f", {GPU: 0}),), "org"),
    }
    request = PlacementRequest("a/node", (podset(1, gpu=8, required=HOST),))
    calls: list[int] = []

    def run(flavor: str, removed: Sequence[Running]) -> PlacementDecision | None:
        calls.append(len(removed))
        gone = {r.key for r in removed}
        extra: dict[str, dict[str, int]] = {}
        for key, name in held.items():
            if key not in gone:
                slot = extra.setdefault(name, {GPU: 0, "pods": 0})
                slot[GPU] += 1
                slot["pods"] += 1
        snapshot = ClusterSnapshot.build(nodes, [], extra)
        return place(DomainTree.from_labels(snapshot, LEVELS), snapshot, request, topology_name="d")

    # 700 used of 800: quota fits, but each node has one GPU free; a node needs its 7 gone.
    gang = PendingWorkload("a/node", "team-a", 0, ADMITTED, request)
    plan = plan_fair_preemption(gang, queues["team-a"], queues, _usage(running), running, run)
    assert plan is not None and plan.decision is not None and plan.decision.fits
    assert len(plan.victims) == 7
    assert len({n for v in running if v.key in {x.key for x in plan.victims} for n in v.nodes}) == 1
    assert len(calls) < 60, calls


def test_second_strategy_only_with_two() -> None:
    """With one strategy, a candidate it refuses is not tried again: x1, refused while
    cohort A borrows at weight 0, is what the second strategy takes in Kueue's case."""
    case = next(c for c in CASES if c["name"].startswith("candidates skipped by the first"))
    assert _plan_case(case) == {("y1", IN_COHORT_FAIR_SHARING), ("x1", IN_COHORT_FAIR_SHARING)}
    one = dict(case, strategies=[LESS_THAN_OR_EQUAL_TO_FINAL_SHARE])
    assert _plan_case(one) == set()


# --- The cycle: Kueue's pkg/scheduler/scheduler_fs_test.go (TestScheduleForFairSharing) ------
# The cases of its table that preempt, through admission_cycle with fair sharing on and the
# fair planner as the cycle's preemption hook (quota only, as Kueue's cases). Limits written
# Resource(cpu, nominal, borrowingLimit) in Kueue's builders are ``borrowing`` here.


def _fq(flavor: str, nominal: Mapping[str, str], borrowing: Mapping[str, str] = {}) -> FlavorQuota:
    return FlavorQuota(
        flavor,
        {r: to_units(r, v) for r, v in nominal.items()},
        {r: to_units(r, v) for r, v in borrowing.items()},
    )


def _cycle(
    queues: Sequence[QueueSpec], admitted: Sequence[Running], pending: Sequence[PendingWorkload]
) -> tuple[dict[str, set[tuple[str, str]]], list[str]]:
    """(preemptor -> its victims and reasons, the workloads admitted)."""
    specs = {q.name: q for q in queues}
    tree = CohortTree(specs)

    def preempt(workload: PendingWorkload, queue: QueueSpec, usage: Usage, held: Any) -> Any:
        return plan_fair_preemption(workload, queue, specs, usage, admitted, _quota_only, tree)

    result = admission_cycle(
        specs, pending, _usage(admitted), lambda *_: None, preempt, fair_sharing=True
    )
    plans = {key: {(v.key, v.reason) for v in plan.victims} for key, plan in result.preemptions}
    return plans, [a.key for a in result.admitted]


def _cpu_running(key: str, cq: str, flavor: str, amount: str, priority: int = 0) -> Running:
    return Running(key, cq, flavor, priority, ADMITTED, {"cpu": to_units("cpu", amount)})


def _eng() -> list[QueueSpec]:
    """The table's eng cohort: eng-alpha, eng-beta (which preempts) and eng-gamma."""
    beta_policy = PreemptionPolicy("LowerPriority", "Any")
    return [
        QueueSpec(
            "eng-alpha",
            "StrictFIFO",
            (
                _fq("on-demand", {"cpu": "50"}, {"cpu": "50"}),
                _fq("spot", {"cpu": "100"}, {"cpu": "0"}),
            ),
            "eng",
        ),
        QueueSpec(
            "eng-beta",
            "StrictFIFO",
            (
                _fq("on-demand", {"cpu": "50"}, {"cpu": "10"}),
                _fq("spot", {"cpu": "0"}, {"cpu": "100"}),
                _fq("model-a", {"example.com/gpu": "20"}, {"example.com/gpu": "0"}),
            ),
            "eng",
            beta_policy,
        ),
        QueueSpec(
            "eng-gamma", "BestEffortFIFO", (_fq("on-demand", {"cpu": "50"}, {"cpu": "0"}),), "eng"
        ),
    ]


def test_kueue_fs_preempt_workload_from_cq_with_the_highest_share() -> None:
    """Kueue's "with fair sharing: preempt workload from CQ with the highest share": eng-alpha
    borrows 30 on-demand, eng-gamma 20; eng-beta's 30 takes alpha1 (alpha borrows most),
    then gamma1 (gamma now does); both reclaim eng-beta's nominal quota. The preemptor
    waits for them."""
    admitted = [_cpu_running("eng-alpha/all_spot", "eng-alpha", "spot", "100")]
    admitted += [
        _cpu_running(f"eng-alpha/alpha{i}", "eng-alpha", "on-demand", "20") for i in range(1, 5)
    ]
    admitted += [_cpu_running("eng-gamma/gamma1", "eng-gamma", "on-demand", "10")]
    admitted += [
        _cpu_running(f"eng-gamma/gamma{i}", "eng-gamma", "on-demand", "20") for i in range(2, 5)
    ]
    preemptor = _cpu("eng-beta/preemptor", "eng-beta", "30")
    plans, admissions = _cycle(_eng(), admitted, [preemptor])
    assert plans == {
        "eng-beta/preemptor": {
            ("eng-alpha/alpha1", "InCohortReclamation"),
            ("eng-gamma/gamma1", "InCohortReclamation"),
        }
    }
    assert admissions == []


def _other(cpu: str, bank: str, policy: PreemptionPolicy, extra: str = "") -> list[QueueSpec]:
    queues = []
    for name in ("alpha", "beta", "gamma"):
        nominal = {"cpu": cpu}
        if extra:
            nominal[f"{name}-resource"] = extra
        queues.append(
            QueueSpec(
                f"other-{name}", "BestEffortFIFO", (_fq("default", nominal),), "other", policy
            )
        )
    queues.append(
        QueueSpec("resource-bank", "BestEffortFIFO", (_fq("default", {"cpu": bank}),), "other")
    )
    return queues


def test_kueue_fs_multiple_preemptions_within_cq() -> None:
    """Kueue's "multiple preemptions within cq when fair sharing": three queues of 2 CPUs each run a
    3-CPU workload (the cohort's 9 all used); a 3-CPU workload of higher priority arrives
    in each: each takes its own queue's (InClusterQueue), all planned in one cycle (each as
    if the victims planned before it were gone, as Kueue plans every head at the cycle's
    start)."""
    queues = _other("2", "3", PreemptionPolicy("LowerPriority"))
    admitted = [
        _cpu_running(f"eng-{n}/{n[0]}1", f"other-{n}", "default", "3")
        for n in ("alpha", "beta", "gamma")
    ]
    pending = [
        _cpu(f"eng-{n}/preemptor", f"other-{n}", "3", 100) for n in ("alpha", "beta", "gamma")
    ]
    plans, admissions = _cycle(queues, admitted, pending)
    kueue = {
        f"eng-{n}/preemptor": {(f"eng-{n}/{n[0]}1", "InClusterQueue")}
        for n in ("alpha", "beta", "gamma")
    }
    assert plans == kueue
    assert admissions == []


def test_kueue_fs_in_cq_preemption_without_cohort() -> None:
    """Kueue's "fair sharing: in-CQ preemption for CQ without cohort; repro for nil pointer panic"."""
    queue = QueueSpec(
        "no-cohort-cq",
        "BestEffortFIFO",
        (_fq("default", {"cpu": "4"}),),
        None,
        PreemptionPolicy("LowerPriority"),
    )
    admitted = [_cpu_running("default/nc-low", "no-cohort-cq", "default", "4", -1)]
    plans, admissions = _cycle(
        [queue], admitted, [_cpu("default/nc-high", "no-cohort-cq", "4", 100)]
    )
    assert plans == {"default/nc-high": {("default/nc-low", "InClusterQueue")}}
    assert admissions == []


def test_kueue_fs_prefer_reclamation_over_priority_based_preemption() -> None:
    """Kueue's "with fair sharing: prefer reclamation over cq priority based preemption; with
    preemption while borrowing": other-alpha (7 GPUs per flavor) runs a1 on on-demand,
    other-beta (3) borrows 2 on spot with b1; alpha's 8-GPU preemptor takes b1 by fair
    sharing rather than its own a1.

    Both flavors need preemption; by Kueue's default flavor fungibility the flavor where it
    can reclaim from another queue (spot) is preferred to one where it must preempt by
    priority in its own queue (on-demand, a1)."""
    gpu = "gpu"
    queues = [
        QueueSpec(
            "other-alpha",
            "BestEffortFIFO",
            (_fq("on-demand", {gpu: "7"}), _fq("spot", {gpu: "7"})),
            "other",
            PreemptionPolicy("LowerPriority", "LowerPriority"),
        ),
        QueueSpec(
            "other-beta",
            "BestEffortFIFO",
            (_fq("on-demand", {gpu: "3"}), _fq("spot", {gpu: "3"})),
            "other",
        ),
    ]
    admitted = [
        Running("eng-alpha/a1", "other-alpha", "on-demand", 50, ADMITTED, {gpu: 5}),
        Running("eng-beta/b1", "other-beta", "spot", 50, ADMITTED, {gpu: 5}),
    ]
    one = PodSetRequest(name="main", count=1, requests={gpu: 8})
    preemptor = PendingWorkload(
        "eng-alpha/preemptor", "other-alpha", 100, ADMITTED, PlacementRequest("p", (one,))
    )
    plans, admissions = _cycle(queues, admitted, [preemptor])
    assert plans == {"eng-alpha/preemptor": {("eng-beta/b1", "InCohortFairSharing")}}
    assert admissions == []
