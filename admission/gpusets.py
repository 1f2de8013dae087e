"""Which GPUs of a node a pod gets: the free subset with the best bottleneck bandwidth.

Pure and exact. A collective runs at the speed of its slowest link, so a set of GPUs is worth
its *bottleneck*: the smallest bandwidth between any two of its members. For ``k`` GPUs out of
the free set ``F``:

1. **Bottleneck.** The best bottleneck is the largest threshold ``t`` for which the graph of
   free GPUs joined by links of at least ``t`` has a ``k``-clique. A greedy set gives a lower
   bound and the members' degrees an upper bound; the distinct link bandwidths in between are
   searched by bisection. Each test drops GPUs with fewer than ``k - 1`` good links (the
   ``k - 1``-core) and runs a branch-and-bound clique search on bitsets with Tomita's MCQ
   colour bound (branch on the highest colour classes first, stop when the classes left
   cannot hold ``k``). Exact: the bounds only skip thresholds that cannot be the answer.
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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IndexArray = npt.NDArray[np.intp]


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


def _colour_classes(candidates: int, adjacency: Sequence[int]) -> tuple[list[int], list[int]]:
    """Greedy sequential colouring of ``candidates`` in bit order: the vertices in colour
    order and each one's colour (from 1). A clique among the vertices up to position ``i``
    has at most ``colours[i]`` members."""
    order: list[int] = []
    colours: list[int] = []
    colour = 0
    left = candidates
    while left:
        colour += 1
        queue = left
        while queue:
            low = queue & -queue
            v = low.bit_length() - 1
            left ^= low
            queue &= ~adjacency[v]
            queue &= ~low
            order.append(v)
            colours.append(colour)
    return order, colours


def _has_clique(adjacency: Sequence[int], candidates: int, k: int) -> bool:
    """Is there a k-clique inside ``candidates``? MCQ: branch on the vertices of the highest
    colours first; stop when the colour bound says the rest cannot reach ``k``."""
    if k <= 0:
        return True
    if candidates.bit_count() < k:
        return False
    if k == 1:
        return True
    if k == 2:
        return any(candidates & adjacency[v] for v in _bits(candidates))
    order, colours = _colour_classes(candidates, adjacency)
    for i in range(len(order) - 1, -1, -1):
        if colours[i] < k:
            return False
        v = order[i]
        if _has_clique(adjacency, candidates & adjacency[v], k - 1):
            return True
        candidates &= ~(1 << v)
    return False


def _bitsets(links: BoolArray) -> list[int]:
    """Row ``i`` as an int whose bit ``j`` is ``links[i, j]``."""
    packed = np.packbits(links, axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in packed]


def _links(sub: FloatArray, threshold: float) -> BoolArray:
    links = sub >= threshold
    np.fill_diagonal(links, False)
    return links


def _k_core(links: BoolArray, degree: int) -> IndexArray:
    """Positions left after repeatedly dropping those with fewer than ``degree`` links: no
    clique of ``degree + 1`` members can use a dropped one."""
    alive = np.ones(len(links), dtype=np.bool_)
    while True:
        counts = links[:, alive].sum(axis=1)
        drop = alive & (counts < degree)
        if not drop.any():
            return np.flatnonzero(alive)
        alive &= ~drop


def _feasible(sub: FloatArray, threshold: float, k: int) -> bool:
    """Do ``k`` of the GPUs of ``sub`` (pair bandwidths) all link at ``threshold`` or better?"""
    links = _links(sub, threshold)
    core = _k_core(links, k - 1)
    if len(core) < k:
        return False
    inner = links[np.ix_(core, core)]
    # Bit order = degree, highest first: the colouring then packs hubs into few classes.
    order = np.argsort(-inner.sum(axis=1), kind="stable")
    inner = inner[np.ix_(order, order)]
    return _has_clique(_bitsets(inner), (1 << len(core)) - 1, k)


def _greedy_bound(sub: FloatArray, k: int) -> float:
    """A bottleneck some k-set reaches: from every seed, add the GPU with the best worst link
    to the set so far (all seeds at once, vectorised)."""
    n = len(sub)
    links = sub.copy()
    np.fill_diagonal(links, -np.inf)
    reach = links.copy()  # reach[s, v]: v's worst link to the set grown from seed s
    taken = np.eye(n, dtype=np.bool_)
    reach[taken] = -np.inf
    worst = np.full(n, np.inf)
    rows = np.arange(n)
    for _ in range(k - 1):
        pick = np.argmax(reach, axis=1)
        worst = np.minimum(worst, reach[rows, pick])
        taken[rows, pick] = True
        reach = np.minimum(reach, links[pick])
        reach[taken] = -np.inf
    return float(worst.max())


def _upper_bound(sub: FloatArray, k: int) -> float:
    """No k-set beats this: each of its members needs k-1 links at least that good."""
    n = len(sub)
    links = sub.copy()
    np.fill_diagonal(links, -np.inf)
    kth_link = np.sort(links, axis=1)[:, n - (k - 1)]
    return float(np.sort(kth_link)[n - k])


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
    return best_set(pair_bandwidth(matrix), free, k)


def best_set(pair: FloatArray, free_gpus: Sequence[int], k: int) -> GpuSet | None:
    """:func:`best_gpu_set` on pair bandwidths (:func:`pair_bandwidth`), computed once."""
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
    # The answer lies between what a greedy set reaches and what degrees allow; bisect over
    # the link values in between for the largest threshold that admits a k-clique.
    lower, upper = _greedy_bound(sub, k), _upper_bound(sub, k)
    values = np.unique(sub[np.isfinite(sub)])
    thresholds = values[(values >= lower) & (values <= upper)][::-1]  # descending
    low, high = 0, len(thresholds) - 1  # the last one, the greedy bound, is reached
    while low < high:
        middle = (low + high) // 2
        if _feasible(sub, float(thresholds[middle]), k):
            high = middle
        else:
            low = middle + 1
    threshold = float(thresholds[low])
    links = _links(sub, threshold)
    adjacency = _bitsets(links)  # over every free GPU: degrees count links left behind
    core = _k_core(links, k - 1).tolist()
    order = sorted(core, key=lambda v: (adjacency[v].bit_count(), v))
    chosen = _min_degree_clique(adjacency, order, k)
    gpus = tuple(sorted(free[v] for v in chosen))
    return GpuSet(gpus, bottleneck(pair, gpus))


def greedy_sets(
    pair: FloatArray, free: Sequence[int], k: int, minimum: float, limit: int | None = None
) -> list[GpuSet]:
    """Disjoint sets of ``k`` GPUs, each the best of what the earlier ones left, while they
    reach ``minimum`` (at most ``limit``). Their number is a lower bound on how many pods of
    ``k`` GPUs with that minimum the GPUs can hold (exactly the maximum is a set packing
    problem); placement counts with it and selection falls back to it, so the two agree."""
    out: list[GpuSet] = []
    left = sorted(set(free))
    while limit is None or len(out) < limit:
        chosen = best_set(pair, left, k)
        if chosen is None or chosen.bottleneck < minimum or k == 0:
            break
        out.append(chosen)
        left = [g for g in left if g not in chosen.gpus]
    return out


EXACT_SPLIT_LIMIT = 16  # GPUs in a group up to which the split into pods is searched fully
SPLIT_BUDGET = 20_000  # search steps for the second split criterion (the sum), see below


def joint_gpu_sets(
    matrix: Sequence[Sequence[float]] | FloatArray,
    free: Sequence[int],
    sizes: Sequence[int],
    minimum: float | None = None,
) -> tuple[GpuSet, list[GpuSet]] | None:
    """GPUs for several pods of one job on one node: first the group (all their GPUs) with the
    best bottleneck, which is what the job's collectives see; then the group is split into the
    pods so that the worst pod's bottleneck is as good as possible (exact up to 16 GPUs in the
    group; larger groups are split greedily, largest pod first), then their sum (best found
    within a search budget). Returns (group, per-pod sets in ``sizes`` order).

    With ``minimum`` every pod's own set must reach it: when the split of the best group
    cannot, the pods take :func:`greedy_sets` instead (which is what placement counted); None
    when that does not reach it either."""
    return joint_sets(pair_bandwidth(matrix), free, sizes, minimum)


def joint_sets(
    pair: FloatArray, free: Sequence[int], sizes: Sequence[int], minimum: float | None = None
) -> tuple[GpuSet, list[GpuSet]] | None:
    """:func:`joint_gpu_sets` on pair bandwidths."""
    group = best_set(pair, free, sum(sizes))
    if group is None:
        return None
    if len(group.gpus) <= EXACT_SPLIT_LIMIT:
        split = _exact_split(pair, list(group.gpus), list(sizes))
    else:
        split = _greedy_split(pair, list(group.gpus), list(sizes))
    if minimum is None or all(s.bottleneck >= minimum for s in split):
        return group, split
    # Pods of one size, one after the other, each the best of what is left.
    sets: dict[int, GpuSet] = {}
    left = sorted(set(free))
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        found = greedy_sets(pair, left, sizes[i], minimum, limit=1)
        if not found:
            return None
        sets[i] = found[0]
        left = [g for g in left if g not in found[0].gpus]
    gpus = tuple(sorted(g for s in sets.values() for g in s.gpus))
    return GpuSet(gpus, bottleneck(pair, gpus)), [sets[i] for i in range(len(sizes))]


def _score(value: float) -> float:
    return 1e18 if value == float("inf") else value


def _worst(rows: list[list[float]], block: Sequence[int]) -> float:
    """:func:`bottleneck` in plain Python, for the many small sets of the split search."""
    value = float("inf")
    for i, a in enumerate(block):
        row = rows[a]
        for b in block[i + 1 :]:
            if row[b] < value:
                value = row[b]
    return value


def _cliques(
    rows: list[list[float]], left: list[int], size: int, threshold: float
) -> Iterator[tuple[int, ...]]:
    """Sets of ``size`` from ``left`` that hold ``left[0]`` and link at ``threshold`` or
    better, in lexicographic order; grown one GPU at a time among those linked to all."""
    first = left[0]

    def grow(block: tuple[int, ...], candidates: list[int]) -> Iterator[tuple[int, ...]]:
        if len(block) == size:
            yield block
            return
        need = size - len(block)
        for i, g in enumerate(candidates):
            if len(candidates) - i < need:
                return
            row = rows[g]
            yield from grow((*block, g), [h for h in candidates[i + 1 :] if row[h] >= threshold])

    yield from grow((first,), [g for g in left[1:] if rows[first][g] >= threshold])


def _blocks(
    rows: list[list[float]], left: list[int], size: int, threshold: float
) -> list[tuple[float, tuple[int, ...]]]:
    """:func:`_cliques` with their bottleneck, best first (then lowest GPUs)."""
    found = [(-_score(_worst(rows, b)), b) for b in _cliques(rows, left, size, threshold)]
    found.sort()
    return [(-value, block) for value, block in found]


def _mask_cliques(adjacency: list[int], first: int, size: int, within: int) -> Iterator[int]:
    """Bitmasks of ``size`` positions that hold ``first``, lie in ``within`` and are pairwise
    adjacent; ascending order."""

    def grow(block: int, candidates: int, need: int) -> Iterator[int]:
        if need == 0:
            yield block
            return
        while candidates and candidates.bit_count() >= need:
            low = candidates & -candidates
            candidates ^= low
            v = low.bit_length() - 1
            yield from grow(block | low, candidates & adjacency[v], need - 1)

    yield from grow(1 << first, within & adjacency[first], size - 1)


def _partition(
    rows: list[list[float]], gpus: list[int], counts: dict[int, int], threshold: float
) -> list[tuple[int, ...]] | None:
    """A split of ``gpus`` into sets of the given sizes (size -> how many), every set linked
    at ``threshold`` or better; the lowest GPU left always starts the next set, so each
    split is met once. On bitsets; dead ends are remembered, and a state where some GPU has
    fewer good links left than the smallest pod needs is one."""
    n = len(gpus)
    adjacency = [
        sum(1 << j for j in range(n) if j != i and rows[gpus[i]][gpus[j]] >= threshold)
        for i in range(n)
    ]
    dead: set[tuple[int, tuple[int, ...]]] = set()
    sizes = sorted(counts, reverse=True)

    def search(left: int, left_counts: tuple[int, ...]) -> list[int] | None:
        if not left:
            return []
        if (left, left_counts) in dead:
            return None
        smallest = min(size for size, c in zip(sizes, left_counts, strict=True) if c)
        rest = left
        while rest:
            low = rest & -rest
            rest ^= low
            if (adjacency[low.bit_length() - 1] & left).bit_count() < smallest - 1:
                dead.add((left, left_counts))
                return None
        first = (left & -left).bit_length() - 1
        for i, size in enumerate(sizes):
            if not left_counts[i]:
                continue
            fewer = (*left_counts[:i], left_counts[i] - 1, *left_counts[i + 1 :])
            for block in _mask_cliques(adjacency, first, size, left):
                found = search(left & ~block, fewer)
                if found is not None:
                    return [block, *found]
        dead.add((left, left_counts))
        return None

    blocks = search((1 << n) - 1, tuple(counts[size] for size in sizes))
    if blocks is None:
        return None
    return [tuple(gpus[i] for i in range(n) if block >> i & 1) for block in blocks]


def _exact_split(pair: FloatArray, gpus: list[int], sizes: list[int]) -> list[GpuSet]:
    counts: dict[int, int] = {}
    for size in sizes:
        counts[size] = counts.get(size, 0) + 1
    greedy = _greedy_split(pair, gpus, sizes)
    if all(size <= 1 for size in sizes):
        return greedy
    # 1. The best worst pod: the largest threshold at which the group splits into cliques. The
    # greedy split reaches one; no split beats what every GPU's links allow (when every pod
    # has two GPUs or more, each GPU needs its smallest pod's size - 1 links that good).
    rows: list[list[float]] = pair.tolist()
    lower = min(_score(one.bottleneck) for one in greedy)
    upper = float("inf")
    smallest = min(sizes)
    if smallest >= 2:
        upper = min(
            sorted((rows[g][h] for h in gpus if h != g), reverse=True)[smallest - 2] for g in gpus
        )
    links = {rows[a][b] for a, b in itertools.combinations(gpus, 2)}
    values = sorted({v for v in links if lower <= v <= upper} | {lower}, reverse=True)
    low, high = 0, len(values) - 1  # the greedy split's worst (the last) is reached
    witness: list[tuple[int, ...]] = [one.gpus for one in greedy]
    while low < high:
        middle = (low + high) // 2
        found = _partition(rows, gpus, counts, values[middle])
        if found is not None:
            high, witness = middle, found
        else:
            low = middle + 1
    worst = values[low]
    # 2. Among those, the largest sum of pod bottlenecks: branch and bound, best-first, within
    # SPLIT_BUDGET steps (the worst pod stays optimal whatever the budget cuts off).
    best = [sum(_score(_worst(rows, b)) for b in witness)]
    best_blocks = [witness]
    steps = [0]
    top = max(values[0], 0.0)

    def search(
        left: list[int], counts: dict[int, int], chosen: list[tuple[int, ...]], total: float
    ) -> None:
        if steps[0] >= SPLIT_BUDGET:
            return
        steps[0] += 1
        if not left:
            if total > best[0]:
                best[0], best_blocks[0] = total, list(chosen)
            return
        bound = total + sum(n * (1e18 if s == 1 else top) for s, n in counts.items())
        if bound <= best[0]:
            return
        for size in sorted((s for s, n in counts.items() if n > 0), reverse=True):
            for value, block in _blocks(rows, left, size, worst):
                rest = [g for g in left if g not in block]
                search(rest, {**counts, size: counts[size] - 1}, [*chosen, block], total + value)

    search(gpus, counts, [], 0.0)
    return _assign(pair, best_blocks[0], sizes)


def _assign(pair: FloatArray, blocks: list[tuple[int, ...]], sizes: list[int]) -> list[GpuSet]:
    """Blocks to pods: of each size, by lowest GPU, to the pods of that size in order."""
    by_size: dict[int, list[tuple[int, ...]]] = {}
    for block in sorted(tuple(sorted(b)) for b in blocks):
        by_size.setdefault(len(block), []).append(block)
    out = []
    for size in sizes:
        block = by_size[size].pop(0)
        out.append(GpuSet(block, bottleneck(pair, block)))
    return out


def _greedy_split(pair: FloatArray, gpus: list[int], sizes: list[int]) -> list[GpuSet]:
    left = list(gpus)
    sets: dict[int, GpuSet] = {}
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        chosen = best_set(pair, left, sizes[i])
        assert chosen is not None  # the group holds every pod's GPUs
        sets[i] = chosen
        left = [g for g in left if g not in chosen.gpus]
    return [sets[i] for i in range(len(sizes))]
