"""Classical preemption across a cohort tree (admission/preemption.py ``_tree_candidates``):
Kueue's own cases, with and without fair sharing.

Kueue's cases: kubernetes-sigs/kueue @ ff69552e,
pkg/scheduler/preemption/preemption_hierarchical_test.go ``TestHierarchicalPreemptions``, every
case, transcribed as data in ``data/kueue_preemption_hierarchical.json`` (queues with their
nominal quota, borrowing and lending limits and policies, cohorts, admitted workloads, the
incoming one and its queue, and the victims with the reasons Kueue writes). A flavor Kueue's
case gives no resources (or a queue no resource group) is transcribed with nominal 0 of what the
case requests (Kueue's test
assigns the flavor by hand; topogate's queue must cover a resource to try it). All are
admitted at the same instant, so ties fall to the name (Kueue: the UID, unset there).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from topogate.admission.fairpreemption import plan_fair_preemption
from topogate.admission.lanes import PendingWorkload
from topogate.admission.preemption import Running, plan_preemption
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

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "kueue_preemption_hierarchical.json").read_text()
)
ADMITTED = "2026-01-01T00:00:00Z"


def _units(values: Mapping[str, str]) -> dict[str, int]:
    return {r: to_units(r, v) for r, v in values.items()}


def _flavors(raw: Sequence[Any]) -> tuple[FlavorQuota, ...]:
    return tuple(
        FlavorQuota(name, _units(nominal), _units(borrowing), _units(lending))
        for name, nominal, borrowing, lending in raw
    )


def _setup(
    case: Mapping[str, Any],
) -> tuple[dict[str, QueueSpec], CohortTree, list[Running], PendingWorkload]:
    queues = {}
    for q in case["queues"]:
        p = q["policy"]
        policy = PreemptionPolicy(
            p.get("within", "Never"),
            p.get("reclaim", "Never"),
            p.get("borrow", "Never"),
            p.get("threshold"),
        )
        queues[q["name"]] = QueueSpec(
            q["name"], "BestEffortFIFO", _flavors(q["flavors"]), q["cohort"], policy
        )
    cohorts = {
        c["name"]: CohortSpec(c["name"], c["parent"], _flavors(c["flavors"]))
        for c in case["cohorts"]
    }
    running = [
        Running(
            w["name"],
            w["cq"],
            w["flavor"],
            w["priority"],
            ADMITTED,
            _units(w["requests"]),
            evicted=w["evicted"],
        )
        for w in case["admitted"]
    ]
    incoming = case["incoming"]
    one = PodSetRequest(name="main", count=1, requests=_units(incoming["requests"]))
    preemptor = PendingWorkload(
        "in", case["target"], incoming["priority"], ADMITTED, PlacementRequest("in", (one,))
    )
    return queues, CohortTree(queues, cohorts), running, preemptor


def _usage(running: Sequence[Running]) -> Usage:
    usage: Usage = {}
    for w in running:
        slot = usage.setdefault((w.cluster_queue, w.flavor), {})
        for resource, amount in w.usage.items():
            slot[resource] = slot.get(resource, 0) + amount
    return usage


def _quota_only(flavor: str, removed: Sequence[Running]) -> PlacementDecision | None:
    return None


def _want(case: Mapping[str, Any]) -> set[tuple[str, str | None]]:
    if case["want"] or not case["want_count"]:
        return {(k, r) for k, r in case["want"]}
    # Kueue writes nothing on a target already evicted: the evicted candidate is the target.
    return {(w["name"], None) for w in case["admitted"] if w["evicted"]}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_kueue_hierarchical_preemptions(case: Mapping[str, Any]) -> None:
    queues, tree, running, preemptor = _setup(case)
    queue = queues[case["target"]]
    plan = plan_preemption(
        preemptor, queue, queue.preemption, queues, _usage(running), running, _quota_only, tree
    )
    got: set[tuple[str, str | None]] = set()
    if plan is not None:
        got = {(v.key, v.reason) for v in plan.victims}
    want = _want(case)
    if any(r is None for _, r in want):
        got = {(k, None) for k, _ in got}
    assert got == want
    assert len(got) == case["want_count"]


def test_every_kueue_case_is_transcribed() -> None:
    assert len(CASES) == 15


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_fair_sharing_reclaims_across_the_tree_too(case: Mapping[str, Any]) -> None:
    """With fair sharing the same trees: the fair planner draws candidates from the whole
    tree, so whenever Kueue's classical planner reclaims by hierarchical advantage (the
    preemptor's request fits within its own quota), the fair one finds a preemption too,
    and never takes a workload of a queue within its nominal quota."""
    queues, tree, running, preemptor = _setup(case)
    queue = queues[case["target"]]
    plan = plan_fair_preemption(
        preemptor, queue, queues, _usage(running), running, _quota_only, tree
    )
    reclaims = bool(case["want"]) and all(r == "InCohortReclamation" for _, r in case["want"])
    assert plan is not None or not reclaims
    if plan is None:
        return
    usage = _usage(running)
    for victim in plan.victims:
        found = next(r for r in running if r.key == victim.key)
        owner = queues[found.cluster_queue]
        if owner.name == queue.name:
            continue
        nominal = next(f for f in owner.flavors if f.flavor == found.flavor).nominal
        assert any(
            usage[(owner.name, found.flavor)].get(r, 0) > nominal.get(r, 0) for r in found.usage
        )
