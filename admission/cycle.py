"""The admission cycle: which pending workloads a cycle admits, pure and synchronous.

The admitter (topogate.controllers.admitter) hands a cycle the ClusterQueues, the pending
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
from typing import Protocol

from sortedcontainers import SortedList

from topogate.api.podspec import Toleration
from topogate.api.quantity import format_units
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree

from .assignments import node_usage
from .exact import ExactBudget
from .fairshare import FairShares, FlavorResource, Share
from .fungibility import FIT, MAY_STOP_SEARCH, PREEMPT, RECLAIM, Choice, Mode, best_of, choose
from .gpuplace import taken_by
from .lanes import PendingWorkload, QueueLanes, Shape
from .partial import can_shrink, largest_fit, with_counts
from .placement import place
from .preemption import Preemption
from .quota import STRICT_FIFO, CohortSpec, CohortTree, FlavorQuota, QueueSpec, QuotaBook, Usage
from .request import ExactOutcome, PlacementDecision, PlacementRequest

Held = list[tuple[PlacementRequest, PlacementDecision]]


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
    # The usage preemption searches read once plans are made (their victims' quota given
    # back), with the (quota changes, plans) it holds for: the searches only read it.
    released_usage: tuple[tuple[int, int], Usage] | None = None
    # Lanes held behind a workload refused and parked this cycle (:class:`Parking`): the
    # next cycle is due at once, as Kueue's next head is.
    held: int = 0
    # Stopped at its admissions' limit (``admission_cycle(limit=...)``): more may fit.
    limited: bool = False

    @property
    def pending(self) -> dict[str, str]:
        """key -> why it waits."""
        messages = self.messages
        for workloads, words in self.deferred:
            for w in workloads:  # a plain loop: thousands a second, a generator's cost each
                said = words[w.shape]
                if said:  # empty: not refused for quota (a held lane's rest), nothing to tell
                    messages[w.key] = said
        self.deferred.clear()
        return messages


# Plans a preemption for a workload that does not fit (:func:`.preemption.plan_preemption`); the
# admitter provides it with the running workloads and a simulation on its snapshot
# (topogate.controllers.evictions.preemptor).
Preempt = Callable[[PendingWorkload, QueueSpec, Usage, Held], Preemption | None]


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


def _quota_by_flavor(
    queue: QueueSpec, book: QuotaBook, demand: Mapping[str, int]
) -> Iterator[tuple[FlavorQuota, str]]:
    """Each of the queue's flavors in order, with why it cannot take ``demand`` for quota
    ("" when it can). Lazy: a caller that stops at the first fit asks no further flavor."""
    for flavor in queue.flavors:
        uncovered = sorted(set(demand) - set(flavor.nominal))
        if uncovered:
            yield flavor, f"flavor {flavor.flavor} does not cover {', '.join(uncovered)}"
        else:
            yield flavor, _quota_problem(book, queue, flavor, demand)


@dataclass(slots=True)
class _Refusals:
    """Quota refusals by (queue, demand shape): thousands of pending workloads come in a few
    shapes. ``words`` are kept until the caller clears them (when the quota in use changed);
    ``fits`` (no refusal) are kept with the quota state (:attr:`QuotaBook.changes`) they were
    found in and trusted only in that very state, so they never need clearing."""

    words: dict[tuple[str, Shape], str] = field(default_factory=dict)
    fits: dict[tuple[str, Shape], int] = field(default_factory=dict)


def _quota_refusal(memo: _Refusals, queue: QueueSpec, book: QuotaBook, shape: Shape) -> str:
    """Why no flavor of the queue has the quota for a demand of this shape (the words
    :func:`_try` would use), or "" when one has: then the placement decides. Memoised by
    (queue, shape) while the quota in use is unchanged (the caller clears ``memo.words``)."""
    key = (queue.name, shape)
    found = memo.words.get(key)
    if found is not None:
        return found
    if memo.fits.get(key) == book.changes:
        return ""
    reasons: list[str] = []
    for _, problem in _quota_by_flavor(queue, book, dict(shape)):
        if not problem:
            memo.fits[key] = book.changes
            return ""
        reasons.append(problem)
    memo.words[key] = "; ".join(reasons) or f"ClusterQueue {queue.name} has no flavors"
    return memo.words[key]


def _fits_on(
    workload: PendingWorkload,
    queue: QueueSpec,
    book: QuotaBook,
    placer: Placer,
    held: Held,
    flavor: FlavorQuota,
    problem: str,
) -> Admitted | str:
    """The admission on ``flavor`` when quota (``problem`` is "") and placement allow it,
    else why not."""
    if problem:
        return problem
    decision = placer(flavor.flavor, workload.request, held)
    if decision is not None and not decision.fits:
        # the pod set named, as Kueue names it ("... to pod set workers: ...")
        return f"flavor {flavor.flavor}: {decision.podset}: {decision.message}"
    return Admitted(workload.key, queue.name, flavor.flavor, workload.demand(), decision)


def _try(
    workload: PendingWorkload,
    queue: QueueSpec,
    book: QuotaBook,
    placer: Placer,
    held: Held,
) -> Admitted | str:
    """The flavor the queue's fungibility takes among those where the workload fits now:
    the first one by default; with ``whenCanBorrow: TryNextFlavor`` a fit that borrows lets
    the walk go on, and the one borrowing least wins."""
    demand = workload.demand()
    reasons: list[str] = []
    fungibility = queue.fungibility
    fits: list[Choice[Admitted]] = []
    for index, (flavor, problem) in enumerate(_quota_by_flavor(queue, book, demand)):
        outcome = _fits_on(workload, queue, book, placer, held, flavor, problem)
        if isinstance(outcome, str):
            reasons.append(outcome)
            continue
        if fungibility.when_can_borrow == MAY_STOP_SEARCH:
            return outcome  # any fit ends the walk: its level does not matter
        level = book.borrowing_level(queue, flavor, demand)
        if fungibility.fit_ends_walk(level):
            return outcome
        fits.append(Choice(index, Mode(FIT, level), outcome))
    best = best_of(fits, fungibility)
    if best is not None:
        return best.found
    return "; ".join(reasons) or f"ClusterQueue {queue.name} has no flavors"


def _same_words(why: str) -> Mapping[Shape, str]:
    """The same words for every shape."""
    return defaultdict(lambda: why)


Rank = tuple[int, int, str, str, str]
FairKey = tuple[bool, tuple[int, float], int, str, str, str]
Node = tuple[str, str]  # ("q", lane) or ("c", cohort): the tournament's players


class _Heads:
    """The queues' lanes, each walked from its head, and the next head to try across them.

    The walk is a cursor: the lanes are not changed. Its cost per pop is what the pop
    touched, not the number of queues:

    - A head's rank (:meth:`_rank`) only grows while the quota in use only grows (more usage
      can only make a workload borrow from higher up), so the heads sit in a heap keyed by a
      rank never above theirs now, and the top is ranked again when it comes up: one whose
      rank has not changed is the least of all. A head is pushed with its floor
      (:meth:`_floor`, borrowing level 0), not its rank, which walks the cohort tree: most
      lanes' heads never come up in a cycle that stops at its limit, and ranking all of them
      was most of its cost at 1,000 queues. Usage taken away (a hook giving quota back) can
      lower a rank below one worked out before: every head goes back to its floor.
    - Fair sharing plays Kueue's tournament on a tree kept between pops: each cohort holds
      its children (queues' heads, and child cohorts with their winners) sorted by their key
      at that cohort (:meth:`_fair_key`). A head's key depends only on the usage along its
      own path, so an admission re-keys only the admitted queue and the cohorts above it
      (:meth:`_refresh`), and a lane whose head changed re-keys its own path.

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
        fair: FairShares | None = None,
    ) -> None:
        self.queues, self.book, self.lanes, self.result = queues, book, lanes, result
        self.fair = fair
        # Fair sharing: per lane, (head key, quota state) -> its shares along the tree.
        self._shares: dict[
            str, tuple[str, int, Mapping[str, Share], frozenset[FlavorResource]]
        ] = {}
        self.heads: dict[str, PendingWorkload] = {}
        # The heads that compete by rank (all of them, or with fair sharing those of queues
        # without a cohort), by their floor or their rank when pushed: never above it now.
        self._ranked: list[tuple[Rank, str]] = []
        # Per (lane, shape): (its tree's changes then, its borrowing level then).
        self._borrows: dict[tuple[str, Shape], tuple[int, int]] = {}
        # Per cohort tree (:func:`_tree_of`), how often the quota in use changed in it: a
        # level depends on its own tree's usage only, so an admission elsewhere keeps it.
        self._tree_changes: dict[str, int] = {}
        self._stamped = 0  # how much of the book's log `_tree_changes` counts
        self._tree_names: dict[str, str] = {}  # queue -> its tree
        self._read = 0  # how much of the book's log has been followed
        self._removals = book.removals
        self._popped: str | None = None  # the lane to move on before the next pop
        self._blocked: dict[str, str] = {}
        self._taken: dict[str, int] = {}  # per lane, how many the walk has reached
        # Fair sharing's tournament: per cohort its players sorted by key, each player's
        # entry (cohort, sort item), the nodes to re-key by depth, the trees' roots, and the
        # lanes whose head may change flavor with anyone's usage (two flavors cover it).
        self._players: dict[str, SortedList[tuple[FairKey, Node]]] = {}
        self._entry: dict[Node, tuple[str, tuple[FairKey, Node]]] = {}
        self._dirty: dict[int, set[Node]] = defaultdict(set)
        self._depth: dict[str, int] = {}
        self._roots: set[str] = set()
        self._volatile: set[str] = set()

    def fill(self) -> None:
        queues, inactive_of, fair = self.queues, self.book.tree.inactive, self.fair
        heads, taken, ranked = self.heads, self._taken, self._ranked
        for name, lane in self.lanes.by_name():
            if name not in queues:
                missing = _same_words(f"ClusterQueue {name} does not exist")
                self.result.deferred.append((list(lane), missing))
                continue
            inactive = inactive_of.get(name)
            if inactive is not None:  # its cohort is in a cycle: nothing is admitted from it
                self.result.deferred.append((list(lane), _same_words(inactive)))
                continue
            head = heads[name] = lane[0]
            taken[name] = 1
            if fair is None or not queues[name].cohort:  # its floor (:meth:`_floor`)
                ranked.append(((0, -head.priority, head.created, name, head.key), name))
            else:
                self._headed(name)
        heapq.heapify(ranked)  # one O(n) build, not n pushes
        self._read = len(self.book.log)

    def _headed(self, name: str) -> None:
        """The lane's head changed (or the lane is done): put it where it competes."""
        cohort = self.queues[name].cohort
        if self.fair is None or not cohort:
            if name in self.heads:
                heapq.heappush(self._ranked, (self._floor(name), name))
            return
        self._roots.add(self.book.tree.root(cohort))
        self._mark(("q", name))
        head, flavors = self.heads.get(name), self.queues[name].flavors
        asks = set(head.demand()) if head is not None else None
        if asks is not None and sum(asks <= f.nominal.keys() for f in flavors) > 1:
            self._volatile.add(name)
        else:
            self._volatile.discard(name)

    def block(self, name: str, why: str) -> None:
        """A StrictFIFO queue waits behind its head: the rest of it waits too."""
        self._blocked[name] = why

    def pass_rest(self, name: str) -> Sequence[PendingWorkload]:
        """Take the queue just popped off the walk: the rest of its lane, for the caller."""
        assert self._popped == name
        self._popped = None
        del self.heads[name]
        self._headed(name)
        return self._rest(name)

    def _rest(self, name: str) -> Sequence[PendingWorkload]:
        return self.lanes.lane(name)[self._taken[name] :]

    def _rank(self, name: str) -> Rank:
        head = self.heads[name]
        stamp = self._tree_stamp(name)
        found = self._borrows.get((name, head.shape))
        if found is None or found[0] != stamp:
            found = (stamp, self.book.borrows(self.queues[name], head.demand()))
            self._borrows[(name, head.shape)] = found
        return (found[1], -head.priority, head.created, name, head.key)

    def _tree_stamp(self, name: str) -> int:
        """How often the quota in use changed in the queue's cohort tree this cycle."""
        log = self.book.log
        if self._stamped != len(log):
            changes = self._tree_changes
            for queue in log[self._stamped :]:
                tree = self._tree_name(queue)
                changes[tree] = changes.get(tree, 0) + 1
            self._stamped = len(log)
        return self._tree_changes.get(self._tree_name(name), 0)

    def _tree_name(self, queue: str) -> str:
        found = self._tree_names.get(queue)
        if found is None:
            spec = self.queues.get(queue)
            found = _tree_of(spec, self.book.tree) if spec is not None else f"queue {queue}"
            self._tree_names[queue] = found
        return found

    def _floor(self, name: str) -> Rank:
        """The least the head's rank can be, whatever the quota in use: borrowing level 0."""
        head = self.heads[name]
        return (0, -head.priority, head.created, name, head.key)

    def _advance(self, name: str) -> None:
        """Move the lane past the head just popped."""
        why = self._blocked.get(name)
        if why is None:
            lane, taken = self.lanes.lane(name), self._taken[name]
            if taken < len(lane):
                self._taken[name] = taken + 1
                self.heads[name] = lane[taken]
                self._headed(name)
                return
        else:
            self.result.deferred.append((self._rest(name), _same_words(why)))
        del self.heads[name]
        self._headed(name)

    def pop(self) -> tuple[str, PendingWorkload] | None:
        """The next head to try, by :func:`admission_cycle`'s rule (None: all tried)."""
        moved, self._popped = self._popped, None
        if moved is not None:
            self._advance(moved)
        self._follow_book()
        if not self.heads:
            return None
        best = self._least_ranked()
        if self.fair is not None:
            self._refresh()
            for root in self._roots:
                players = self._players.get(root)
                if players:
                    winner = players[0][0][4]
                    if best is None or self._rank(winner) < self._rank(best):
                        best = winner
        assert best is not None
        if self._ranked and self._ranked[0][1] == best:
            heapq.heappop(self._ranked)
        self._popped = best
        return best, self.heads[best]

    def _follow_book(self) -> None:
        """Mark what the quota changes since the last pop touched."""
        log = self.book.log
        if self.book.removals != self._removals:  # usage went down: back to the floors
            self._removals = self.book.removals
            self._ranked = [
                (self._floor(name), name)
                for name in self.heads
                if self.fair is None or not self.queues[name].cohort
            ]
            heapq.heapify(self._ranked)
            for name in self.heads:
                if self.fair is not None and self.queues[name].cohort:
                    self._mark(("q", name))
                    self._mark_path(self.queues[name].cohort)
        if self.fair is None or self._read == len(log):
            self._read = len(log)
            return
        for queue in log[self._read :]:
            spec = self.queues.get(queue)
            if spec is not None and spec.cohort:
                if queue in self.heads:
                    self._mark(("q", queue))
                self._mark_path(spec.cohort)
        for name in self._volatile:
            self._mark(("q", name))
        self._read = len(log)

    def _least_ranked(self) -> str | None:
        """The lane of least rank now among those in the heap (left on top), or None."""
        ranked = self._ranked
        while ranked:
            pushed, name = ranked[0]
            now = self._rank(name)
            if now == pushed:
                return name
            heapq.heapreplace(ranked, (now, name))
        return None

    # Fair sharing's tournament.

    def _depth_of_tree(self) -> Mapping[str, int]:
        if not self._depth:
            tree = self.book.tree
            for cohort in tree.cohorts:
                depth, up = 0, tree.parent[cohort]
                while up is not None:
                    depth, up = depth + 1, tree.parent[up]
                self._depth[cohort] = depth
        return self._depth

    def _mark(self, node: Node) -> None:
        kind, name = node
        cohort = self.queues[name].cohort if kind == "q" else name
        assert cohort is not None
        self._dirty[self._depth_of_tree()[cohort] + (kind == "q")].add(node)

    def _mark_path(self, cohort: str | None) -> None:
        tree = self.book.tree
        while cohort is not None:
            self._mark(("c", cohort))
            cohort = tree.parent[cohort]

    def _refresh(self) -> None:
        """Re-key the marked players, deepest first, each cohort whose winner or usage
        changed in its own parent."""
        tree = self.book.tree
        while self._dirty:
            depth = max(self._dirty)
            for node in self._dirty.pop(depth):
                kind, name = node
                if kind == "q":
                    above = self.queues[name].cohort
                    player = name if name in self.heads else None
                else:
                    above = tree.parent[name]
                    players = self._players.get(name)
                    player = players[0][0][4] if players else None
                    if above is None:
                        continue
                assert above is not None
                self._seat(node, above, player)

    def _seat(self, node: Node, cohort: str, player: str | None) -> None:
        """Put ``node`` among ``cohort``'s players keyed by ``player``'s head (None: out)."""
        old = self._entry.pop(node, None)
        players = self._players.setdefault(cohort, SortedList())
        if old is not None:
            players.remove(old[1])
        if player is not None:
            item = (self._fair_key(cohort, player), node)
            players.add(item)
            self._entry[node] = (cohort, item)
        if old is not None or player is not None:
            self._mark(("c", cohort))

    def _head_shares(self, name: str) -> tuple[Mapping[str, Share], frozenset[FlavorResource]]:
        """The shares along the tree with the lane's head admitted (keyed by the cohort where
        each is compared), and the (flavor, resource) pairs it asks for. The head is counted
        in the first flavor with quota for it, else the first that covers it (Kueue counts
        the flavor its assignment chose)."""
        head, changes = self.heads[name], self.book.changes
        found = self._shares.get(name)
        if found is not None and found[0] == head.key and found[1] == changes:
            return found[2], found[3]
        assert self.fair is not None
        queue, demand = self.queues[name], head.demand()
        chosen = ""
        for flavor, problem in _quota_by_flavor(queue, self.book, demand):
            if not problem:
                chosen = flavor.flavor
                break
            if not chosen and set(demand) <= set(flavor.nominal):
                chosen = flavor.flavor
        shares = self.fair.path(queue, chosen, demand)
        asked = frozenset((chosen, r) for r, a in demand.items() if a > 0)
        self._shares[name] = (head.key, changes, shares, asked)
        return shares, asked

    def _fair_key(self, level: str, name: str) -> FairKey:
        """A head's rank among its siblings at cohort ``level`` (Kueue's fair-sharing
        comparer, with its default feature gates): a child not borrowing from ``level`` on
        what the head asks for first, then the lower share after admitting it, then higher
        priority, then older (then queue and key, for determinism)."""
        shares, asked = self._head_shares(name)
        share = shares[level]
        head = self.heads[name]
        return (share.borrows_on(asked), share.order, -head.priority, head.created, name, head.key)


class Parking:
    """Kueue's inadmissible workloads (kept by the admitter across cycles): a BestEffortFIFO
    queue lets later workloads go by one that does not fit only once that one was found
    inadmissible and its cohort tree gave no quota back since.

    Kueue's scheduler tries each ClusterQueue's head every cycle; a head that does not fit
    (and preempts nothing) is set aside as inadmissible, and the next workload is the head of
    the next cycle; any workload of the tree that finishes (or is evicted, or deleted) puts
    the inadmissible ones back in their queues (``QueueAssociatedInadmissibleWorkloadsAfter``),
    so the higher-priority head is tried first again. While its tree keeps giving quota back,
    a high-priority workload that waits for room holds its queue's lower ones back, and the
    room freed gathers for it instead of going one CPU at a time to smaller, later workloads.
    Our cycle walks whole lanes; this keeps that order: a workload refused and not parked
    is parked; one refused again after its tree gave quota back holds the rest of its lane
    for this cycle, and the admitter runs the next cycle at once (:attr:`CycleResult.held`),
    where it is passed if nothing was given back meanwhile.
    """

    def __init__(self) -> None:
        self._catalog: object = None  # the queues read: a new catalog unparks every workload
        self._released: set[str] = set()  # queues that gave quota back since the last cycle
        self._held: dict[str, str] = {}  # workload -> its ClusterQueue, while it holds quota
        self._gives: dict[str, int] = {}  # per cohort tree, how often it gave quota back
        self._parked: dict[str, tuple[str, int]] = {}  # workload -> (its tree, gives then)
        # Changes when a lane was held: the next cycle reads the same quota and workloads but
        # decides otherwise (the catalog and the quota given back are read elsewhere).
        self.version = 0

    def follow(self, held: frozenset[str], queue_of: Callable[[str], str | None]) -> None:
        """The workloads holding quota now: those gone since gave their queue's quota back;
        ``queue_of`` names a new one's ClusterQueue (None: it holds none)."""
        known = self._held
        for key in known.keys() - held:
            self._released.add(known.pop(key))
        for key in held - known.keys():
            queue = queue_of(key)
            if queue is not None:
                known[key] = queue

    def begin(self, queues: Mapping[str, QueueSpec], tree: CohortTree) -> None:
        """A cycle starts: count the gives of the trees of the queues that gave back."""
        if queues is not self._catalog:
            self._catalog = queues
            self._parked.clear()
            self._gives.clear()
        for name in self._released:
            queue = queues.get(name)
            root = _tree_of(queue, tree) if queue is not None else f"queue {name}"
            self._gives[root] = self._gives.get(root, 0) + 1
        self._released.clear()

    def refused(self, key: str, root: str) -> bool:
        """The workload was refused (no plan either) and is parked; True when its lane waits
        for the next cycle: it had been refused before and its tree gave quota back since
        (Kueue puts it back at its queue's head; the first time, Kueue takes the next head
        in its next cycle, which is this one's walk when nothing is given back meanwhile)."""
        now = (root, self._gives.get(root, 0))
        before = self._parked.get(key)
        self._parked[key] = now
        if before is None or before == now:
            return False
        self.version += 1  # the next cycle passes it: it must not be skipped as unchanged
        return True

    def forget(self, key: str) -> None:
        """Drop a workload that no longer waits."""
        self._parked.pop(key, None)


def _tree_of(queue: QueueSpec, tree: CohortTree) -> str:
    """The cohort tree a queue's usage counts in (a queue without a cohort: its own)."""
    return f"cohort {tree.root(queue.cohort)}" if queue.cohort else f"queue {queue.name}"


def admission_cycle(
    queues: Mapping[str, QueueSpec],
    pending: Sequence[PendingWorkload] | QueueLanes,
    usage: Usage,
    placer: Placer,
    preempt: Preempt | None = None,
    cohorts: Mapping[str, CohortSpec] | None = None,
    fair_sharing: bool = False,
    parking: Parking | None = None,
    limit: int | None = None,
    tree: CohortTree | None = None,
) -> CycleResult:
    """Admit what fits; ``usage`` gains the admissions, ``pending`` (or lanes) is unchanged.

    Each queue is walked in its own order (:func:`.lanes.queue_order`); across queues the
    next workload tried is the best of the queues' heads, by Kueue's rule: one that fits
    within its queue's nominal quota before one that would borrow, then higher priority, then
    older (then queue and key, for determinism). So a lender's job goes before a borrower's
    requeued one, and reclaiming never ping-pongs; in a cohort tree, one that borrows from a
    lower subtree before one that borrows from higher up (Kueue's borrowing level). Queues
    share physical capacity: every admission's placement is passed to later placements of the
    same cycle as held capacity, and quota is the queue's own or its cohort tree's
    (:class:`.quota.QuotaBook`; ``cohorts`` are the Cohort objects, none for flat cohorts).
    A queue whose cohort is in a cycle of the tree admits nothing; with ``fair_sharing``, a
    tree's next head is Kueue's fair-sharing tournament's winner (:meth:`_Heads._tournament`).
    A workload refused for quota alone is told the quota the cycle leaves (not what was left
    when its turn came), so a lane found hopeless can be passed whole (:func:`_hopeless`) and
    the cycle costs what it admits and tries, not what waits. ``parking``: Kueue's
    inadmissible workloads (:class:`Parking`); ``limit``: the most admissions it makes;
    ``tree``: the cohort tree of these ``queues`` and ``cohorts``, which depends on their quotas
    only (a caller running cycle after cycle on one catalog keeps it; built when not given).
    """
    result = CycleResult()
    book = QuotaBook(queues, usage, tree if tree is not None else CohortTree(queues, cohorts))
    if parking is not None:
        parking.begin(queues, book.tree)
    lanes = pending if isinstance(pending, QueueLanes) else QueueLanes(pending)
    heads = _Heads(queues, book, lanes, result, FairShares(book) if fair_sharing else None)
    heads.fill()
    walk = _Walk(result, book, placer, [], preempt)
    refused_at = 0
    # Refused for quota and nothing else: worded at the end, against the quota the cycle
    # leaves (so the words do not depend on when in the walk a workload came up).
    for_quota: list[tuple[QueueSpec, Sequence[PendingWorkload]]] = []
    hopeful: dict[str, int] = {}  # queue -> the quota state in which its lane was not hopeless
    while (popped := heads.pop()) is not None:
        if limit is not None and len(result.admitted) >= limit:
            result.limited = True
            break
        name, workload = popped
        if book.changes != refused_at:
            walk.refusals.words.clear()
            refused_at = book.changes
        queue = queues[name]
        quota, outcome, planned = _try_head(walk, workload, queue)
        if isinstance(outcome, str):
            if quota and outcome == quota:
                for_quota.append((queue, (workload,)))
            else:
                result.messages[workload.key] = outcome
            passed = _past_refusal(
                heads, workload, queue, book, walk.refusals, hopeful, None if planned else parking
            )
            if passed:
                for_quota.append((queue, passed))
            continue
        result.admitted.append(outcome)
        book.add(name, outcome.flavor, outcome.usage)
        if outcome.decision is not None:
            walk.held.append((outcome.request or workload.request, outcome.decision))
    # The walk's refusals hold for the quota left now unless it changed since they were
    # cleared (the fits check their own quota state).
    worded = walk.refusals if book.changes == refused_at else _Refusals(fits=walk.refusals.fits)
    _word_quota_refusals(result, for_quota, lanes, book, worded)
    return result


@dataclass(slots=True)
class _Walk:
    """What one cycle's tries share: the outcome so far, the quota and capacity held by its
    admissions and plans, and the memos of what it already worked out."""

    result: CycleResult
    book: QuotaBook
    placer: Placer
    held: Held
    preempt: Preempt | None
    searched: set[str] = field(default_factory=set)  # queues that looked for victims
    # Quota refusals by (queue, demand) while the quota in use is unchanged: thousands of
    # pending workloads come in a few shapes, and each refusal was worked out and worded anew.
    refusals: _Refusals = field(default_factory=_Refusals)


def _try_head(
    walk: _Walk, workload: PendingWorkload, queue: QueueSpec
) -> tuple[str, Admitted | str, bool]:
    """(the quota refusal, or ""; the admission, or why not; whether a preemption plan was
    made for it): the first try, then a plan or fewer pods (:func:`_otherwise`)."""
    before = len(walk.result.preemptions)  # a fungibility walk in the first try may plan
    quota, outcome = _first_try(walk, workload, queue)
    if not isinstance(outcome, str):
        return quota, outcome, False
    outcome, planned = _otherwise(walk, workload, queue, outcome, before)
    return quota, outcome, planned


def _first_try(
    walk: _Walk, workload: PendingWorkload, queue: QueueSpec
) -> tuple[str, Admitted | str]:
    """(the quota refusal, or ""; the admission, or why not). A fungibility that may take a
    preemption before a later fit walks the flavors with their preemptions, as Kueue's
    assigner does: that is the queue's one preemption search of the cycle."""
    book, placer, held, preempt = walk.book, walk.placer, walk.held, walk.preempt
    if (
        preempt is not None
        and queue.preemption.enabled
        and queue.fungibility.preempts_before_fits()
        and queue.name not in walk.searched
    ):
        walk.searched.add(queue.name)
        return "", _choose_eager(walk.result, workload, queue, book, placer, held, preempt)
    quota = _quota_refusal(walk.refusals, queue, book, workload.shape)
    return quota, quota or _try(workload, queue, book, placer, held)


def _otherwise(
    walk: _Walk, workload: PendingWorkload, queue: QueueSpec, why: str, planned: int
) -> tuple[Admitted | str, bool]:
    """For a workload that does not fit: a preemption plan, or fewer pods (as Kueue: only
    when preempting cannot make room for all of them); and whether a plan was made. One
    search per queue per cycle (``walk.searched``), as Kueue's scheduler takes one head per
    queue: the search is the costly part, and the later ones are of lower or equal rank.
    ``planned``: the plans made before this workload's first try, which may have made one."""
    result, book, held = walk.result, walk.book, walk.held
    if queue.name not in walk.searched:
        walk.searched.add(queue.name)
        why = _maybe_preempt(result, workload, queue, why, book, held, walk.preempt)
    if len(result.preemptions) != planned:
        return why, True
    if can_shrink(workload.request):
        partial = _try_partial(workload, queue, book, walk.placer, held, walk.refusals)
        return partial or f"{why}; {_no_partial(workload.request)}", False
    return why, False


def _past_refusal(
    heads: _Heads,
    workload: PendingWorkload,
    queue: QueueSpec,
    book: QuotaBook,
    refusals: _Refusals,
    hopeful: dict[str, int],
    parking: Parking | None,
) -> Sequence[PendingWorkload]:
    """What a queue does past a workload it cannot admit (and no plan of its own with
    ``parking``): StrictFIFO waits behind it; one refused again since its tree gave quota back
    holds the lane for this cycle (:class:`Parking`); a hopeless lane is passed whole. Returns
    those passed that are refused for quota, for the words."""
    name = queue.name
    if queue.strategy == STRICT_FIFO:
        heads.block(name, f"waiting behind {workload.key} (StrictFIFO)")
        return ()
    if parking is not None and parking.refused(workload.key, _tree_of(queue, book.tree)):
        # The others are tried next cycle: words only for those refused for quota (their
        # shapes' words, read at the end, are empty for the rest).
        heads.result.held += 1
        return heads.pass_rest(name)
    if _hopeless(heads.lanes, queue, book, refusals, hopeful):
        return heads.pass_rest(name)
    return ()


def _word_quota_refusals(
    result: CycleResult,
    for_quota: Iterable[tuple[QueueSpec, Sequence[PendingWorkload]]],
    lanes: QueueLanes,
    book: QuotaBook,
    refusals: _Refusals,
) -> None:
    """The words for those refused for quota alone, against the quota left now, per shape
    (each workload is told when :attr:`CycleResult.pending` is read); ``refusals`` hold for
    the quota left now."""
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
    refusals: _Refusals,
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
    refusals: _Refusals,
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
    usage = _planning_usage(result, book)
    plan = preempt(workload, queue, usage, held)
    if plan is None:
        return why
    if len(queue.flavors) > 1:
        plan = _better_plan(workload, queue, book, usage, held, preempt, plan)
    return _record_plan(result, workload, queue, why, book, held, plan)


def _plan_mode(
    workload: PendingWorkload, queue: QueueSpec, book: QuotaBook, usage: Usage, plan: Preemption
) -> Mode:
    """How ``plan`` gets the workload its quota (Kueue's preemption modes: preempting in its
    own queue, or only reclaiming from others) and how far it still borrows once the victims
    are gone."""
    how = RECLAIM
    if any(owner == queue.name for owner, _ in plan.released):
        how = PREEMPT
    after = QuotaBook(book.queues, usage, book.tree).fork()
    for (owner, flavor), amounts in plan.released.items():
        after.add(owner, flavor, {r: -a for r, a in amounts.items()})
    level = after.borrowing_level(queue, queue.by_flavor[plan.flavor], workload.demand())
    return Mode(how, level)


def _better_plan(
    workload: PendingWorkload,
    queue: QueueSpec,
    book: QuotaBook,
    usage: Usage,
    held: Held,
    preempt: Preempt,
    plan: Preemption,
) -> Preemption:
    """With no flavor fitting, Kueue's assigner weighs the preemptions of every flavor and
    takes the preferred (reclaiming before preempting in the queue, then borrowing least),
    the earliest on a tie. The hook plans on the first flavor where a preemption works, so
    it is asked again on the flavors after that one while a better mode is possible."""
    names = [f.flavor for f in queue.flavors]
    fungibility = queue.fungibility
    best = Choice(names.index(plan.flavor), _plan_mode(workload, queue, book, usage, plan), plan)
    last = best.index
    while best.mode != Mode(RECLAIM, 0) and last + 1 < len(names):
        rest = dataclasses.replace(queue, flavors=queue.flavors[last + 1 :])
        found = preempt(workload, rest, usage, held)
        if found is None:
            break
        last = names.index(found.flavor)
        mode = _plan_mode(workload, queue, book, usage, found)
        if fungibility.preferred(mode, best.mode):
            best = Choice(last, mode, found)
    return best.found


def _choose_eager(
    result: CycleResult,
    workload: PendingWorkload,
    queue: QueueSpec,
    book: QuotaBook,
    placer: Placer,
    held: Held,
    preempt: Preempt,
) -> Admitted | str:
    """Kueue's flavor walk, each flavor in order: the workload fits there now, or a
    preemption there would make it fit, or neither; the fungibility stops the walk or takes
    the preferred at its end (:func:`.fungibility.choose`). A preemption taken is recorded
    (and named in the message returned)."""
    demand = workload.demand()
    usage = _planning_usage(result, book)
    reasons: list[str] = []
    flavors = list(_quota_by_flavor(queue, book, demand))

    def probe(index: int) -> tuple[Mode, Admitted | Preemption] | None:
        flavor, problem = flavors[index]
        outcome = _fits_on(workload, queue, book, placer, held, flavor, problem)
        if not isinstance(outcome, str):
            return Mode(FIT, book.borrowing_level(queue, flavor, demand)), outcome
        reasons.append(outcome)
        if set(demand) - set(flavor.nominal):
            return None
        plan = preempt(workload, dataclasses.replace(queue, flavors=(flavor,)), usage, held)
        if plan is None:
            return None
        return _plan_mode(workload, queue, book, usage, plan), plan

    chosen = choose(len(flavors), queue.fungibility, probe)
    why = "; ".join(reasons) or f"ClusterQueue {queue.name} has no flavors"
    if chosen is None:
        return why
    if isinstance(chosen.found, Admitted):
        return chosen.found
    return _record_plan(result, workload, queue, why, book, held, chosen.found)


def _planning_usage(result: CycleResult, book: QuotaBook) -> Usage:
    """The usage a preemption search reads: as Kueue, as if the victims of this cycle's
    earlier plans were gone (their quota is still counted for admissions, and their pods'
    capacity held, until they are)."""
    usage = book.usage
    if result.preemptions:
        # Worked out again only when the quota in use or the plans changed: with a thousand
        # queues, copying the usage for each search was most of a cycle.
        state = (book.changes, len(result.preemptions))
        if result.released_usage is None or result.released_usage[0] != state:
            usage = {k: dict(v) for k, v in usage.items()}
            for _, earlier in result.preemptions:
                for slot, amounts in earlier.released.items():
                    held_now = usage.setdefault(slot, {})
                    for resource, amount in amounts.items():
                        held_now[resource] = held_now.get(resource, 0) - amount
            result.released_usage = (state, usage)
        usage = result.released_usage[1]
    return usage


def _record_plan(
    result: CycleResult,
    workload: PendingWorkload,
    queue: QueueSpec,
    why: str,
    book: QuotaBook,
    held: Held,
    plan: Preemption,
) -> str:
    """Record the chosen plan (the preemptor then holds its quota and placement); the
    pending message names it."""
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
