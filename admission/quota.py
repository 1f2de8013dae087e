"""Queue specs and quota: a ClusterQueue's flavors and limits as the cycle reads them, the quota
book (in use and available per queue, flavor and resource, cohorts included), the quota held by
written admissions, and the rows `topogate status --queues` shows. Pure and synchronous.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from topogate.api.errors import InputError
from topogate.api.models import ClusterQueue, Cohort, ResourceGroup
from topogate.api.quantity import QuantityError, parse_quantity, to_units

from .fungibility import DEFAULT as DEFAULT_FUNGIBILITY
from .fungibility import FlavorFungibility

STRICT_FIFO = "StrictFIFO"

# (cluster queue, flavor) -> resource -> amount: quota is per ClusterQueue and flavor.
Usage = dict[tuple[str, str], dict[str, int]]


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


def _flavor_quotas(groups: Iterable[ResourceGroup]) -> tuple[FlavorQuota, ...]:
    return tuple(
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
        for group in groups
        for flavor in group.flavors
    )


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    strategy: str
    flavors: tuple[FlavorQuota, ...]  # in the order they are tried
    cohort: str | None = None
    preemption: PreemptionPolicy = PreemptionPolicy()
    weight: float | None = None  # spec.fairSharing.weight (fair sharing; None: 1)
    fungibility: FlavorFungibility = DEFAULT_FUNGIBILITY  # spec.flavorFungibility
    # Its flavors by name (the first of a name, as a walk in order finds it): the quota
    # arithmetic asks for a queue's flavor millions of times a cycle at a thousand queues.
    by_flavor: Mapping[str, FlavorQuota] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_flavor: dict[str, FlavorQuota] = {}
        for flavor in self.flavors:
            by_flavor.setdefault(flavor.flavor, flavor)
        object.__setattr__(self, "by_flavor", by_flavor)

    @classmethod
    def from_model(cls, queue: ClusterQueue) -> QueueSpec:
        flavors = _flavor_quotas(queue.spec.resource_groups)
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
        weight = spec.fair_sharing.weight if spec.fair_sharing is not None else None
        fungibility = DEFAULT_FUNGIBILITY
        if spec.flavor_fungibility is not None:
            given = spec.flavor_fungibility
            fungibility = FlavorFungibility(
                given.when_can_borrow, given.when_can_preempt, given.preference
            )
        return cls(
            queue.metadata.name,
            spec.queueing_strategy,
            flavors,
            spec.cohort_of,
            policy,
            _weight(weight),
            fungibility,
        )


def _weight(weight: str | int | None) -> float | None:
    """``fairSharing.weight`` as a float; one past a float's range is infinite, as Kueue's
    ``AsApproximateFloat64`` reads it (its share is then 0), not an OverflowError that no
    reader of the catalog catches."""
    if weight is None:
        return None
    value = parse_quantity(weight)
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


@dataclass(frozen=True, slots=True)
class CohortSpec:
    """A Cohort object (Kueue's ``kueue.x-k8s.io/v1beta2`` or topogate's twin): its parent in
    the tree and the quota it holds itself. A cohort only named by ClusterQueues or as a
    parent has no object: no quota, no parent."""

    name: str
    parent: str | None = None
    flavors: tuple[FlavorQuota, ...] = ()
    weight: float | None = None  # spec.fairSharing.weight (fair sharing; None: 1)

    @classmethod
    def from_model(cls, cohort: Cohort) -> CohortSpec:
        spec = cohort.spec
        weight = spec.fair_sharing.weight if spec.fair_sharing is not None else None
        return cls(
            cohort.metadata.name,
            spec.parent_name,
            _flavor_quotas(spec.resource_groups),
            _weight(weight),
        )


# Cohorts at this many levels below their root or more are cut from the tree, their queues
# inactive: the tree's walks recurse once per level (Python's stack holds about 1,000 frames).
MAX_COHORT_DEPTH = 64


class CohortTree:
    """The cohort forest over a set of ClusterQueues: parents, children, heights, the quota
    each node holds for its subtree (static: it depends on quotas only), and the queues a
    cycle in the tree makes inactive. Built once per cycle; a :class:`QuotaBook` reads it."""

    def __init__(
        self, queues: Mapping[str, QueueSpec], cohorts: Mapping[str, CohortSpec] | None = None
    ) -> None:
        self.cohorts: dict[str, CohortSpec] = dict(cohorts or {})
        for queue in queues.values():  # cohorts named only by queues, or only as parents
            if queue.cohort and queue.cohort not in self.cohorts:
                self.cohorts[queue.cohort] = CohortSpec(queue.cohort)
        for cohort in list(self.cohorts.values()):
            if cohort.parent and cohort.parent not in self.cohorts:
                self.cohorts[cohort.parent] = CohortSpec(cohort.parent)
        self.queues = queues
        # cohort -> the cycle it leads into (Kueue's HasCycle: the walk up meets a name twice).
        self.cycles: dict[str, tuple[str, ...]] = self._find_cycles()
        # cohort -> its levels below its root, for those MAX_COHORT_DEPTH or more down: cut
        # like cycles (the walks over the tree recurse once per level).
        self.too_deep: dict[str, int] = {
            name: depth for name, depth in self._depths().items() if depth >= MAX_COHORT_DEPTH
        }
        # Arithmetic runs on the tree with the cycles cut (their queues are inactive, but
        # `status` and preemption may still ask about them and must not loop).
        self.parent: dict[str, str | None] = {
            c.name: None if c.name in self.cycles or c.name in self.too_deep else c.parent
            for c in self.cohorts.values()
        }
        self.child_cohorts: dict[str, list[str]] = {name: [] for name in self.cohorts}
        self.child_queues: dict[str, list[QueueSpec]] = {name: [] for name in self.cohorts}
        for name, parent in self.parent.items():
            if parent is not None:
                self.child_cohorts[parent].append(name)
        for queue in queues.values():
            if queue.cohort:
                self.child_queues[queue.cohort].append(queue)
        self.inactive: dict[str, str] = {
            q.name: (
                f"ClusterQueue {q.name} is inactive: its Cohort {q.cohort} is in a cycle "
                f"({' -> '.join(self.cycles[q.cohort])})"
            )
            for q in queues.values()
            if q.cohort in self.cycles
        }
        for q in queues.values():
            if q.cohort in self.too_deep:
                self.inactive[q.name] = (
                    f"ClusterQueue {q.name} is inactive: its Cohort {q.cohort} is "
                    f"{self.too_deep[q.cohort]} levels below its root Cohort; topogate reads "
                    f"{MAX_COHORT_DEPTH - 1} at most"
                )
        self._subtree: dict[tuple[str, str, str], int] = {}
        self._heights: dict[str, int] = {}

    def _find_cycles(self) -> dict[str, tuple[str, ...]]:
        """Each cohort's walk up, once: a name met twice closes a cycle, which every cohort
        on it or leading into it gets (as seen from the first cohort of the cycle it meets).
        Linear in the cohorts: a walk stops where an earlier one went."""
        cycles: dict[str, tuple[str, ...]] = {}
        done: set[str] = set()
        for name in self.cohorts:
            path: dict[str, int] = {}  # cohort -> its place on this walk
            current: str | None = name
            while current is not None and current not in done and current not in path:
                path[current] = len(path)
                current = self.cohorts[current].parent
            walked = list(path)
            if current is not None and current in path:  # closed here
                ring = walked[path[current] :]
                for i, member in enumerate(ring):
                    cycles[member] = (*ring[i:], *ring[:i], member)
                for leader in walked[: path[current]]:
                    cycles[leader] = cycles[current]
            elif current is not None and current in cycles:  # leads into a known cycle
                for leader in walked:
                    cycles[leader] = cycles[current]
            done.update(walked)
        return cycles

    def _depths(self) -> dict[str, int]:
        """Levels below its root of each cohort outside the cycles (a root: 0)."""
        depths: dict[str, int] = {}
        for name in self.cohorts:
            path: list[str] = []
            current: str | None = name
            while current is not None and current not in depths and current not in self.cycles:
                path.append(current)
                current = self.cohorts[current].parent
            depth = depths[current] if current is not None and current in depths else -1
            for cohort in reversed(path):
                depth += 1
                depths[cohort] = depth
        return depths

    @property
    def flat(self) -> bool:
        """No cohort has a parent or quota of its own: today's flat cohorts."""
        return all(c.parent is None and not c.flavors for c in self.cohorts.values())

    def cohort_quota(self, cohort: str, flavor: str) -> FlavorQuota | None:
        return next((f for f in self.cohorts[cohort].flavors if f.flavor == flavor), None)

    def subtree(self, cohort: str, flavor: str, resource: str) -> int:
        """Kueue's SubtreeQuota of a cohort: its own nominal quota plus what each child
        lends up (the child's subtree quota less what its lending limit keeps local)."""
        key = (cohort, flavor, resource)
        found = self._subtree.get(key)
        if found is not None:
            return found
        own = self.cohort_quota(cohort, flavor)
        total = own.nominal.get(resource, 0) if own is not None else 0
        for child in self.child_cohorts[cohort]:
            total += self.subtree(child, flavor, resource) - self.cohort_local(
                child, flavor, resource
            )
        for queue in self.child_queues[cohort]:
            quota = queue_quota(queue, flavor)
            if quota is not None and resource in quota.nominal:
                total += quota.nominal[resource] - queue_local(quota, resource)
        self._subtree[key] = total
        return total

    def cohort_local(self, cohort: str, flavor: str, resource: str) -> int:
        """What a cohort's lending limit keeps inside its subtree."""
        own = self.cohort_quota(cohort, flavor)
        if own is None or resource not in own.lending:
            return 0
        return max(0, self.subtree(cohort, flavor, resource) - own.lending[resource])

    def height(self, cohort: str) -> int:
        """Distance to the furthest leaf (Kueue's getNodeHeight): a cohort of queues is 1."""
        found = self._heights.get(cohort)
        if found is None:
            children = len(self.child_cohorts[cohort]) + len(self.child_queues[cohort])
            found = min(children, 1)
            for child in self.child_cohorts[cohort]:
                found = max(found, self.height(child) + 1)
            self._heights[cohort] = found
        return found

    def root(self, cohort: str) -> str:
        while (parent := self.parent[cohort]) is not None:
            cohort = parent
        return cohort


def queue_quota(queue: QueueSpec, flavor: str) -> FlavorQuota | None:
    return queue.by_flavor.get(flavor)


def queue_local(quota: FlavorQuota, resource: str) -> int:
    """What a queue's lending limit keeps to itself (none without one)."""
    if resource not in quota.lending:
        return 0
    return max(0, quota.nominal.get(resource, 0) - quota.lending[resource])


class QuotaBook:
    """Quota in use and available per (ClusterQueue, flavor, resource), over the cohort tree,
    by Kueue's resource-node arithmetic (its pkg/cache/scheduler/resource_node.go):

    - every node (queue or cohort) has a subtree quota: a queue's is its nominal quota; a
      cohort's is its own nominal quota plus what each child lends up, which is the child's
      subtree quota less its local quota (``subtree - lendingLimit`` when it has a lending
      limit, else nothing);
    - a node's usage: a queue's own; a cohort's is the sum of its children's usage beyond
      their local quota;
    - a node may use its unused local quota plus what its parent has available, the latter
      capped by its borrowing limit (``subtree - local - usage beyond local + limit``), up to
      the root, where what is available is ``subtree - usage``;
    - usage above a queue's nominal quota is borrowed.

    A cohort without parent or quota of its own (one only ClusterQueues name) is the flat
    cohort of before: its pool is what the members lend.
    """

    def __init__(
        self,
        queues: Mapping[str, QueueSpec],
        usage: Usage,
        tree: CohortTree | None = None,
        base: QuotaBook | None = None,
    ) -> None:
        self.queues = queues
        self.usage = usage  # updated in place by :meth:`add`
        # A fork (:meth:`fork`) reads the entries it has not changed from ``base``.
        self._base = base
        self.changes = 0  # bumped by every :meth:`add`
        # The queue of each :meth:`add`, in order, and how many of them took usage away: a
        # reader that follows the log re-ranks only what an addition touched (usage that only
        # grows only makes ranks worse), and everything after a removal.
        self.log: list[str] = []
        self.removals = 0
        self.tree = tree if tree is not None else CohortTree(queues)
        # Kept up to date by :meth:`add` along the added queue's path (an entry is worked out
        # once, then moved by the difference), so a cycle's cost per admission is its depth.
        self._cohort_usage: dict[tuple[str, str, str], int] = (
            dict(base._cohort_usage) if base is not None else {}
        )

    def fork(self) -> QuotaBook:
        """A book starting from this one's usage whose changes are its own (a what-if, such as
        a preemption search's victims gone): it copies only the entries it changes and the
        cohorts' usage worked out so far, not the usage of every queue. This book must not
        change while the fork is read."""
        return QuotaBook(self.queues, {}, self.tree, base=self)

    def _slot(self, key: tuple[str, str]) -> Mapping[str, int]:
        found = self.usage.get(key)
        if found is None and self._base is not None:
            return self._base._slot(key)
        return found or {}

    def used(self, queue: str, flavor: str, resource: str) -> int:
        return self._slot((queue, flavor)).get(resource, 0)

    def cohort_used(self, cohort: str, flavor: str, resource: str) -> int:
        """A cohort's usage: its children's usage beyond their local quota. A queue's usage
        in a flavor or resource it has no quota for is not counted (as before trees)."""
        key = (cohort, flavor, resource)
        found = self._cohort_usage.get(key)
        if found is not None:
            return found
        tree = self.tree
        total = 0
        for child in tree.child_cohorts[cohort]:
            local = tree.cohort_local(child, flavor, resource)
            total += max(0, self.cohort_used(child, flavor, resource) - local)
        for queue in tree.child_queues[cohort]:
            quota = queue_quota(queue, flavor)
            if quota is None or resource not in quota.nominal:
                continue
            local = queue_local(quota, resource)
            total += max(0, self.used(queue.name, flavor, resource) - local)
        self._cohort_usage[key] = total
        return total

    def _cohort_available(self, cohort: str, flavor: str, resource: str) -> int:
        tree = self.tree
        subtree = tree.subtree(cohort, flavor, resource)
        used = self.cohort_used(cohort, flavor, resource)
        parent = tree.parent[cohort]
        if parent is None:
            return subtree - used
        local = tree.cohort_local(cohort, flavor, resource)
        from_parent = self._cohort_available(parent, flavor, resource)
        own = tree.cohort_quota(cohort, flavor)
        if own is not None and resource in own.borrowing:
            in_parent = subtree - local
            used_in_parent = max(0, used - local)
            limit = own.borrowing[resource]
            from_parent = min(from_parent, in_parent - used_in_parent + limit)
        return max(0, local - used) + from_parent

    def available(self, queue: QueueSpec, quota: FlavorQuota, resource: str) -> int:
        """How much more of ``resource`` the queue may use in this flavor now (negative when
        the tree is over-admitted: quota taken away, or a queue moved)."""
        nominal = quota.nominal.get(resource, 0)
        used = self.used(queue.name, quota.flavor, resource)
        if not queue.cohort:
            return nominal - used
        local = queue_local(quota, resource)
        from_parent = self._cohort_available(queue.cohort, quota.flavor, resource)
        if resource in quota.borrowing:
            in_parent = nominal - local
            used_in_parent = max(0, used - local)
            from_parent = min(from_parent, in_parent - used_in_parent + quota.borrowing[resource])
        return max(0, local - used) + from_parent

    def cohort_potential(self, cohort: str, flavor: str, resource: str) -> int:
        """The most a cohort's subtree could use with nothing else in use (Kueue's
        potentialAvailable of a cohort)."""
        return self._cohort_potential(cohort, flavor, resource)

    def _cohort_potential(self, cohort: str, flavor: str, resource: str) -> int:
        tree = self.tree
        subtree = tree.subtree(cohort, flavor, resource)
        parent = tree.parent[cohort]
        if parent is None:
            return subtree
        found = tree.cohort_local(cohort, flavor, resource) + self._cohort_potential(
            parent, flavor, resource
        )
        own = tree.cohort_quota(cohort, flavor)
        if own is not None and resource in own.borrowing:
            found = min(found, subtree + own.borrowing[resource])
        return found

    def potential(self, queue: QueueSpec, quota: FlavorQuota, resource: str) -> int:
        """The most the queue could use with nothing else in use (Kueue's
        potentialAvailable): the largest workload it could ever admit."""
        nominal = quota.nominal.get(resource, 0)
        if not queue.cohort:
            return nominal
        found = queue_local(quota, resource) + self._cohort_potential(
            queue.cohort, quota.flavor, resource
        )
        if resource in quota.borrowing:
            found = min(found, nominal + quota.borrowing[resource])
        return found

    def _borrowing_level(
        self, queue: QueueSpec, quota: FlavorQuota, resource: str, amount: int
    ) -> int:
        """Kueue's borrowing level (FindHeightOfLowestSubtreeThatFits): 0 within nominal
        quota, else the height of the lowest cohort whose subtree holds the rest."""
        used = self.used(queue.name, quota.flavor, resource)
        if used + amount <= quota.nominal.get(resource, 0):
            return 0
        if not queue.cohort:
            # Kueue says 0 (nothing to borrow from); 1 keeps the order topogate had before
            # trees, where such a head (it can only preempt) ranks after those that fit.
            return 1
        tree, flavor = self.tree, quota.flavor
        remaining = amount - max(0, queue_local(quota, resource) - used)
        cohort: str | None = queue.cohort
        while cohort is not None:
            subtree = tree.subtree(cohort, flavor, resource)
            node_used = self.cohort_used(cohort, flavor, resource)
            if node_used + remaining <= subtree:
                return tree.height(cohort)
            local = tree.cohort_local(cohort, flavor, resource)
            remaining -= max(0, local - node_used)
            cohort = tree.parent[cohort]
        return tree.height(tree.root(queue.cohort))

    def borrowing_level(
        self, queue: QueueSpec, quota: FlavorQuota, demand: Mapping[str, int]
    ) -> int:
        """How far up the tree ``demand`` borrows in this flavor, its worst resource (Kueue's
        borrowing level in its flavor assigner: 0 within nominal quota or without a cohort)."""
        if not queue.cohort:
            return 0
        return max(
            (self._borrowing_level(queue, quota, r, a) for r, a in demand.items()), default=0
        )

    def borrows(self, queue: QueueSpec, demand: Mapping[str, int]) -> int:
        """How far up the tree ``demand`` must borrow in the first flavor that covers it: 0
        within the queue's nominal quota, else the height of the lowest cohort whose subtree
        holds it (Kueue orders workloads by this level; in a flat cohort it is 0 or 1)."""
        for quota in queue.flavors:
            if set(demand) <= set(quota.nominal):
                return max(
                    (self._borrowing_level(queue, quota, r, a) for r, a in demand.items()),
                    default=0,
                )
        return 0

    def borrowed(self, queue: QueueSpec, quota: FlavorQuota, resource: str) -> int:
        return max(
            0, self.used(queue.name, quota.flavor, resource) - quota.nominal.get(resource, 0)
        )

    def add(self, queue: str, flavor: str, amounts: Mapping[str, int]) -> None:
        """Add ``amounts`` (negative: give back) to the queue's usage in ``flavor``. The usage
        mapping must change only through here: the cohorts' usage follows it."""
        self.changes += 1
        self.log.append(queue)
        slot = self.usage.get((queue, flavor))
        if slot is None:  # a fork's first change of this entry: from the base's amounts
            slot = self.usage[(queue, flavor)] = dict(self._slot((queue, flavor)))
        spec = self.queues.get(queue)
        for resource, amount in amounts.items():
            if amount < 0:
                self.removals += 1
            old = slot.get(resource, 0)
            slot[resource] = old + amount
            if spec is not None and spec.cohort:
                self._carry_up(spec, flavor, resource, old, old + amount)

    def _carry_up(self, queue: QueueSpec, flavor: str, resource: str, old: int, new: int) -> None:
        """Move the cohorts' usage above ``queue`` by its change from ``old`` to ``new`` (only
        what is beyond each node's local quota goes up). A cohort not yet worked out ends the
        walk, and what was worked out above it is dropped: it is worked out again if asked."""
        quota = queue_quota(queue, flavor)
        if quota is None or resource not in quota.nominal:
            return  # not counted in the cohorts (:meth:`cohort_used`)
        local = queue_local(quota, resource)
        delta = max(0, new - local) - max(0, old - local)
        tree, cohort = self.tree, queue.cohort
        while cohort is not None and delta:
            key = (cohort, flavor, resource)
            before = self._cohort_usage.get(key)
            if before is None:
                while cohort is not None:
                    self._cohort_usage.pop((cohort, flavor, resource), None)
                    cohort = tree.parent[cohort]
                return
            self._cohort_usage[key] = before + delta
            local = tree.cohort_local(cohort, flavor, resource)
            delta = max(0, before + delta - local) - max(0, before - local)
            cohort = tree.parent[cohort]


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
    queues: Mapping[str, QueueSpec],
    usage: Usage,
    pending: Mapping[str, int],
    cohorts: Mapping[str, CohortSpec] | None = None,
) -> list[QuotaRow]:
    book = QuotaBook(queues, usage, CohortTree(queues, cohorts))
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
