"""Fair sharing: Kueue's dominant resource share of ClusterQueues and Cohorts, and the order
in which the queues of a cohort tree get their turn (its fair-sharing tournament). Pure and
synchronous; reads a :class:`.quota.QuotaBook`.

The share of a node (queue or cohort) with a parent: for each resource, what the node uses
above its subtree quota, summed over flavors, per mille of what its parent's subtree could
lend it (the parent's potential, summed over the tree's flavors); the largest of these,
divided by the node's ``fairSharing.weight`` (default 1). A node without a parent has share
0; a node of weight 0 that borrows has an infinite share, and such nodes rank after all
others, by their unweighted ratio among themselves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from .quota import QueueSpec, QuotaBook, queue_local, queue_quota

FlavorResource = tuple[str, str]  # (flavor, resource)
DEFAULT_WEIGHT = 1.0
MAX_INT64 = 2**63 - 1  # Kueue's weighted share of a zero-weight borrower


@dataclass(frozen=True, slots=True)
class Share:
    """A node's dominant resource share (Kueue's DRS)."""

    weight: float = DEFAULT_WEIGHT
    ratio: float = 0.0  # unweighted: borrowed per mille of lendable, of the dominant resource
    dominant: str = ""
    borrowed: frozenset[FlavorResource] = field(default_factory=frozenset)  # borrowing on

    @property
    def value(self) -> float:
        """The weighted share: 0 when not borrowing, infinite at weight 0."""
        if self.ratio == 0:
            return 0.0
        if self.weight == 0:
            return math.inf
        return self.ratio / self.weight

    @property
    def rounded(self) -> int:
        """As Kueue writes ``status.fairSharing.weightedShare``: rounded up, the largest
        integer when a zero-weight node borrows."""
        if self.weight == 0 and self.ratio != 0:
            return MAX_INT64
        return math.ceil(self.value)

    @property
    def order(self) -> tuple[int, float]:
        """Lower is served first (Kueue's CompareDRS): zero-weight borrowers after all others,
        by their unweighted ratio among themselves."""
        if self.weight == 0 and self.ratio != 0:
            return (1, self.ratio)
        return (0, self.value)

    def borrows_on(self, requested: frozenset[FlavorResource]) -> bool:
        return not self.borrowed.isdisjoint(requested)


class FairShares:
    """Shares over one :class:`QuotaBook`'s tree and usage, with or without a candidate
    workload's usage added to a queue (and what it puts on each cohort up to the root)."""

    def __init__(self, book: QuotaBook) -> None:
        self.book = book
        self.tree = book.tree
        self._frs: dict[str, frozenset[FlavorResource]] = {}
        self._lendable: dict[str, dict[str, int]] = {}

    def cohort_resources(self, cohort: str) -> frozenset[FlavorResource]:
        """The (flavor, resource) pairs a cohort's subtree has quota entries for (Kueue keeps
        even zeros in a cohort's SubtreeQuota)."""
        found = self._frs.get(cohort)
        if found is None:
            tree = self.tree
            pairs = {(f.flavor, r) for f in tree.cohorts[cohort].flavors for r in f.nominal}
            for queue in tree.child_queues[cohort]:
                pairs |= _queue_resources(queue)
            for child in tree.child_cohorts[cohort]:
                pairs |= self.cohort_resources(child)
            found = self._frs[cohort] = frozenset(pairs)
        return found

    def lendable(self, cohort: str) -> Mapping[str, int]:
        """Per resource, what ``cohort`` could lend a child: its potential in every flavor of
        the tree, summed (Kueue's calculateLendable; static, it depends on quotas only)."""
        found = self._lendable.get(cohort)
        if found is None:
            found = {}
            for flavor, resource in sorted(self.cohort_resources(self.tree.root(cohort))):
                amount = self.book.cohort_potential(cohort, flavor, resource)
                found[resource] = found.get(resource, 0) + amount
            self._lendable[cohort] = found
        return found

    def _share(
        self,
        weight: float | None,
        parent: str | None,
        above: Mapping[FlavorResource, int],
    ) -> Share:
        """``above``: usage beyond subtree quota per (flavor, resource), positive or not."""
        share = Share(DEFAULT_WEIGHT if weight is None else weight)
        if parent is None:
            return share
        borrowing: dict[str, int] = {}
        borrowed: set[FlavorResource] = set()
        for (flavor, resource), amount in above.items():
            if amount > 0:
                borrowing[resource] = borrowing.get(resource, 0) + amount
                borrowed.add((flavor, resource))
        if not borrowing:
            return share
        ratio, dominant = 0.0, ""
        lendable = self.lendable(parent)
        for resource, amount in borrowing.items():
            lend = lendable.get(resource, 0)
            if lend <= 0:
                continue
            found = amount * 1000.0 / lend
            if found > ratio or (found == ratio and resource < dominant):
                ratio, dominant = found, resource
        return Share(share.weight, ratio, dominant, frozenset(borrowed))

    def queue_share(self, queue: QueueSpec, extra: Mapping[FlavorResource, int] = {}) -> Share:
        above: dict[FlavorResource, int] = {}
        for flavor, resource in _queue_resources(queue):
            quota = queue_quota(queue, flavor)
            nominal = quota.nominal.get(resource, 0) if quota is not None else 0
            used = self.book.used(queue.name, flavor, resource)
            above[(flavor, resource)] = used + extra.get((flavor, resource), 0) - nominal
        return self._share(queue.weight, queue.cohort, above)

    def cohort_share(self, cohort: str, extra: Mapping[FlavorResource, int] = {}) -> Share:
        tree, book = self.tree, self.book
        above = {
            (f, r): book.cohort_used(cohort, f, r)
            + extra.get((f, r), 0)
            - tree.subtree(cohort, f, r)
            for f, r in self.cohort_resources(cohort)
        }
        return self._share(tree.cohorts[cohort].weight, tree.parent[cohort], above)

    def path(self, queue: QueueSpec, flavor: str, demand: Mapping[str, int]) -> dict[str, Share]:
        """With ``demand`` added to the queue in ``flavor``: the share of the queue and of
        each cohort above it, keyed by the cohort where it is compared (the node's parent),
        as Kueue's tournament compares them."""
        shares: dict[str, Share] = {}
        if not queue.cohort:
            return shares
        book, tree = self.book, self.tree
        quota = queue_quota(queue, flavor)
        extra: dict[FlavorResource, int] = {}
        if quota is not None:
            extra = {(flavor, r): a for r, a in demand.items() if r in quota.nominal and a}
        shares[queue.cohort] = self.queue_share(queue, extra)
        # What the queue's added usage puts on its cohort: only the part beyond local quota.
        up: dict[FlavorResource, int] = {}
        for (f, r), amount in extra.items():
            assert quota is not None
            local, used = queue_local(quota, r), book.used(queue.name, f, r)
            up[(f, r)] = max(0, used + amount - local) - max(0, used - local)
        cohort: str | None = queue.cohort
        while cohort is not None:
            parent = tree.parent[cohort]
            if parent is None:
                break
            shares[parent] = self.cohort_share(cohort, up)
            nxt: dict[FlavorResource, int] = {}
            for (f, r), amount in up.items():
                local, used = tree.cohort_local(cohort, f, r), book.cohort_used(cohort, f, r)
                nxt[(f, r)] = max(0, used + amount - local) - max(0, used - local)
            up, cohort = nxt, parent
        return shares


def _queue_resources(queue: QueueSpec) -> frozenset[FlavorResource]:
    return frozenset((f.flavor, r) for f in queue.flavors for r in f.nominal)


def tree_shares(book: QuotaBook) -> tuple[dict[str, Share], dict[str, Share]]:
    """Every ClusterQueue's share and every cohort's (named or with an object) over the
    book's usage, with nothing added: what ``status.fairSharing`` and `status --queues`
    report. A queue without a cohort, and a root cohort, have share 0."""
    fair = FairShares(book)
    queues = {name: fair.queue_share(queue) for name, queue in book.queues.items()}
    cohorts = {name: fair.cohort_share(name) for name in book.tree.cohorts}
    return queues, cohorts
