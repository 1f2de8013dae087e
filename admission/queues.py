"""Queue order and quota: which pending workloads an admission cycle admits, pure and synchronous.

The admitter's shell (watches, status writes) hands a cycle the ClusterQueues, the pending
workloads and the quota already in use; the cycle walks each queue in order (priority, then
creation time), checks quota per flavor, asks the placement core for a topology assignment and
admits the whole gang or nothing. StrictFIFO stops a queue at its first workload that cannot be
admitted; BestEffortFIFO lets later, smaller ones go by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from topogate.api.models import ClusterQueue
from topogate.api.podspec import Toleration
from topogate.api.quantity import format_units, to_units
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree

from .assignments import node_usage
from .gpuplace import taken_by
from .placement import place
from .request import PlacementDecision, PlacementRequest

STRICT_FIFO = "StrictFIFO"

# (cluster queue, flavor) -> resource -> amount: quota is per ClusterQueue and flavor.
Usage = dict[tuple[str, str], dict[str, int]]
Held = list[tuple[PlacementRequest, PlacementDecision]]


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    flavor: str
    nominal: Mapping[str, int]  # covered resource -> quota (cache units)


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    strategy: str
    flavors: tuple[FlavorQuota, ...]  # in the order they are tried

    @classmethod
    def from_model(cls, queue: ClusterQueue) -> QueueSpec:
        flavors = tuple(
            FlavorQuota(
                flavor.name,
                {r.name: to_units(r.name, r.nominal_quota) for r in flavor.resources},
            )
            for group in queue.spec.resource_groups
            for flavor in group.flavors
        )
        return cls(queue.metadata.name, queue.spec.queueing_strategy, flavors)


@dataclass(frozen=True, slots=True)
class PendingWorkload:
    key: str  # namespace/name
    cluster_queue: str
    priority: int
    created: str  # RFC 3339; sorts in time order
    request: PlacementRequest

    def demand(self) -> dict[str, int]:
        """Total requests of the whole gang, per resource."""
        total: dict[str, int] = {}
        for podset in self.request.podsets:
            for name, amount in podset.requests.items():
                total[name] = total.get(name, 0) + amount * podset.count
        return total


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


@dataclass(slots=True)
class CycleResult:
    admitted: list[Admitted] = field(default_factory=list)
    pending: dict[str, str] = field(default_factory=dict)  # key -> why it waits


def order(workloads: Sequence[PendingWorkload]) -> list[PendingWorkload]:
    """Queue order: higher priority first, then older, then by key (deterministic)."""
    return sorted(workloads, key=lambda w: (-w.priority, w.created, w.key))


def _quota_problem(flavor: FlavorQuota, demand: Mapping[str, int], used: Mapping[str, int]) -> str:
    for name in sorted(demand):
        free = flavor.nominal[name] - used.get(name, 0)
        if demand[name] > free:
            return (
                f"insufficient quota for {name} in flavor {flavor.flavor}: needs "
                f"{format_units(name, demand[name])}, {format_units(name, max(free, 0))} available"
            )
    return ""


def _try(
    workload: PendingWorkload,
    queue: QueueSpec,
    usage: Usage,
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
        problem = _quota_problem(flavor, demand, usage.get((queue.name, flavor.flavor), {}))
        if problem:
            reasons.append(problem)
            continue
        decision = placer(flavor.flavor, workload.request, held)
        if decision is not None and not decision.fits:
            reasons.append(f"flavor {flavor.flavor}: {decision.message}")
            continue
        return Admitted(workload.key, queue.name, flavor.flavor, demand, decision)
    return "; ".join(reasons) or f"ClusterQueue {queue.name} has no flavors"


def admission_cycle(
    queues: Mapping[str, QueueSpec],
    pending: Sequence[PendingWorkload],
    usage: Usage,
    placer: Placer,
) -> CycleResult:
    """Admit what fits, in queue order; ``usage`` is updated with the admissions.

    Queues are visited in name order and share physical capacity: every admission's placement
    is passed to later placements of the same cycle as held capacity.
    """
    result = CycleResult()
    held: Held = []
    by_queue: dict[str, list[PendingWorkload]] = {}
    for workload in pending:
        by_queue.setdefault(workload.cluster_queue, []).append(workload)
    for name in sorted(by_queue):
        queue = queues.get(name)
        if queue is None:
            for workload in by_queue[name]:
                result.pending[workload.key] = f"ClusterQueue {name} does not exist"
            continue
        blocked_by: str | None = None
        for workload in order(by_queue[name]):
            if blocked_by is not None:
                result.pending[workload.key] = f"waiting behind {blocked_by} (StrictFIFO)"
                continue
            outcome = _try(workload, queue, usage, placer, held)
            if isinstance(outcome, str):
                result.pending[workload.key] = outcome
                if queue.strategy == STRICT_FIFO:
                    blocked_by = workload.key
                continue
            result.admitted.append(outcome)
            flavor_usage = usage.setdefault((name, outcome.flavor), {})
            for resource, amount in outcome.usage.items():
                flavor_usage[resource] = flavor_usage.get(resource, 0) + amount
            if outcome.decision is not None:
                held.append((workload.request, outcome.decision))
    return result


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
        return place(
            topology.tree,
            self._holding(held),
            request,
            topology_name=topology.topology_name,
            flavor_tolerations=topology.tolerations,
        )
