"""Preemption, topology-aware: which admitted workloads to evict so that a pending gang fits
both its quota and the topology. Pure and synchronous.

Kueue's classical preemption (its pkg/scheduler/preemption, with classical/
hierarchical_preemption.go for cohort trees), with the fit check simulated on the capacity
snapshot with the victims' usage removed:

- candidates: workloads of the preemptor's own ClusterQueue that its ``withinClusterQueue``
  policy allows (LowerPriority, or LowerOrNewerEqualPriority), and workloads of other queues of
  its cohort tree that are borrowing in the resources that need preemption, under cohorts
  that borrow too, as its ``reclaimWithinCohort`` policy allows (LowerPriority or Any); only
  workloads that use those resources count (:func:`_tree_candidates`);
- order: already evicted first; those the preemptor reclaims by hierarchical advantage, then
  other queues', then its own; lower priority first; the most recently admitted first; then
  by key;
- a workload of another queue is skipped once its queue, or a cohort between it and where it
  was found, is back within its nominal quota;
- victims are taken in that order until the preemptor fits; then each victim but the last is
  put back, newest first, if the preemptor still fits without it: the fewest victims the
  order allows, and never a victim whose removal the fit did not need;
- with ``borrowWithinCohort: Never`` the preemptor may not borrow to fit, unless it reclaims
  its own nominal quota; ``LowerPriority`` lets it borrow by evicting lower-priority workloads
  of other queues (below ``maxPriorityThreshold`` when one is set).

Where topogate does better than Kueue: the fit check runs the placement core on the snapshot
without the victims (their pods' usage and GPU sets), so a victim that frees nothing inside
the domain the preemptor will use is put back rather than evicted (Kueue #10497); the search
for the first fitting prefix is a binary search over the ordered candidates (monotone: more
victims never fit worse), which keeps 700 candidates to about ten placements (Kueue #13148).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .lanes import PendingWorkload
from .quota import (
    ANY,
    LOWER_OR_NEWER_EQUAL,
    LOWER_PRIORITY,
    NEVER,
    CohortTree,
    FlavorQuota,
    PreemptionPolicy,
    QueueSpec,
    QuotaBook,
    Usage,
    queue_local,
    queue_quota,
)

__all__ = [
    "ANY",
    "LOWER_OR_NEWER_EQUAL",
    "LOWER_PRIORITY",
    "NEVER",
    "FutileSearches",
    "Preemption",
    "PreemptionPolicy",
    "Running",
    "RunningIndex",
    "Search",
    "Victim",
    "allowed",
    "candidate_order",
    "fill_back",
    "needed_resources",
    "plan_preemption",
    "released",
]
from .request import PlacementDecision

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"


@dataclass(frozen=True, slots=True)
class Running:
    """An admitted workload, as a possible victim."""

    key: str
    cluster_queue: str
    flavor: str
    priority: int
    admitted: str  # when its quota was reserved (RFC 3339): newer ones go first
    usage: Mapping[str, int]  # quota it holds in ``flavor``
    created: str = ""  # for LowerOrNewerEqualPriority
    evicted: bool = False
    nodes: frozenset[str] = frozenset()  # where its pods run (empty: unknown)


@dataclass(frozen=True, slots=True)
class Victim:
    key: str
    reason: str  # Kueue's: InClusterQueue, InCohortReclamation, InCohortReclaimWhileBorrowing


@dataclass(frozen=True, slots=True)
class Preemption:
    flavor: str
    victims: tuple[Victim, ...]
    decision: PlacementDecision | None  # the preemptor's placement once they are gone
    placements: int = 0  # placement simulations run (for the benchmark and logs)
    # The quota the victims hold, per (queue, flavor): what a later plan of the same cycle
    # counts as given back (Kueue plans every head as if earlier targets were gone).
    released: Usage = field(default_factory=dict)


def released(victims: Sequence[Running]) -> Usage:
    """The quota ``victims`` hold, summed per (queue, flavor)."""
    out: Usage = {}
    for victim in victims:
        slot = out.setdefault((victim.cluster_queue, victim.flavor), {})
        for resource, amount in victim.usage.items():
            slot[resource] = slot.get(resource, 0) + amount
    return out


# Simulates the preemptor on ``flavor`` with ``removed`` gone; None: the flavor has no
# topology (quota alone decides).
Simulate = Callable[[str, Sequence[Running]], PlacementDecision | None]


@dataclass(slots=True)
class Search:
    preemptor: PendingWorkload
    queue: QueueSpec
    policy: PreemptionPolicy
    queues: Mapping[str, QueueSpec]
    usage: Usage
    simulate: Simulate
    tree: CohortTree
    placements: int = 0
    decisions: dict[frozenset[str], PlacementDecision | None] = field(default_factory=dict)
    found_at: dict[str, str] = field(default_factory=dict)  # candidate -> cohort it came from
    # The usage as handed in, read only: each what-if is a fork of it (with a thousand
    # queues, copying the usage for every candidate checked was most of a cycle's cost).
    _book: QuotaBook | None = None

    @property
    def book(self) -> QuotaBook:
        """The quota book over the usage as handed in (read it; change a fork of it)."""
        if self._book is None:
            self._book = QuotaBook(self.queues, self.usage, self.tree)
        return self._book

    def book_without(self, removed: Sequence[Running]) -> QuotaBook:
        """A book of its own with ``removed``'s quota given back."""
        book = self.book.fork()
        for victim in removed:
            take_out(book, victim)
        return book

    def quota_fits(self, quota: FlavorQuota, removed: Sequence[Running], borrow: bool) -> bool:
        return self._quota_fits_in(quota, self.book_without(removed), borrow)

    def _quota_fits_in(self, quota: FlavorQuota, book: QuotaBook, borrow: bool) -> bool:
        for resource, amount in self.preemptor.demand().items():
            if amount > book.available(self.queue, quota, resource):
                return False
            used = book.used(self.queue.name, quota.flavor, resource)
            if not borrow and used + amount > quota.nominal.get(resource, 0):
                return False
        return True

    def quota_fits_back(
        self, quota: FlavorQuota, book: QuotaBook, candidate: Running, borrow: bool
    ) -> bool:
        """:meth:`quota_fits` with ``candidate`` put back into ``book`` (left unchanged)."""
        book.add(candidate.cluster_queue, candidate.flavor, candidate.usage)
        try:
            return self._quota_fits_in(quota, book, borrow)
        finally:
            book.add(
                candidate.cluster_queue,
                candidate.flavor,
                {k: -v for k, v in candidate.usage.items()},
            )

    def fits(self, quota: FlavorQuota, removed: Sequence[Running], borrow: bool) -> bool:
        if not self.quota_fits(quota, removed, borrow):
            return False
        key = _key(removed)
        if key not in self.decisions:
            self.placements += 1
            self.decisions[key] = self.simulate(quota.flavor, removed)
        decision = self.decisions[key]
        return decision is None or decision.fits


def take_out(book: QuotaBook, victim: Running) -> None:
    """Give the victim's quota back in ``book``."""
    book.add(victim.cluster_queue, victim.flavor, {k: -v for k, v in victim.usage.items()})


def allowed(policy: str, preemptor: PendingWorkload, candidate: Running) -> bool:
    lower = candidate.priority < preemptor.priority
    if policy == LOWER_PRIORITY:
        return lower
    if policy == LOWER_OR_NEWER_EQUAL:
        newer = candidate.priority == preemptor.priority and preemptor.created < candidate.created
        return lower or newer
    return policy == ANY


def needed_resources(search: Search, quota: FlavorQuota) -> set[str]:
    """Resources whose quota does not fit now; all demanded ones when only the topology is
    in the way."""
    book = search.book
    demand = search.preemptor.demand()
    short = {r for r, a in demand.items() if a > book.available(search.queue, quota, r)}
    return short or set(demand)


class RunningIndex:
    """The running workloads grouped by ClusterQueue, built once for many searches (a cycle's):
    a search reads its own queue's and those of its cohort tree's borrowing queues, not every
    running workload (a thousand searches a cycle over thousands running)."""

    def __init__(self, running: Sequence[Running]) -> None:
        self.all = list(running)
        self.by_queue: dict[str, list[Running]] = {}
        for candidate in running:
            self.by_queue.setdefault(candidate.cluster_queue, []).append(candidate)


class _Using:
    """A queue's running workloads in ``flavor`` that use a needed resource, in their order."""

    def __init__(self, index: RunningIndex, flavor: str, needed: set[str]) -> None:
        self.index, self.flavor, self.needed = index, flavor, needed

    def get(self, queue: str, default: Sequence[Running] = ()) -> Sequence[Running]:
        found = [
            c
            for c in self.index.by_queue.get(queue, ())
            if c.flavor == self.flavor and self.needed & c.usage.keys()
        ]
        return found or default


def _candidates(
    search: Search,
    quota: FlavorQuota,
    running: Sequence[Running] | RunningIndex,
    needed: set[str],
) -> list[tuple[Running, str]]:
    """(candidate, reason) in Kueue's order, before the dynamic checks: its own queue's, and
    those of other queues of its cohort tree (:func:`_tree_candidates`)."""
    policy, preemptor, queue = search.policy, search.preemptor, search.queue
    grouped = running if isinstance(running, RunningIndex) else RunningIndex(running)
    by_queue = _Using(grouped, quota.flavor, needed)
    own = [
        (c, IN_CLUSTER_QUEUE)
        for c in by_queue.get(queue.name, ())
        if allowed(policy.within_cluster_queue, preemptor, c)
    ]
    advantaged, others = _tree_candidates(search, quota, by_queue, needed)
    # Kueue's order: the evicted of each group first (hierarchical reclaim, other queues,
    # its own queue), then the others in the same group order; within a group by
    # :func:`candidate_order`.
    groups = (advantaged, others, own)
    out = [(pair, index) for index, group in enumerate(groups) for pair in group]
    out.sort(
        key=lambda item: (not item[0][0].evicted, item[1], candidate_order(item[0][0], queue.name))
    )
    return [pair for pair, _ in out]


def _cohort_within_nominal(book: QuotaBook, cohort: str, flavor: str, needed: set[str]) -> bool:
    tree = book.tree
    return all(
        book.cohort_used(cohort, flavor, r) <= tree.subtree(cohort, flavor, r) for r in needed
    )


def _borrows(book: QuotaBook, queue: QueueSpec, flavor: str, needed: set[str]) -> bool:
    """Above its nominal quota in a needed resource (and active)."""
    if queue.name in book.tree.inactive:
        return False
    quota = queue_quota(queue, flavor)
    nominal = quota.nominal if quota is not None else {}
    return any(book.used(queue.name, flavor, r) > nominal.get(r, 0) for r in needed)


def _tree_candidates(
    search: Search,
    quota: FlavorQuota,
    by_queue: _Using,
    needed: set[str],
) -> tuple[list[tuple[Running, str]], list[tuple[Running, str]]]:
    """Kueue's hierarchical reclaim (classical/hierarchical_preemption.go): walking up from
    the preemptor's cohort, each cohort's subtree (less the one below, already walked) gives
    the workloads of queues above their nominal quota, under cohorts above theirs. Once the
    preemptor's request fits within a node's own quota on the way up, the candidates found
    from there are taken back by *hierarchical advantage* (reclamation, first in the order);
    before that they are taken by priority, as ``borrowWithinCohort`` allows. Each
    candidate's cohort where it was found is kept (:attr:`Search.found_at`)."""
    policy, preemptor, queue, tree = search.policy, search.preemptor, search.queue, search.tree
    advantaged: list[tuple[Running, str]] = []
    others: list[tuple[Running, str]] = []
    if not queue.cohort or policy.reclaim_within_cohort == NEVER:
        return advantaged, others
    book = search.book
    flavor = quota.flavor
    remaining: dict[str, int] = {}
    advantage = True
    for r, a in preemptor.demand().items():
        used = book.used(queue.name, flavor, r)
        advantage = advantage and used + a <= quota.nominal.get(r, 0)
        remaining[r] = max(0, a - max(0, queue_local(quota, r) - used))

    def collect(cohort: str, skip: str | None, top: str, into: list[tuple[Running, str]]) -> None:
        for child in tree.child_cohorts[cohort]:
            if child != skip and not _cohort_within_nominal(book, child, flavor, needed):
                collect(child, skip, top, into)
        for other in tree.child_queues[cohort]:
            if other.name == queue.name or not _borrows(book, other, flavor, needed):
                continue
            for candidate in by_queue.get(other.name, ()):
                if allowed(policy.reclaim_within_cohort, preemptor, candidate):
                    reason = _reclaim_reason(policy, preemptor, candidate, advantage)
                    into.append((candidate, reason))
                    search.found_at[candidate.key] = top

    # Without borrowing within the cohort, from a queue not under its nominal quota, the
    # preemptor may only try with borrowing allowed (:func:`_attempts`), and then those found
    # before it has the advantage are never valid (:func:`_valid`): they are not gathered (a
    # thousand queues' heads each walked every running workload of their cohort for nothing).
    useless = policy.borrow_within_cohort == NEVER and not _under_nominal(
        book, queue, quota, needed
    )
    previous: str | None = None
    current: str | None = queue.cohort
    while current is not None:
        if advantage or not useless:
            collect(current, previous, current, advantaged if advantage else others)
        fits = True
        for r, amount in remaining.items():
            used = book.cohort_used(current, flavor, r)
            fits = fits and used + amount <= tree.subtree(current, flavor, r)
            remaining[r] = max(0, amount - max(0, tree.cohort_local(current, flavor, r) - used))
        advantage = advantage or fits
        previous, current = current, tree.parent[current]
    return advantaged, others


def candidate_order(candidate: Running, own: str) -> tuple[bool, bool, int, tuple[int, ...], str]:
    """Kueue's CandidatesOrdering, lowest first: already evicted, then other queues before
    the preemptor's own ``own``, lower priority, most recently admitted, then by key."""
    newest_first = tuple(-ord(ch) for ch in candidate.admitted)
    return (
        not candidate.evicted,
        candidate.cluster_queue == own,
        candidate.priority,
        newest_first,
        candidate.key,
    )


def _reclaim_reason(
    policy: PreemptionPolicy, preemptor: PendingWorkload, candidate: Running, own_fits: bool
) -> str:
    if own_fits:
        return IN_COHORT_RECLAMATION  # it takes back its own nominal quota
    if policy.borrow_within_cohort == NEVER:
        return "reclaim-without-borrowing"
    above = candidate.priority >= preemptor.priority or (
        policy.borrow_max_priority is not None and candidate.priority > policy.borrow_max_priority
    )
    return "reclaim-without-borrowing" if above else IN_COHORT_RECLAIM_WHILE_BORROWING


def _valid(
    search: Search,
    quota: FlavorQuota,
    candidate: Running,
    reason: str,
    book: QuotaBook,
    needed: set[str],
    borrow: bool,
) -> bool:
    """Kueue's dynamic check: a victim of another queue only while that queue borrows
    (``book``: the quota with the candidates chosen before it given back)."""
    if candidate.cluster_queue == search.queue.name:
        return True
    if borrow and reason == "reclaim-without-borrowing":
        return False
    other = search.queues[candidate.cluster_queue]
    other_quota = next((f for f in other.flavors if f.flavor == quota.flavor), None)
    if other_quota is None:
        return False
    if not any(
        book.used(other.name, quota.flavor, r) > other_quota.nominal.get(r, 0) for r in needed
    ):
        return False
    # In a tree, every cohort between its queue and where it was found must still be above
    # its own quota (Kueue's candidateIsValid).
    tree, top = search.tree, search.found_at.get(candidate.key)
    cohort = other.cohort
    while cohort is not None and cohort != top:
        if _cohort_within_nominal(book, cohort, quota.flavor, needed):
            return False
        cohort = tree.parent[cohort]
    return True


def _under_nominal(book: QuotaBook, queue: QueueSpec, quota: FlavorQuota, needed: set[str]) -> bool:
    return all(book.used(queue.name, quota.flavor, r) < quota.nominal.get(r, 0) for r in needed)


def _attempts(
    search: Search, quota: FlavorQuota, candidates: list[tuple[Running, str]], needed: set[str]
) -> list[bool]:
    """Kueue's order of attempts (True: the preemptor may borrow to fit)."""
    own = search.queue.name
    from_others = [c for c in candidates if c[0].cluster_queue != own]
    forbidden = search.policy.borrow_within_cohort == NEVER
    under_nominal = _under_nominal(search.book, search.queue, quota, needed)
    if not from_others or (forbidden and not under_nominal):
        return [True]
    if forbidden and not any(c[1] == IN_COHORT_RECLAMATION for c in from_others):
        return [False, True]
    return [True, False]


def _first_fit(
    search: Search,
    quota: FlavorQuota,
    candidates: list[tuple[Running, str]],
    needed: set[str],
    borrow: bool,
) -> list[tuple[Running, str]] | None:
    """The shortest prefix of valid candidates after which the preemptor fits. Validity is
    decided walking in order (it depends on what was removed before); the fit is monotone in
    the prefix, so its end is found by binary search."""
    chosen: list[tuple[Running, str]] = []
    removed: list[Running] = []
    book = search.book_without(())  # followed as the walk removes candidates
    for candidate, reason in candidates:
        if _valid(search, quota, candidate, reason, book, needed, borrow):
            chosen.append((candidate, reason))
            removed.append(candidate)
            take_out(book, candidate)
    if not chosen or not search.fits(quota, removed, borrow):
        return None
    low, high = 1, len(chosen)  # the shortest fitting prefix lies in [low, high]
    while low < high:
        middle = (low + high) // 2
        if search.fits(quota, [c for c, _ in chosen[:middle]], borrow):
            high = middle
        else:
            low = middle + 1
    return chosen[:low]


def fill_back(
    search: Search, quota: FlavorQuota, victims: list[tuple[Running, str]], borrow: bool
) -> list[tuple[Running, str]]:
    """Put back each victim but the last, newest first, when the preemptor fits without
    evicting it (Kueue's fillBackWorkloads). A victim whose nodes the preemptor's current
    placement does not touch is put back without a simulation when quota allows: that
    placement stays valid with it (the reason a victim outside the preemptor's domain is
    never evicted)."""
    kept = list(victims)
    book = search.book_without([c for c, _ in kept])
    current = search.decisions.get(_key([c for c, _ in kept]))
    for index in range(len(kept) - 2, -1, -1):
        candidate = kept[index][0]
        used = _nodes(current)
        if used is not None and candidate.nodes and not candidate.nodes & used:
            if search.quota_fits_back(quota, book, candidate, borrow):
                book.add(candidate.cluster_queue, candidate.flavor, candidate.usage)
                del kept[index]
            continue
        trial = kept[:index] + kept[index + 1 :]
        removed = [c for c, _ in trial]
        if search.fits(quota, removed, borrow):
            book.add(candidate.cluster_queue, candidate.flavor, candidate.usage)
            current = search.decisions.get(_key(removed))
            kept = trial
    # The kept set's placement, for the caller (a put-back without simulation keeps it).
    search.decisions[_key([c for c, _ in kept])] = current
    return kept


def _key(removed: Sequence[Running]) -> frozenset[str]:
    return frozenset(r.key for r in removed)


def _nodes(decision: PlacementDecision | None) -> set[str] | None:
    """The nodes a fitting placement uses, or None when it names none (quota only, or a
    topology whose lowest level is above the node)."""
    if decision is None or not decision.fits:
        return None
    nodes = {n for p in decision.placements for n in p.node_counts}
    return nodes or None


def plan_preemption(
    preemptor: PendingWorkload,
    queue: QueueSpec,
    policy: PreemptionPolicy,
    queues: Mapping[str, QueueSpec],
    usage: Usage,
    running: Sequence[Running] | RunningIndex,
    simulate: Simulate,
    tree: CohortTree | None = None,
) -> Preemption | None:
    """The victims whose eviction lets ``preemptor`` fit quota and topology on the first
    flavor where that is possible, or None (nothing is preempted when nothing would fit).
    Quota is counted, and candidates found, over ``tree`` (flat cohorts without one)."""
    tree = tree if tree is not None else CohortTree(queues)
    search = Search(preemptor, queue, policy, queues, usage, simulate, tree)
    for quota in queue.flavors:
        if set(preemptor.demand()) - set(quota.nominal):
            continue
        needed = needed_resources(search, quota)
        candidates = _candidates(search, quota, running, needed)
        for borrow in _attempts(search, quota, candidates, needed):
            victims = _first_fit(search, quota, candidates, needed, borrow)
            if victims is None:
                continue
            victims = fill_back(search, quota, victims, borrow)
            # Every set kept was simulated on the way (the search only keeps fitting ones).
            decision = search.decisions[_key([c for c, _ in victims])]
            reasons = tuple(
                Victim(c.key, IN_COHORT_RECLAMATION if r == "reclaim-without-borrowing" else r)
                for c, r in victims
            )
            gone = released([c for c, _ in victims])
            return Preemption(quota.flavor, reasons, decision, search.placements, gone)
    return None


class FutileSearches:
    """Preemption searches that found no victims, with everything they read, so a search
    with the same inputs is not run again (nearly every search of a busy cycle finds nothing,
    and the same heads are searched cycle after cycle while nothing they read changes).

    What a search reads: the capacity snapshot and the catalog (by identity: a snapshot or a
    catalog is a new object once anything in it changed), the preemptor, the quota in use,
    what earlier heads of the cycle hold, the admitted workloads (candidates) and the policy
    options (by value). Any difference is a miss. Only the newest snapshot's answers are kept:
    an older snapshot never comes back.
    """

    def __init__(self) -> None:
        self._snapshot: object = None
        self._known: dict[str, tuple[object, ...]] = {}
        self.hits = 0  # for tests and the benchmark

    def futile(self, snapshot: object, key: str, inputs: tuple[object, ...]) -> bool:
        """True when a search of ``key`` with these inputs already found nothing."""
        if snapshot is not self._snapshot:
            self._snapshot = snapshot
            self._known.clear()
            return False
        known = self._known.get(key)
        if known is None or not _same(known, inputs):
            return False
        self.hits += 1
        return True

    def found_nothing(self, snapshot: object, key: str, inputs: tuple[object, ...]) -> None:
        if snapshot is not self._snapshot:
            self._snapshot = snapshot
            self._known.clear()
        self._known[key] = inputs

    def forget(self, key: str) -> None:
        self._known.pop(key, None)


def _same(known: tuple[object, ...], inputs: tuple[object, ...]) -> bool:
    # Identity first (a cycle's searches share their running list and catalog), then value.
    return len(known) == len(inputs) and all(
        a is b or a == b for a, b in zip(known, inputs, strict=True)
    )
