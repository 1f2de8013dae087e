"""The pending workloads of each ClusterQueue in queue order (priority, then creation time),
kept sorted as workloads come, change and go. Pure and synchronous.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from sortedcontainers import SortedKeyList

from .partial import can_shrink
from .request import PlacementRequest

# A workload's total requests per resource as a sorted tuple: a quota answer holds for every
# workload of one shape in a queue.
Shape = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class PendingWorkload:
    key: str  # namespace/name
    cluster_queue: str
    priority: int
    created: str  # RFC 3339; sorts in time order
    request: PlacementRequest
    # The whole gang's requests per resource, and the same as a sorted tuple (its shape: a
    # quota answer holds for every workload of one shape in a queue). Worked out once: a
    # cycle asks for them for every workload it looks at.
    _demand: dict[str, int] = field(init=False, repr=False, compare=False)
    shape: tuple[tuple[str, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        total: dict[str, int] = {}
        for podset in self.request.podsets:
            for name, amount in podset.requests.items():
                total[name] = total.get(name, 0) + amount * podset.count
        object.__setattr__(self, "_demand", total)
        object.__setattr__(self, "shape", tuple(sorted(total.items())))

    def demand(self) -> Mapping[str, int]:
        """Total requests of the whole gang, per resource."""
        return self._demand


def queue_order(workload: PendingWorkload) -> tuple[int, str, str]:
    """A ClusterQueue's order: higher priority first, then older, then by key (Kueue's
    priority, then creation time; the key makes it total)."""
    return (-workload.priority, workload.created, workload.key)


def order(workloads: Sequence[PendingWorkload]) -> list[PendingWorkload]:
    """Queue order: higher priority first, then older, then by key (deterministic)."""
    return sorted(workloads, key=queue_order)


class QueueLanes:
    """The pending workloads of each ClusterQueue, each lane kept in :func:`queue_order` as
    workloads come, change and go: a cycle walks the lanes from their heads instead of
    sorting every pending workload again (O(log n) per change)."""

    def __init__(self, workloads: Iterable[PendingWorkload] = ()) -> None:
        self._lanes: dict[str, SortedKeyList[PendingWorkload, tuple[int, str, str]]] = {}
        self._entries: dict[str, PendingWorkload] = {}
        # Per lane, what a cycle asks of it as a whole: its shapes (one workload of each,
        # counted) and how many of it may shrink; across lanes, the topologies named.
        self._shapes: dict[str, Counter[tuple[tuple[str, int], ...]]] = {}
        self._shrinkable: Counter[str] = Counter()
        self._topologies: Counter[str] = Counter()
        self._feeds: list[set[str]] = []  # lane names changed, one set per reader
        for workload in workloads:
            self.put(workload)

    def put(self, workload: PendingWorkload) -> None:
        """Add the workload, or move it to where its new version belongs."""
        self.discard(workload.key)
        lane = self._lanes.get(workload.cluster_queue)
        if lane is None:
            lane = self._lanes[workload.cluster_queue] = SortedKeyList(key=queue_order)
        lane.add(workload)
        self._entries[workload.key] = workload
        for feed in self._feeds:
            feed.add(workload.cluster_queue)
        self._shapes.setdefault(workload.cluster_queue, Counter())[workload.shape] += 1
        if can_shrink(workload.request):
            self._shrinkable[workload.cluster_queue] += 1
        if workload.request.topology is not None:
            self._topologies[workload.request.topology] += 1

    def discard(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        name = entry.cluster_queue
        lane = self._lanes[name]
        lane.remove(entry)
        for feed in self._feeds:
            feed.add(name)
        if not lane:
            del self._lanes[name]
        shapes = self._shapes[name]
        shapes[entry.shape] -= 1
        if not shapes[entry.shape]:
            del shapes[entry.shape]
            if not shapes:
                del self._shapes[name]
        if can_shrink(entry.request):
            self._shrinkable[name] -= 1
            if not self._shrinkable[name]:
                del self._shrinkable[name]
        if entry.request.topology is not None:
            self._topologies[entry.request.topology] -= 1
            if not self._topologies[entry.request.topology]:
                del self._topologies[entry.request.topology]

    def changes(self) -> set[str]:
        """A feed for one reader: the set fills with the name of every lane a workload
        joined or left (the reader empties it as it takes them)."""
        feed = set(self._lanes)
        self._feeds.append(feed)
        return feed

    def shapes(self, name: str) -> Iterable[tuple[tuple[str, int], ...]]:
        """The shapes (total requests per resource) in the queue's lane."""
        return self._shapes.get(name, {}).keys()

    def shrinkable(self, name: str) -> int:
        """How many of the queue's lane may be admitted with fewer pods."""
        return self._shrinkable.get(name, 0)

    def topologies(self) -> set[str]:
        """The topologies the pending workloads name."""
        return set(self._topologies)

    def get(self, key: str) -> PendingWorkload | None:
        return self._entries.get(key)

    def names(self) -> list[str]:
        """The ClusterQueues with pending workloads, in name order."""
        return sorted(self._lanes)

    def by_name(self) -> list[tuple[str, Sequence[PendingWorkload]]]:
        """Each ClusterQueue with pending workloads and its lane, in name order (one sort
        of the pairs: a cycle reads every lane)."""
        return sorted(self._lanes.items())

    def lane(self, name: str) -> Sequence[PendingWorkload]:
        """The queue's pending workloads, head first."""
        return self._lanes.get(name) or ()

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[PendingWorkload]:
        return iter(self._entries.values())
