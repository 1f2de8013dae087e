"""admission/lanes.py QueueLanes: the lanes kept in order across events equal a sort from
scratch (property), and the cycle decides the same on kept lanes as on a plain list."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.kit import podset
from topogate.admission.cycle import admission_cycle
from topogate.admission.lanes import PendingWorkload, QueueLanes, order
from topogate.admission.quota import FlavorQuota, QueueSpec, QuotaBook, Usage
from topogate.admission.request import PlacementRequest

GPU = "example.com/gpu"
KEYS = [f"ns/w{i}" for i in range(8)]
QUEUES = ["cq-a", "cq-b", "cq-c"]


def _workload(key: str, queue: str, priority: int, day: int, pods: int) -> PendingWorkload:
    request = PlacementRequest(key, (podset(pods, gpu=1, required=None),))
    return PendingWorkload(key, queue, priority, f"2026-01-{day:02d}T00:00:00Z", request)


# An event: put a workload (new, or a new version of one: another queue, priority, creation
# time or size), or discard the one of a key.
Event = tuple[str, PendingWorkload | None]
PUT = st.builds(
    _workload,
    st.sampled_from(KEYS),
    st.sampled_from(QUEUES),
    st.integers(-2, 2),
    st.integers(1, 4),
    st.integers(1, 3),
).map(lambda workload: (workload.key, workload))
DISCARD = st.sampled_from(KEYS).map(lambda key: (key, None))
EVENTS = st.lists(st.one_of(PUT, DISCARD), max_size=40)


def _replay(lanes: QueueLanes, events: Sequence[Event]) -> dict[str, PendingWorkload]:
    """Apply the events to ``lanes``; the workloads that should be there, by key."""
    current: dict[str, PendingWorkload] = {}
    for key, workload in events:
        if workload is not None:
            lanes.put(workload)
            current[key] = workload
        else:
            lanes.discard(key)
            current.pop(key, None)
    return current


def _from_scratch(current: dict[str, PendingWorkload]) -> dict[str, list[PendingWorkload]]:
    by_queue: dict[str, list[PendingWorkload]] = {}
    for workload in current.values():
        by_queue.setdefault(workload.cluster_queue, []).append(workload)
    return {name: order(workloads) for name, workloads in sorted(by_queue.items())}


def _kept(lanes: QueueLanes) -> dict[str, list[PendingWorkload]]:
    return {name: list(lanes.lane(name)) for name in lanes.names()}


@settings(max_examples=300, deadline=None)
@given(EVENTS)
def test_lanes_kept_across_events_equal_a_sort_from_scratch(events: list[Event]) -> None:
    lanes = QueueLanes()
    current = _replay(lanes, events)
    assert _kept(lanes) == _from_scratch(current)
    assert len(lanes) == len(current)
    assert all(lanes.get(key) == workload for key, workload in current.items())
    # What a cycle asks of a lane as a whole is kept too: its shapes, and none shrinks here.
    for name in QUEUES:
        shapes = {w.shape for w in current.values() if w.cluster_queue == name}
        assert set(lanes.shapes(name)) == shapes
        assert lanes.shrinkable(name) == 0


class _DropsUpdates(QueueLanes):
    """A broken keeper: a new version of a workload already held is not moved."""

    def put(self, workload: PendingWorkload) -> None:
        if self.get(workload.key) is None:
            super().put(workload)


def test_the_property_catches_a_dropped_update() -> None:
    found: list[list[Event]] = []

    @settings(max_examples=300, deadline=None, database=None)
    @given(EVENTS)
    def check(events: list[Event]) -> None:
        lanes = _DropsUpdates()
        current = _replay(lanes, events)
        if _kept(lanes) != _from_scratch(current):
            found.append(events)

    check()
    assert found, "dropping updates went unnoticed"


def test_a_cycle_on_kept_lanes_decides_as_on_a_list() -> None:
    queues = {
        name: QueueSpec(name, "BestEffortFIFO", (FlavorQuota("f", {GPU: 6}),)) for name in QUEUES
    }
    pending = [_workload(f"ns/w{i}", QUEUES[i % 3], i % 2, 1 + i % 5, 1 + i % 4) for i in range(30)]
    # The lanes' history differs from the list: older versions of workloads (other queues,
    # priorities, sizes) and workloads since gone, put in another order first.
    lanes = QueueLanes()
    for i, workload in enumerate(pending):
        lanes.put(_workload(workload.key, QUEUES[(i + 1) % 3], 1 - i % 2, 9, 4))
    for i in range(5):
        lanes.put(_workload(f"ns/gone{i}", QUEUES[i % 3], 5, 1, 1))
    for workload in reversed(pending):
        lanes.put(workload)
    for i in range(5):
        lanes.discard(f"ns/gone{i}")

    def quota_only(flavor: str, request: PlacementRequest, held: object) -> None:
        return None

    kept = admission_cycle(queues, lanes, {}, quota_only)
    plain = admission_cycle(queues, pending, {}, quota_only)
    assert [a.key for a in kept.admitted] == [a.key for a in plain.admitted]
    assert kept.pending == plain.pending
    assert len(lanes) == 30  # the cycle walks the lanes, it does not empty them


def _every_head(
    queues: dict[str, QueueSpec], pending: list[PendingWorkload], usage: Usage
) -> tuple[list[str], dict[str, str], dict[str, int]]:
    """The cycle as it was before lanes were kept: every workload popped through the heads
    one at a time (quota only), for comparison; also the quota each queue has left after."""
    book = QuotaBook(queues, usage)
    lanes = {name: order([w for w in pending if w.cluster_queue == name]) for name in queues}
    admitted: list[str] = []
    refused: dict[str, str] = {}
    blocked: set[str] = set()
    while any(lanes.values()):

        def rank(name: str) -> tuple[int, int, str, str, str]:
            head = lanes[name][0]
            borrows = book.borrows(queues[name], head.demand())
            return (borrows, -head.priority, head.created, name, head.key)

        name = min((n for n in lanes if lanes[n]), key=rank)
        workload = lanes[name].pop(0)
        if name in blocked:
            refused[workload.key] = "blocked"
            continue
        fits = next(
            (
                f
                for f in queues[name].flavors
                if set(workload.demand()) <= set(f.nominal)
                and all(
                    a <= book.available(queues[name], f, r) for r, a in workload.demand().items()
                )
            ),
            None,
        )
        if fits is None:
            refused[workload.key] = "quota"
            if queues[name].strategy == "StrictFIFO":
                blocked.add(name)
            continue
        admitted.append(workload.key)
        book.add(name, fits.flavor, workload.demand())
    left = {name: max(0, book.available(q, q.flavors[0], GPU)) for name, q in queues.items()}
    return admitted, refused, left


QUEUE_SPECS = st.lists(
    st.tuples(
        st.sampled_from(["BestEffortFIFO", "StrictFIFO"]),
        st.integers(0, 8),
        st.one_of(st.none(), st.integers(0, 8)),
    ),
    min_size=3,
    max_size=3,
)
WORKLOADS = st.lists(
    st.tuples(st.sampled_from(QUEUES), st.integers(0, 2), st.integers(1, 5), st.integers(1, 4)),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(QUEUE_SPECS, WORKLOADS, st.integers(0, 6))
def test_passing_over_hopeless_lanes_admits_what_trying_every_head_admits(
    specs: list[tuple[str, int, int | None]],
    shapes: list[tuple[str, int, int, int]],
    used: int,
) -> None:
    queues = {
        name: QueueSpec(
            name,
            strategy,
            (
                FlavorQuota(
                    "f",
                    {GPU: nominal},
                    {GPU: borrowing} if borrowing is not None else {},
                ),
            ),
            cohort="c",
        )
        for name, (strategy, nominal, borrowing) in zip(QUEUES, specs, strict=True)
    }
    pending = [
        _workload(f"ns/w{i}", queue, priority, day, pods)
        for i, (queue, priority, day, pods) in enumerate(shapes)
    ]

    def quota_only(flavor: str, request: PlacementRequest, held: object) -> None:
        return None

    usage: Usage = {("cq-a", "f"): {GPU: used}}
    result = admission_cycle(queues, QueueLanes(pending), usage, quota_only)
    admitted, refused, left = _every_head(queues, pending, {("cq-a", "f"): {GPU: used}})
    assert [a.key for a in result.admitted] == admitted
    assert set(result.pending) == set(refused)
    by_key = {w.key: w for w in pending}
    for key, why in refused.items():  # a StrictFIFO queue's rest waits behind its head
        message = result.pending[key]
        assert ("StrictFIFO" in message) == (why == "blocked")
        if why == "quota":  # its own shape's answer, against the quota the cycle left
            workload = by_key[key]
            needs, free = workload.demand()[GPU], left[workload.cluster_queue]
            assert message == (
                f"insufficient quota for {GPU} in flavor f: needs {needs}, {free} available"
            )


def test_a_lane_with_a_shrinkable_workload_is_never_passed_whole() -> None:
    """A Job that may run with fewer pods can fit where its whole gang is refused: its lane
    is walked to it. The count of such workloads follows puts and discards."""
    queues = {"cq-a": QueueSpec("cq-a", "BestEffortFIFO", (FlavorQuota("f", {GPU: 2}),))}
    big = _workload("ns/big", "cq-a", 1, 1, 4)
    shrinks = _workload("ns/shrinks", "cq-a", 0, 2, 4)
    podsets = (dataclasses.replace(shrinks.request.podsets[0], min_count=1),)
    shrinks = dataclasses.replace(
        shrinks, request=dataclasses.replace(shrinks.request, podsets=podsets)
    )
    lanes = QueueLanes([big, shrinks])
    assert lanes.shrinkable("cq-a") == 1

    def quota_only(flavor: str, request: PlacementRequest, held: object) -> None:
        return None

    result = admission_cycle(queues, lanes, {}, quota_only)
    assert [(a.key, a.usage) for a in result.admitted] == [("ns/shrinks", {GPU: 2})]
    lanes.discard("ns/shrinks")
    assert lanes.shrinkable("cq-a") == 0
