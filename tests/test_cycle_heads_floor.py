"""admission/cycle.py: heads pushed on the heap with their floor (borrowing level 0) and ranked
only when they come up decide exactly what ranking every head at every pop decides
(tests/test_cycle_heads_exact.py's reference), with random usage already in the quota (queues
over their nominal quota, or over what their tree holds), a limit on the admissions (the
admitter's, which stops a cycle after a handful), and usage given back in the middle of a cycle
(a removal: ranks worked out before may fall); and a cycle that stops at its limit ranks only
the heads that came up, not every lane's."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topogate.admission import cycle as q
from topogate.admission.cycle import admission_cycle
from topogate.admission.lanes import PendingWorkload, QueueLanes
from topogate.admission.quota import CohortTree, FlavorQuota, QueueSpec, QuotaBook, Usage
from topogate.controllers import admitter as admitter_module
from topogate.kube.resources import WORKLOADS

from .test_cycle_heads_exact import (
    COHORT,
    COHORTS,
    CPU,
    FLAVORS,
    GPU,
    PARENTS,
    QUEUE,
    QUEUES,
    WORKLOAD,
    ReferenceHeads,
    _cohorts,
    _placer,
    _preempt,
    _specs,
    _workloads,
)
from .test_shells import Harness, workload

USAGE = st.dictionaries(
    st.tuples(st.sampled_from(QUEUES), st.sampled_from(FLAVORS)),
    st.fixed_dictionaries({GPU: st.integers(0, 8)}, optional={CPU: st.integers(0, 4)}),
    max_size=6,
)


def _run(
    heads: type,
    queues: Any,
    cohorts: Any,
    pending: list[PendingWorkload],
    usage: Usage,
    fair: bool,
    placer: Any,
    preempt: Any,
    limit: int | None,
    give: tuple[int, str] | None,
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    """One cycle with ``heads`` as the walk; ``give``: after every so many admissions, that
    queue gives back one of each resource it holds (a removal, as a hook giving quota back)."""
    used = {k: dict(v) for k, v in usage.items()}
    real, admitted = q._try, [0]

    def giving(workload: PendingWorkload, queue: QueueSpec, book: QuotaBook, *a: Any) -> Any:
        outcome = real(workload, queue, book, *a)
        if not isinstance(outcome, str):
            admitted[0] += 1
            if give is not None and admitted[0] % give[0] == 0:
                for (name, flavor), held in list(book.usage.items()):
                    if name == give[1]:
                        book.add(name, flavor, {r: -1 for r, a in held.items() if a > 0})
        return outcome

    with monkeypatch.context() as patched:
        patched.setattr(q, "_Heads", heads)
        patched.setattr(q, "_try", giving)
        result = admission_cycle(
            queues,
            QueueLanes(pending),
            used,
            placer,
            preempt,
            cohorts=cohorts,
            fair_sharing=fair,
            limit=limit,
        )
    admissions = [(a.key, a.cluster_queue, a.flavor, dict(a.usage)) for a in result.admitted]
    return admissions, result.preemptions, result.pending, result.limited, used


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(QUEUE, min_size=len(QUEUES), max_size=len(QUEUES)),
    st.lists(COHORT, min_size=len(COHORTS), max_size=len(COHORTS)),
    PARENTS,
    st.lists(WORKLOAD, max_size=50),
    USAGE,
    st.dictionaries(st.sampled_from(FLAVORS), st.integers(0, 14)),
    st.one_of(st.none(), st.integers(1, 6)),
    st.one_of(st.none(), st.tuples(st.integers(1, 4), st.sampled_from(QUEUES))),
    st.booleans(),
    st.booleans(),
)
def test_floor_pushed_heads_decide_as_ranking_every_head(
    monkeypatch: pytest.MonkeyPatch,
    raw_queues: list[Any],
    raw_cohorts: list[Any],
    parents: tuple[bool, bool, bool],
    raw_workloads: list[Any],
    usage: Usage,
    capacity: dict[str, int],
    limit: int | None,
    give: tuple[int, str] | None,
    preempting: bool,
    fair: bool,
) -> None:
    queues = _specs(raw_queues)
    cohorts = _cohorts(raw_cohorts, parents)
    pending = _workloads(raw_workloads)
    placer = _placer(capacity, frozenset())
    preempt = _preempt if preempting else None
    runs = [
        _run(h, queues, cohorts, pending, usage, fair, placer, preempt, limit, give, monkeypatch)
        for h in (q._Heads, ReferenceHeads)
    ]
    assert runs[0] == runs[1]


def test_a_cycle_stopped_at_its_limit_ranks_only_the_heads_that_came_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1,000 queues in one cohort, each past its nominal quota (its head would borrow) but for
    the first few; a cycle limited to two admissions works out the borrowing level of a few
    heads, not of every lane's (that was most of a cycle's cost at 1,000 queues)."""
    quota = (FlavorQuota("f1", {GPU: 1}),)
    names = [f"cq-{i:04d}" for i in range(1000)]
    queues = {n: QueueSpec(n, "BestEffortFIFO", quota, "c") for n in names}
    usage: Usage = {(n, "f1"): {GPU: 1} for n in names[3:]}
    pending = [
        PendingWorkload(f"{n}/w", n, 0, "2026-01-01T00:00:00Z", w.request)
        for n, w in zip(names, _workloads([("cq-0", 0, 1, 1, 1, 0, None)]) * 1000, strict=True)
    ]
    calls = [0]
    real = QuotaBook.borrows

    def counted(self: QuotaBook, *a: Any) -> int:
        calls[0] += 1
        return real(self, *a)

    monkeypatch.setattr(QuotaBook, "borrows", counted)
    result = admission_cycle(queues, QueueLanes(pending), usage, lambda *a: None, limit=2)
    assert [a.cluster_queue for a in result.admitted] == names[:2]
    assert result.limited
    assert calls[0] <= 4


# A plainer shape, where usage given back often lowers a head ranked before: queues in one flat
# cohort (or none) with one flavor, usage over or under each one's nominal quota, every
# placement fitting.
PLAIN_QUEUES = [f"p{i}" for i in range(5)]


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.booleans(), st.integers(0, 5)),
        min_size=len(PLAIN_QUEUES),
        max_size=len(PLAIN_QUEUES),
    ),
    st.lists(
        st.tuples(st.sampled_from(PLAIN_QUEUES), st.integers(0, 1), st.integers(1, 9)),
        max_size=30,
    ),
    st.one_of(st.none(), st.integers(1, 8)),
    st.one_of(st.none(), st.tuples(st.integers(1, 3), st.sampled_from(PLAIN_QUEUES))),
)
def test_floor_pushed_heads_after_usage_given_back(
    monkeypatch: pytest.MonkeyPatch,
    raw_queues: list[tuple[int, bool, int]],
    raw_workloads: list[tuple[str, int, int]],
    limit: int | None,
    give: tuple[int, str] | None,
) -> None:
    queues, usage = {}, {}
    for name, (nominal, in_cohort, used) in zip(PLAIN_QUEUES, raw_queues, strict=True):
        flavor = (FlavorQuota("f1", {GPU: nominal}),)
        queues[name] = QueueSpec(name, "BestEffortFIFO", flavor, "c" if in_cohort else None)
        usage[(name, "f1")] = {GPU: used}
    pending = _workloads([(n, p, day, 1, 1, 0, None) for n, p, day in raw_workloads])
    runs = [
        _run(h, queues, {}, pending, usage, False, lambda *a: None, None, limit, give, monkeypatch)
        for h in (q._Heads, ReferenceHeads)
    ]
    assert runs[0] == runs[1]


def test_lanes_by_name_pair_each_lane_in_name_order() -> None:
    """QueueLanes.by_name, which the cycle reads every lane through: each queue with its lane,
    in name order, and none whose lane was emptied."""
    lanes = QueueLanes(_workloads([(n, 0, d, 1, 1, 0, None) for n, d in [("p2", 1), ("p0", 2)]]))
    lanes.put(_workloads([("p1", 0, 3, 1, 1, 0, None)] * 3)[2])
    lanes.discard("ns/w1")
    assert [(n, list(lane)) for n, lane in lanes.by_name()] == [
        (n, list(lanes.lane(n))) for n in ["p1", "p2"]
    ]
    assert lanes.names() == ["p1", "p2"]


async def test_the_admitter_builds_the_cohort_tree_once_per_catalog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cohort tree depends on the catalog's quotas only: cycle after cycle on one catalog
    reads the tree built for it (the cycle builds none), and another catalog gets its own."""
    built: list[CohortTree] = []

    class Counted(CohortTree):
        def __init__(self, *a: Any) -> None:
            super().__init__(*a)
            built.append(self)

    monkeypatch.setattr(admitter_module, "CohortTree", Counted)
    monkeypatch.setattr(q, "CohortTree", Counted)
    h = Harness()
    admitter, events = h.admitter()
    for name in ("first", "second"):
        h.kube.seed(WORKLOADS, workload(name, count=1, gpus=1))
        h.deliver()
        assert admitter.decide()
        await admitter.settle()
    assert admitter.cycles == 2
    assert len(built) == 1
    catalog = h.state.catalogs.catalog()
    assert admitter._cohort_tree(catalog) is built[0]
    other = dataclasses.replace(catalog, queues=dict(catalog.queues))
    assert admitter._cohort_tree(other) is not built[0]
    assert len(built) == 2
    await events.drain()
