"""The admitter keeps the preemption searches that found nothing across cycles
(controllers.evictions.NoPlanMemo) and the search's what-ifs fork the quota book
(admission.quota.QuotaBook.fork): a search runs again whenever what it reads in its cohort
tree changed, and only then."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from topogate.admission import preemption
from topogate.admission.lanes import PendingWorkload
from topogate.admission.podsets import build_placer
from topogate.admission.quota import FlavorQuota, QueueSpec, QuotaBook
from topogate.admission.request import PlacementRequest, PodSetRequest
from topogate.controllers import evictions
from topogate.controllers.admitter import Admitter
from topogate.kube.events import EventRecorder
from topogate.kube.resources import CLUSTER_QUEUES, LOCAL_QUEUES, RESOURCE_FLAVORS, WORKLOADS
from topogate.metrics import Metrics
from topogate.state import ControllerState
from topogate.state.store import WATCHED
from topogate.testing.fakekube import FakeKube

Obj = dict[str, Any]
BY_PLURAL = {r.key: r for r in WATCHED}
API = "topogate.dev/v1alpha1"


def queue(name: str, cohort: str | None, nominal: int) -> Obj:
    spec: Obj = {
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [
                    {"name": "rf", "resources": [{"name": "cpu", "nominalQuota": nominal}]}
                ],
            }
        ],
        "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
    }
    if cohort:
        spec["cohort"] = cohort
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def workload(name: str, cq: str, cpu: int, priority: int, admitted: bool = False) -> Obj:
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": str(cpu)}}}
    obj: Obj = {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": cq,
            "creationTimestamp": f"2026-01-01T00:00:{len(name):02d}Z",
        },
        "spec": {
            "queueName": cq,
            "priority": priority,
            "podSets": [
                {"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}
            ],
        },
    }
    if admitted:
        assignment = {"name": "main", "count": 1, "flavors": {"cpu": "rf"}}
        assignment["resourceUsage"] = {"cpu": str(cpu)}
        when = "2026-01-01T00:00:00Z"
        obj["status"] = {
            "admission": {"clusterQueue": cq, "podSetAssignments": [assignment]},
            "conditions": [
                {"type": t, "status": "True", "reason": t, "lastTransitionTime": when}
                for t in ("QuotaReserved", "Admitted")
            ],
        }
    return obj


class Harness:
    """serve's admitter on an in-memory API server, the watch delivered by hand."""

    def __init__(self, queues: list[Obj]) -> None:
        self.kube, self.state = FakeKube(), ControllerState()
        self.cursor = 0
        flavor = {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": "rf"}}
        self.kube.seed(RESOURCE_FLAVORS, flavor)
        for q in queues:
            self.kube.seed(CLUSTER_QUEUES, q)
            name = q["metadata"]["name"]
            local: Obj = {
                "apiVersion": API,
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": name},
                "spec": {"clusterQueue": name},
            }
            self.kube.seed(LOCAL_QUEUES, local)
        self.admitter = Admitter(self.kube, self.state, Metrics(), EventRecorder(self.kube, "t"))
        self.deliver()

    def deliver(self) -> None:
        for event in self.kube._log[self.cursor :]:
            resource = BY_PLURAL.get(event.plural)
            if resource is not None:
                new = None if event.type == "DELETED" else copy.deepcopy(event.obj)
                self.state.handler(resource)(copy.deepcopy(event.previous), new)
        self.cursor = len(self.kube._log)

    def seed(self, obj: Obj) -> None:
        self.kube.seed(WORKLOADS, obj)
        self.deliver()

    def preempted(self) -> list[str]:
        last = self.admitter._last
        assert last is not None
        return [key for key, _ in last[2].preemptions]


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The preemptor of every classical search run."""
    ran: list[str] = []
    real = preemption.plan_preemption

    def counted(workload: PendingWorkload, *args: Any, **kwargs: Any) -> Any:
        ran.append(workload.key)
        return real(workload, *args, **kwargs)

    monkeypatch.setattr(evictions, "plan_preemption", counted)
    return ran


async def test_a_search_that_found_nothing_is_not_run_again_while_its_tree_is_unchanged(
    searches: list[str],
) -> None:
    h = Harness([queue("a", "one", 2), queue("b", "two", 2)])
    h.seed(workload("high", "a", 2, 100, admitted=True))
    h.seed(workload("waits", "a", 2, 50))
    await h.admitter.cycle()
    assert searches == ["a/waits"]  # nothing of lower priority to preempt
    # A change in another cohort tree wakes a cycle: the search reads nothing that changed.
    h.seed(workload("other", "b", 1, 10))
    await h.admitter.cycle()
    assert h.admitter.cycles == 2
    assert searches == ["a/waits"]
    assert h.preempted() == []


async def test_a_running_workload_changed_in_the_tree_runs_the_search_again(
    searches: list[str],
) -> None:
    h = Harness([queue("a", None, 2)])
    h.seed(workload("high", "a", 2, 100, admitted=True))
    h.seed(workload("waits", "a", 2, 50))
    await h.admitter.cycle()
    assert h.preempted() == [] and searches == ["a/waits"]
    # The running one's priority drops below the waiting one's: now it may be preempted.
    lowered = copy.deepcopy(h.kube.stored(WORKLOADS, "high", "a"))
    assert lowered is not None
    lowered["spec"]["priority"] = 10
    h.seed(lowered)
    await h.admitter.cycle()
    assert searches == ["a/waits", "a/waits"]
    assert h.preempted() == ["a/waits"]


def test_the_usage_of_the_tree_changed_runs_the_search_again(searches: list[str]) -> None:
    """The same running workloads, another usage handed in: the memo does not answer."""
    h = Harness([queue("a", "one", 2), queue("b", "one", 2)])
    h.seed(workload("borrower", "b", 3, 10, admitted=True))
    catalog = h.state.catalogs.catalog()
    memo = evictions.NoPlanMemo()
    placer = build_placer(h.state.ledger.snapshot(), catalog)
    plan = evictions.preemptor(h.state, catalog.queues, placer, catalog.cohorts, memo=memo)
    request = PlacementRequest("a/waits", (PodSetRequest("main", 1, {"cpu": 2000}),))
    waits = PendingWorkload("a/waits", "a", 50, "2026-01-01T00:00:05Z", request)
    spec: QueueSpec = catalog.queues["a"]
    # b within its nominal quota: nothing to reclaim.
    assert plan(waits, spec, {("b", "rf"): {"cpu": 2000}}, []) is None
    assert plan(waits, spec, {("b", "rf"): {"cpu": 2000}}, []) is None
    assert searches == ["a/waits"]
    # b borrows: its workload may be reclaimed.
    found = plan(waits, spec, {("b", "rf"): {"cpu": 3000}}, [])
    assert found is not None and [v.key for v in found.victims] == ["b/borrower"]
    assert searches == ["a/waits", "a/waits"]


def test_a_new_catalog_voids_the_memo() -> None:
    memo = evictions.NoPlanMemo()
    queues: dict[str, QueueSpec] = {}
    memo.begin(queues, None)
    request = PlacementRequest("a/w", (PodSetRequest("main", 1, {"cpu": 1}),))
    waits = PendingWorkload("a/w", "a", 0, "", request)
    memo.remember("a/w", (waits, (), ()))
    assert memo.nothing("a/w", (waits, (), ()))
    memo.begin(queues, None)  # the same catalog
    assert memo.nothing("a/w", (waits, (), ()))
    memo.begin({}, None)  # another one
    assert not memo.nothing("a/w", (waits, (), ()))


def test_a_fork_of_the_quota_book_reads_its_base_and_changes_alone() -> None:
    queues = {
        name: QueueSpec(name, "BestEffortFIFO", (FlavorQuota("rf", {"cpu": 2}),), "one")
        for name in ("a", "b")
    }
    usage = {("a", "rf"): {"cpu": 2}, ("b", "rf"): {"cpu": 3}}
    base = QuotaBook(queues, usage)
    assert base.cohort_used("one", "rf", "cpu") == 5
    fork = base.fork()
    fork.add("b", "rf", {"cpu": -3})
    assert fork.used("b", "rf", "cpu") == 0 and fork.used("a", "rf", "cpu") == 2
    assert fork.cohort_used("one", "rf", "cpu") == 2
    assert fork.available(queues["a"], queues["a"].flavors[0], "cpu") == 2
    # The base and the usage it reads are unchanged.
    assert usage == {("a", "rf"): {"cpu": 2}, ("b", "rf"): {"cpu": 3}}
    assert base.used("b", "rf", "cpu") == 3 and base.cohort_used("one", "rf", "cpu") == 5
    assert base.available(queues["a"], queues["a"].flavors[0], "cpu") == -1


async def test_the_queue_gauges_follow_the_words_at_most_once_a_second() -> None:
    """They walk every queue and every held admission: serve's loop sets them with the
    pending messages (``describe``), not on every cycle, and they are right when set."""
    h = Harness([queue("a", None, 2)])
    gauge = h.admitter.metrics.pending_workloads.labels("a")
    h.seed(workload("first", "a", 2, 50))
    h.seed(workload("second", "a", 2, 50))
    h.admitter.decide(describe=False)
    assert gauge._value.get() == 0  # not set by a cycle that does not word
    h.admitter.decide(describe=True)  # nothing changed: the outcome stands, the gauges are set
    assert gauge._value.get() == 1
    assert h.admitter.metrics.admitted_workloads.labels("a")._value.get() == 1
    await h.admitter.settle()
