"""admission/queues.py QueueLanes: the lanes kept in order across events equal a sort from
scratch (property), and the cycle decides the same on kept lanes as on a plain list."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.kit import podset
from topogate.admission.queues import (
    FlavorQuota,
    PendingWorkload,
    QueueLanes,
    QueueSpec,
    admission_cycle,
    order,
)
from topogate.admission.request import PlacementRequest

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
        name: QueueSpec(name, "BestEffortFIFO", (FlavorQuota("f", {"example.com/gpu": 6}),))
        for name in QUEUES
    }
    pending = [_workload(f"ns/w{i}", QUEUES[i % 3], i % 2, 1 + i % 5, 1 + i % 4) for i in range(30)]
    lanes = QueueLanes()
    for workload in reversed(pending):
        lanes.put(workload)

    def quota_only(flavor: str, request: PlacementRequest, held: object) -> None:
        return None

    kept = admission_cycle(queues, lanes, {}, quota_only)
    plain = admission_cycle(queues, pending, {}, quota_only)
    assert [a.key for a in kept.admitted] == [a.key for a in plain.admitted]
    assert kept.pending == plain.pending
    assert len(lanes) == 30  # the cycle walks the lanes, it does not empty them
