"""GPU-set selection: the seed's matrix, and an exhaustive cross-check on random matrices."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from topogate.admission.gpusets import (
    best_gpu_set,
    bottleneck,
    greedy_sets,
    joint_gpu_sets,
    pair_bandwidth,
)

# Koordinator's GPU-topology proposal (seed 003): measured GB/s between 8 GPUs of one node.
SEED = [
    [750.48, 48.39, 48.33, 96.41, 15.77, 15.52, 96.40, 15.74],
    [48.39, 753.38, 96.46, 48.38, 4.64, 16.93, 16.98, 96.39],
    [48.38, 96.25, 751.92, 96.48, 48.39, 17.57, 17.59, 16.72],
    [96.25, 48.39, 96.43, 750.48, 15.45, 48.39, 15.88, 14.62],
    [5.00, 16.81, 48.38, 15.98, 755.56, 96.39, 48.38, 96.44],
    [15.80, 16.93, 17.50, 48.39, 96.25, 751.92, 96.23, 48.38],
    [96.42, 16.75, 17.47, 15.89, 48.35, 96.28, 754.10, 48.33],
    [15.65, 96.20, 16.77, 15.71, 96.25, 48.38, 48.33, 754.83],
]


def test_two_pods_of_two_gpus_get_a_48_gbps_group_never_a_4_gbps_one() -> None:
    result = joint_gpu_sets(SEED, range(8), [2, 2])
    assert result is not None
    group, pods = result
    assert group.bottleneck == pytest.approx(48.33)
    assert set(group.gpus) == {0, 1, 2, 3}
    # Split so that the worse pod is as good as possible: 96.25 each, not 96.43 and 48.39.
    assert [p.gpus for p in pods] == [(0, 3), (1, 2)]
    assert min(p.bottleneck for p in pods) == pytest.approx(96.25)


def test_a_pair_takes_the_96_gbps_link() -> None:
    choice = best_gpu_set(SEED, range(8), 2)
    assert choice is not None and choice.bottleneck == pytest.approx(96.43)


def test_slower_direction_counts() -> None:
    pair = pair_bandwidth(SEED)
    assert pair[1, 4] == pytest.approx(4.64) and pair[4, 1] == pytest.approx(4.64)
    assert pair[0, 4] == pytest.approx(5.00)


def test_too_few_free_gpus_is_none_and_zero_is_empty() -> None:
    assert best_gpu_set(SEED, [0, 1], 3) is None
    empty = best_gpu_set(SEED, [0, 1], 0)
    assert empty is not None and empty.gpus == ()


def test_bad_matrices_are_refused() -> None:
    with pytest.raises(ValueError, match="square"):
        pair_bandwidth([[1.0, 2.0]])
    with pytest.raises(ValueError, match="finite"):
        pair_bandwidth([[1.0, -2.0], [2.0, 1.0]])


def test_a_whole_free_island_is_kept_when_a_fragment_will_do() -> None:
    # Two NVLink islands {0,1,2,3} and {4,5,6,7} (100 GB/s inside, 10 across); GPU 4 and 5 are
    # all that is left of the second one. A pair should come from the fragment.
    bw = np.full((8, 8), 10.0)
    for island in ((0, 1, 2, 3), (4, 5, 6, 7)):
        for i in island:
            for j in island:
                bw[i, j] = 100.0
    choice = best_gpu_set(bw, [0, 1, 2, 3, 4, 5], 2)
    assert choice is not None and choice.gpus == (4, 5)


def _degree_sum(pair: np.ndarray, free: list[int], chosen: tuple[int, ...], t: float) -> int:
    return sum(sum(1 for f in free if f != g and pair[g, f] >= t) for g in chosen)


@pytest.mark.parametrize("seed", range(60))
def test_matches_exhaustive_search_on_random_matrices(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 10))
    # Few distinct values make ties common, which exercises the tie-break.
    raw = rng.choice([5.0, 16.0, 48.0, 96.0, 300.0], size=(n, n))
    pair = pair_bandwidth(raw)
    free = sorted(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False).tolist())
    for k in range(2, len(free) + 1):
        choice = best_gpu_set(raw, free, k)
        assert choice is not None
        subsets = list(itertools.combinations(free, k))
        best = max(bottleneck(pair, s) for s in subsets)
        assert choice.bottleneck == best
        assert bottleneck(pair, choice.gpus) == best and set(choice.gpus) <= set(free)
        optimal = [s for s in subsets if bottleneck(pair, s) == best]
        least = min(_degree_sum(pair, free, s, best) for s in optimal)
        assert _degree_sum(pair, free, choice.gpus, best) == least


@pytest.mark.parametrize("seed", range(20))
def test_joint_split_matches_exhaustive_search(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    raw = rng.choice([5.0, 16.0, 48.0, 96.0], size=(8, 8))
    pair = pair_bandwidth(raw)
    sizes = [2, 2, 2] if seed % 2 else [3, 2, 1]
    result = joint_gpu_sets(raw, range(8), sizes)
    assert result is not None
    group, pods = result
    assert group.bottleneck == max(
        bottleneck(pair, s) for s in itertools.combinations(range(8), sum(sizes))
    )
    assert sorted(g for p in pods for g in p.gpus) == list(group.gpus)
    assert [len(p.gpus) for p in pods] == sizes

    def worst(split: list[tuple[int, ...]]) -> float:
        return min(min(bottleneck(pair, s), 1e18) for s in split)

    best = -1.0
    gpus = list(group.gpus)
    for perm in itertools.permutations(gpus):
        split, start = [], 0
        for size in sizes:
            split.append(tuple(perm[start : start + size]))
            start += size
        best = max(best, worst(split))
    assert worst([p.gpus for p in pods]) == best


@pytest.mark.parametrize("seed", range(40))
def test_bounds_and_cores_stay_exact_on_distinct_bandwidths(seed: int) -> None:
    # Distinct values (no ties): every threshold is a candidate, the greedy and degree bounds
    # and the k-core pruning must never skip the answer.
    rng = np.random.default_rng(5000 + seed)
    n = int(rng.integers(6, 15))
    raw = rng.uniform(1.0, 500.0, size=(n, n))
    pair = pair_bandwidth(raw)
    free = sorted(rng.choice(n, size=int(rng.integers(4, n + 1)), replace=False).tolist())
    for k in range(2, min(len(free), 8) + 1):
        choice = best_gpu_set(raw, free, k)
        assert choice is not None
        best = max(bottleneck(pair, s) for s in itertools.combinations(free, k))
        assert choice.bottleneck == best


def _max_packing(pair: np.ndarray, free: list[int], k: int, minimum: float) -> int:
    good = [s for s in itertools.combinations(free, k) if bottleneck(pair, s) >= minimum]
    best = 0

    def grow(chosen: int, used: frozenset[int], start: int) -> None:
        nonlocal best
        best = max(best, chosen)
        for i in range(start, len(good)):
            if not used & set(good[i]):
                grow(chosen + 1, used | set(good[i]), i + 1)

    grow(0, frozenset(), 0)
    return best


@pytest.mark.parametrize("seed", range(30))
def test_greedy_sets_reach_the_minimum_and_bound_the_packing_from_below(seed: int) -> None:
    rng = np.random.default_rng(7000 + seed)
    raw = rng.choice([5.0, 16.0, 48.0, 96.0], size=(8, 8))
    pair = pair_bandwidth(raw)
    k = int(rng.integers(2, 4))
    minimum = float(rng.choice([16.0, 48.0, 96.0]))
    found = greedy_sets(pair, list(range(8)), k, minimum)
    assert all(s.bottleneck >= minimum and len(s.gpus) == k for s in found)
    assert len({g for s in found for g in s.gpus}) == k * len(found)
    optimum = _max_packing(pair, list(range(8)), k, minimum)
    assert len(found) <= optimum
    assert (len(found) == 0) == (optimum == 0)  # one set exists iff greedy finds one
    # What placement counted, selection delivers: every pod reaches the minimum.
    if found:
        result = joint_gpu_sets(raw, range(8), [k] * len(found), minimum)
        assert result is not None
        assert all(p.bottleneck >= minimum for p in result[1])


def test_joint_sets_fall_back_to_the_counted_sets_for_a_minimum() -> None:
    # Two fast triangles {0,1,2} and {3,4,5}, 10 GB/s between: the best group of four is
    # {0,1,2,3}-like (bottleneck 10), whose split cannot give two pods 100 GB/s each.
    raw = np.full((6, 6), 10.0)
    for tri in ((0, 1, 2), (3, 4, 5)):
        for i, j in itertools.permutations(tri, 2):
            raw[i, j] = 100.0
    result = joint_gpu_sets(raw, range(6), [2, 2], minimum=100.0)
    assert result is not None
    _, pods = result
    assert all(p.bottleneck == 100.0 for p in pods)
    assert joint_gpu_sets(raw, range(6), [2, 2, 2], minimum=100.0) is None


@pytest.mark.parametrize("sizes", [[2] * 8, [4] * 4, [8, 8], [3, 3, 2, 2, 2, 4]])
def test_splitting_sixteen_gpus_is_fast(sizes: list[int]) -> None:
    rng = np.random.default_rng(3)
    for raw in (np.full((16, 16), 450.0), rng.choice([5.0, 16.0, 48.0, 96.0], size=(16, 16))):
        started = time.perf_counter()
        result = joint_gpu_sets(raw, range(16), sizes)
        assert result is not None and [len(p.gpus) for p in result[1]] == sizes
        assert time.perf_counter() - started < 2.0  # was minutes before the split search
