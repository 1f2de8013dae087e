"""The cohort tree as `topogate status --queues` draws it: root cohorts, their child cohorts
and ClusterQueues, and each ClusterQueue's LocalQueues, with quota figures per node. Pure:
reads a :class:`.quota.QuotaBook` and the fair shares over it.

Per node and (flavor, resource), by Kueue's resource-node arithmetic:
- nominal: a queue's nominal quota; a cohort's subtree quota (its own quota plus what its
  members lend up);
- used: a queue's usage; a cohort's is what its members use beyond what they keep local;
- borrowed: used beyond nominal;
- lent: of the node's unused quota in its parent's pool, what others there borrow (its
  siblings' borrowing plus what the parent lends on). Who lends to whom is not recorded, so
  when several nodes have unused quota each counts all the borrowing its own could cover:
  an upper bound, never more than the node's unused quota.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .fairshare import Share, tree_shares
from .quota import (
    MAX_COHORT_DEPTH,
    CohortSpec,
    CohortTree,
    QueueSpec,
    QuotaBook,
    queue_local,
    queue_quota,
)

CLUSTER_QUEUE, COHORT, LOCAL_QUEUE = "ClusterQueue", "Cohort", "LocalQueue"


@dataclass(frozen=True, slots=True)
class Figures:
    """One (flavor, resource) of a node."""

    flavor: str
    resource: str
    nominal: int
    used: int
    borrowed: int
    lent: int


@dataclass(slots=True)
class TreeNode:
    kind: str  # CLUSTER_QUEUE, COHORT or LOCAL_QUEUE
    name: str
    figures: list[Figures] = field(default_factory=list)
    share: Share | None = None  # with fair shares asked for; none for a LocalQueue
    pending: int = 0  # waiting workloads (a cohort: of its whole subtree)
    problem: str = ""  # a cohort in a cycle: the cycle, in words
    children: list[TreeNode] = field(default_factory=list)


def queue_tree(
    book: QuotaBook,
    pending: Mapping[str, int],
    local_queues: Mapping[str, str | None] = {},
    local_pending: Mapping[str, int] = {},
    shares: bool = False,
) -> list[TreeNode]:
    """The forest: root cohorts by name, then ClusterQueues without a cohort by name.
    ``pending`` per ClusterQueue; ``local_queues``: "namespace/name" -> ClusterQueue, with
    ``local_pending`` per LocalQueue; ``shares``: fill in each node's fair share."""
    tree = book.tree
    by_queue, by_cohort = tree_shares(book) if shares else ({}, {})
    locals_of: dict[str, list[str]] = {}
    for key, cq in sorted(local_queues.items()):
        if cq:
            locals_of.setdefault(cq, []).append(key)
    figures = _Figures(book)

    def queue_node(queue: QueueSpec) -> TreeNode:
        node = TreeNode(CLUSTER_QUEUE, queue.name, figures.of_queue(queue))
        node.share, node.pending = by_queue.get(queue.name), pending.get(queue.name, 0)
        node.children = [
            TreeNode(LOCAL_QUEUE, key, pending=local_pending.get(key, 0))
            for key in locals_of.get(queue.name, [])
        ]
        return node

    def cohort_node(name: str) -> TreeNode:
        node = TreeNode(COHORT, name, figures.of_cohort(name), by_cohort.get(name))
        cycle = tree.cycles.get(name)
        if cycle:
            node.problem = f"in a cycle: {' -> '.join(cycle)}"
        elif name in tree.too_deep:
            node.problem = f"{tree.too_deep[name]} levels below its root, too deep"
        node.children = [cohort_node(c) for c in sorted(tree.child_cohorts[name])]
        node.children += [
            queue_node(q) for q in sorted(tree.child_queues[name], key=lambda q: q.name)
        ]
        node.pending = sum(child.pending for child in node.children)
        return node

    roots = [cohort_node(name) for name in sorted(tree.cohorts) if tree.parent[name] is None]
    alone = sorted((q for q in book.queues.values() if not q.cohort), key=lambda q: q.name)
    return roots + [queue_node(q) for q in alone]


def tree_warnings(tree: CohortTree, objects: Mapping[str, CohortSpec]) -> list[str]:
    """What a user likely did not mean, one line each: a ``parentName`` no Cohort object
    holds (Kueue makes it a root without quota; often a typo), and each cycle once, with the
    ClusterQueues it stops. ``objects``: the Cohort objects, by name."""
    warnings = [
        f"Cohort {name}: parentName {cohort.parent} names no Cohort; {cohort.parent} is a "
        "root cohort without quota of its own"
        for name, cohort in sorted(objects.items())
        if cohort.parent and cohort.parent not in objects
    ]
    said: set[frozenset[str]] = set()
    for name in sorted(tree.cycles):
        cycle = tree.cycles[name]
        if frozenset(cycle) in said or name != cycle[0]:
            continue  # said, or a cohort that only leads into the cycle
        said.add(frozenset(cycle))
        stopped = sorted(
            q
            for q in tree.inactive
            if frozenset(tree.cycles.get(tree.queues[q].cohort or "", ())) == frozenset(cycle)
        )
        warnings.append(
            f"Cohort {name} is in a cycle ({' -> '.join(cycle)}): ClusterQueues "
            f"{', '.join(stopped) or '(none)'} are inactive and admit nothing"
        )
    below: dict[str, list[str]] = {}  # each cut Cohort: the queues at or below it
    for queue in sorted(q for q in tree.inactive if tree.queues[q].cohort in tree.too_deep):
        cohort = tree.queues[queue].cohort or ""
        while tree.too_deep[cohort] > MAX_COHORT_DEPTH:
            cohort = tree.cohorts[cohort].parent or ""
        below.setdefault(cohort, []).append(queue)
    warnings += [
        f"Cohort {name} is {MAX_COHORT_DEPTH} levels below its root Cohort; topogate reads "
        f"{MAX_COHORT_DEPTH - 1} at most: ClusterQueues "
        f"{', '.join(below.get(name, [])) or '(none)'} at or below it are inactive and admit "
        "nothing"
        for name, depth in sorted(tree.too_deep.items())
        if depth == MAX_COHORT_DEPTH
    ]
    return warnings


class _Figures:
    def __init__(self, book: QuotaBook) -> None:
        self.book, self.tree = book, book.tree
        self._lent: dict[tuple[str, str, str], int] = {}  # cohort's, per flavor and resource
        self._borrowing: dict[tuple[str, str, str], int] = {}  # all children's, per cohort
        self._pair_cache: dict[str, set[tuple[str, str]]] = {}

    def of_queue(self, queue: QueueSpec) -> list[Figures]:
        out = []
        for quota in queue.flavors:
            for resource in sorted(quota.nominal):
                nominal = quota.nominal[resource]
                used = self.book.used(queue.name, quota.flavor, resource)
                local = queue_local(quota, resource)
                unused = max(0, (nominal - local) - max(0, used - local))
                lent = 0
                if queue.cohort and unused:
                    lent = min(unused, self._demand(queue.cohort, quota.flavor, resource, queue))
                borrowed = max(0, used - nominal)
                out.append(Figures(quota.flavor, resource, nominal, used, borrowed, lent))
        return out

    def of_cohort(self, cohort: str) -> list[Figures]:
        pairs = sorted(self._pairs(cohort))
        return [
            Figures(
                flavor,
                resource,
                self.tree.subtree(cohort, flavor, resource),
                self.book.cohort_used(cohort, flavor, resource),
                max(
                    0,
                    self.book.cohort_used(cohort, flavor, resource)
                    - self.tree.subtree(cohort, flavor, resource),
                ),
                self._cohort_lent(cohort, flavor, resource),
            )
            for flavor, resource in pairs
        ]

    def _pairs(self, cohort: str) -> set[tuple[str, str]]:
        found = self._pair_cache.get(cohort)
        if found is None:
            tree = self.tree
            found = {(f.flavor, r) for f in tree.cohorts[cohort].flavors for r in f.nominal}
            for queue in tree.child_queues[cohort]:
                found |= {(f.flavor, r) for f in queue.flavors for r in f.nominal}
            for child in tree.child_cohorts[cohort]:
                found |= self._pairs(child)
            self._pair_cache[cohort] = found
        return found

    def _cohort_lent(self, cohort: str, flavor: str, resource: str) -> int:
        key = (cohort, flavor, resource)
        found = self._lent.get(key)
        if found is None:
            tree, book = self.tree, self.book
            parent = tree.parent[cohort]
            found = 0
            if parent is not None:
                subtree = tree.subtree(cohort, flavor, resource)
                local = tree.cohort_local(cohort, flavor, resource)
                used = book.cohort_used(cohort, flavor, resource)
                unused = max(0, (subtree - local) - max(0, used - local))
                if unused:
                    found = min(unused, self._demand(parent, flavor, resource, cohort))
            self._lent[key] = found
        return found

    def _demand(self, parent: str, flavor: str, resource: str, child: QueueSpec | str) -> int:
        """What the parent's pool gives out beyond its members' own quota, other than to
        ``child``: its other children's borrowing, plus what it lends on to its parent."""
        key = (parent, flavor, resource)
        total = self._borrowing.get(key)
        if total is None:
            total = sum(self._borrowed(c, flavor, resource) for c in self._children(parent))
            self._borrowing[key] = total
        own = self._borrowed(child, flavor, resource)
        return total - own + self._cohort_lent(parent, flavor, resource)

    def _children(self, cohort: str) -> list[QueueSpec | str]:
        return [*self.tree.child_cohorts[cohort], *self.tree.child_queues[cohort]]

    def _borrowed(self, node: QueueSpec | str, flavor: str, resource: str) -> int:
        """A child's usage beyond its own quota (a cohort's: beyond its subtree quota)."""
        if isinstance(node, str):
            used = self.book.cohort_used(node, flavor, resource)
            return max(0, used - self.tree.subtree(node, flavor, resource))
        quota = queue_quota(node, flavor)
        if quota is None:
            return 0
        used = self.book.used(node.name, flavor, resource)
        return max(0, used - quota.nominal.get(resource, 0))
