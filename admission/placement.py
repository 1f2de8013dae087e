"""The placement core: which domains get how many pods of a gang, or why none can.

Pure and synchronous: it reads a ``DomainTree`` and a ``ClusterSnapshot`` (numpy arrays) and
returns a ``PlacementDecision``; it never does I/O. It follows Kueue's Topology Aware Scheduling
step for step, including its tie-breaks, so that a job lands where Kueue would put it:

1. count, per node, how many pods fit; roll the counts (and slice counts) up the tree;
2. find the level and the domain(s) that hold the whole PodSet (required: only the requested
   level; preferred: climb a level at a time; unconstrained: capacity only);
3. walk down, at each level choosing the children that keep the number of domains lowest.

Where we differ from Kueue, on purpose:

- capacity is counted per node even when the lowest level is not ``kubernetes.io/hostname``
  (Kueue sums allocatable over a leaf's nodes, so a pod may "fit" a sum but no single node);
- taints, nodeSelector and required affinity are honoured at any lowest level, and the leader
  of a leader+workers group is checked against its own template, not the workers';
- not-ready and cordoned nodes are counted in the failure message instead of vanishing;
- a count that is not a multiple of the slice size is refused up front (Kueue drops the rest);
- when the greedy pass misses a gang's fit, or spreads preferred PodSets over more domains
  than needed, an exact second pass (``exact.py``) gets a time budget to do better.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from topogate.api.podspec import NodeConstraints, Toleration
from topogate.cache.selectors import Exclusions, eligible
from topogate.cache.snapshot import BoolArray, ClusterSnapshot, IntArray
from topogate.cache.topology import DomainTree

from .balanced import DomainCounts, Shape, balanced_choice
from .exact import (
    WHOLE_TREE,
    WHOLE_TREE_COLUMNS,
    Budget,
    Candidates,
    Counts,
    ExactBudget,
    OutOfTime,
    Part,
    Regions,
    TooLarge,
    fewest_domains,
    fit_jointly,
    log,
    lower_bound,
)
from .exact import per_node_count as _per_node_count
from .gpuplace import GpuPlacer, HostnameRequired, with_visible
from .request import (
    DomainCount,
    ExactOutcome,
    Mode,
    PlacementDecision,
    PlacementRequest,
    PodSetPlacement,
    PodSetRequest,
    Profile,
)

_NONE = np.iinfo(np.int64).max // 4  # "no leader-capable child" in min-reductions


_ELIGIBLE_KEPT = 64  # pod templates' eligibility kept per tree (a cycle sees a few)


@dataclass(slots=True)
class _Eligibility:
    """Eligibility per pod template, for the snapshot node states and labels in ``guard``."""

    guard: tuple[object, ...]
    answers: dict[object, tuple[BoolArray, Exclusions]]


class _NoFit(Exception):
    """Raised inside one group's computation; becomes the decision's message."""

    def __init__(self, message: str, exclusions: Exclusions | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.exclusions = exclusions


@dataclass(frozen=True, slots=True)
class _Chosen:
    """Domains chosen at one level, in choice order, with the workers and leaders each got."""

    domains: IntArray
    pods: IntArray
    leaders: IntArray


class _GroupPlacer:
    """One placement computation: a PodSet, or a leader PodSet and its workers."""

    def __init__(
        self,
        tree: DomainTree,
        snapshot: ClusterSnapshot,
        free: IntArray,
        workers: PodSetRequest,
        leader: PodSetRequest | None,
        topology_name: str,
        flavor_tolerations: Sequence[Toleration],
    ) -> None:
        self.tree = tree
        self.snapshot = snapshot
        self.free = free
        self.workers = workers
        self.leader = leader
        self.topology_name = topology_name
        self.flavor_tolerations = tuple(flavor_tolerations)
        self.count = workers.count
        self.leader_count = 1 if leader is not None else 0
        self._resolve_levels()
        self.profile = Profile.LEAST_FREE_CAPACITY if self.unconstrained else Profile.BEST_FIT
        self.found: tuple[int, list[int]] | None = None  # find_level's answer, once run

    # --- setup ---------------------------------------------------------------------------

    def _level_index(self, key: str, what: str) -> int:
        try:
            return self.tree.level_keys.index(key)
        except ValueError:
            raise _NoFit(f"{what}: {key}") from None

    def _resolve_levels(self) -> None:
        request = self.workers
        layers = request.slices
        self.required = request.mode is Mode.REQUIRED
        self.unconstrained = request.mode is Mode.UNCONSTRAINED
        self.slice_size = layers[0].size if layers else 1
        if self.slice_size <= 0:
            raise _NoFit("slice topology requested, but slice size not provided")
        if self.count % self.slice_size:
            # Kueue places the whole slices and silently drops the rest; we refuse.
            raise _NoFit(
                f"pod count {self.count} is not a multiple of the slice size {self.slice_size}"
            )
        if request.level is not None:
            self.level = self._level_index(request.level, "no requested topology level")
        elif layers:
            self.level = 0  # slices only: the whole tree, slices enforced at their level
        else:
            self.level = self.tree.output_level
        if layers:
            self.slice_level = self._level_index(
                layers[0].level, "no requested topology level for slices"
            )
        else:
            self.slice_level = self.tree.output_level
        # The highest level a preferred search may climb to (0: the whole tree).
        self.limit_level = 0
        if request.limit is not None:
            self.limit_level = self._level_index(request.limit, "no requested topology level")
            if self.limit_level > self.level:
                raise _NoFit(
                    f"required topology {request.limit} is below the preferred topology "
                    f"{self.tree.level_keys[self.level]}"
                )
        if self.level > self.slice_level:
            raise _NoFit(
                f"podset slice topology {layers[0].level} is above the podset topology "
                f"{self.tree.level_keys[self.level]}"
            )
        # Inner layers of a multi-layer request: the unit each level below rounds down to.
        self.inner_size: dict[int, int] = {}
        previous_size, previous_level = self.slice_size, self.slice_level
        for layer in layers[1:]:
            level = self._level_index(
                layer.level, "no requested topology level for additional slice layer"
            )
            if level <= previous_level:
                raise _NoFit(
                    f"additional slice layer topology {layer.level} must be at a lower level "
                    f"than {self.tree.level_keys[previous_level]}"
                )
            if previous_size % layer.size != 0:
                raise _NoFit(
                    f"additional slice layer size {layer.size} must evenly divide parent "
                    f"layer size {previous_size}"
                )
            for between in range(previous_level + 1, level + 1):
                self.inner_size[between] = layer.size
            previous_size, previous_level = layer.size, level

    @property
    def best_fit(self) -> bool:
        return self.profile is Profile.BEST_FIT

    # --- phase 1: counts -----------------------------------------------------------------

    def _eligible(self, podset: PodSetRequest) -> tuple[BoolArray, Exclusions]:
        constraints = podset.constraints
        tolerations = constraints.tolerations + self.flavor_tolerations
        snapshot = self.snapshot
        # Eligibility reads only the snapshot's node states and labels, which its usage
        # copies share: kept per tree while they are the same objects (every placement of
        # a cycle asks again for the same few pod templates).
        guard = (
            snapshot.ready,
            snapshot.unschedulable,
            snapshot.taints,
            snapshot.taint_sets,
            snapshot.labels,
            snapshot.node_index,
        )
        try:
            key = (
                tolerations,
                tuple(sorted(constraints.node_selector.items())),
                constraints.affinity_terms,
            )
            hash(key)
        except TypeError:  # an unhashable term: judged afresh
            key = None
        kept = self.tree.derived.get("eligible")
        if not (
            isinstance(kept, _Eligibility)
            and all(a is b for a, b in zip(kept.guard, guard, strict=True))
        ):
            kept = self.tree.derived["eligible"] = _Eligibility(guard, {})
        found = kept.answers.get(key) if key is not None else None
        if found is None:
            merged = NodeConstraints(
                tolerations=tolerations,
                node_selector=constraints.node_selector,
                affinity_terms=constraints.affinity_terms,
            )
            mask, exclusions = eligible(snapshot, self.tree.nodes, merged)
            mask.flags.writeable = False
            if key is not None:
                if len(kept.answers) >= _ELIGIBLE_KEPT:
                    kept.answers.clear()
                found = kept.answers[key] = (mask, exclusions)
            else:
                return mask, exclusions
        return found  # shared: _not_fit copies the exclusions before adding to them

    def fill_in_counts(self) -> None:
        tree = self.tree
        depth = tree.depth
        worker_vec, worker_missing = self.snapshot.pod_vector(self.workers.requests)
        mask, self.exclusions = self._eligible(self.workers)
        self.worker_mask = mask
        raw = _per_node_count(self.free, worker_vec)
        if worker_missing:
            raw = np.zeros_like(raw)
        self.worker_missing = worker_missing
        # Eligibility as judged here, kept for the exact pass (it must not judge anew).
        self.leader_eligible = np.zeros_like(mask)
        self.worker_vec = worker_vec
        pods = np.where(mask, raw, 0)
        try:
            self.gpu = GpuPlacer(self.snapshot, tree, self.workers, self.leader)
        except HostnameRequired as error:
            raise _NoFit(str(error)) from None
        pods, self.worker_mask, self.exclusions = self.gpu.counts(mask, pods, self.exclusions)
        self.worker_eligible = self.worker_mask & (not worker_missing)
        pods_with_leader = pods
        leads = _zeros(tree, depth - 1)
        if self.leader is not None:
            leader_vec, leader_missing = self.snapshot.pod_vector(self.leader.requests)
            self.leader_vec = leader_vec
            leader_mask, _ = self._eligible(self.leader)
            self.leader_eligible = leader_mask & (not leader_missing)
            fits = leader_mask & (_per_node_count(self.free, leader_vec) > 0)
            if leader_missing:
                fits[:] = False
            after = _per_node_count(np.maximum(self.free - leader_vec, 0), worker_vec)
            fits, after = self.gpu.with_leader(fits, after)
            pods_with_leader = np.where(fits, np.where(mask, after, 0), pods)
            if worker_missing:
                pods_with_leader = np.zeros_like(pods)
            leads = fits.astype(np.int64)
        self.pod: list[IntArray] = [np.empty(0, np.int64)] * depth
        self.pod_wl: list[IntArray] = [np.empty(0, np.int64)] * depth
        self.slc: list[IntArray] = [np.empty(0, np.int64)] * depth
        self.slc_wl: list[IntArray] = [np.empty(0, np.int64)] * depth
        self.lead: list[IntArray] = [np.empty(0, np.int64)] * depth
        bottom = depth - 1
        self.pod[bottom], self.pod_wl[bottom], self.lead[bottom] = pods, pods_with_leader, leads
        none = _zeros(tree, bottom)
        self._set_slices(bottom, none, none)
        for level in range(depth - 2, -1, -1):
            self._roll_up(level)

    def _set_slices(self, level: int, summed: IntArray, summed_wl: IntArray) -> None:
        if level == self.slice_level:
            self.slc[level] = self.pod[level] // self.slice_size
            self.slc_wl[level] = self.pod_wl[level] // self.slice_size
            if self.workers.exclusive_slices:
                self.slc[level] = np.minimum(self.slc[level], 1)
                self.slc_wl[level] = np.minimum(self.slc_wl[level], 1)
        elif level < self.slice_level:
            self.slc[level], self.slc_wl[level] = summed, summed_wl
        else:
            self.slc[level] = _zeros(self.tree, level)
            self.slc_wl[level] = self.slc[level]

    def _roll_up(self, level: int) -> None:
        child = level + 1
        parent = self.tree.parent[child]
        size = self.tree.size(level)
        contribution, contribution_wl = self.pod[child], self.pod_wl[child]
        inner = self.inner_size.get(child)
        if inner:
            contribution = contribution // inner * inner
            contribution_wl = contribution_wl // inner * inner

        def total(values: IntArray) -> IntArray:
            return np.bincount(parent, weights=values, minlength=size).astype(np.int64)

        self.pod[level] = total(contribution)
        if self.leader is None:
            self.pod_wl[level] = self.pod[level]
            self.lead[level] = _zeros(self.tree, level)
            # Summed slices count only above the slice level (below it there are none).
            summed = total(self.slc[child]) if level < self.slice_level else self.lead[level]
            self._set_slices(level, summed, summed)
            return
        slices = total(self.slc[child])
        capable = self.lead[child] > 0
        pod_penalty = np.full(size, _NONE, dtype=np.int64)
        np.minimum.at(pod_penalty, parent, np.where(capable, contribution - contribution_wl, _NONE))
        slice_penalty = np.full(size, _NONE, dtype=np.int64)
        np.minimum.at(
            slice_penalty, parent, np.where(capable, self.slc[child] - self.slc_wl[child], _NONE)
        )
        has = pod_penalty < _NONE
        self.pod_wl[level] = np.where(has, self.pod[level] - pod_penalty, 0)
        lead = np.zeros(size, dtype=np.int64)
        np.maximum.at(lead, parent, self.lead[child])
        self.lead[level] = lead
        self._set_slices(level, slices, np.where(has, slices - slice_penalty, 0))

    # --- ordering ------------------------------------------------------------------------

    def _sorted(self, level: int, domains: IntArray, with_leader: bool) -> IntArray:
        """Kueue's order: [leaders desc], slices desc (BestFit) / asc, pods asc, path asc."""
        slices = (self.slc_wl if with_leader else self.slc)[level][domains]
        pods = (self.pod_wl if with_leader else self.pod)[level][domains]
        keys: list[npt.NDArray[Any]] = [
            self.tree.lexrank[level][domains],
            pods,
            -slices if self.best_fit else slices,
        ]
        gpu_key = self.gpu.rank_key(level, domains)  # nodes only: better GPU sets first
        if gpu_key is not None:
            keys.insert(1, gpu_key)
        if with_leader and self.leader_count:
            keys.append(-self.lead[level][domains])
        return domains[_lexsort(keys)]

    def _tightest(
        self, candidates: IntArray, needed: int, leaders: int, capacity: IntArray, lead: IntArray
    ) -> int:
        """The candidate with the least capacity that still holds ``needed`` (first on ties)."""
        if len(candidates) <= _SMALL:
            # A rack's nodes or a block's racks: a Python pass beats six numpy calls.
            best, least = -1, 0
            for domain, cap, leads in zip(
                candidates.tolist(),
                capacity[candidates].tolist(),
                lead[candidates].tolist(),
                strict=True,
            ):
                if cap >= needed and leads >= leaders and (best < 0 or cap < least):
                    best, least = domain, cap
            return best if best >= 0 else int(candidates[0])
        caps = capacity[candidates]
        ok = (caps >= needed) & (lead[candidates] >= leaders)
        if not ok.any():
            return int(candidates[0])
        index = np.flatnonzero(ok)
        return int(candidates[index[np.argmin(caps[index])]])

    def _leader_first(
        self,
        domains: IntArray,
        need: int,
        capacity: IntArray,
        capacity_wl: IntArray,
        lead: IntArray,
    ) -> IntArray:
        """Move to the front the first leader-capable domain whose leader cost others absorb."""
        if not self.leader_count or len(domains) < 2:
            return domains
        available = int(capacity[domains].sum())
        penalty = capacity[domains] - capacity_wl[domains]
        ok = (lead[domains] >= self.leader_count) & (available - penalty >= need)
        hits = np.flatnonzero(ok)
        if hits.size == 0 or hits[0] == 0:
            return domains
        first = int(hits[0])
        return np.concatenate((domains[first : first + 1], domains[:first], domains[first + 1 :]))

    # --- phase 2: level, then descent ----------------------------------------------------

    def _not_fit(self, fit: int, total: int, level: int) -> _NoFit:
        # The eligibility summary is shared by the placements on this tree: added to in a copy.
        self.exclusions = dataclasses.replace(
            self.exclusions,
            taints=dict(self.exclusions.taints),
            resources=dict(self.exclusions.resources),
        )
        self._count_resource_exclusions()
        if len(self.workers.slices) >= 2:
            message = self._multi_layer_message(level)
        else:
            unit = "pod" if self.slice_size == 1 else "slice"
            if fit == 0:
                message = (
                    f'topology "{self.topology_name}" doesn\'t allow to fit any of '
                    f"{total} {unit}(s)"
                )
            else:
                message = (
                    f'topology "{self.topology_name}" allows to fit only {fit} out of '
                    f"{total} {unit}(s)"
                )
        if self.exclusions.any:
            message += ". " + self.exclusions.describe()
        return _NoFit(message, self.exclusions)

    def _count_resource_exclusions(self) -> None:
        """Eligible nodes that fit no pod, under the resource that ran out (ties: by name)."""
        zero = self.worker_mask & (self.pod[-1] == 0)
        if not zero.any():
            return
        if self.worker_missing:
            self.exclusions.resources[sorted(self.worker_missing)[0]] = int(zero.sum())
            return
        columns = [c for c in np.flatnonzero(self.worker_vec > 0)]
        columns.sort(key=lambda c: self.snapshot.resources[c])
        per = self.free[np.ix_(np.flatnonzero(zero), columns)] // self.worker_vec[columns]
        limiting = np.argmin(per, axis=1)
        for column, count in enumerate(np.bincount(limiting, minlength=len(columns)).tolist()):
            if count:
                name = self.snapshot.resources[columns[column]]
                self.exclusions.resources[name] = count

    def _multi_layer_message(self, level: int) -> str:
        tree = self.tree
        slices = self.slc[level]
        best = int(np.lexsort((tree.lexrank[level], -slices))[0]) if len(slices) else 0
        parts = [f'topology "{self.topology_name}" doesn\'t allow to fit']
        for layer in self.workers.slices:
            layer_level = tree.level_keys.index(layer.level)
            needed = self.count // layer.size
            ancestor: npt.NDArray[np.integer[Any]] = np.arange(tree.size(layer_level))
            for current in range(layer_level, level, -1):
                ancestor = tree.parent[current][ancestor]
            inside = ancestor == best
            fit = int((self.pod[layer_level][inside] // layer.size).sum())
            parts.append(f"{fit}/{needed} slice(s) fit on level {layer.level}")
        return "; ".join(parts)

    def find_level(self) -> tuple[int, list[int]]:
        level = self.level
        need = self.count // self.slice_size
        leaders = self.leader_count
        while True:
            size = self.tree.size(level)
            if size == 0:
                raise _NoFit(f"no topology domains at level: {self.tree.level_keys[level]}")
            slc, slc_wl, lead = self.slc[level], self.slc_wl[level], self.lead[level]
            order = self._sorted(level, np.arange(size), with_leader=True)
            top = int(order[0])
            if self.best_fit and slc_wl[top] >= need and lead[top] >= leaders:
                top = self._tightest(order, need, leaders, slc_wl if leaders else slc, lead)
            if not self.best_fit:
                capacity = slc_wl if leaders else slc
                ok = (lead[order] >= leaders) & (capacity[order] >= need)
                hits = np.flatnonzero(ok)
                if hits.size:
                    return level, [int(order[hits[0]])]
            if slc_wl[top] >= need and lead[top] >= leaders:
                return level, [top]
            if self.required:
                raise self._not_fit(int(slc[order[0]]), need, level)
            if level > self.limit_level and not self.unconstrained:
                level -= 1
                continue
            if self.workers.limit is not None:
                # Climbed to the highest allowed level: the gang must fit in one domain.
                raise self._not_fit(int(slc[order[0]]), need, level)
            return level, self._several_domains(level, order, need)

    def _several_domains(self, level: int, order: IntArray, need: int) -> list[int]:
        slc, slc_wl, lead = self.slc[level], self.slc_wl[level], self.lead[level]
        order = self._leader_first(order, need, slc, slc_wl, lead)
        chosen: list[int] = []
        remaining, leaders_left, i = need, self.leader_count, 0
        while leaders_left > 0 and i < len(order) and lead[order[i]] > 0:
            domain = int(order[i])
            if self.best_fit and slc_wl[domain] >= remaining:
                domain = self._tightest(order[i:], remaining, leaders_left, slc_wl, lead)
            chosen.append(domain)
            leaders_left -= int(lead[domain])
            remaining -= int(slc_wl[domain])
            i += 1
        if leaders_left > 0:
            raise self._not_fit(self.leader_count - leaders_left, need, level)
        if remaining <= 0:
            return chosen
        # Without a leader both orders use the same keys (and end in the unique path rank):
        # the rest of ``order`` is already sorted.
        rest = order[i:] if self.leader is None else self._sorted(level, order[i:], False)
        cumulative = np.cumsum(slc[rest])
        k = int(np.searchsorted(cumulative, remaining, side="left"))
        if k >= len(rest):
            got = int(cumulative[-1]) if len(rest) else 0
            raise self._not_fit(need - (remaining - got), need, level)
        before = int(cumulative[k - 1]) if k else 0
        last = int(rest[k])
        if self.best_fit:
            last = self._tightest(rest[k:], remaining - before, 0, slc, lead)
        whole: list[int] = rest[:k].tolist()
        return chosen + whole + [last]

    def _distribute(
        self,
        domains: IntArray,
        count: int,
        leaders: int,
        unit: int,
        capacity: IntArray,
        capacity_wl: IntArray,
        lead: IntArray,
    ) -> _Chosen:
        """Kueue's updateCountsToMinimum: fill ``domains`` in order, tightest last."""
        need = count // unit
        domains = self._leader_first(domains, need, capacity, capacity_wl, lead)
        if len(domains) <= _SMALL:
            return self._distribute_small(
                domains.tolist(),
                count,
                need,
                leaders,
                unit,
                capacity[domains].tolist(),
                capacity_wl[domains].tolist(),
                lead[domains].tolist(),
            )
        picked: list[int] = []
        pods: list[int] = []
        led: list[int] = []
        remaining, leaders_left, i = need, leaders, 0
        while leaders_left > 0 and i < len(domains):
            domain = int(domains[i])
            if self.best_fit and capacity_wl[domain] >= remaining and lead[domain] >= leaders_left:
                domain = self._tightest(domains[i:], remaining, leaders_left, capacity_wl, lead)
            if capacity_wl[domain] >= remaining and lead[domain] >= leaders_left:
                picked.append(domain)
                pods.append(remaining * unit)
                led.append(leaders_left)
                return _Chosen(np.array(picked), np.array(pods), np.array(led))
            take = min(int(capacity_wl[domain]), remaining)
            lead_here = min(int(lead[domain]), leaders_left)
            picked.append(domain)
            pods.append(take * unit)
            led.append(lead_here)
            remaining -= take
            leaders_left -= lead_here
            i += 1
        if remaining == 0 and leaders_left == 0:
            return _Chosen(
                np.array(picked, dtype=np.int64),
                np.array(pods, dtype=np.int64),
                np.array(led, dtype=np.int64),
            )
        rest = domains[i:]
        cumulative = np.cumsum(capacity[rest])
        k = int(np.searchsorted(cumulative, remaining, side="left"))
        if leaders_left > 0 or k >= len(rest):
            raise _NoFit(
                f"internal error: {count} pod(s) could not be spread over the chosen domains"
            )
        before = int(cumulative[k - 1]) if k else 0
        last = int(rest[k])
        if self.best_fit:
            last = self._tightest(rest[k:], remaining - before, 0, capacity, lead)
        whole = rest[:k].astype(np.int64)
        # Whole arrays: thousands of domains filled whole (unconstrained gangs over nodes).
        return _Chosen(
            np.concatenate((np.array(picked, dtype=np.int64), whole, [last])),
            np.concatenate(
                (
                    np.array(pods, dtype=np.int64),
                    capacity[whole] * unit,
                    [(remaining - before) * unit],
                )
            ).astype(np.int64),
            np.concatenate((np.array(led, dtype=np.int64), np.zeros(k + 1, dtype=np.int64))),
        )

    def _distribute_small(
        self,
        domains: list[int],
        count: int,
        need: int,
        leaders: int,
        unit: int,
        capacity: list[int],
        capacity_wl: list[int],
        lead: list[int],
    ) -> _Chosen:
        """``_distribute`` over a few domains (a rack's nodes) in plain Python: the same
        choices, without a dozen numpy calls on arrays of tens of elements. The lists hold
        each domain's values, in ``domains``'s order."""
        best_fit = self.best_fit
        picked: list[int] = []
        pods: list[int] = []
        led: list[int] = []
        remaining, leaders_left, i, n = need, leaders, 0, len(domains)
        while leaders_left > 0 and i < n:
            at = i
            if best_fit and capacity_wl[i] >= remaining and lead[i] >= leaders_left:
                at = _tightest_at(capacity_wl, lead, i, remaining, leaders_left)
            if capacity_wl[at] >= remaining and lead[at] >= leaders_left:
                picked.append(domains[at])
                pods.append(remaining * unit)
                led.append(leaders_left)
                return _chosen(picked, pods, led)
            take = min(capacity_wl[at], remaining)
            lead_here = min(lead[at], leaders_left)
            picked.append(domains[at])
            pods.append(take * unit)
            led.append(lead_here)
            remaining -= take
            leaders_left -= lead_here
            i += 1
        if remaining == 0 and leaders_left == 0:
            return _chosen(picked, pods, led)
        # The first k whose running total reaches ``remaining`` (numpy's searchsorted, left).
        before, k = 0, i
        while k < n and before + capacity[k] < remaining:
            before += capacity[k]
            k += 1
        if leaders_left > 0 or k >= n:
            raise _NoFit(
                f"internal error: {count} pod(s) could not be spread over the chosen domains"
            )
        last = k
        if best_fit:
            last = _tightest_at(capacity, lead, k, remaining - before, 0)
        picked += domains[i:k]
        pods += [c * unit for c in capacity[i:k]]
        picked.append(domains[last])
        pods.append((remaining - before) * unit)
        led += [0] * (k - i + 1)
        return _chosen(picked, pods, led)

    def _fill_slices(self, level: int, domains: IntArray) -> _Chosen:
        """The whole gang, in slices, over ``domains`` (already in fill order) of ``level``."""
        return self._distribute(
            domains,
            self.count,
            self.leader_count,
            self.slice_size,
            self.slc[level],
            self.slc_wl[level],
            self.lead[level],
        )

    def descend(self, level: int, fit_domains: list[int], fixed: _Chosen | None = None) -> _Chosen:
        # ``fixed``: a balanced split already made at ``level``; Kueue only hands it down.
        if fixed is None:
            chosen = self._fill_slices(level, np.array(fit_domains, dtype=np.int64))
        else:
            chosen = fixed
        tree = self.tree
        # Above the slice level: pool the children of every chosen domain, fill them afresh.
        while fixed is None and level < min(tree.depth - 1, self.slice_level):
            used = chosen.domains[(chosen.pods > 0) | (chosen.leaders > 0)]
            pool = np.concatenate([tree.children(level, int(d)) for d in used]).astype(np.int64)
            level += 1
            chosen = self._fill_slices(level, self._sorted(level, pool, with_leader=False))
        # At and below the slice level: each parent hands its own count to its children.
        while level < tree.depth - 1:
            child = level + 1
            unit = self.inner_size.get(child, 1)
            capacity, capacity_wl = self.pod[child], self.pod_wl[child]
            if unit > 1:
                capacity, capacity_wl = capacity // unit, capacity_wl // unit
            if level < self.slice_level:  # only after a balanced split: still whole slices
                unit, capacity, capacity_wl = self.slice_size, self.slc[child], self.slc_wl[child]
            parts: list[_Chosen] = []
            for domain, pods, leaders in zip(
                chosen.domains.tolist(), chosen.pods.tolist(), chosen.leaders.tolist(), strict=True
            ):
                if pods == 0 and leaders == 0:
                    continue
                children = self._sorted(child, tree.children(level, domain).astype(np.int64), False)
                parts.append(
                    self._distribute(
                        children, pods, leaders, unit, capacity, capacity_wl, self.lead[child]
                    )
                )
            level = child
            chosen = _Chosen(
                np.concatenate([p.domains for p in parts]).astype(np.int64),
                np.concatenate([p.pods for p in parts]).astype(np.int64),
                np.concatenate([p.leaders for p in parts]).astype(np.int64),
            )
        return chosen

    # --- output --------------------------------------------------------------------------

    def placement(self, name: str, per_node: IntArray) -> PodSetPlacement:
        tree = self.tree
        out_level = tree.output_level
        rows = np.flatnonzero(per_node)
        counts = per_node[rows]
        # Whole-array conversions: a 5,000-pod plan writes 5,000 entries, and per-element
        # numpy indexing and int() calls cost more than the placement itself.
        names = tree.node_names(self.snapshot.node_names, rows)
        node_counts = dict(zip(names, counts.tolist(), strict=True))
        if out_level == tree.node_level:
            # Domain i of the node level is the node at position i: the counts are per domain.
            per_domain, domains = per_node, rows
        else:
            per_domain = np.bincount(
                tree.member_domain[out_level][rows],
                weights=counts,
                minlength=tree.size(out_level),
            ).astype(np.int64)
            domains = np.flatnonzero(per_domain)
        domains = domains[np.argsort(tree.lexrank[out_level][domains], kind="stable")]
        if tree.hostname_lowest:
            levels: tuple[str, ...] = (tree.level_keys[-1],)
            values: list[tuple[str, ...]] = list(tree.value_tuples(out_level, domains))
        else:
            levels = tuple(tree.level_keys)
            values = tree.paths(out_level, domains)
        placed = PodSetPlacement(
            name=name,
            levels=levels,
            domains=DomainCount.many(values, per_domain[domains].tolist(), domains.tolist()),
            node_counts=node_counts,
        )
        return self.gpu.attach(placed, per_node)  # with its pods' GPU sets, if any

    def _balanced(self) -> tuple[int, _Chosen] | None:
        """Kueue's balanced split (``admission/balanced.py``) when asked for; None: BestFit."""
        request = self.workers
        if not request.balanced or request.mode is not Mode.PREFERRED:
            return None
        shape = Shape(
            slices=self.count // self.slice_size,
            level=self.level,
            slice_level=self.slice_level,
            leaders=self.leader_count,
            slice_size=self.slice_size,
            below_unit=self.inner_size.get(self.level + 1, 1),
            exclusive_slices=request.exclusive_slices,
            limit=None if request.limit is None else self.limit_level,
        )

        def counts(level: int) -> DomainCounts:
            return DomainCounts(
                self.pod[level],
                self.pod_wl[level],
                self.slc[level],
                self.slc_wl[level],
                self.lead[level],
                self.tree.lexrank[level],
            )

        choice = balanced_choice(self.tree, counts, shape)
        if choice is None:
            return None
        split = _Chosen(choice.domains, choice.slices * self.slice_size, choice.leaders)
        return choice.level, split

    def run(self) -> list[tuple[PodSetRequest, IntArray]]:
        """Pods per node (positions in ``tree.nodes``) for the workers and the leader."""
        self.fill_in_counts()
        balanced = self._balanced()
        if balanced is not None:
            level, split = balanced
            return self._per_node(self.descend(level, [], split))
        level, domains = self.find_level()
        self.found = (level, domains)  # where the exact pass may look for fewer domains
        return self.run_in(level, domains)

    def run_in(self, level: int, domains: list[int]) -> list[tuple[PodSetRequest, IntArray]]:
        """The descent from ``domains`` of ``level`` (counts filled in), per node."""
        return self._per_node(self.descend(level, domains))

    def _per_node(self, chosen: _Chosen) -> list[tuple[PodSetRequest, IntArray]]:
        workers = np.zeros(len(self.tree.nodes), dtype=np.int64)
        np.add.at(workers, chosen.domains, chosen.pods)
        result = [(self.workers, workers)]
        if self.leader is not None:
            leaders = np.zeros(len(self.tree.nodes), dtype=np.int64)
            np.add.at(leaders, chosen.domains, chosen.leaders)
            result.insert(0, (self.leader, leaders))
        return result


def _zeros(tree: DomainTree, level: int) -> IntArray:
    """Read-only zeros, one per domain of ``level``: the counts a placement leaves at zero
    (no leaders, no slices) are the same for every placement on the tree."""
    kept = tree.derived.get("zeros")
    if not isinstance(kept, list):
        made: list[IntArray] = []
        for at in range(tree.depth):
            zeros = np.zeros(tree.size(at), dtype=np.int64)
            zeros.flags.writeable = False
            made.append(zeros)
        kept = tree.derived["zeros"] = made
    found: IntArray = kept[level]
    return found


def _chosen(domains: list[int], pods: list[int], leaders: list[int]) -> _Chosen:
    return _Chosen(
        np.array(domains, dtype=np.int64),
        np.array(pods, dtype=np.int64),
        np.array(leaders, dtype=np.int64),
    )


def _tightest_at(
    capacity: list[int], lead: list[int], start: int, needed: int, leaders: int
) -> int:
    """``_tightest`` over positions ``start`` on of plain lists: the position of the least
    capacity that holds ``needed`` with ``leaders`` (first on ties; ``start`` when none)."""
    best, least = start, -1
    for at in range(start, len(capacity)):
        cap = capacity[at]
        if cap >= needed and lead[at] >= leaders and (least < 0 or cap < least):
            best, least = at, cap
    return best


def _present(codes: npt.NDArray[Any], size: int) -> IntArray:
    """``np.unique(codes)`` for codes in [0, size): a count, not a sort."""
    return np.flatnonzero(np.bincount(codes, minlength=size)).astype(np.int64)


def _distinct(codes: npt.NDArray[Any], size: int) -> int:
    """``len(np.unique(codes))`` for codes in [0, size)."""
    return int(np.count_nonzero(np.bincount(codes, minlength=size)))


_SMALL = 256  # up to this many domains, small-array paths (same answers) are faster
_SPAN = 2**62  # composite sort keys stay below this (int64)


def _lexsort(keys: Sequence[npt.NDArray[Any]]) -> npt.NDArray[np.intp]:
    """``np.lexsort(keys)`` (last key first) when the first key is unique, as the path rank
    is: integer keys packed into one int64 and sorted once, which is several times faster
    than lexsort's pass per key over 20,000 nodes. Falls back when a key is not integer or
    the packed key would not fit."""
    if len(keys[0]) <= _SMALL:
        return np.lexsort(keys)  # one call: packing costs more than it saves on few domains
    composite = np.zeros(len(keys[0]), dtype=np.int64)
    span = 1
    for key in keys:
        if key.dtype.kind not in "iu":
            return np.lexsort(keys)
        low, high = int(key.min()), int(key.max())
        width = high - low + 1
        if span * width >= _SPAN:
            return np.lexsort(keys)
        if width > 1:
            composite += (key.astype(np.int64) - low) * span
        span *= width
    # The first key is unique among the domains, so every packed key is: no ties to break.
    return np.argsort(composite)


def _groups(podsets: Sequence[PodSetRequest]) -> list[list[PodSetRequest]]:
    groups: dict[str, list[PodSetRequest]] = {}
    for index, podset in enumerate(podsets):
        groups.setdefault(podset.group or f"#{index}", []).append(podset)
    return list(groups.values())


def _leader_and_workers(group: list[PodSetRequest]) -> tuple[PodSetRequest, PodSetRequest | None]:
    """As Kueue: the second is the leader unless it has more pods than the first."""
    workers = group[0]
    if len(group) == 1:
        return workers, None
    leader = group[1]
    if leader.count > workers.count:
        workers, leader = leader, workers
    return workers, leader


def _empty(podset: PodSetRequest, tree: DomainTree) -> PodSetPlacement:
    levels = (tree.level_keys[-1],) if tree.hostname_lowest else tuple(tree.level_keys)
    return PodSetPlacement(podset.name, levels, (), {})


@dataclass(slots=True)
class _Group:
    """One group of the request as placed by the greedy pass (placer and result once run)."""

    workers: PodSetRequest
    leader: PodSetRequest | None
    placer: _GroupPlacer | None = None
    result: list[tuple[PodSetRequest, IntArray]] | None = None

    @property
    def shape(self) -> str:
        """Equal for groups that differ only in their names: interchangeable in a search."""
        leader = None if self.leader is None else dataclasses.replace(self.leader, name="")
        return repr((dataclasses.replace(self.workers, name=""), leader))


@dataclass(slots=True)
class _FirstPass:
    decision: PlacementDecision
    groups: list[_Group]  # the groups that were placed or tried, in order
    free: IntArray  # free capacity per tree node before any group
    retry: bool = True  # False: the request itself is malformed; no second pass


def place(
    tree: DomainTree,
    snapshot: ClusterSnapshot,
    request: PlacementRequest,
    *,
    topology_name: str,
    flavor_tolerations: Sequence[Toleration] = (),
    exact: ExactBudget | None = None,
) -> PlacementDecision:
    """Place every PodSet of ``request`` on ``tree``, earlier PodSets taking capacity first.

    All or nothing: the first PodSet (or group) that does not fit ends the computation, and
    the decision carries its message and no placements. When that greedy pass (Kueue's)
    misses a fit of a gang of several groups, or a preferred request spans more domains than
    needed, the exact second pass (``exact.py``) gets ``exact.seconds`` on ``exact.clock`` to
    do better; without ``exact`` (or with 0 seconds) it does not run.
    """
    first = _first_pass(tree, snapshot, request, topology_name, flavor_tolerations)
    if exact is None or exact.seconds <= 0 or not first.retry:
        return first.decision
    second = _SecondPass(tree, snapshot, request, first, topology_name, flavor_tolerations)
    return second.run(exact)


def joint_fit(
    tree: DomainTree,
    snapshot: ClusterSnapshot,
    request: PlacementRequest,
    *,
    topology_name: str,
    exact: ExactBudget,
) -> PlacementDecision:
    """The second pass's joint fit whatever the greedy answer (to time and test it)."""
    first = _first_pass(tree, snapshot, request, topology_name, ())
    second = _SecondPass(tree, snapshot, request, first, topology_name, ())
    return second.run(exact, joint=True)


def _first_pass(
    tree: DomainTree,
    snapshot: ClusterSnapshot,
    request: PlacementRequest,
    topology_name: str,
    flavor_tolerations: Sequence[Toleration],
) -> _FirstPass:
    # Read-only and shared by every placement on this snapshot and tree: a group's usage
    # is taken off a copy (the second pass starts from the capacity before any group).
    free = snapshot.free_rows(tree.nodes)
    pass_ = _FirstPass(PlacementDecision(fits=False), [], free)
    placements: dict[str, PodSetPlacement] = {}
    groups = _groups(request.podsets)
    for index, group in enumerate(groups):
        workers, leader = _leader_and_workers(group)
        if len(group) > 2:
            pass_.decision = PlacementDecision(
                fits=False,
                message=f"podset group {workers.group!r} has {len(group)} pod sets; a group "
                "holds exactly 2 (a leader and its workers)",
                podset=workers.name,
            )
            pass_.retry = False
            return pass_
        if workers.count == 0 and (leader is None or leader.count == 0):
            for podset in group:
                placements[podset.name] = _empty(podset, tree)
            continue
        entry = _Group(workers, leader)
        pass_.groups.append(entry)
        try:
            placer = _GroupPlacer(
                tree, snapshot, free, workers, leader, topology_name, flavor_tolerations
            )
            result = placer.run()
        except _NoFit as failure:
            pass_.decision = PlacementDecision(
                fits=False,
                message=failure.message,
                podset=workers.name if leader is None else f"{leader.name}+{workers.name}",
                exclusions=failure.exclusions,
            )
            return pass_
        entry.placer, entry.result = placer, result
        for podset, per_node in result:
            placements[podset.name] = placer.placement(podset.name, per_node)
            if index == len(groups) - 1:
                continue  # no later group to see it
            # Later PodSets of the same workload see this one's usage.
            if free is pass_.free:
                free = free.copy()
            vec, _ = snapshot.pod_vector(podset.requests)
            rows = np.flatnonzero(per_node)
            free[rows] -= per_node[rows, None] * vec
        snapshot = placer.gpu.after(snapshot)  # and its GPUs
    ordered = with_visible([placements[p.name] for p in request.podsets])
    pass_.decision = PlacementDecision(fits=True, placements=ordered)
    return pass_


GroupResult = list[tuple[PodSetRequest, IntArray]]


class _Unsupported(Exception):
    """GPU sets or balanced placement: exactness is out of reach; the greedy answer stands."""


class _SecondPass:
    """The exact second pass over a greedy answer (see ``exact.py`` for the method)."""

    def __init__(
        self,
        tree: DomainTree,
        snapshot: ClusterSnapshot,
        request: PlacementRequest,
        first: _FirstPass,
        topology_name: str,
        flavor_tolerations: Sequence[Toleration],
    ) -> None:
        self.tree = tree
        self.snapshot = snapshot
        self.request = request
        self.first = first
        self.topology_name = topology_name
        self.flavor_tolerations = flavor_tolerations
        self._node_regions: Regions | None = None  # built on first use: most runs need none
        self._fresh: dict[str, _GroupPlacer] = {}
        # Set by _more_domains for _fewer: per preferred group, the nodes searched and its
        # greedy counts at the levels above its own (caps); the summed greedy counts and
        # lower bounds per level.
        self._regions: dict[int, IntArray] = {}
        self._caps: dict[int, Counts] = {}
        self._greedy: Counts = ()
        self._bound: Counts = ()
        self._cut_short = False  # the budget ran out after a joint fit was found

    @property
    def regions(self) -> Regions:
        if self._node_regions is None:
            # Per tree, not per call: its node orders depend on the tree alone.
            kept = self.tree.derived.get("exact-regions")
            if not isinstance(kept, Regions):
                kept = self.tree.derived["exact-regions"] = Regions(self.tree)
            self._node_regions = kept
        return self._node_regions

    def run(self, exact: ExactBudget, joint: bool = False) -> PlacementDecision:
        """``joint``: search the joint fit even when the greedy answer fits (benchmarks)."""
        decision = self.first.decision
        preferred: list[int] = []
        if decision.fits and not joint:
            preferred = self._more_domains()
            if not preferred:
                return decision  # fits and already (provably) uses the fewest domains
        elif len(_groups(self.request.podsets)) < 2 and not joint:
            return decision  # one group alone: the greedy counts are exact
        budget = exact.start()
        try:
            results = self._fewer(preferred, budget) if preferred else self._fit(budget)
        except OutOfTime:
            log.info(
                "placement of %s: the exact second pass ran out of its %.0f ms budget; the "
                "greedy answer stands",
                self.request.workload,
                exact.seconds * 1000,
            )
            return dataclasses.replace(decision, exact=ExactOutcome.BUDGET)
        except (TooLarge, _Unsupported):
            return dataclasses.replace(decision, exact=ExactOutcome.UNSUPPORTED)
        except _NoFit:
            return dataclasses.replace(decision, exact=ExactOutcome.NO_BETTER)
        if results is None or not self._valid(results):
            return dataclasses.replace(decision, exact=ExactOutcome.NO_BETTER)
        return self._decision(results)

    # --- the groups, counted on the free capacity before any of them --------------------

    def _all_groups(self) -> list[_Group]:
        placed = {id(g.workers): g for g in self.first.groups}
        groups = []
        for group in _groups(self.request.podsets):
            if len(group) > 2:
                raise _NoFit("malformed group")  # refused by the greedy pass once reached
            workers, leader = _leader_and_workers(group)
            if workers.count == 0 and (leader is None or leader.count == 0):
                continue
            groups.append(placed.get(id(workers)) or _Group(workers, leader))
        return groups

    def fresh(self, group: _Group) -> _GroupPlacer:
        """The group's counts as if it came first (shared by groups of the same shape)."""
        shape = group.shape
        if shape not in self._fresh:
            placer = _GroupPlacer(
                self.tree,
                self.snapshot,
                self.first.free,
                group.workers,
                group.leader,
                self.topology_name,
                self.flavor_tolerations,
            )
            placer.fill_in_counts()
            if _needs_greedy(placer):
                raise _Unsupported
            self._fresh[shape] = placer
        return self._fresh[shape]

    # --- a gang the greedy pass could not fit --------------------------------------------

    def _fit(self, budget: Budget) -> list[tuple[_GroupPlacer, GroupResult]] | None:
        groups = self._all_groups()
        placers = [self.fresh(g) for g in groups]
        budget.check()
        parts = [_part(p, g.shape) for p, g in zip(placers, groups, strict=True)]
        candidates = [_candidates(p) for p in placers]
        joint = fit_jointly(self.tree, self.first.free, parts, candidates, budget)
        if joint is None:
            return None
        results: list[GroupResult] = [[] for _ in groups]
        for members, plan in joint.components.items():
            if plan is None:  # alone in its domain: placed inside it the greedy way
                (i,) = members
                level, domain = joint.regions[i]
                results[i] = _renamed(groups[i], placers[i].run_in(level, [domain]))
            else:
                for k, i in enumerate(members):
                    results[i] = _from_plan(groups[i], plan[k])
        results = self._tighten(groups, placers, results, budget)
        return list(zip(placers, results, strict=True))

    # --- a preferred request over more domains than needed -------------------------------
    #
    # The objective is lexicographic from the top of the topology down: fewest domains of
    # the top level, then of the next, down to each group's requested level (summed over the
    # preferred groups), and never more domains of a level above a group's requested one
    # than the greedy pass gave that group. Fewer hosts bought with more racks is worse:
    # cross-rack traffic is what the request asked to avoid.

    def _levels_used(self, placer: _GroupPlacer, result: GroupResult) -> Counts:
        """Domains the group's pods use at each level from the top down to its own."""
        held = np.flatnonzero(sum((per_node for _, per_node in result), np.zeros(1, np.int64)))
        member = self.tree.member_domain
        return tuple(
            _distinct(member[lv][held], self.tree.size(lv)) for lv in range(placer.level + 1)
        )

    def _area(self, group: _Group) -> IntArray:
        """The nodes of the domains the greedy pass settled the group in (find_level)."""
        assert group.placer is not None and group.placer.found is not None
        level, domains = group.placer.found
        return self.regions.union([(level, d) for d in domains])

    def _whole_tree(self, placers: Sequence[_GroupPlacer]) -> bool:
        """Whether the preferred groups may be searched for over the whole tree (beyond the
        block the greedy pass chose): when the ILP over every eligible node stays small."""
        return sum(int(p.worker_eligible.sum()) for p in placers) <= WHOLE_TREE_COLUMNS

    def _lower(self, placer: _GroupPlacer, nodes: IntArray) -> Counts:
        """Per level, the fewest domains among ``nodes`` whose capacities (before the gang)
        could hold the group: largest first, a bound no plan can beat."""
        need = placer.count // placer.slice_size
        bounds = []
        for level in range(placer.level + 1):
            inside = _present(self.tree.member_domain[level][nodes], self.tree.size(level))
            bounds.append(max(lower_bound(placer.slc[level][inside], need), 1))
        return tuple(bounds)

    def _more_domains(self) -> list[int]:
        """The preferred groups, when at some level their greedy domain counts exceed what
        a lower bound allows; else [] (the greedy answer is then lexicographically fewest,
        and stands). Kept for ``_fewer``: the region searched, the counts, the bounds."""
        groups = self.first.groups
        preferred = [
            i
            for i, g in enumerate(groups)
            if g.workers.mode is Mode.PREFERRED
            and not g.workers.balanced
            and g.placer is not None
            and g.placer.found is not None
        ]
        greedy: dict[int, Counts] = {}
        for i in preferred:
            placer, result = groups[i].placer, groups[i].result
            assert placer is not None and result is not None
            greedy[i] = self._levels_used(placer, result)
        if all(counts[-1] <= 1 for counts in greedy.values()):
            return []  # one domain at the requested level: one at every level above too
        try:
            # The first group's greedy counts are its counts before the gang; the others'
            # are recounted so.
            placers = [groups[i].placer if i == 0 else self.fresh(groups[i]) for i in preferred]
        except (_NoFit, _Unsupported):
            return []
        whole = self._whole_tree([p for p in placers if p is not None])
        lower: dict[int, Counts] = {}
        for i, placer in zip(preferred, placers, strict=True):
            assert placer is not None
            self._regions[i] = (
                self.regions.nodes((WHOLE_TREE, 0)) if whole else self._area(groups[i])
            )
            lower[i] = self._lower(placer, self._regions[i])
        self._greedy = _summed(greedy.values())
        self._bound = _summed(lower.values())
        self._caps = {i: greedy[i][:-1] for i in preferred}
        return preferred if self._greedy != self._bound else []

    def _fewer(
        self, preferred: list[int], budget: Budget
    ) -> list[tuple[_GroupPlacer, GroupResult]] | None:
        groups = self.first.groups
        free = self.first.free.copy()
        for i, group in enumerate(groups):
            assert group.placer is not None and group.result is not None
            if _needs_greedy(group.placer):
                raise _Unsupported
            if i not in preferred:  # kept where the greedy pass put it
                for podset, per_node in group.result:
                    vec, _ = self.snapshot.pod_vector(podset.requests)
                    free -= per_node[:, None] * vec
        items = []
        for i in preferred:
            placer = groups[i].placer
            assert placer is not None
            items.append((_part(placer, groups[i].shape, placer.level), self._regions[i]))
        plan = fewest_domains(
            self.tree,
            free,
            items,
            budget,
            reference=self._greedy,
            lower=self._bound,
            caps=[self._caps[i] for i in preferred],
        )
        if plan is None:
            return None
        results: list[tuple[_GroupPlacer, GroupResult]] = []
        for i, group in enumerate(groups):
            assert group.placer is not None and group.result is not None
            if i in preferred:
                results.append((group.placer, _from_plan(group, plan[preferred.index(i)])))
            else:  # kept as the greedy pass placed it
                results.append((group.placer, group.result))
        return results

    def _tighten(
        self,
        groups: Sequence[_Group],
        placers: Sequence[_GroupPlacer],
        results: list[GroupResult],
        budget: Budget,
    ) -> list[GroupResult]:
        """After a joint fit of a gang the greedy pass missed: its preferred groups moved to
        the lexicographically fewest domains, the other groups kept where the fit put them
        (their domains are not counted). Unchanged when the ILP would be too large."""
        preferred = [
            i
            for i, g in enumerate(groups)
            if g.workers.mode is Mode.PREFERRED and not g.workers.balanced
        ]
        if not preferred or not self._whole_tree([placers[i] for i in preferred]):
            return results
        free = self.first.free.copy()
        for i, result in enumerate(results):
            if i not in preferred:
                for podset, per_node in result:
                    vec, _ = self.snapshot.pod_vector(podset.requests)
                    free -= per_node[:, None] * vec
        whole = self.regions.nodes((WHOLE_TREE, 0))
        items = [(_part(placers[i], groups[i].shape, placers[i].level), whole) for i in preferred]
        reference = _summed(self._levels_used(placers[i], results[i]) for i in preferred)
        lower = _summed(self._lower(placers[i], whole) for i in preferred)
        try:
            plan = fewest_domains(self.tree, free, items, budget, reference=reference, lower=lower)
        except OutOfTime:
            # A fit found beats none: it stands, said to be cut short.
            self._cut_short = True
            return results
        except TooLarge:
            return results
        if plan is None:
            return results
        tightened = list(results)
        for k, i in enumerate(preferred):
            tightened[i] = _from_plan(groups[i], plan[k])
        return tightened

    # --- the answer ----------------------------------------------------------------------

    def _valid(self, results: list[tuple[_GroupPlacer, GroupResult]]) -> bool:
        """A last check that the plan holds (a bug here must not overcommit a node)."""
        free = self.first.free.copy()
        for _, result in results:
            for podset, per_node in result:
                vec, _ = self.snapshot.pod_vector(podset.requests)
                free -= per_node[:, None] * vec
                if int(per_node.sum()) != podset.count:
                    log.error("exact pass: wrong count for %s; greedy kept", podset.name)
                    return False
        if (free < 0).any():
            log.error("exact pass: a node over capacity for %s; greedy kept", self.request.workload)
            return False
        return True

    def _decision(self, results: list[tuple[_GroupPlacer, GroupResult]]) -> PlacementDecision:
        placements: dict[str, PodSetPlacement] = {}
        for placer, result in results:
            for podset, per_node in result:
                placements[podset.name] = placer.placement(podset.name, per_node)
        for podset in self.request.podsets:
            if podset.name not in placements:
                placements[podset.name] = _empty(podset, self.tree)
        ordered = with_visible([placements[p.name] for p in self.request.podsets])
        outcome = ExactOutcome.BUDGET if self._cut_short else ExactOutcome.FOUND
        return PlacementDecision(fits=True, placements=ordered, produced_by="exact", exact=outcome)


def _summed(vectors: Iterable[Counts]) -> Counts:
    """Per-level counts of several groups added level by level (shorter ones end higher)."""
    totals: list[int] = []
    for vector in vectors:
        totals.extend([0] * (len(vector) - len(totals)))
        for level, count in enumerate(vector):
            totals[level] += count
    return tuple(totals)


def _needs_greedy(placer: _GroupPlacer) -> bool:
    """GPU sets (bandwidth matrices, minimums) and balanced splits stay with the greedy pass:
    their per-node counts are not plain resource arithmetic the ILP could state."""
    requests = [placer.workers] if placer.leader is None else [placer.workers, placer.leader]
    return (
        placer.gpu.matrices
        or placer.workers.balanced
        or any(r.gpu_min_bandwidth is not None for r in requests)
    )


def _part(placer: _GroupPlacer, shape: str, count_level: int | None = None) -> Part:
    units: list[tuple[int, int]] = []
    if placer.slice_size > 1 or placer.workers.exclusive_slices:
        units.append((placer.slice_level, placer.slice_size))
    units.extend(sorted(placer.inner_size.items()))
    leader = placer.leader is not None
    return Part(
        shape=shape,
        count=placer.count,
        worker_vec=placer.worker_vec,
        worker_mask=placer.worker_eligible,
        leader_vec=placer.leader_vec if leader else None,
        leader_mask=placer.leader_eligible if leader else None,
        units=tuple(units),
        exclusive_level=placer.slice_level if placer.workers.exclusive_slices else None,
        count_level=count_level,
        limit_level=placer.limit_level if placer.workers.limit is not None else None,
    )


def _candidates(placer: _GroupPlacer) -> Candidates:
    """Domains that hold the group alone, in the greedy pass's order; the whole tree when
    the group is not held to one domain."""
    request = placer.workers
    if request.mode is Mode.REQUIRED:
        level = placer.level
    elif request.mode is Mode.PREFERRED and request.limit is not None:
        level = placer.limit_level
    else:
        return Candidates(((WHOLE_TREE, 0),), alone=False)
    need = placer.count // placer.slice_size
    fits = (placer.slc_wl[level] >= need) & (placer.lead[level] >= placer.leader_count)
    order = placer._sorted(level, np.flatnonzero(fits).astype(np.int64), with_leader=True)
    # Required: the greedy counts of one group in one domain are exact, no ILP needed.
    return Candidates(tuple((level, int(d)) for d in order), alone=request.mode is Mode.REQUIRED)


def _from_plan(group: _Group, plan: tuple[IntArray, IntArray | None]) -> GroupResult:
    workers, leader = plan
    if group.leader is None or leader is None:
        return [(group.workers, workers)]
    return [(group.leader, leader), (group.workers, workers)]


def _renamed(group: _Group, result: GroupResult) -> GroupResult:
    """A result computed by a placer shared by shape, handed to this group's own PodSets."""
    if group.leader is None:
        return [(group.workers, result[-1][1])]
    return [(group.leader, result[0][1]), (group.workers, result[1][1])]
