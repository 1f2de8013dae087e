"""Queue order and quota: which pending workloads an admission cycle admits, pure and synchronous.

The admitter's shell (watches, status writes) hands a cycle the ClusterQueues, the pending
workloads and the quota already in use; the cycle walks each queue in order (priority, then
creation time), checks quota per flavor, asks the placement core for a topology assignment and
admits the whole gang or nothing. StrictFIFO stops a queue at its first workload that cannot be
admitted; BestEffortFIFO lets later, smaller ones go by.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol

from sortedcontainers import SortedKeyList

from topogate.api.errors import InputError
from topogate.api.models import ClusterQueue
from topogate.api.podspec import Toleration
from topogate.api.quantity import QuantityError, format_units, to_units
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree

from .assignments import node_usage
from .exact import ExactBudget
from .gpuplace import taken_by
from .partial import can_shrink, largest_fit, with_counts
from .placement import place
from .request import ExactOutcome, PlacementDecision, PlacementRequest

if TYPE_CHECKING:
    from .preemption import Preemption

STRICT_FIFO = "StrictFIFO"

# (cluster queue, flavor) -> resource -> amount: quota is per ClusterQueue and flavor.
Usage = dict[tuple[str, str], dict[str, int]]
Held = list[tuple[PlacementRequest, PlacementDecision]]


NEVER = "Never"
LOWER_PRIORITY = "LowerPriority"
LOWER_OR_NEWER_EQUAL = "LowerOrNewerEqualPriority"
ANY = "Any"


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    """A ClusterQueue's ``spec.preemption`` (Kueue's fields and values)."""

    within_cluster_queue: str = NEVER
    reclaim_within_cohort: str = NEVER
    borrow_within_cohort: str = NEVER
    borrow_max_priority: int | None = None  # borrowWithinCohort.maxPriorityThreshold

    @property
    def enabled(self) -> bool:
        return self.within_cluster_queue != NEVER or self.reclaim_within_cohort != NEVER


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    flavor: str
    nominal: Mapping[str, int]  # covered resource -> quota (cache units)
    # In a cohort: resource -> limit; a resource not listed has no limit.
    borrowing: Mapping[str, int] = field(default_factory=dict)
    lending: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    strategy: str
    flavors: tuple[FlavorQuota, ...]  # in the order they are tried
    cohort: str | None = None
    preemption: PreemptionPolicy = PreemptionPolicy()

    @classmethod
    def from_model(cls, queue: ClusterQueue) -> QueueSpec:
        flavors = tuple(
            FlavorQuota(
                flavor.name,
                {r.name: to_units(r.name, r.nominal_quota) for r in flavor.resources},
                {
                    r.name: to_units(r.name, r.borrowing_limit)
                    for r in flavor.resources
                    if r.borrowing_limit is not None
                },
                {
                    r.name: to_units(r.name, r.lending_limit)
                    for r in flavor.resources
                    if r.lending_limit is not None
                },
            )
            for group in queue.spec.resource_groups
            for flavor in group.flavors
        )
        spec = queue.spec
        policy = PreemptionPolicy()
        if spec.preemption is not None:
            borrow = spec.preemption.borrow_within_cohort
            policy = PreemptionPolicy(
                spec.preemption.within_cluster_queue,
                spec.preemption.reclaim_within_cohort,
                borrow.policy if borrow is not None else NEVER,
                borrow.max_priority_threshold if borrow is not None else None,
            )
        return cls(queue.metadata.name, spec.queueing_strategy, flavors, spec.cohort_of, policy)


class QuotaBook:
    """Quota in use and available per (ClusterQueue, flavor, resource), cohorts included, by
    Kueue's rules (its pkg/cache/scheduler resource nodes, for cohorts without a parent):

    - a queue keeps ``nominal - lendingLimit`` to itself (its local quota; none without a
      lending limit) and puts the rest into its cohort's pool;
    - the pool is the sum of what the members put in; it is used by each member's usage
      beyond its local quota;
    - a queue may use its unused local quota plus what the pool has left, but no more than its
      nominal quota plus its borrowing limit;
    - usage above nominal quota is borrowed.
    """

    def __init__(self, queues: Mapping[str, QueueSpec], usage: Usage) -> None:
        self.queues = queues
        self.usage = usage  # updated in place by :meth:`add`
        self.changes = 0  # bumped by every :meth:`add`
        self._members: dict[str, list[QueueSpec]] = {}
        for queue in queues.values():
            if queue.cohort:
                self._members.setdefault(queue.cohort, []).append(queue)

    def _quota(self, queue: QueueSpec, flavor: str) -> FlavorQuota | None:
        return next((f for f in queue.flavors if f.flavor == flavor), None)

    def _local(self, quota: FlavorQuota, resource: str) -> int:
        if resource not in quota.lending:
            return 0
        return max(0, quota.nominal.get(resource, 0) - quota.lending[resource])

    def used(self, queue: str, flavor: str, resource: str) -> int:
        return self.usage.get((queue, flavor), {}).get(resource, 0)

    def _pool_left(self, cohort: str, flavor: str, resource: str) -> int:
        size = used = 0
        for member in self._members.get(cohort, ()):
            quota = self._quota(member, flavor)
            if quota is None or resource not in quota.nominal:
                continue
            local = self._local(quota, resource)
            size += quota.nominal[resource] - local
            used += max(0, self.used(member.name, flavor, resource) - local)
        return size - used

    def available(self, queue: QueueSpec, quota: FlavorQuota, resource: str) -> int:
        """How much more of ``resource`` the queue may use in this flavor now."""
        nominal = quota.nominal.get(resource, 0)
        used = self.used(queue.name, quota.flavor, resource)
        if not queue.cohort:
            return nominal - used
        local = self._local(quota, resource)
        from_pool = self._pool_left(queue.cohort, quota.flavor, resource)
        if resource in quota.borrowing:
            in_pool = nominal - local
            used_in_pool = max(0, used - local)
            from_pool = min(from_pool, in_pool - used_in_pool + quota.borrowing[resource])
        return max(0, local - used) + from_pool

    def borrows(self, queue: QueueSpec, demand: Mapping[str, int]) -> bool:
        """Whether ``demand`` goes beyond the queue's nominal quota in the first flavor that
        covers it (Kueue orders such workloads after those that do not borrow)."""
        for quota in queue.flavors:
            if set(demand) <= set(quota.nominal):
                return any(
                    self.used(queue.name, quota.flavor, r) + a > quota.nominal[r]
                    for r, a in demand.items()
                )
        return False

    def borrowed(self, queue: QueueSpec, quota: FlavorQuota, resource: str) -> int:
        return max(
            0, self.used(queue.name, quota.flavor, resource) - quota.nominal.get(resource, 0)
        )

    def add(self, queue: str, flavor: str, amounts: Mapping[str, int]) -> None:
        self.changes += 1
        slot = self.usage.setdefault((queue, flavor), {})
        for resource, amount in amounts.items():
            slot[resource] = slot.get(resource, 0) + amount


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

    def lane(self, name: str) -> Sequence[PendingWorkload]:
        """The queue's pending workloads, head first."""
        return self._lanes.get(name) or ()

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[PendingWorkload]:
        return iter(self._entries.values())


class Placer(Protocol):
    """Places a request on a flavor's topology; ``held`` (earlier admissions of this cycle,
    with their requests) counts as used capacity."""

    def __call__(
        self, flavor: str, request: PlacementRequest, held: Held
    ) -> PlacementDecision | None:
        """None when the flavor has no topology (quota-only admission)."""


@dataclass(frozen=True, slots=True)
class Admitted:
    key: str
    cluster_queue: str
    flavor: str
    usage: Mapping[str, int]
    decision: PlacementDecision | None
    # Partial admission: the request with the counts admitted (None: the workload's own).
    request: PlacementRequest | None = None


Shape = tuple[tuple[str, int], ...]


@dataclass(slots=True)
class CycleResult:
    admitted: list[Admitted] = field(default_factory=list)
    # (preemptor key, the victims to evict so it can fit once they are gone)
    preemptions: list[tuple[str, Preemption]] = field(default_factory=list)
    targeted: set[str] = field(default_factory=set)  # victims of this cycle's preemptions
    # Why each workload waits (:attr:`pending`). Lanes passed whole are kept as (workloads,
    # words by shape) until read: a cycle with thousands waiting words them only if asked.
    messages: dict[str, str] = field(default_factory=dict)
    deferred: list[tuple[Sequence[PendingWorkload], Mapping[Shape, str]]] = field(
        default_factory=list
    )

    @property
    def pending(self) -> dict[str, str]:
        """key -> why it waits."""
        for workloads, words in self.deferred:
            self.messages.update((w.key, words[w.shape]) for w in workloads)
        self.deferred.clear()
        return self.messages


# Plans a preemption for a workload that does not fit (admission/preemption.py); the shell
# provides it with the running workloads and a simulation on its snapshot.
Preempt = Callable[["PendingWorkload", "QueueSpec", "Usage", "Held"], "Preemption | None"]


def order(workloads: Sequence[PendingWorkload]) -> list[PendingWorkload]:
    """Queue order: higher priority first, then older, then by key (deterministic)."""
    return sorted(workloads, key=queue_order)


def _quota_problem(
    book: QuotaBook, queue: QueueSpec, flavor: FlavorQuota, demand: Mapping[str, int]
) -> str:
    for name in sorted(demand):
        free = book.available(queue, flavor, name)
        if demand[name] > free:
            return (
                f"insufficient quota for {name} in flavor {flavor.flavor}: needs "
                f"{format_units(name, demand[name])}, {format_units(name, max(free, 0))} available"
            )
    return ""


def _quota_refusal(
    memo: dict[tuple[str, Shape], str], queue: QueueSpec, book: QuotaBook, shape: Shape
) -> str:
    """Why no flavor of the queue has the quota for a demand of this shape (the words
    :func:`_try` would use), or "" when one has: then the placement decides. Memoised by
    (queue, shape) while the quota in use is unchanged (the caller clears the memo)."""
    key = (queue.name, shape)
    found = memo.get(key)
    if found is not None:
        return found
    demand = dict(shape)
    reasons: list[str] = []
    for flavor in queue.flavors:
        uncovered = sorted(set(demand) - set(flavor.nominal))
        if uncovered:
            reasons.append(f"flavor {flavor.flavor} does not cover {', '.join(uncovered)}")
            continue
        problem = _quota_problem(book, queue, flavor, demand)
        if not problem:
            return ""
        reasons.append(problem)
    memo[key] = "; ".join(reasons) or f"ClusterQueue {queue.name} has no flavors"
    return memo[key]


def _try(
    workload: PendingWorkload,
    queue: QueueSpec,
    book: QuotaBook,
    placer: Placer,
    held: Held,
) -> Admitted | str:
    demand = workload.demand()
    reasons: list[str] = []
    for flavor in queue.flavors:
        uncovered = sorted(set(demand) - set(flavor.nominal))
        if uncovered:
            reasons.append(f"flavor {flavor.flavor} does not cover {', '.join(uncovered)}")
            continue
        problem = _quota_problem(book, queue, flavor, demand)
        if problem:
            reasons.append(problem)
            continue
        decision = placer(flavor.flavor, workload.request, held)
        if decision is not None and not decision.fits:
            reasons.append(f"flavor {flavor.flavor}: {decision.message}")
            continue
        return Admitted(workload.key, queue.name, flavor.flavor, demand, decision)
    return "; ".join(reasons) or f"ClusterQueue {queue.name} has no flavors"


_KEY = attrgetter("key")


def _same_words(why: str) -> Mapping[Shape, str]:
    """The same words for every shape."""
    return defaultdict(lambda: why)


class _Heads:
    """The queues' lanes, each walked from its head, and the next head to try across them.

    Each lane's head is ranked once, and again only after the quota in use changed (an
    admission or a preemptor's reservation); whether a head would borrow is worked out once
    per (queue, shape) between such changes. The lanes are not changed: the walk is a cursor.

    The rest of a blocked StrictFIFO lane is passed over at once (:meth:`block`), and so is
    the rest of a lane in which every shape is refused for quota (:meth:`pass_rest`): each of
    them would be refused without side effects, and a lane holding only such refusals does
    not change the order in which the other lanes' heads come up. (Passing over only the rest
    of one refused shape would not be exact: a refused head holds its lane back, so the order
    of the other lanes' admissions depends on its rank.)
    """

    def __init__(
        self,
        queues: Mapping[str, QueueSpec],
        book: QuotaBook,
        lanes: QueueLanes,
        result: CycleResult,
    ) -> None:
        self.queues, self.book, self.lanes, self.result = queues, book, lanes, result
        self.heads: dict[str, PendingWorkload] = {}
        self._walks: dict[str, Iterator[PendingWorkload]] = {}
        # The lanes' heads by rank (a heap, built again when the quota in use changed).
        self._ranked: list[tuple[tuple[bool, int, str, str, str], str]] = []
        self._borrows: dict[tuple[str, tuple[tuple[str, int], ...]], bool] = {}
        self._booked = -1
        self._popped: str | None = None  # the lane to move on before the next pop
        self._blocked: dict[str, str] = {}
        self._taken: dict[str, int] = {}  # per lane, how many the walk has reached

    def fill(self) -> None:
        for name in self.lanes.names():
            lane = self.lanes.lane(name)
            if name not in self.queues:
                missing = _same_words(f"ClusterQueue {name} does not exist")
                self.result.deferred.append((list(lane), missing))
                continue
            walk = iter(lane)
            self._walks[name] = walk
            self._taken[name] = 1
            self.heads[name] = next(walk)

    def block(self, name: str, why: str) -> None:
        """A StrictFIFO queue waits behind its head: the rest of it waits too."""
        self._blocked[name] = why

    def pass_rest(self, name: str) -> Sequence[PendingWorkload]:
        """Take the queue just popped off the walk: the rest of its lane, for the caller."""
        assert self._popped == name
        self._popped = None
        del self.heads[name], self._walks[name]
        return self._rest(name)

    def _rest(self, name: str) -> Sequence[PendingWorkload]:
        return self.lanes.lane(name)[self._taken[name] :]

    def _rank(self, name: str) -> tuple[bool, int, str, str, str]:
        head = self.heads[name]
        borrows = self._borrows.get((name, head.shape))
        if borrows is None:
            borrows = self.book.borrows(self.queues[name], head.demand())
            self._borrows[(name, head.shape)] = borrows
        return (borrows, -head.priority, head.created, name, head.key)

    def _advance(self, name: str) -> None:
        """Move the lane past the head just popped."""
        why = self._blocked.get(name)
        if why is None:
            following = next(self._walks[name], None)
            if following is not None:
                self._taken[name] += 1
                self.heads[name] = following
                return
        else:
            self.result.deferred.append((self._rest(name), _same_words(why)))
        del self.heads[name], self._walks[name]

    def pop(self) -> tuple[str, PendingWorkload] | None:
        """The next head to try, by :func:`admission_cycle`'s rule (None: all tried)."""
        moved, self._popped = self._popped, None
        if moved is not None:
            self._advance(moved)
        if not self.heads:
            return None
        if self.book.changes != self._booked:  # every head is ranked again
            self._borrows.clear()
            self._booked = self.book.changes
            self._ranked = [(self._rank(name), name) for name in self.heads]
            heapq.heapify(self._ranked)
        elif moved is not None and moved in self.heads:
            heapq.heappush(self._ranked, (self._rank(moved), moved))
        _, name = heapq.heappop(self._ranked)
        self._popped = name
        return name, self.heads[name]


def admission_cycle(
    queues: Mapping[str, QueueSpec],
    pending: Sequence[PendingWorkload] | QueueLanes,
    usage: Usage,
    placer: Placer,
    preempt: Preempt | None = None,
) -> CycleResult:
    """Admit what fits; ``usage`` is updated with the admissions. ``pending`` is a list, or
    the lanes a caller keeps in order across cycles (it is not changed).

    Each queue is walked in its own order (:func:`order`); across queues the next workload
    tried is the best of the queues' heads, by Kueue's rule: one that fits within its queue's
    nominal quota before one that would borrow, then higher priority, then older (then queue
    and key, for determinism). So a lender's job goes before a borrower's requeued one, and
    reclaiming never ping-pongs. Queues share physical capacity: every admission's placement
    is passed to later placements of the same cycle as held capacity, and quota is the
    queue's own or its cohort's (:class:`QuotaBook`).

    A workload refused for quota alone is told the quota the cycle leaves (not what was left
    when its turn came), so a lane found hopeless can be passed whole (:func:`_hopeless`) and
    the cycle costs what it admits and tries, not what waits.
    """
    result = CycleResult()
    book = QuotaBook(queues, usage)
    held: Held = []
    lanes = pending if isinstance(pending, QueueLanes) else QueueLanes(pending)
    heads = _Heads(queues, book, lanes, result)
    heads.fill()
    # Queues whose first workload that does not fit looked for victims this cycle: the
    # search is the costly part, and the later ones are of lower or equal rank.
    searched: set[str] = set()
    # Quota refusals by (queue, demand) while the quota in use is unchanged: thousands of
    # pending workloads come in a few shapes, and each refusal was worked out and worded anew.
    refusals: dict[tuple[str, Shape], str] = {}
    refused_at = 0
    # Refused for quota and nothing else: worded at the end, against the quota the cycle
    # leaves (so the words do not depend on when in the walk a workload came up).
    for_quota: list[tuple[QueueSpec, Sequence[PendingWorkload]]] = []
    hopeful: dict[str, int] = {}  # queue -> the quota state in which its lane was not hopeless
    while (popped := heads.pop()) is not None:
        name, workload = popped
        if book.changes != refused_at:
            refusals.clear()
            refused_at = book.changes
        queue = queues[name]
        quota = _quota_refusal(refusals, queue, book, workload.shape)
        outcome = quota or _try(workload, queue, book, placer, held)
        if isinstance(outcome, str):
            planned = len(result.preemptions)
            if name in searched:  # one preemption search per queue per cycle, as Kueue's
                why = outcome  # scheduler takes one head per queue
            else:
                searched.add(name)
                why = _maybe_preempt(result, workload, queue, outcome, book, held, preempt)
            # As Kueue: fewer pods only when preempting cannot make room for all of them.
            outcome = why
            if len(result.preemptions) == planned and can_shrink(workload.request):
                outcome = _try_partial(workload, queue, book, placer, held, refusals) or (
                    f"{why}; {_no_partial(workload.request)}"
                )
            if isinstance(outcome, str):
                if quota and outcome == quota:
                    for_quota.append((queue, (workload,)))
                else:
                    result.messages[workload.key] = outcome
                if queue.strategy == STRICT_FIFO:
                    heads.block(name, f"waiting behind {workload.key} (StrictFIFO)")
                elif _hopeless(lanes, queue, book, refusals, hopeful):
                    for_quota.append((queue, heads.pass_rest(name)))
                continue
        result.admitted.append(outcome)
        book.add(name, outcome.flavor, outcome.usage)
        if outcome.decision is not None:
            held.append((outcome.request or workload.request, outcome.decision))
    _word_quota_refusals(result, for_quota, lanes, book)
    return result


def _word_quota_refusals(
    result: CycleResult,
    for_quota: Iterable[tuple[QueueSpec, Sequence[PendingWorkload]]],
    lanes: QueueLanes,
    book: QuotaBook,
) -> None:
    """The words for those refused for quota alone, against the quota left now, per shape
    (each workload is told when :attr:`CycleResult.pending` is read)."""
    refusals: dict[tuple[str, Shape], str] = {}
    words: dict[str, dict[Shape, str]] = {}
    for queue, refused in for_quota:
        if queue.name not in words:
            shapes = lanes.shapes(queue.name)
            words[queue.name] = {s: _quota_refusal(refusals, queue, book, s) for s in shapes}
        result.deferred.append((refused, words[queue.name]))


def _hopeless(
    lanes: QueueLanes,
    queue: QueueSpec,
    book: QuotaBook,
    refusals: dict[tuple[str, Shape], str],
    hopeful: dict[str, int],
) -> bool:
    """Whether every workload left in the queue's lane is refused for quota now, and so for
    the rest of the cycle (the quota in use only grows within one), with nothing else to try:
    none may shrink, and its one preemption search of the cycle is done. Such a lane is
    passed at once; what it would have refused has no effect on the other lanes' order."""
    if lanes.shrinkable(queue.name) or hopeful.get(queue.name) == book.changes:
        return False
    if all(_quota_refusal(refusals, queue, book, shape) for shape in lanes.shapes(queue.name)):
        return True
    hopeful[queue.name] = book.changes  # asked again only once the quota in use changed
    return False


def _no_partial(request: PlacementRequest) -> str:
    minima = ", ".join(
        f"{p.name} {p.min_count}" for p in request.podsets if p.min_count is not None
    )
    return f"no smaller count down to minCount ({minima}) fits either"


def _try_partial(
    workload: PendingWorkload,
    queue: QueueSpec,
    book: QuotaBook,
    placer: Placer,
    held: Held,
    refusals: dict[tuple[str, Shape], str],
) -> Admitted | None:
    """The largest counts down to the PodSets' minCount that fit quota and topology
    (:func:`largest_fit`, Kueue's search), admitted with those counts; None when none do."""

    def fits(request: PlacementRequest) -> Admitted | None:
        smaller = dataclasses.replace(workload, request=request)
        if _quota_refusal(refusals, queue, book, smaller.shape):
            return None
        outcome = _try(smaller, queue, book, placer, held)
        return None if isinstance(outcome, str) else outcome

    # Quota only grows with the counts: when even the minima are refused, every count the
    # search could try is, so a long lane of such Jobs costs one memo look-up each.
    floor = with_counts(
        workload.request,
        [p.count if p.min_count is None else p.min_count for p in workload.request.podsets],
    )
    if _quota_refusal(refusals, queue, book, dataclasses.replace(workload, request=floor).shape):
        return None
    found = largest_fit(workload.request, fits)
    if found is None:
        return None
    request, admitted = found
    return dataclasses.replace(admitted, request=request)


def _maybe_preempt(
    result: CycleResult,
    workload: PendingWorkload,
    queue: QueueSpec,
    why: str,
    book: QuotaBook,
    held: Held,
    preempt: Preempt | None,
) -> str:
    """The pending message; with a preemption plan, the plan is recorded and named in it.

    As in Kueue's scheduler, a preemptor then holds what it will use for the rest of the
    cycle (its quota, and its placement as capacity), so a later, lower workload cannot take
    what its victims free; this holds again every cycle until the victims are gone, so a
    requeued victim never slips back in ahead of its preemptor. A plan whose victims another
    preemptor of this cycle already targets waits for that one.
    """
    if preempt is None or not queue.preemption.enabled:
        return why
    plan = preempt(workload, queue, book.usage, held)
    if plan is None:
        return why
    victims = {v.key for v in plan.victims}
    if victims & result.targeted:
        return f"{why}; waiting for another workload's preemption of the same workloads"
    result.targeted |= victims
    result.preemptions.append((workload.key, plan))
    book.add(queue.name, plan.flavor, workload.demand())
    if plan.decision is not None:
        held.append((workload.request, plan.decision))
    names = ", ".join(v.key for v in plan.victims)
    return (
        f"{why}; preempting {len(plan.victims)} workload(s) to make room ({names}): "
        "admitted once their pods are gone"
    )


@dataclass(frozen=True, slots=True)
class FlavorTopology:
    tree: DomainTree
    topology_name: str
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class SnapshotPlacer:
    """The usual Placer: the core on one snapshot, with earlier admissions held as usage."""

    snapshot: ClusterSnapshot
    flavors: Mapping[str, FlavorTopology]
    # (flavor, topology) for jobs that name their topology (KAI) instead of the flavor's.
    named: Mapping[tuple[str, str], FlavorTopology] = field(default_factory=dict)
    exact: ExactBudget | None = None  # the exact second pass's time per gang (None: off)
    # What the exact second pass did, per outcome, over this placer's placements (a metric).
    exact_outcomes: Counter[str] = field(default_factory=Counter)

    # (the cycle's held list, admissions applied, snapshot with them): `held` only grows
    # within a cycle, so each call adds the new admissions instead of summing all again.
    _held: list[tuple[Held, int, ClusterSnapshot]] = field(default_factory=list)

    def _holding(self, held: Held) -> ClusterSnapshot:
        done, snapshot = 0, self.snapshot
        if self._held and self._held[0][0] is held:
            _, done, snapshot = self._held[0]
        for earlier, decision in held[done:]:
            snapshot = snapshot.with_usage(node_usage(earlier, decision), taken_by([decision]))
        self._held[:] = [(held, len(held), snapshot)]
        return snapshot

    def without(
        self, per_node: Mapping[str, Mapping[str, int]], gpus: Mapping[str, Iterable[int]]
    ) -> SnapshotPlacer:
        """The same trees on the snapshot with this usage given back (preemption's what-if)."""
        return SnapshotPlacer(
            self.snapshot.without_usage(per_node, gpus),
            self.flavors,
            self.named,
            self.exact,
            self.exact_outcomes,
        )

    def __call__(
        self, flavor: str, request: PlacementRequest, held: Held
    ) -> PlacementDecision | None:
        if request.topology is not None:
            topology = self.named.get((flavor, request.topology))
            if topology is None:
                return PlacementDecision(
                    fits=False, message=f"topology {request.topology!r} does not exist"
                )
        else:
            topology = self.flavors.get(flavor)
        if topology is None:
            return None
        decision = place(
            topology.tree,
            self._holding(held),
            request,
            topology_name=topology.topology_name,
            flavor_tolerations=topology.tolerations,
            exact=self.exact,
        )
        if decision.exact is not ExactOutcome.NOT_RUN:
            self.exact_outcomes[decision.exact.value] += 1
        return decision


def checked_admission(admission: Mapping[str, Any]) -> Mapping[str, Any]:
    """``status.admission`` in the shape :func:`usage_of` reads, or InputError naming the field:
    the API server's schema for our CRD types ``resourceUsage`` as strings, and a file may say
    anything, so a value that is no quantity must be refused, not raised on later."""
    path = "status.admission.podSetAssignments"
    assignments = admission.get("podSetAssignments") or []
    if not isinstance(assignments, list):
        raise InputError("must be a list", field=path)
    for i, assignment in enumerate(assignments):
        at = f"{path}[{i}]"
        if not isinstance(assignment, Mapping):
            raise InputError("must be an object", field=at)
        for name in ("flavors", "resourceUsage"):
            value = assignment.get(name) or {}
            if not isinstance(value, Mapping):
                raise InputError("must be an object", field=f"{at}.{name}")
        for resource, amount in (assignment.get("resourceUsage") or {}).items():
            try:
                to_units(str(resource), amount)
            except QuantityError as error:
                raise InputError(str(error), field=f"{at}.resourceUsage[{resource}]") from None
    return admission


def usage_of(admissions: Iterable[Mapping[str, Any]]) -> Usage:
    """Quota in use, from admissions as written on Workloads (``status.admission``)."""
    usage: Usage = {}
    for admission in admissions:
        cq = str(admission.get("clusterQueue") or "")
        for assignment in admission.get("podSetAssignments") or []:
            flavors = assignment.get("flavors") or {}
            for resource, amount in (assignment.get("resourceUsage") or {}).items():
                slot = usage.setdefault((cq, str(flavors.get(resource, ""))), {})
                slot[resource] = slot.get(resource, 0) + to_units(resource, str(amount))
    return usage


@dataclass(frozen=True, slots=True)
class QuotaRow:
    """One (ClusterQueue, flavor, resource) as `topogate status --queues` shows it."""

    queue: str
    cohort: str
    flavor: str
    resource: str
    nominal: int
    used: int
    borrowed: int
    available: int
    pending: int  # workloads of the queue waiting for admission


def quota_rows(
    queues: Mapping[str, QueueSpec], usage: Usage, pending: Mapping[str, int]
) -> list[QuotaRow]:
    book = QuotaBook(queues, usage)
    return [
        QuotaRow(
            queue.name,
            queue.cohort or "",
            quota.flavor,
            resource,
            quota.nominal[resource],
            book.used(queue.name, quota.flavor, resource),
            book.borrowed(queue, quota, resource),
            max(0, book.available(queue, quota, resource)),
            pending.get(queue.name, 0),
        )
        for queue in sorted(queues.values(), key=lambda q: q.name)
        for quota in queue.flavors
        for resource in sorted(quota.nominal)
    ]
