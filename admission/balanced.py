"""Kueue's balanced placement (feature gate ``TASBalancedPlacement``) for preferred requests.

Same semantics as ``pkg/cache/scheduler/tas_balanced_placement.go`` (kubernetes-sigs/kueue @
ff69552e), written afresh over the per-level counts the placer already has. For a request
preferring level L:

1. Each parent one level above L (all of level 0 when L is 0), in path order, is a candidate.
   A greedy pass over its domains at the level the gang is split at (L+1 when L is above the
   slice level, else L) counts the domains the gang needs; the *threshold* T is slices // that
   count, capped by the last (smallest) domain used and by the leader domain's room.
2. Domains there below T are dropped (pruned), L is recounted from what is left and the
   greedy pass is run again at L. If it no longer fits and the last domain could not take T
   with the leader, T is lowered to that once and the parent retried.
3. The parent with the highest T wins; on a tie the one needing fewer domains at L, then the
   first in path order. No parent with T > 0: not balanced.
4. A subset search keeps, among sets of exactly the greedy number of domains, the one that
   overshoots least. At L ties go to the domain whose children share capacity most evenly
   (entropy); at the split level to path order.
5. Every chosen domain gets T slices; the rest goes out in BestFit order, leader domain first.

Every step can refuse (``None``); the placer then falls back to BestFit, as Kueue does.

Where we differ from Kueue, on purpose:

- recounting L after pruning keeps multi-layer rounding (Kueue recounts without the inner
  slice sizes and may then promise slices the descent cannot deliver);
- entropy sums a domain's children in size order, so equal capacity multisets tie exactly
  (Kueue sums in child order; float rounding may then break the tie either way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from topogate.cache.snapshot import BoolArray, IntArray
from topogate.cache.topology import DomainTree

FloatArray = npt.NDArray[np.float64]

_NONE = np.iinfo(np.int64).max // 4  # "no leader-capable child" in min-reductions


def _ints(values: Sequence[int] | IntArray) -> IntArray:
    return np.asarray(values, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class DomainCounts:
    """Kueue's ``domainState`` for some domains of one level, one entry per domain."""

    pods: IntArray
    pods_with_leader: IntArray
    slices: IntArray
    slices_with_leader: IntArray
    leaders: IntArray  # 0 or 1: whether the domain can host the leader
    rank: IntArray  # position in full-path order: every sort's last key

    @classmethod
    def of(
        cls,
        pods: Sequence[int],
        *,
        slices: Sequence[int] | None = None,
        pods_with_leader: Sequence[int] | None = None,
        slices_with_leader: Sequence[int] | None = None,
        leaders: Sequence[int] | None = None,
        rank: Sequence[int] | None = None,
    ) -> DomainCounts:
        """Spelled out per domain; missing fields: slices = pods, no leader, rank = position."""
        pod_array = _ints(pods)
        slice_array = pod_array.copy() if slices is None else _ints(slices)
        return cls(
            pods=pod_array,
            pods_with_leader=pod_array.copy()
            if pods_with_leader is None
            else _ints(pods_with_leader),
            slices=slice_array,
            slices_with_leader=slice_array.copy()
            if slices_with_leader is None
            else _ints(slices_with_leader),
            leaders=np.zeros_like(pod_array) if leaders is None else _ints(leaders),
            rank=np.arange(len(pod_array), dtype=np.int64) if rank is None else _ints(rank),
        )

    def __len__(self) -> int:
        return len(self.pods)

    def take(self, index: IntArray) -> DomainCounts:
        return DomainCounts(
            self.pods[index],
            self.pods_with_leader[index],
            self.slices[index],
            self.slices_with_leader[index],
            self.leaders[index],
            self.rank[index],
        )

    def cleared(self, mask: BoolArray) -> DomainCounts:
        """Kueue's ``clearState``: the masked domains hold nothing any more."""

        def zero(values: IntArray) -> IntArray:
            return np.where(mask, 0, values)

        return DomainCounts(
            zero(self.pods),
            zero(self.pods_with_leader),
            zero(self.slices),
            zero(self.slices_with_leader),
            zero(self.leaders),
            self.rank,
        )

    def without_leader(self, mask: BoolArray) -> DomainCounts:
        """Kueue's ``clearLeaderCapacity``: the masked domains may still take workers only."""
        return DomainCounts(
            self.pods,
            np.where(mask, 0, self.pods_with_leader),
            self.slices,
            np.where(mask, 0, self.slices_with_leader),
            np.where(mask, 0, self.leaders),
            self.rank,
        )


@dataclass(frozen=True, slots=True)
class Shape:
    """The request as the balanced pass sees it (levels are tree level indices)."""

    slices: int  # whole slices to place: count // slice_size
    level: int  # the preferred level L
    slice_level: int
    leaders: int = 0
    slice_size: int = 1
    # Multi-layer requests: level L+1's pods count towards L only in multiples of this.
    below_unit: int = 1
    exclusive_slices: bool = False  # topogate's one-slice-per-domain extension
    # The highest level a preferred search may climb to: the parent (L-1) must not be above it.
    limit: int | None = None

    @property
    def split_below(self) -> bool:
        """Above the slice level the even split is made one level down, at L+1."""
        return self.level < self.slice_level


# --- orders --------------------------------------------------------------------------------


def best_fit_order(counts: DomainCounts, domains: IntArray) -> IntArray:
    """Kueue's ``sortedDomains`` under BestFit: slices desc, pods asc, path."""
    keys = (counts.rank[domains], counts.pods[domains], -counts.slices[domains])
    return domains[np.lexsort(keys)]


def leader_order(counts: DomainCounts, domains: IntArray) -> IntArray:
    """Kueue's ``sortedDomainsWithLeader``: leader-capable first, then as BestFit with leader."""
    keys = (
        counts.rank[domains],
        counts.pods_with_leader[domains],
        -counts.slices_with_leader[domains],
        -counts.leaders[domains],
    )
    return domains[np.lexsort(keys)]


def entropy(pods: IntArray) -> float:
    """Kueue's ``calculateDomainsEntropy``: bits of spread of capacity over ``pods``."""
    # Summed smallest first, so that the same capacities in any order give the same float.
    positive = np.sort(pods[pods > 0]).astype(np.float64)
    total = positive.sum()
    if total == 0:
        return 0.0
    share = positive / total
    return float(-(share * np.log2(share)).sum())


def capacity_entropy_order(counts: DomainCounts, entropies: FloatArray) -> IntArray:
    """Kueue's ``compareDomainCapacityAndEntropy``: leader-capable first, more room with the
    leader first, then the more even spread over the children, then path."""
    keys = (counts.rank, -entropies, -counts.slices_with_leader, -counts.leaders)
    return np.lexsort(keys).astype(np.int64)


# --- the greedy count and the threshold ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Greedy:
    """How Kueue's ``evaluateGreedyAssignment`` would fill: domains used, and the last ones."""

    used: int
    leader_domain: int | None  # the domain taken for the leader, if any
    last_domain: int | None  # the last domain taken for the remaining slices, if any


def greedy_fill(counts: DomainCounts, slices: int, leaders: int) -> Greedy | None:
    """Leader domains first (in leader order), then BestFit order until ``slices`` are held."""
    remaining, leaders_left = slices, leaders
    used = 0
    leader_domain: int | None = None
    rest = np.arange(len(counts), dtype=np.int64)
    if leaders > 0:
        order = leader_order(counts, rest)
        while leaders_left > 0 and used < len(order) and counts.leaders[order[used]] > 0:
            leader_domain = int(order[used])
            leaders_left -= int(counts.leaders[leader_domain])
            remaining -= int(counts.slices_with_leader[leader_domain])
            used += 1
        if leaders_left > 0:
            return None
        rest = order[used:]
    if remaining <= 0:
        return Greedy(used, leader_domain, None)
    order = best_fit_order(counts, rest)
    capacity = counts.slices[order]
    useful = int(np.count_nonzero(capacity > 0))  # sorted descending: a prefix
    cumulative = np.cumsum(capacity[:useful])
    last = int(np.searchsorted(cumulative, remaining, side="left"))
    if last >= useful:
        return None
    return Greedy(used + last + 1, leader_domain, int(order[last]))


def balance_threshold(counts: DomainCounts, slices: int, greedy: Greedy) -> int:
    """Kueue's ``balanceThresholdValue``: the most slices every used domain can be given."""
    threshold = slices // greedy.used
    if greedy.leader_domain is not None:
        threshold = min(threshold, int(counts.slices_with_leader[greedy.leader_domain]))
    if greedy.last_domain is not None:
        threshold = min(threshold, int(counts.slices[greedy.last_domain]))
    return threshold


# --- choosing the set and splitting it -----------------------------------------------------


def select_optimal_set(
    counts: DomainCounts,
    slices: int,
    leaders: int,
    slice_size: int,
    entropies: FloatArray | None = None,
) -> IntArray | None:
    """Kueue's ``selectOptimalDomainSetToFit``: exactly as many domains as the greedy pass
    uses, overshooting the pods needed least; among equals, the first set found in order
    (capacity and entropy when ``entropies`` is given, else path order)."""
    greedy = greedy_fill(counts, slices, leaders)
    if greedy is None:
        return None
    size = greedy.used
    if entropies is not None:
        order = capacity_entropy_order(counts, entropies)
    else:
        order = np.argsort(counts.rank, kind="stable").astype(np.int64)
    pods, pods_with_leader = counts.pods.tolist(), counts.pods_with_leader.tolist()
    can_lead, can_work = (counts.leaders > 0).tolist(), (counts.slices > 0).tolist()
    lead = counts.leaders.tolist()
    # found[i][leaders left][pods left]: the first set of i domains found that leaves them.
    found: list[list[dict[int, tuple[int, ...]]]] = [
        [{} for _ in range(leaders + 1)] for _ in range(size + 1)
    ]
    found[0][leaders][slices * slice_size] = ()
    for domain in order.tolist():
        if not (can_lead[domain] or can_work[domain]):
            continue  # neither way of taking a domain applies to it
        for taken in range(size, 0, -1):  # downwards: each domain joins a set at most once
            before, after = found[taken - 1], found[taken]
            # Fewer leaders left first: a set that already placed the leader claims a state
            # before one that places it here (Kueue walks its keys in ascending order). Within
            # one count of leaders left the new states are all distinct, so order is moot.
            for leaders_left, sets in enumerate(before):
                for pods_left, chosen in sets.items():
                    if leaders_left <= 0 and pods_left <= 0:
                        continue  # already holds everything: a bigger set would only waste
                    grown = (*chosen, domain)
                    if leaders_left > 0 and can_lead[domain]:
                        with_leader = after[leaders_left - lead[domain]]
                        with_leader.setdefault(pods_left - pods_with_leader[domain], grown)
                    if can_work[domain]:
                        after[leaders_left].setdefault(pods_left - pods[domain], grown)
    complete = [left for left in found[size][0] if left <= 0]
    if not complete:
        return None
    return _ints(found[size][0][max(complete)])


@dataclass(frozen=True, slots=True)
class Spread:
    """Slices (and leaders) per domain; ``domains`` are positions in the given ``DomainCounts``."""

    domains: IntArray
    slices: IntArray
    leaders: IntArray


def spread_evenly(
    counts: DomainCounts, slices: int, leaders: int, slice_size: int, threshold: int
) -> Spread | None:
    """Kueue's ``placeSlicesOnDomainsBalanced``: T slices each, the rest in leader order."""
    chosen = select_optimal_set(counts, slices, leaders, slice_size)
    if chosen is None or slices < len(chosen) * threshold:
        return None
    chosen = leader_order(counts, chosen)
    extra_left, leaders_left = slices - len(chosen) * threshold, leaders
    given: list[int] = []
    led: list[int] = []
    for domain in chosen.tolist():
        if leaders_left > 0:
            extra = min(int(counts.slices_with_leader[domain]) - threshold, extra_left)
            led.append(1)
            leaders_left -= 1
        elif extra_left > 0:
            extra = min(int(counts.slices[domain]) - threshold, extra_left)
            led.append(0)
        else:
            extra = 0
            led.append(0)
        given.append(threshold + extra)
        extra_left -= extra
    if extra_left > 0 or leaders_left > 0:
        return None
    return Spread(chosen, _ints(given), _ints(led))


# --- one parent's domains: pruning and the choice of parent --------------------------------


@dataclass(frozen=True, slots=True)
class Group:
    """A parent's domains at L (``top``) and their children at L+1 (``below``)."""

    top: DomainCounts
    top_ids: IntArray  # their domain indices at L
    below: DomainCounts | None  # None when L is the topology's lowest level (Kueue's leaves)
    below_ids: IntArray
    below_parent: IntArray  # each child's position in ``top``


def _roll_up(
    top: DomainCounts, below: DomainCounts, parent: IntArray, shape: Shape
) -> DomainCounts:
    """Kueue's ``fillInCountsHelper`` for L: ``top`` recounted from its (pruned) children."""
    size = len(top)
    unit = shape.below_unit
    pods, pods_with_leader = below.pods // unit * unit, below.pods_with_leader // unit * unit

    def total(values: IntArray) -> IntArray:
        return np.bincount(parent, weights=values, minlength=size).astype(np.int64)

    all_pods, all_slices = total(pods), total(below.slices)
    # The leader goes to the child that loses least to it; without one, every child counts.
    hosts = below.leaders > 0 if shape.leaders > 0 else np.ones(len(below), dtype=np.bool_)
    pod_loss = np.full(size, _NONE, dtype=np.int64)
    np.minimum.at(pod_loss, parent[hosts], (pods - pods_with_leader)[hosts])
    slice_loss = np.full(size, _NONE, dtype=np.int64)
    np.minimum.at(slice_loss, parent[hosts], (below.slices - below.slices_with_leader)[hosts])
    has_host = pod_loss < _NONE
    pods_left = np.where(has_host, all_pods - pod_loss, 0)
    slices_left = np.where(has_host, all_slices - slice_loss, 0)
    leaders = np.zeros(size, dtype=np.int64)
    np.maximum.at(leaders, parent, below.leaders)
    if shape.level == shape.slice_level:
        all_slices, slices_left = all_pods // shape.slice_size, pods_left // shape.slice_size
        if shape.exclusive_slices:
            all_slices, slices_left = np.minimum(all_slices, 1), np.minimum(slices_left, 1)
    return DomainCounts(all_pods, pods_left, all_slices, slices_left, leaders, top.rank)


def _prune_level(
    counts: DomainCounts, threshold: int, leader_required: bool
) -> tuple[DomainCounts, BoolArray, BoolArray]:
    """Kueue's ``pruneDomainNodeBelowThreshold`` on every domain of ``counts``."""
    dropped = counts.slices < threshold
    # Still good for workers, but not as the leader's domain at this threshold.
    leaderless = (
        ~dropped & (counts.leaders > 0) & (counts.slices_with_leader < threshold)
        if leader_required
        else np.zeros(len(counts), dtype=np.bool_)
    )
    return counts.cleared(dropped).without_leader(leaderless), dropped, leaderless


def prune(group: Group, threshold: int, shape: Shape) -> Group:
    """Kueue's ``pruneDomainsBelowThreshold``: drop children below T, recount L, drop L's
    domains below T (a dropped domain takes its children with it)."""
    leader_required = shape.leaders > 0
    top, below = group.top, group.below
    if below is not None:
        below, _, _ = _prune_level(below, threshold, leader_required)
        top = _roll_up(top, below, group.below_parent, shape)
    top, dropped, leaderless = _prune_level(top, threshold, leader_required)
    if below is not None:
        below = below.cleared(dropped[group.below_parent])
        below = below.without_leader(leaderless[group.below_parent])
    return Group(top, group.top_ids, below, group.below_ids, group.below_parent)


def best_group(groups: Iterator[Group], shape: Shape) -> tuple[Group, int] | None:
    """Kueue's ``findBestDomainsForBalancedPlacement``: the pruned winning parent and its T."""
    best: Group | None = None
    best_threshold, best_used = 0, 0
    for group in groups:
        split = group.below if shape.split_below and group.below is not None else group.top
        greedy = greedy_fill(split, shape.slices, shape.leaders)
        if greedy is None:
            continue
        threshold = balance_threshold(split, shape.slices, greedy)
        if threshold <= 0 or threshold < best_threshold:
            continue  # T = 0 never wins (Kueue requires T > 0 to balance at all)
        # The last domain may not reach T once the leader is placed there instead.
        reserved = threshold
        if shape.leaders > 0 and greedy.last_domain is not None:
            reserved = min(threshold, int(split.slices_with_leader[greedy.last_domain]))
        pruned = prune(group, threshold, shape)
        after = greedy_fill(pruned.top, shape.slices, shape.leaders)
        if after is None and reserved < threshold:
            if reserved <= 0 or reserved < best_threshold:
                continue
            threshold = reserved
            pruned = prune(group, threshold, shape)
            after = greedy_fill(pruned.top, shape.slices, shape.leaders)
        if after is None:
            continue
        # Highest T; on a tie the fewest domains at L; then the first parent in path order.
        if threshold > best_threshold or (threshold == best_threshold and after.used < best_used):
            best, best_threshold, best_used = pruned, threshold, after.used
    return None if best is None else (best, best_threshold)


# --- the whole pass ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BalancedChoice:
    """The split Kueue fixes: slices and leaders per domain of ``level`` (L or L+1)."""

    level: int
    domains: IntArray
    slices: IntArray
    leaders: IntArray


def split_group(group: Group, threshold: int, shape: Shape) -> BalancedChoice | None:
    """Kueue's ``applyBalancedPlacementAlgorithm`` on the winning (pruned) parent."""
    if shape.split_below and group.below is not None:
        below = group.below
        entropies = np.array(
            [entropy(below.pods[group.below_parent == i]) for i in range(len(group.top))],
            dtype=np.float64,
        )
        chosen = select_optimal_set(
            group.top, shape.slices, shape.leaders, shape.slice_size, entropies
        )
        if chosen is None:
            return None
        children = np.flatnonzero(np.isin(group.below_parent, chosen)).astype(np.int64)
        spread = spread_evenly(
            below.take(children), shape.slices, shape.leaders, shape.slice_size, threshold
        )
        if spread is None:
            return None
        ids = group.below_ids[children[spread.domains]]
        return BalancedChoice(shape.level + 1, ids, spread.slices, spread.leaders)
    spread = spread_evenly(group.top, shape.slices, shape.leaders, shape.slice_size, threshold)
    if spread is None:
        return None
    ids = group.top_ids[spread.domains]
    return BalancedChoice(shape.level, ids, spread.slices, spread.leaders)


def _groups(
    tree: DomainTree, level_counts: Callable[[int], DomainCounts], shape: Shape
) -> Iterator[Group]:
    """Each parent's domains at L, parents in path order (level 0: one group of all)."""
    level = shape.level
    top_all = level_counts(level)
    below_all = level_counts(level + 1) if level < tree.output_level else None
    if level == 0:
        parents: list[IntArray] = [np.arange(tree.size(0), dtype=np.int64)]
    else:
        # A parent without room for every slice cannot fit: Kueue's greedy pass says so too.
        room = np.bincount(
            tree.parent[level], weights=top_all.slices, minlength=tree.size(level - 1)
        )
        order = np.argsort(tree.lexrank[level - 1], kind="stable")
        parents = [
            tree.children(level - 1, int(p)).astype(np.int64)
            for p in order
            if room[p] >= shape.slices
        ]
    empty = np.empty(0, dtype=np.int64)
    for top_ids in parents:
        if below_all is None:
            yield Group(top_all.take(top_ids), top_ids, None, empty, empty)
            continue
        kids = [tree.children(level, int(d)).astype(np.int64) for d in top_ids]
        below_ids = np.concatenate(kids) if kids else empty
        below_parent = np.repeat(np.arange(len(top_ids), dtype=np.int64), [len(k) for k in kids])
        yield Group(
            top_all.take(top_ids), top_ids, below_all.take(below_ids), below_ids, below_parent
        )


def balanced_choice(
    tree: DomainTree, level_counts: Callable[[int], DomainCounts], shape: Shape
) -> BalancedChoice | None:
    """The balanced split for ``shape``, or None when Kueue would fall back to BestFit."""
    if shape.slices <= 0 or tree.size(shape.level) == 0:
        return None
    if shape.limit is not None and shape.level - 1 < shape.limit:
        return None  # the parent Kueue balances within would lie above the climb limit
    found = best_group(_groups(tree, level_counts, shape), shape)
    if found is None:
        return None
    return split_group(*found, shape)
