"""Queue specs and quota: a ClusterQueue's flavors and limits as the cycle reads them, the quota
book (in use and available per queue, flavor and resource, cohorts included), the quota held by
written admissions, and the rows `topogate status --queues` shows. Pure and synchronous.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from topogate.api.errors import InputError
from topogate.api.models import ClusterQueue
from topogate.api.quantity import QuantityError, to_units

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
