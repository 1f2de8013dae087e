"""Preemption searches that found nothing are not run again while nothing they read changed
(admission/preemption.py FutileSearches, wired by controllers/evictions.py): a repeat is
answered from memory, and any change a search reads (here a candidate's priority, which moves
no capacity) makes it search again."""

from __future__ import annotations

from tests.test_shells import Harness, workload
from topogate.admission.preemption import FutileSearches
from topogate.api.objects import condition
from topogate.kube.resources import CLUSTER_QUEUES, WORKLOADS


async def test_a_search_that_found_nothing_runs_again_once_a_candidate_changes() -> None:
    h = Harness()
    queue = h.kube.stored(CLUSTER_QUEUES, "cq")
    assert queue is not None
    queue["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    h.kube.seed(CLUSTER_QUEUES, queue)
    low = workload("low", count=2, gpus=8)  # rack r1 whole (n1, n2)
    low["spec"]["priority"] = 100
    h.kube.seed(WORKLOADS, low)
    h.deliver()
    admitter, events = h.admitter()
    await admitter.cycle()
    h.deliver()
    assert h.state.ledger.admission_of("ml/low") is not None
    # Fits only in r1 (r2 has one node); the same priority as low: nothing to preempt.
    high = workload("high", count=2, gpus=8)
    high["spec"]["priority"] = 100
    h.kube.seed(WORKLOADS, high)
    h.deliver()
    await admitter.cycle()
    h.deliver()
    assert admitter.futile.hits == 0
    # A change the search does not read (another pending workload, behind high): answered
    # from memory.
    other = workload("other", count=1, gpus=8)
    other["spec"]["podSets"][0]["template"]["metadata"]["annotations"] = {}
    other["spec"]["priority"] = 0
    h.kube.seed(WORKLOADS, other)
    h.deliver()
    await admitter.cycle()
    h.deliver()
    assert admitter.futile.hits == 1
    stored = h.kube.stored(WORKLOADS, "low", "ml")
    assert stored is not None and condition(stored, "Evicted") is None
    # low drops below high: no capacity moved, yet high may now preempt it.
    stored["spec"]["priority"] = 0
    h.kube.seed(WORKLOADS, stored)
    h.deliver()
    await admitter.cycle()
    await events.drain()
    h.deliver()
    evicted = h.kube.stored(WORKLOADS, "low", "ml")
    assert evicted is not None
    assert condition(evicted, "Evicted")["reason"] == "Preempted"  # type: ignore[index]
    assert "ml/high" in condition(evicted, "Evicted")["message"]  # type: ignore[index]


def test_an_answer_holds_only_for_the_same_snapshot_and_the_same_inputs() -> None:
    futile = FutileSearches()
    snapshot, usage = object(), {("cq", "f"): {"cpu": 4}}
    futile.found_nothing(snapshot, "ml/a", ("catalog", usage, ("low", 0)))
    assert futile.futile(snapshot, "ml/a", ("catalog", {("cq", "f"): {"cpu": 4}}, ("low", 0)))
    assert not futile.futile(snapshot, "ml/b", ("catalog", usage, ("low", 0)))
    assert not futile.futile(snapshot, "ml/a", ("catalog", usage, ("low", 1)))
    assert not futile.futile(snapshot, "ml/a", ("catalog", {("cq", "f"): {"cpu": 5}}, ("low", 0)))
    # A new snapshot: capacity moved, every answer is dropped.
    assert not futile.futile(object(), "ml/a", ("catalog", usage, ("low", 0)))
    assert futile.hits == 1
