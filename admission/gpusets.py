"""Which GPUs of a node a pod gets: the free subset with the best bottleneck bandwidth.

Pure and exact. A collective runs at the speed of its slowest link, so a set of GPUs is worth
its *bottleneck*: the smallest bandwidth between any two of its members. For ``k`` GPUs out of
the free set ``F``:

1. **Bottleneck.** The best bottleneck is the largest threshold ``t`` for which the graph of
   free GPUs joined by links of at least ``t`` has a ``k``-clique. Thresholds are the distinct
   link bandwidths, searched by bisection; each test is a branch-and-bound clique search on
   bitsets with a greedy-colouring bound (Tomita's MCQ idea), exact.
2. **Tie-break: keep well-connected groups intact.** Among the sets with that bottleneck, take
   the one with the fewest links of at least ``t`` to the free GPUs left behind (the sum of the
   members' degrees, since inside the set every pair is linked): GPUs already cut off from good
   partners go first, and a fully free NVLink island is not split when a fragment will do. Then
   the lowest indices, so the answer is deterministic.

Measured matrices are not symmetric (``nvbandwidth`` measures each direction); a pair counts
with its slower direction.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class GpuSet:
    gpus: tuple[int, ...]  # ascending
    bottleneck: float  # GB/s; inf for a single GPU


def pair_bandwidth(matrix: Sequence[Sequence[float]] | FloatArray) -> FloatArray:
    """Symmetric pair bandwidths (the slower direction); the diagonal is +inf."""
    values = np.asarray(matrix, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] != values.shape[1]:
        raise ValueError(f"the bandwidth matrix must be square, not {values.shape}")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError("bandwidths must be finite and non-negative")
    pair = np.minimum(values, values.T)
    np.fill_diagonal(pair, np.inf)
    return pair


def bottleneck(pair: FloatArray, gpus: Sequence[int]) -> float:
    if len(gpus) < 2:
        return float("inf")
    index = np.asarray(gpus)
    return float(pair[np.ix_(index, index)].min())


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _colour_bound(candidates: int, adjacency: Sequence[int]) -> int:
    """An upper bound on the clique size inside ``candidates``: greedy colour classes."""
    colours = 0
    left = candidates
    while left:
        colours += 1
        free = left
        while free:
            low = free & -free
            v = low.bit_length() - 1
            left &= ~low
            free &= ~low & ~adjacency[v]
    return colours


def _has_clique(adjacency: Sequence[int], candidates: int, k: int) -> bool:
    if k <= 0:
        return True
    if candidates.bit_count() < k or _colour_bound(candidates, adjacency) < k:
        return False
    for v in _bits(candidates):
        if _has_clique(adjacency, candidates & adjacency[v], k - 1):
            return True
        candidates &= ~(1 << v)
        if candidates.bit_count() < k - 1:
            return False
    return False


def _adjacency(pair: FloatArray, free: Sequence[int], threshold: float) -> list[int]:
    """Bitsets over positions in ``free``: i~j when their link is at least ``threshold``."""
    sub = pair[np.ix_(free, free)] >= threshold
    np.fill_diagonal(sub, False)
    weights = 1 << np.arange(len(free), dtype=object)
    return [int(np.sum(weights[row])) if row.any() else 0 for row in sub]


def _min_degree_clique(adjacency: list[int], order: list[int], k: int) -> list[int]:
    """The k-clique with the smallest degree sum, the first in ``order`` (degree, then
    position) among equals; branch and bound."""
    degree = [a.bit_count() for a in adjacency]
    best: list[int] = []
    best_cost = [float("inf")]

    def extend(chosen: list[int], cost: int, candidates: list[int]) -> None:
        need = k - len(chosen)
        if need == 0:
            # Strictly better only: among equal costs the first found wins, which is the
            # first in (degree, position) order.
            if cost < best_cost[0]:
                best_cost[0] = cost
                best[:] = chosen
            return
        if len(candidates) < need:
            return
        # Candidates are in ascending degree: the cheapest completion is the next ``need``.
        if cost + sum(degree[v] for v in candidates[:need]) >= best_cost[0]:
            return
        mask = 0
        for v in candidates:
            mask |= 1 << v
        if _colour_bound(mask, adjacency) < need:
            return
        for i, v in enumerate(candidates):
            rest = candidates[i + 1 :]
            if len(rest) < need - 1:
                break
            extend([*chosen, v], cost + degree[v], [u for u in rest if adjacency[v] >> u & 1])

    extend([], 0, order)
    return best


def best_gpu_set(
    matrix: Sequence[Sequence[float]] | FloatArray, free: Sequence[int], k: int
) -> GpuSet | None:
    """The best ``k`` of the ``free`` GPUs, or None when fewer than ``k`` are free."""
    return _best(pair_bandwidth(matrix), free, k)


def _best(pair: FloatArray, free_gpus: Sequence[int], k: int) -> GpuSet | None:
    free = sorted(set(free_gpus))
    if k < 0 or len(free) < k:
        return None
    if k == 0:
        return GpuSet((), float("inf"))
    if k == 1:
        # No link to judge; keep well-connected GPUs free: take the one whose best link to
        # another free GPU is weakest, then the lowest index.
        def best_link(g: int) -> float:
            others = [f for f in free if f != g]
            return float(pair[g, others].max()) if others else 0.0

        return GpuSet((min(free, key=lambda g: (best_link(g), g)),), float("inf"))
    sub = pair[np.ix_(free, free)]
    thresholds = np.unique(sub[np.isfinite(sub)])[::-1]  # descending
    # Bisection for the first (largest) threshold that admits a k-clique; the smallest
    # threshold always does (every pair is linked).
    low, high = 0, len(thresholds) - 1
    everyone = (1 << len(free)) - 1
    while low < high:
        middle = (low + high) // 2
        if _has_clique(_adjacency(pair, free, float(thresholds[middle])), everyone, k):
            high = middle
        else:
            low = middle + 1
    threshold = float(thresholds[low])
    adjacency = _adjacency(pair, free, threshold)
    order = sorted(range(len(free)), key=lambda v: (adjacency[v].bit_count(), v))
    chosen = _min_degree_clique(adjacency, order, k)
    gpus = tuple(sorted(free[v] for v in chosen))
    return GpuSet(gpus, bottleneck(pair, gpus))


EXACT_SPLIT_LIMIT = 16  # GPUs in a group up to which the split into pods is searched fully


def joint_gpu_sets(
    matrix: Sequence[Sequence[float]] | FloatArray, free: Sequence[int], sizes: Sequence[int]
) -> tuple[GpuSet, list[GpuSet]] | None:
    """GPUs for several pods of one job on one node: first the group (all their GPUs) with the
    best bottleneck, which is what the job's collectives see; then the group is split into the
    pods so that the worst pod's bottleneck is as good as possible (then their sum). Exact up
    to 16 GPUs in the group (every node of today); larger groups are split greedily, largest
    pod first. Returns (group, per-pod sets in ``sizes`` order)."""
    pair = pair_bandwidth(matrix)
    group = _best(pair, free, sum(sizes))
    if group is None:
        return None
    if len(group.gpus) <= EXACT_SPLIT_LIMIT:
        split = _exact_split(pair, list(group.gpus), list(sizes))
    else:
        split = _greedy_split(pair, list(group.gpus), list(sizes))
    return group, split


def _exact_split(pair: FloatArray, gpus: list[int], sizes: list[int]) -> list[GpuSet]:
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    best: tuple[float, float] = (-1.0, -1.0)
    best_sets: list[tuple[int, ...]] = []

    def score(value: float) -> float:
        return 1e18 if value == float("inf") else value

    def assign(left: list[int], position: int, chosen: list[tuple[int, ...]]) -> None:
        nonlocal best, best_sets
        if position == len(order):
            values = [score(bottleneck(pair, c)) for c in chosen]
            key = (min(values, default=1e18), sum(values))
            if key > best:
                best, best_sets = key, list(chosen)
            return
        size = sizes[order[position]]
        # Pods of equal size are interchangeable: the lowest free GPU goes to this pod.
        first, rest = left[0], left[1:]
        same_as_next = position + 1 < len(order) and sizes[order[position + 1]] == size
        pools = (
            [(first, *others) for others in itertools.combinations(rest, size - 1)]
            if same_as_next and size > 0
            else list(itertools.combinations(left, size))
        )
        for pod in pools:
            remaining = [g for g in left if g not in pod]
            assign(remaining, position + 1, [*chosen, tuple(sorted(pod))])

    assign(gpus, 0, [])
    by_pod = dict(zip(order, best_sets, strict=True))
    return [GpuSet(by_pod[i], bottleneck(pair, by_pod[i])) for i in range(len(sizes))]


def _greedy_split(pair: FloatArray, gpus: list[int], sizes: list[int]) -> list[GpuSet]:
    left = list(gpus)
    sets: dict[int, GpuSet] = {}
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        chosen = _best(pair, left, sizes[i])
        assert chosen is not None  # the group holds every pod's GPUs
        sets[i] = chosen
        left = [g for g in left if g not in chosen.gpus]
    return [sets[i] for i in range(len(sizes))]
