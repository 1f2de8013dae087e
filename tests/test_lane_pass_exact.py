"""admission/cycle.py: passing a hopeless lane whole (:func:`_hopeless`) decides exactly what
walking every head decides: the same admissions in the same order (flavors, usage, counts),
the same preemptions and the same pending messages. The reference is the same cycle with the
pass turned off, over several flavors (one not covering a resource), cohorts with borrowing
and lending limits, StrictFIFO, a queue that does not exist, placements that fail where
quota fits, preemption plans that reserve quota and Jobs that may shrink (minCount)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topogate.admission import cycle as q
from topogate.admission.cycle import admission_cycle
from topogate.admission.lanes import PendingWorkload, QueueLanes
from topogate.admission.preemption import Preemption, Victim
from topogate.admission.quota import FlavorQuota, PreemptionPolicy, QueueSpec, Usage
from topogate.admission.request import PlacementDecision, PlacementRequest, PodSetRequest

GPU = "example.com/gpu"
CPU = "cpu"
QUEUES = ["cq-a", "cq-b", "cq-c"]
FLAVORS = ["f1", "f2"]

LIMIT = st.one_of(st.none(), st.integers(0, 6))
FLAVOR = st.tuples(
    st.sampled_from(FLAVORS),
    st.integers(0, 8),  # gpu nominal
    st.one_of(st.none(), st.integers(0, 8)),  # cpu nominal (None: not covered)
    LIMIT,  # gpu borrowing limit
    LIMIT,  # gpu lending limit
)
QUEUE = st.tuples(
    st.sampled_from(["BestEffortFIFO", "StrictFIFO"]),
    st.lists(FLAVOR, min_size=0, max_size=2, unique_by=lambda f: f[0]),
    st.sampled_from([None, "c1", "c2"]),
    st.booleans(),  # preemption enabled
)
WORKLOAD = st.tuples(
    st.sampled_from([*QUEUES, "cq-missing"]),
    st.integers(0, 2),  # priority
    st.integers(1, 4),  # day
    st.integers(1, 5),  # pods
    st.integers(0, 2),  # gpu per pod
    st.integers(0, 1),  # cpu per pod
    st.one_of(st.none(), st.integers(1, 4)),  # minCount
)


def _specs(raw: list[Any]) -> dict[str, QueueSpec]:
    queues = {}
    for name, (strategy, flavors, cohort, preempts) in zip(QUEUES, raw, strict=True):
        quotas = []
        for flavor, gpu, cpu, borrowing, lending in flavors:
            nominal = {GPU: gpu} if cpu is None else {GPU: gpu, CPU: cpu}
            quotas.append(
                FlavorQuota(
                    flavor,
                    nominal,
                    {GPU: borrowing} if borrowing is not None else {},
                    {GPU: min(lending, gpu)} if lending is not None else {},
                )
            )
        policy = PreemptionPolicy("LowerPriority") if preempts else PreemptionPolicy()
        queues[name] = QueueSpec(name, strategy, tuple(quotas), cohort, policy)
    return queues


def _workloads(raw: list[Any]) -> list[PendingWorkload]:
    out = []
    for i, (queue, priority, day, pods, gpu, cpu, min_count) in enumerate(raw):
        requests = {k: v for k, v in ((GPU, gpu), (CPU, cpu)) if v}
        if min_count is not None and min_count >= pods:
            min_count = None
        podset = PodSetRequest("main", pods, requests, min_count=min_count)
        request = PlacementRequest(f"ns/w{i}", (podset,))
        out.append(
            PendingWorkload(f"ns/w{i}", queue, priority, f"2026-01-{day:02d}T00:00:00Z", request)
        )
    return out


def _placer(capacity: dict[str, int], bad: frozenset[str]):
    """A topology per flavor holding ``capacity`` pods, that never places the keys in ``bad``."""

    def place(flavor: str, request: PlacementRequest, held: Any) -> PlacementDecision:
        used = sum(
            p.count for r, d in held if d is not None and d.produced_by == flavor for p in r.podsets
        )
        pods = sum(p.count for p in request.podsets)
        if request.workload in bad or used + pods > capacity[flavor]:
            return PlacementDecision(False, message="does not fit", produced_by=flavor)
        return PlacementDecision(True, produced_by=flavor)

    return place


def _preempt(victims: int):
    """Plans for every other preemptor while the queue uses little (depends on usage)."""

    def plan(workload: PendingWorkload, queue: QueueSpec, usage: Usage, held: Any):
        if not queue.flavors or int(workload.key[4:]) % 2:
            return None
        used = sum(sum(v.values()) for (cq, _), v in usage.items() if cq == queue.name)
        if used > 12:
            return None
        index = int(workload.key[4:]) % victims
        return Preemption(
            queue.flavors[0].flavor, (Victim(f"ns/victim{index}", "InClusterQueue"),), None
        )

    return plan


def _run(queues, pending, usage, placer, preempt) -> tuple[Any, ...]:
    result = admission_cycle(queues, QueueLanes(pending), usage, placer, preempt)
    admitted = [
        (a.key, a.cluster_queue, a.flavor, dict(a.usage), a.request) for a in result.admitted
    ]
    return admitted, result.preemptions, result.pending, result.targeted, usage


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(QUEUE, min_size=3, max_size=3),
    st.lists(WORKLOAD, max_size=30),
    st.integers(0, 8),
    st.dictionaries(st.sampled_from(FLAVORS), st.integers(0, 12), min_size=2),
    st.frozensets(st.integers(0, 29).map(lambda i: f"ns/w{i}"), max_size=4),
    st.integers(1, 3),
    st.booleans(),
)
def test_passing_a_lane_whole_decides_as_walking_every_head(
    monkeypatch: pytest.MonkeyPatch,
    raw_queues: list[Any],
    raw_workloads: list[Any],
    used: int,
    capacity: dict[str, int],
    bad: frozenset[str],
    victims: int,
    preempting: bool,
) -> None:
    queues = _specs(raw_queues)
    pending = _workloads(raw_workloads)
    placer = _placer(capacity, bad)
    preempt = _preempt(victims) if preempting else None

    def usage() -> Usage:
        return {("cq-a", "f1"): {GPU: used}, ("cq-b", "f2"): {GPU: used // 2, CPU: 1}}

    fast = _run(queues, pending, usage(), placer, preempt)
    with monkeypatch.context() as patched:
        patched.setattr(q, "_hopeless", lambda *args: False)
        slow = _run(queues, pending, usage(), placer, preempt)
    assert fast[0] == slow[0]  # admissions, in order, with flavors, usage and counts
    assert fast[1] == slow[1]  # preemptions
    assert fast[2] == slow[2]  # pending messages
    assert fast[3:] == slow[3:]


def test_the_reference_walks_every_head(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass is taken in the property's space (so the property compares something)."""
    queues = {"cq-a": QueueSpec("cq-a", "BestEffortFIFO", (FlavorQuota("f1", {GPU: 1}),))}
    pending = _workloads([("cq-a", 0, 1, 2, 1, 0, None)] * 3)
    taken: list[bool] = []
    real = q._hopeless

    def spy(*args: Any) -> bool:
        taken.append(real(*args))
        return taken[-1]

    monkeypatch.setattr(q, "_hopeless", spy)
    admission_cycle(queues, QueueLanes(pending), {}, lambda *a: None)
    assert taken == [True]
