"""Fair-sharing preemption, topology-aware: which admitted workloads to evict so that a pending
gang fits, when ``serve --fair-sharing`` is on. Pure and synchronous.

Kueue's fair preemption (its pkg/scheduler/preemption ``fairPreemptions`` and the
``fairsharing`` package), with the fit simulated on the capacity snapshot without the victims
as in :mod:`.preemption`:

- candidates: workloads of the preemptor's queue its ``withinClusterQueue`` policy allows, and
  workloads of every queue of its cohort *tree* that borrows in a resource needing
  preemption, as ``reclaimWithinCohort`` allows; ordered as classical preemption orders them;
- the preemptor's usage is counted as admitted; then target queues are taken in turn: from
  the root down, the child (queue or cohort) with the highest dominant resource share
  (:mod:`.fairshare`), skipping those that do not borrow (the cohorts on the preemptor's path
  and its own queue excepted, which may still hold candidates);
- a target in the preemptor's own queue is taken as it comes (``InClusterQueue``); while the
  preemptor's queue stays within its nominal quota with the preemptor, any target is taken
  (``InCohortReclamation``, Kueue's ``FairSharingPreemptWithinNominal``, on by default);
- otherwise the shares are compared where the two branches meet (each side's child of their
  lowest common cohort): the first strategy decides per candidate, in the queue's order, and
  takes at most one per turn; ``LessThanOrEqualToFinalShare``: the preemptor's share after
  admission is at most the target's after the eviction; ``LessThanInitialShare``: it is below
  the target's before it. Candidates refused are tried again by the second strategy, which is
  always ``LessThanInitialShare`` and takes at most one per queue;
- taken victims stop at the first that lets the preemptor fit; then each but the last is put
  back when the preemptor still fits without evicting it (:func:`.preemption.fill_back`).

Which victims are taken does not depend on whether the preemptor fits (that only says where
to stop), and the fit only improves with more victims: so the sequence is generated lazily and
its first fitting prefix found by galloping, then bisecting, over placements, about
2·log2(n) simulations rather than one per victim.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence

from .fairshare import FairShares, Share
from .lanes import PendingWorkload
from .preemption import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_RECLAMATION,
    NEVER,
    Preemption,
    Running,
    Search,
    Simulate,
    Victim,
    allowed,
    candidate_order,
    fill_back,
    needed_resources,
    released,
)
from .quota import CohortTree, FlavorQuota, QueueSpec, QuotaBook, Usage, queue_quota

LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"
STRATEGIES = (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE)
DEFAULT_STRATEGIES = STRATEGIES  # Kueue's default: both, in this order
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"

_NEGATIVE = Share(ratio=-1.0)  # below every share (Kueue's NegativeDRS)


def compare(a: Share, b: Share) -> int:
    """Kueue's CompareDRS: -1, 0 or 1."""
    return (a.order > b.order) - (a.order < b.order)


def _passes(strategy: str, preemptor_new: Share, target_old: Share, target_new: Share) -> bool:
    if strategy == LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return compare(preemptor_new, target_new) <= 0
    return compare(preemptor_new, target_old) < 0


Node = tuple[bool, str]  # (is a cohort, name)


class _Tree:
    """The cohort tree as fair preemption walks it, with usage that changes as victims are
    taken (a :class:`QuotaBook` with the preemptor counted as admitted)."""

    def __init__(self, queue: QueueSpec, book: QuotaBook) -> None:
        self.own, self.book, self.tree = queue.name, book, book.tree
        self.fair = FairShares(book)
        self.path: set[str] = set()
        cohort = queue.cohort
        while cohort is not None:
            self.path.add(cohort)
            cohort = self.tree.parent[cohort]

    def share(self, node: Node) -> Share:
        is_cohort, name = node
        if is_cohort:
            return self.fair.cohort_share(name)
        return self.fair.queue_share(self.book.queues[name])

    def below(self, queue: str, lca: str) -> Node:
        """The child of cohort ``lca`` on the way down to ``queue``."""
        node: Node = (False, queue)
        cohort = self.book.queues[queue].cohort
        while cohort is not None and cohort != lca:
            node, cohort = (True, cohort), self.tree.parent[cohort]
        return node

    def lca(self, queue: str) -> str:
        cohort = self.book.queues[queue].cohort
        while cohort is not None and cohort not in self.path:
            cohort = self.tree.parent[cohort]
        assert cohort is not None, f"{queue} is not in the preemptor's tree"
        return cohort

    def shares(self, target: str) -> tuple[Share, Share]:
        """(the preemptor's share, the target's) where their branches meet."""
        lca = self.lca(target)
        return self.share(self.below(self.own, lca)), self.share(self.below(target, lca))

    def remove(self, victim: Running, sign: int = -1) -> None:
        self.book.add(
            victim.cluster_queue, victim.flavor, {k: sign * v for k, v in victim.usage.items()}
        )


class _Ordering:
    """Kueue's TargetClusterQueueOrdering: the next target queue, by share from the root."""

    def __init__(self, tree: _Tree, candidates: Sequence[Running]) -> None:
        self.tree = tree
        self.by_queue: dict[str, deque[Running]] = {}
        for candidate in candidates:
            self.by_queue.setdefault(candidate.cluster_queue, deque()).append(candidate)
        self.pruned_queues: set[str] = set()
        self.pruned_cohorts: set[str] = set()

    def has(self, queue: str) -> bool:
        return bool(self.by_queue.get(queue))

    def pop(self, queue: str) -> Running:
        return self.by_queue[queue].popleft()

    def drop(self, queue: str) -> None:
        self.pruned_queues.add(queue)

    def targets(self) -> Iterator[str]:
        """Target queues, each time the highest by share; the caller takes from it before
        asking again."""
        own = self.tree.own
        cohort = self.tree.book.queues[own].cohort
        if cohort is None:
            while own not in self.pruned_queues and self.has(own):
                yield own
            return
        root = self.tree.tree.root(cohort)
        while root not in self.pruned_cohorts:
            target = self._next(root)
            if target is not None:
                yield target

    def _next(self, cohort: str) -> str | None:
        tree, own = self.tree, self.tree.own
        best_queue: str | None = None
        best_queue_share = _NEGATIVE
        for queue in tree.tree.child_queues[cohort]:
            name = queue.name
            if name in self.pruned_queues:
                continue
            share = tree.share((False, name))
            found = compare(share, best_queue_share)
            if (not share.borrowed and name != own) or not self.has(name):
                self.pruned_queues.add(name)
            elif found == 0 and best_queue is not None:
                # Equal shares: the queue whose next candidate comes first.
                head, best = self.by_queue[name][0], self.by_queue[best_queue][0]
                if candidate_order(head, own) < candidate_order(best, own):
                    best_queue = name
            elif found > 0:
                best_queue, best_queue_share = name, share
        best_cohort: str | None = None
        best_cohort_share = _NEGATIVE
        for child in tree.tree.child_cohorts[cohort]:
            if child in self.pruned_cohorts:
                continue
            share = tree.share((True, child))
            # A cohort on the preemptor's path stays until all below it are pruned.
            if not share.borrowed and child not in tree.path:
                self.pruned_cohorts.add(child)
            elif compare(share, best_cohort_share) >= 0:
                best_cohort, best_cohort_share = child, share
        if best_cohort is None and best_queue is None:
            self.pruned_cohorts.add(cohort)
            return None
        # On a tie the cohort: the most unfair node within it can then be chosen.
        if best_cohort is not None and compare(best_cohort_share, best_queue_share) >= 0:
            return self._next(best_cohort)
        return best_queue


def _unsatisfiable(preemptor_new: Share, target_old: Share) -> bool:
    return math.isinf(preemptor_new.value) and not math.isinf(target_old.value)


def _sequence(
    tree: _Tree,
    candidates: Sequence[Running],
    strategies: Sequence[str],
    within_nominal: bool,
) -> Iterator[tuple[Running, str]]:
    """The victims in the order Kueue takes them, each removed from ``tree`` as it is
    yielded (it does not depend on whether the preemptor fits, only where it stops)."""
    own = tree.own
    retry: list[Running] = []
    ordering = _Ordering(tree, candidates)
    for target in ordering.targets():
        if target == own or within_nominal:
            victim = ordering.pop(target)
            tree.remove(victim)
            yield victim, IN_CLUSTER_QUEUE if target == own else IN_COHORT_RECLAMATION
            continue
        preemptor_new, target_old = tree.shares(target)
        if _unsatisfiable(preemptor_new, target_old):  # no candidate of it could pass
            while ordering.has(target):
                retry.append(ordering.pop(target))
            continue
        while ordering.has(target):
            victim = ordering.pop(target)
            tree.remove(victim)
            _, target_new = tree.shares(target)
            if _passes(strategies[0], preemptor_new, target_old, target_new):
                yield victim, IN_COHORT_FAIR_SHARING
                break
            tree.remove(victim, +1)
            retry.append(victim)
    if len(strategies) < 2:
        return
    second = _Ordering(tree, retry)
    for target in second.targets():
        preemptor_new, target_old = tree.shares(target)
        victim = second.pop(target)
        if _passes(LESS_THAN_INITIAL_SHARE, preemptor_new, target_old, target_old):
            tree.remove(victim)
            yield victim, IN_COHORT_FAIR_SHARING
        second.drop(target)


def _candidates(
    search: Search, quota: FlavorQuota, running: Sequence[Running], needed: set[str]
) -> list[Running]:
    """Kueue's findCandidates: the preemptor's own queue by its policy; any queue of the
    tree borrowing in a needed resource, by ``reclaimWithinCohort``."""
    queue, policy, preemptor = search.queue, search.policy, search.preemptor
    book, tree = QuotaBook(search.queues, search.usage, search.tree), search.tree
    root = tree.root(queue.cohort) if queue.cohort else None
    borrowing: dict[str, bool] = {}

    def borrows(name: str) -> bool:
        found = borrowing.get(name)
        if found is None:
            other = search.queues.get(name)
            found = (
                other is not None
                and other.cohort is not None
                and name not in tree.inactive
                and tree.root(other.cohort) == root
                and _borrowing(book, other, quota.flavor, needed)
            )
            borrowing[name] = found
        return found

    within, reclaim = policy.within_cluster_queue, policy.reclaim_within_cohort
    out: list[Running] = []
    for candidate in running:
        if candidate.flavor != quota.flavor or not needed & set(candidate.usage):
            continue
        if candidate.cluster_queue == queue.name:
            policy_name, eligible = within, True
        else:
            policy_name, eligible = reclaim, root is not None and borrows(candidate.cluster_queue)
        if eligible and policy_name != NEVER and allowed(policy_name, preemptor, candidate):
            out.append(candidate)
    out.sort(key=lambda c: candidate_order(c, queue.name))
    return out


def _borrowing(book: QuotaBook, queue: QueueSpec, flavor: str, needed: set[str]) -> bool:
    """Whether ``queue`` uses more than its nominal quota of a needed resource."""
    quota = queue_quota(queue, flavor)
    nominal = quota.nominal if quota is not None else {}
    return any(book.used(queue.name, flavor, r) > nominal.get(r, 0) for r in needed)


def _shortest(
    search: Search, quota: FlavorQuota, sequence: Iterator[tuple[Running, str]]
) -> list[tuple[Running, str]] | None:
    """The first prefix of ``sequence`` after which the preemptor fits (quota with
    borrowing, and topology): quota is checked victim by victim, placements by galloping
    from the first prefix whose quota fits, then bisecting."""
    taken: list[tuple[Running, str]] = []

    def extend(length: int) -> int:
        while len(taken) < length:
            following = next(sequence, None)
            if following is None:
                break
            taken.append(following)
        return min(length, len(taken))

    def removed(length: int) -> list[Running]:
        return [c for c, _ in taken[:length]]

    failed, want, stride = 0, 1, 1  # the prefix of length `failed` is known not to fit
    while True:
        length = extend(want)
        if length <= failed:
            return None  # the sequence ran out without a fit
        if not search.quota_fits(quota, removed(length), True):
            failed, want = length, length + 1
            continue
        if search.fits(quota, removed(length), True):
            break
        failed, want, stride = length, length + stride, stride * 2
    low, high = failed + 1, length
    while low < high:
        middle = (low + high) // 2
        if search.fits(quota, removed(middle), True):
            high = middle
        else:
            low = middle + 1
    return taken[:low]


def plan_fair_preemption(
    preemptor: PendingWorkload,
    queue: QueueSpec,
    queues: Mapping[str, QueueSpec],
    usage: Usage,
    running: Sequence[Running],
    simulate: Simulate,
    tree: CohortTree | None = None,
    strategies: Sequence[str] = DEFAULT_STRATEGIES,
) -> Preemption | None:
    """The victims fair sharing allows to evict so that ``preemptor`` fits quota and
    topology, on the first flavor where that is possible, or None. ``strategies``: Kueue's
    ``fairSharing.preemptionStrategies`` (one or two of :data:`STRATEGIES`, in order)."""
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown or not strategies:
        raise ValueError(f"preemption strategies must be one or two of {STRATEGIES}: {unknown}")
    tree = tree if tree is not None else CohortTree(queues)
    search = Search(preemptor, queue, queue.preemption, queues, usage, simulate, tree)
    demand = preemptor.demand()
    for quota in queue.flavors:
        if set(demand) - set(quota.nominal):
            continue
        needed = needed_resources(search, quota)
        candidates = _candidates(search, quota, running, needed)
        if not candidates:
            continue
        book = QuotaBook(queues, {k: dict(v) for k, v in usage.items()}, tree)
        book.add(queue.name, quota.flavor, demand)  # the preemptor counted as admitted
        within_nominal = all(
            book.used(queue.name, quota.flavor, r) <= quota.nominal.get(r, 0) for r in needed
        )
        order = _sequence(_Tree(queue, book), candidates, strategies, within_nominal)
        victims = _shortest(search, quota, order)
        if victims is None:
            continue
        victims = fill_back(search, quota, victims, True)
        decision = search.decisions[frozenset(c.key for c, _ in victims)]
        chosen = tuple(Victim(c.key, r) for c, r in victims)
        gone = released([c for c, _ in victims])
        return Preemption(quota.flavor, chosen, decision, search.placements, gone)
    return None
