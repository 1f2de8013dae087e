"""The admitter's side of preemption: the admitted workloads as candidates, the what-if on the
capacity snapshot, and the eviction written the way Kueue writes it.

An evicted workload keeps its capacity until its pods are gone (the job sync suspends its job
and takes its admission back only then), so a node is never given twice while a victim's pods
still run on it (Kueue #15337).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence

from topogate.admission.cycle import Held, Preempt, SnapshotPlacer
from topogate.admission.fairpreemption import plan_fair_preemption
from topogate.admission.lanes import PendingWorkload
from topogate.admission.preemption import (
    FutileSearches,
    Preemption,
    Running,
    RunningIndex,
    Victim,
    plan_preemption,
)
from topogate.admission.quota import CohortSpec, CohortTree, QueueSpec, Usage
from topogate.admission.request import PlacementDecision
from topogate.api.objects import condition, is_evicted, meta
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import WORKLOADS, Obj
from topogate.state import ControllerState

from .writes import new_condition

EVICTED = "Evicted"
PREEMPTED = "Preempted"


# Per state, per workload: the candidate built from (the stored Workload, the quota it holds,
# what it holds per node), each the object the state holds (replaced on change, never changed
# in place), and the candidate by value. A cycle that preempts reads every admitted workload;
# building each one again every cycle was a visible share of serve's CPU.
_Built = tuple[Obj, Usage, Mapping[str, Mapping[str, int]], Running, tuple[object, ...]]
_BUILT: weakref.WeakKeyDictionary[ControllerState, dict[str, _Built]] = weakref.WeakKeyDictionary()


def running_workloads(state: ControllerState) -> list[Running]:
    """Every admitted, unfinished workload (as stored), with the nodes it holds."""
    return [running for running, _ in _running(state)]


def _running(state: ControllerState) -> list[tuple[Running, tuple[object, ...]]]:
    """:func:`running_workloads`, each with its value for :class:`FutileSearches`."""
    out = []
    workloads = state.store.objects(WORKLOADS)
    built = _BUILT.setdefault(state, {})
    keep: dict[str, _Built] = {}
    for key in state.workloads.running():
        workload, admission = workloads.get(key), state.ledger.admission_of(key)
        if workload is None or admission is None:
            continue
        usage = state.workloads.quota_of(key)
        if not usage:
            continue
        per_node = state.ledger.workload_usage(key)
        known = built.get(key)
        if (
            known is not None
            and known[0] is workload
            and known[1] is usage
            and known[2] is per_node
        ):
            keep[key] = known
            out.append((known[3], known[4]))
            continue
        (cq, flavor), amounts = next(iter(usage.items()))
        reserved = condition(workload, "QuotaReserved") or {}
        spec = workload.get("spec") if isinstance(workload.get("spec"), dict) else {}
        priority = spec.get("priority") if isinstance(spec, dict) else None
        running = Running(
            key,
            cq,
            flavor,
            priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
            str(reserved.get("lastTransitionTime") or ""),
            amounts,
            created=str(meta(workload).get("creationTimestamp") or ""),
            evicted=is_evicted(workload),
            nodes=frozenset(per_node),
        )
        value = _by_value(running)
        keep[key] = (workload, usage, per_node, running, value)
        out.append((running, value))
    _BUILT[state] = keep  # only the admitted ones of now
    return out


# What a classical search read, for the memo: the preemptor, the usage of every queue of its
# cohort tree (per flavor), and the running workloads of that tree.
_Inputs = tuple[PendingWorkload, tuple[Mapping[str, int] | None, ...], tuple[Running, ...]]


class NoPlanMemo:
    """The classical searches that found nothing, kept across cycles (the admitter's): a search
    reads only its queue's cohort tree (the usage of its queues, their running workloads) and,
    on a flavor with a topology, the capacity; so on quota-only flavors a search whose inputs
    in its tree are equal to the last one's finds nothing again, and is not run. With a
    thousand queues waiting and one Workload finished in one cohort, the other cohorts'
    searches are not run again (Kueue parks such heads until their cohort changes)."""

    def __init__(self) -> None:
        self._catalog: tuple[object, object] = (None, None)  # the queues and cohorts read
        self._found: dict[str, _Inputs] = {}  # preemptor key -> the inputs of its search
        # Per root cohort, the running workloads last read: an equal tuple read in a later
        # cycle is replaced by this one, so comparing the inputs is by identity.
        self._running: dict[str, tuple[Running, ...]] = {}

    def begin(self, queues: Mapping[str, QueueSpec], cohorts: object) -> None:
        """A cycle starts; a new catalog voids every entry."""
        if self._catalog[0] is not queues or self._catalog[1] is not cohorts:
            self._found.clear()
            self._running.clear()
        self._catalog = (queues, cohorts)

    def running(self, root: str, found: tuple[Running, ...]) -> tuple[Running, ...]:
        """``found`` (a tree's running workloads), or the equal tuple read before."""
        if self._running.get(root) != found:
            self._running[root] = found
        return self._running[root]

    def nothing(self, key: str, inputs: _Inputs) -> bool:
        """The last search with these very inputs found nothing."""
        return self._found.get(key) == inputs

    def remember(self, key: str, inputs: _Inputs | None) -> None:
        """The search found nothing with ``inputs`` (None: it found a plan, or is not kept)."""
        if inputs is None:
            self._found.pop(key, None)
        else:
            self._found[key] = inputs

    def forget_one(self, key: str) -> None:
        """Drop the entry of a Workload that no longer waits."""
        self._found.pop(key, None)


class _Trees:
    """What a classical search reads in one cycle: per root cohort (a queue without one: its
    own name) its queues and, read once, its running workloads."""

    def __init__(
        self,
        queues: Mapping[str, QueueSpec],
        tree: CohortTree,
        placer: SnapshotPlacer,
        memo: NoPlanMemo,
    ) -> None:
        self.queues, self.tree, self.placer, self.memo = queues, tree, placer, memo
        self.members: dict[str, list[QueueSpec]] = {}
        self.running: dict[str, tuple[Running, ...]] = {}

    def root(self, queue: QueueSpec) -> str:
        return self.tree.root(queue.cohort) if queue.cohort else f"queue {queue.name}"

    def inputs(
        self, workload: PendingWorkload, queue: QueueSpec, usage: Usage, running: RunningIndex
    ) -> _Inputs | None:
        """What a search for ``workload`` reads, or None when that is more than its tree (a
        flavor with a topology, or a topology named: the capacity is read too)."""
        if workload.request.topology is not None or any(
            self.placer.flavors.get(f.flavor) is not None for f in queue.flavors
        ):
            return None
        if not self.members:
            for spec in self.queues.values():
                self.members.setdefault(self.root(spec), []).append(spec)
            grouped: dict[str, list[Running]] = {}
            for one in running.all:
                owner = self.queues.get(one.cluster_queue)
                grouped.setdefault(self.root(owner) if owner else "", []).append(one)
            for root, found in grouped.items():  # by key: the running set has no order
                self.running[root] = self.memo.running(root, tuple(sorted(found, key=_by_key)))
        root = self.root(queue)
        used = tuple(
            usage.get((other.name, f.flavor)) for other in self.members[root] for f in other.flavors
        )
        return workload, used, self.running.get(root, ())


def _by_key(running: Running) -> str:
    return running.key


class _NothingFound:
    """The two memories of searches that found nothing, asked before a search and told after
    it: ``memo`` answers for classical searches on quota-only flavors, per cohort tree
    (:class:`NoPlanMemo`); ``futile`` for the rest, while nothing they read changed, the
    capacity snapshot among it (:class:`FutileSearches`)."""

    def __init__(
        self,
        memo: NoPlanMemo | None,
        futile: FutileSearches | None,
        trees: _Trees | None,
        placer: SnapshotPlacer,
        catalog: tuple[object, object, Sequence[str] | None],
    ) -> None:
        self.memo, self.futile, self.trees, self.placer = memo, futile, trees, placer
        queues, cohorts, fair = catalog
        self.catalog = (queues, cohorts, tuple(fair) if fair is not None else None)
        self._read: _Inputs | None = None  # the last search's inputs, for record()
        self._inputs: tuple[object, ...] | None = None

    def known(
        self,
        workload: PendingWorkload,
        queue: QueueSpec,
        usage: Usage,
        held: Held,
        running: RunningIndex,
        candidates: tuple[object, ...],
    ) -> bool:
        """A search with these inputs found nothing before (then it is not run)."""
        trees, memo, futile = self.trees, self.memo, self.futile
        self._read = trees.inputs(workload, queue, usage, running) if trees is not None else None
        self._inputs = None
        if self._read is not None:
            return memo is not None and memo.nothing(workload.key, self._read)
        if futile is None:
            return False
        # Copies of what the cycle changes in place (usage, held); the catalog by identity.
        quota = {k: dict(v) for k, v in usage.items()}
        self._inputs = (*self.catalog, workload, queue, quota, list(held), candidates)
        return futile.futile(self.placer.snapshot, workload.key, self._inputs)

    def record(self, key: str, found: Preemption | None) -> None:
        """What the search :meth:`known` was asked about found."""
        read, inputs = self._read, self._inputs
        if self.memo is not None:
            kept = None
            if read is not None and found is None:
                # Copies: the cycle's usage changes in place as it admits.
                kept = (read[0], tuple(dict(u) if u else None for u in read[1]), read[2])
            self.memo.remember(key, kept)
        if self.futile is not None and inputs is not None:
            if found is None:
                self.futile.found_nothing(self.placer.snapshot, key, inputs)
            else:
                self.futile.forget(key)


def preemptor(
    state: ControllerState,
    queues: Mapping[str, QueueSpec],
    placer: SnapshotPlacer,
    cohorts: Mapping[str, CohortSpec] | None = None,
    fair: Sequence[str] | None = None,
    memo: NoPlanMemo | None = None,
    futile: FutileSearches | None = None,
) -> Preempt:
    """The cycle's preemption planner: candidates read once, fits simulated on the placer's
    snapshot without the victims' usage and GPU sets, quota counted over the cohort tree.
    ``fair``: fair-sharing preemption with these strategies (None: classical). ``memo``: the
    classical searches on quota-only flavors that found nothing, kept between cycles per
    cohort tree (:class:`NoPlanMemo`); ``futile``: the other searches that found nothing,
    kept while nothing they read changed (the capacity snapshot among it)."""
    running: RunningIndex | None = None  # read at the first search, grouped by queue
    candidates: tuple[object, ...] = ()  # the running workloads by value, for ``futile``
    tree = CohortTree(queues, cohorts)
    if memo is not None:
        memo.begin(queues, cohorts)
    trees = _Trees(queues, tree, placer, memo) if memo is not None and fair is None else None
    nothing = _NothingFound(memo, futile, trees, placer, (queues, cohorts, fair))

    def plan(
        workload: PendingWorkload, queue: QueueSpec, usage: Usage, held: Held
    ) -> Preemption | None:
        nonlocal running, candidates
        if running is None:
            pairs = _running(state)
            running = RunningIndex([r for r, _ in pairs])
            candidates = tuple(value for _, value in pairs)
        if queue is not queues.get(queue.name):
            # Asked about some of its flavors (flavor fungibility weighing them): the memos
            # hold whole-queue searches, so this one is neither answered nor kept by them.
            return _plan(workload, queue, usage, held, running)
        if nothing.known(workload, queue, usage, held, running, candidates):
            return None
        found = _plan(workload, queue, usage, held, running)
        nothing.record(workload.key, found)
        return found

    def _plan(
        workload: PendingWorkload,
        queue: QueueSpec,
        usage: Usage,
        held: Held,
        running: RunningIndex,
    ) -> Preemption | None:

        def simulate(flavor: str, removed: Sequence[Running]) -> PlacementDecision | None:
            per_node: dict[str, dict[str, int]] = {}
            gpus: dict[str, set[int]] = {}
            for victim in removed:
                for node, amounts in state.ledger.workload_usage(victim.key).items():
                    slot = per_node.setdefault(node, {})
                    for name, amount in amounts.items():
                        slot[name] = slot.get(name, 0) + amount
                for placed in (state.ledger.workload_gpus(victim.key) or {}).values():
                    for node, sets in placed.items():
                        gpus.setdefault(node, set()).update(g for one in sets for g in one)
            return placer.without(per_node, gpus)(flavor, workload.request, held)

        if fair is not None:
            return plan_fair_preemption(
                workload, queue, queues, usage, running.all, simulate, tree, fair
            )
        return plan_preemption(
            workload, queue, queue.preemption, queues, usage, running, simulate, tree
        )

    return plan


def _by_value(running: Running) -> tuple[object, ...]:
    """A candidate as a search reads it, copied (its usage mapping is the state's)."""
    return (
        running.key,
        running.cluster_queue,
        running.flavor,
        running.priority,
        running.admitted,
        tuple(sorted(running.usage.items())),
        running.created,
        running.evicted,
        running.nodes,
    )


def eviction_status(victim: Obj, preemptor_key: str, reason: str) -> Obj:
    """The victim's conditions with Evicted (reason Preempted) and Preempted, as Kueue writes
    them; the message names the preemptor."""
    message = f"Preempted to accommodate workload {preemptor_key} due to {_why(reason)}"
    kept = [
        c
        for c in ((victim.get("status") or {}).get("conditions") or [])
        if c.get("type") not in (EVICTED, PREEMPTED)
    ]
    kept.append(new_condition(EVICTED, "True", PREEMPTED, message))
    kept.append(new_condition(PREEMPTED, "True", reason, message))
    return {"conditions": kept}


def _why(reason: str) -> str:
    return {
        "InClusterQueue": "prioritization in the ClusterQueue",
        "InCohortReclamation": "reclamation within the cohort",
        "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
        "InCohortFairSharing": "Fair Sharing within the cohort",
    }.get(reason, reason)


async def evict(kube: KubeApi, victim: Obj, preemptor_key: str, chosen: Victim) -> Obj:
    """Write the eviction, guarded by the version read (a changed victim is planned again)."""
    m = meta(victim)
    body: Obj = {
        "metadata": {"resourceVersion": m.get("resourceVersion")},
        "status": eviction_status(victim, preemptor_key, chosen.reason),
    }
    return await kube.patch(WORKLOADS, m["name"], body, m.get("namespace"), subresource="status")
