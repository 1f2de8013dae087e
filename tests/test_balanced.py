"""Kueue's balanced placement (``TASBalancedPlacement``), in ``admission/balanced.py``.

Source: kubernetes-sigs/kueue @ ff69552e. The unit tests port the behaviour of
``pkg/cache/scheduler/tas_balanced_placement_test.go`` (one test per Kueue test function);
the placement tests port every "balanced placement; ..." case of ``TestFindTopologyAssignments``
in ``tas_cache_test.go`` (the Kueue case name is in each docstring). Kueue's nodes carry a
"pods" allocatable large enough never to bind, so ours do too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kit import BLOCK, HOST, L2, L3, RACK, assigned, hosts, node, podset, run
from topogate.admission.balanced import (
    DomainCounts,
    FloatArray,
    Group,
    Shape,
    best_group,
    capacity_entropy_order,
    entropy,
    prune,
    select_optimal_set,
    spread_evenly,
)
from topogate.admission.request import PlacementDecision, PodSetRequest
from topogate.cache.nodes import NodeInfo
from topogate.cache.snapshot import IntArray

SUBBLOCK = "cloud.com/topology-subblock"
L4 = (BLOCK, SUBBLOCK, RACK, HOST)


def balanced(request: PodSetRequest) -> PodSetRequest:
    return replace(request, balanced=True)


def gpu_node(path: str, gpu: int, pods: int = 25) -> NodeInfo:
    """A node from "b1-r1-x1" (block, rack, host) with ``gpu`` GPUs."""
    block, rack, host = path.split("-")
    return node(path, block, rack, host, gpu=gpu, pods=pods)


def ids(chosen: IntArray | None, names: Sequence[str]) -> list[str]:
    assert chosen is not None
    return sorted(names[int(i)] for i in chosen)


# --- unit level: TestSelectOptimalDomainSetToFit ------------------------------------------

# d1 and d3 can host the leader (losing one slot to it); d2 and d4 cannot.
FOUR = DomainCounts.of(
    [9, 6, 4, 2],
    pods_with_leader=[8, 6, 3, 2],
    slices_with_leader=[8, 6, 3, 2],
    leaders=[1, 0, 1, 0],
)
FOUR_NAMES = ("d1", "d2", "d3", "d4")


def no_entropy(counts: DomainCounts) -> FloatArray:
    return np.zeros(len(counts), dtype=np.float64)


@pytest.mark.parametrize(
    ("workers", "leaders", "expected"),
    [
        pytest.param(5, 1, ["d1"], id="simple fit one domain"),
        pytest.param(9, 1, ["d2", "d3"], id="perfect fit with two domains"),
        pytest.param(10, 1, ["d1", "d4"], id="perfect fit with two domains 2"),
        pytest.param(5, 0, ["d2"], id="best fit, single domain"),
    ],
)
def test_select_optimal_set(workers: int, leaders: int, expected: list[str]) -> None:
    chosen = select_optimal_set(FOUR, workers, leaders, 1, no_entropy(FOUR))
    assert ids(chosen, FOUR_NAMES) == expected


def test_select_optimal_set_no_fit() -> None:
    assert select_optimal_set(FOUR, 22, 0, 1, no_entropy(FOUR)) is None


@pytest.mark.parametrize("by_entropy", [False, True], ids=["path order", "entropy order"])
def test_select_optimal_set_stable_tie_break(by_entropy: bool) -> None:
    """Four identical domains; the first in full-path order wins, whatever their order."""
    names = ("leaf-a", "leaf-m", "leaf-z", "leaf-zz")
    paths = [
        ("block-b", "host-a"),
        ("block-b", "host-m"),
        ("block-a", "host-z"),
        ("block-a", "host-zz"),
    ]
    rank = [sorted(paths).index(p) for p in paths]
    counts = DomainCounts.of([3, 3, 3, 3], rank=rank)
    entropies = no_entropy(counts) if by_entropy else None
    assert ids(select_optimal_set(counts, 1, 0, 1, entropies), names) == ["leaf-z"]


def test_select_optimal_set_counts_pods_for_slices() -> None:
    """The search compares pods, not slices: 20+15 and 15+10 both hold 5 slices of 5, and the
    second overshoots 25 pods least."""
    counts = DomainCounts.of([20, 15, 10], slices=[4, 3, 2])
    assert ids(select_optimal_set(counts, 5, 0, 5), ("x1", "x2", "x3")) == ["x2", "x3"]


# --- unit level: TestCompareDomainCapacityAndEntropy --------------------------------------


def test_capacity_entropy_order_ties_on_path() -> None:
    """Same leader, capacity and children: path order (block-a before block-b)."""
    names = ("leaf-a", "leaf-m", "leaf-z")
    paths = [("block-b", "host-a"), ("block-b", "host-m"), ("block-a", "host-z")]
    counts = DomainCounts.of(
        [0, 0, 0],
        slices_with_leader=[5, 5, 5],
        leaders=[1, 1, 1],
        rank=[sorted(paths).index(p) for p in paths],
    )
    entropies = np.array([entropy(np.array([2, 2]))] * 3)
    order = capacity_entropy_order(counts, entropies)
    assert [names[i] for i in order] == ["leaf-z", "leaf-a", "leaf-m"]


def test_capacity_entropy_order_capacity_before_entropy_before_path() -> None:
    names = ("lower-leader", "lower-capacity", "low-entropy", "high-entropy")
    counts = DomainCounts.of([0, 0, 0, 0], slices_with_leader=[100, 4, 5, 5], leaders=[0, 1, 1, 1])
    children = [[50, 50], [2, 2], [4, 0], [2, 2]]
    entropies = np.array([entropy(np.array(c)) for c in children])
    order = capacity_entropy_order(counts, entropies)
    assert [names[i] for i in order] == [
        "high-entropy",
        "low-entropy",
        "lower-capacity",
        "lower-leader",
    ]


def test_entropy() -> None:
    assert entropy(np.array([0, 0])) == 0.0
    assert entropy(np.array([7])) == 0.0
    assert entropy(np.array([2, 2, 0])) == 1.0
    # The same capacities in another order give the very same float (sorted before summing).
    assert entropy(np.array([1, 5, 3, 7, 11])) == entropy(np.array([11, 3, 7, 1, 5]))


# --- unit level: TestPlaceSlicesOnDomainsBalanced -----------------------------------------

FIVE = DomainCounts.of([18, 18, 18, 10, 2])
FIVE_NAMES = ("d1", "d2", "d3", "d4", "d5")


@pytest.mark.parametrize(
    ("domains", "slices", "threshold", "expected"),
    [
        pytest.param(
            3, 20, 10, {"d1": 10, "d2": 10}, id="simple balanced placement on two domains"
        ),
        pytest.param(
            3, 40, 13, {"d1": 14, "d2": 13, "d3": 13}, id="simple placement on three domains"
        ),
        pytest.param(5, 2, 2, {"d5": 2}, id="find smallest domain that fits"),
        pytest.param(5, 25, 10, {"d1": 15, "d4": 10}, id="correctly select domains"),
    ],
)
def test_spread_evenly(domains: int, slices: int, threshold: int, expected: dict[str, int]) -> None:
    counts = FIVE.take(np.arange(domains))
    spread = spread_evenly(counts, slices, 0, 1, threshold)
    assert spread is not None
    got = {
        FIVE_NAMES[d]: s
        for d, s in zip(spread.domains.tolist(), spread.slices.tolist(), strict=True)
    }
    assert got == expected
    assert spread.leaders.tolist() == [0] * len(expected)


def test_spread_evenly_stable_tie_break() -> None:
    paths = [("block-b", "host-a"), ("block-a", "host-z")]
    counts = DomainCounts.of([3, 3], rank=[sorted(paths).index(p) for p in paths])
    spread = spread_evenly(counts, 1, 0, 1, 1)
    assert spread is not None
    assert spread.domains.tolist() == [1]  # leaf-z: block-a comes first


def test_spread_evenly_refuses_what_cannot_reach_the_threshold() -> None:
    assert spread_evenly(FIVE, 25, 0, 1, 13) is None  # two domains cannot each take 13 of 25


def test_spread_evenly_leader_goes_first() -> None:
    """The leader's domain is filled first, with its room after the leader."""
    counts = DomainCounts.of(
        [20, 15, 12],
        slices=[4, 3, 2],
        pods_with_leader=[19, 14, 11],
        slices_with_leader=[3, 2, 2],
        leaders=[1, 1, 1],
    )
    spread = spread_evenly(counts, 5, 1, 5, 2)
    assert spread is not None
    # x3 (fewer pods with the leader) hosts it and keeps T; x2 takes the extra slice.
    assert spread.domains.tolist() == [2, 1]
    assert spread.slices.tolist() == [2, 3]
    assert spread.leaders.tolist() == [1, 0]


# --- unit level: TestPruneDomainsBelowThreshold -------------------------------------------


def test_prune_keeps_worker_only_domain() -> None:
    """A child below T with the leader but not without keeps its workers, loses the leader."""
    group = Group(
        top=DomainCounts.of([0]),
        top_ids=np.array([0]),
        below=DomainCounts.of(
            [6, 5], pods_with_leader=[5, 4], slices_with_leader=[5, 4], leaders=[1, 1]
        ),
        below_ids=np.array([0, 1]),
        below_parent=np.array([0, 0]),
    )
    shape = Shape(slices=10, level=0, slice_level=2, leaders=1)
    pruned = prune(group, 5, shape)
    assert pruned.below is not None

    def state(counts: DomainCounts, i: int) -> list[int]:
        fields = (
            counts.pods,
            counts.slices,
            counts.pods_with_leader,
            counts.slices_with_leader,
            counts.leaders,
        )
        return [int(f[i]) for f in fields]

    assert state(pruned.below, 0) == [6, 6, 5, 5, 1]  # the leader's domain
    assert state(pruned.below, 1) == [5, 5, 0, 0, 0]  # workers only
    assert state(pruned.top, 0) == [11, 11, 10, 10, 1]  # recounted from what is left


def test_prune_drops_domains_below_threshold_with_their_children() -> None:
    group = Group(
        top=DomainCounts.of([0, 0]),
        top_ids=np.array([0, 1]),
        below=DomainCounts.of([4, 1, 1]),
        below_ids=np.array([0, 1, 2]),
        below_parent=np.array([0, 1, 1]),
    )
    pruned = prune(group, 2, Shape(slices=4, level=0, slice_level=2))
    assert pruned.top.pods.tolist() == [4, 0]
    assert pruned.below is not None
    assert pruned.below.pods.tolist() == [4, 0, 0]


# --- unit level: TestFindBestDomainsForBalancedPlacement ----------------------------------


def blocks_of_racks(racks: list[tuple[int, tuple[int, int, int, int, int]]], blocks: int) -> Group:
    """Level 0 (blocks) with racks below; each rack: (block, (pods, slices, pods with leader,
    slices with leader, leaders)). Blocks start empty: pruning recounts them."""
    pods, slices, pods_with_leader, slices_with_leader, leaders = zip(
        *(state for _, state in racks), strict=True
    )
    below = DomainCounts.of(
        pods,
        slices=slices,
        pods_with_leader=pods_with_leader,
        slices_with_leader=slices_with_leader,
        leaders=leaders,
    )
    return Group(
        top=DomainCounts.of([0] * blocks),
        top_ids=np.arange(blocks),
        below=below,
        below_ids=np.arange(len(racks)),
        below_parent=np.array([block for block, _ in racks]),
    )


def test_best_group_falls_back_to_the_leader_reservation() -> None:
    """T = 2 leaves no room for the leader once pruned; T = 1 (the last rack's room with the
    leader) fits in two blocks."""
    group = blocks_of_racks([(0, (3, 3, 2, 2, 1)), (1, (2, 2, 1, 1, 1)), (1, (4, 4, 2, 2, 1))], 2)
    found = best_group(iter([group]), Shape(slices=8, level=0, slice_level=1, leaders=1))
    assert found is not None
    pruned, threshold = found
    assert threshold == 1
    assert int(np.count_nonzero(pruned.top.slices)) == 2


def test_best_group_rejects_after_the_leader_reservation() -> None:
    group = blocks_of_racks(
        [(0, (2, 2, 1, 1, 1)), (1, (3, 3, 1, 1, 1)), (1, (4, 4, 2, 2, 1)), (2, (4, 4, 3, 3, 1))], 3
    )
    assert best_group(iter([group]), Shape(slices=12, level=0, slice_level=1, leaders=1)) is None


# --- placement: TestFindTopologyAssignments, "balanced placement; ..." --------------------


def test_basic() -> None:
    """balanced placement; basic"""
    nodes = [gpu_node("b1-r1-x1", 15), gpu_node("b1-r2-x2", 15)]
    request = podset(25, gpu=1, preferred=RACK)
    assert hosts(run(nodes, L3, balanced(request))) == {"x1": 13, "x2": 12}
    # Without it, BestFit fills the first rack and puts the rest in the second.
    assert hosts(run(nodes, L3, request)) == {"x1": 15, "x2": 10}


def test_select_optimal_set_of_domains() -> None:
    """balanced placement; select optmial set of domains"""
    nodes = [gpu_node("b1-r1-x1", 15), gpu_node("b1-r1-x2", 13), gpu_node("b1-r1-x3", 10)]
    decision = run(nodes, L3, balanced(podset(23, gpu=1, preferred=RACK)))
    assert hosts(decision) == {"x1": 12, "x2": 11}


def test_select_optimal_set_of_domains_with_slices() -> None:
    """balanced placement; select optmial set of domains; with slices"""
    nodes = [gpu_node("b1-r1-x1", 20), gpu_node("b1-r1-x2", 15), gpu_node("b1-r1-x3", 10)]
    decision = run(nodes, L3, balanced(podset(25, gpu=1, preferred=RACK, slice=(HOST, 5))))
    assert hosts(decision) == {"x2": 15, "x3": 10}


def test_select_correct_block() -> None:
    """balanced placement; select correct block"""
    nodes = [
        gpu_node("b1-r1-x1", 20, pods=22),
        gpu_node("b1-r1-x2", 10, pods=22),
        gpu_node("b2-r2-x3", 15, pods=22),
        gpu_node("b2-r2-x4", 15, pods=22),
    ]
    decision = run(nodes, L3, balanced(podset(22, gpu=1, preferred=RACK, slice=(HOST, 1))))
    assert hosts(decision) == {"x3": 11, "x4": 11}


def test_cannot_choose_domains_from_different_blocks() -> None:
    """balanced placement; cannot chose domains from different blocks"""
    nodes = [
        gpu_node("b1-r1-x1", 14),
        gpu_node("b1-r1-x2", 11),
        gpu_node("b2-r2-x3", 15),
        gpu_node("b2-r2-x4", 10),
    ]
    decision = run(nodes, L3, balanced(podset(25, gpu=1, preferred=RACK, slice=(HOST, 1))))
    assert hosts(decision) == {"x1": 14, "x2": 11}


def test_prefer_blocks_with_single_rack_with_slices() -> None:
    """balanced placement; select correct block; prefer blocks with single rack; with slices"""
    nodes = [
        gpu_node("b1-r1-x1", 15),
        gpu_node("b1-r2-x2", 15),
        gpu_node("b1-r3-x3", 15),
        gpu_node("b1-r3-x4", 15),
    ]
    decision = run(nodes, L3, balanced(podset(25, gpu=1, preferred=RACK, slice=(HOST, 5))))
    assert hosts(decision) == {"x3": 15, "x4": 10}


def four_level_nodes(last: tuple[int, int]) -> list[NodeInfo]:
    """b1 / sb1 {r1: x1:18, r2: x2:8}, sb2 {r3: x3:15, r4: x4, x5} with GPUs ``last``."""
    layout = [
        ("sb1", "r1", "x1", 18),
        ("sb1", "r2", "x2", 8),
        ("sb2", "r3", "x3", 15),
        ("sb2", "r4", "x4", last[0]),
        ("sb2", "r4", "x5", last[1]),
    ]
    return [
        node(f"b1-{sb}-{r}-{h}", "b1", r, h, gpu=gpu, pods=20, labels={SUBBLOCK: sb})
        for sb, r, h, gpu in layout
    ]


def test_four_levels_slice_two_levels_below() -> None:
    """balanced placement; four level topology; slice two levels below balanced level"""
    request = podset(20, gpu=1, preferred=SUBBLOCK, slice=(HOST, 2))
    decision = run(four_level_nodes((9, 7)), L4, balanced(request))
    assert hosts(decision) == {"x3": 10, "x4": 8, "x5": 2}


def test_four_levels_slice_one_level_below() -> None:
    """balanced placement; four level topology; slice one level below balanced level"""
    request = podset(20, gpu=1, preferred=SUBBLOCK, slice=(RACK, 2))
    decision = run(four_level_nodes((9, 7)), L4, balanced(request))
    # Below the slice level Kueue's hosts have no slices, so fewer free pods go first.
    assert hosts(decision) == {"x3": 10, "x4": 3, "x5": 7}


def test_four_levels_rack_lowest_slice_not_on_lowest_level() -> None:
    """balanced placement; four level topology; balance on rack level; slice not on the
    lowest level (three levels, rack lowest)"""
    layout = [("sb1", "r1", 18), ("sb1", "r2", 8), ("sb2", "r3", 15), ("sb2", "r4", 15)]
    nodes = [
        node(f"b1-{sb}-{r}", "b1", r, gpu=gpu, pods=20, labels={SUBBLOCK: sb})
        for sb, r, gpu in layout
    ]
    levels = (BLOCK, SUBBLOCK, RACK)
    request = podset(20, gpu=1, preferred=SUBBLOCK, slice=(RACK, 2))
    decision = run(nodes, levels, balanced(request))
    assert assigned(decision) == {("b1", "sb2", "r3"): 10, ("b1", "sb2", "r4"): 10}


def test_balance_on_the_slice_level() -> None:
    """balanced placement; three level topology; balance on the same level as slice"""
    nodes = [
        gpu_node("b1-r1-x1", 15, pods=22),
        gpu_node("b1-r1-x2", 13, pods=22),
        gpu_node("b1-r1-x3", 10, pods=22),
        gpu_node("b1-r2-x4", 20, pods=22),
        gpu_node("b1-r2-x5", 8, pods=22),
    ]
    decision = run(nodes, L3, balanced(podset(22, gpu=1, preferred=HOST, slice=(HOST, 2))))
    assert hosts(decision) == {"x2": 12, "x3": 10}


def test_balance_on_the_lowest_level() -> None:
    """balanced placement; three level topology; balance on the lowest level"""
    nodes = [
        gpu_node("b1-r1-x1", 20, pods=22),
        gpu_node("b1-r1-x2", 8, pods=22),
        gpu_node("b1-r2-x3", 15, pods=22),
        gpu_node("b1-r2-x4", 13, pods=22),
        gpu_node("b1-r2-x5", 10, pods=22),
    ]
    decision = run(nodes, L3, balanced(podset(22, gpu=1, preferred=HOST)))
    assert hosts(decision) == {"x3": 11, "x4": 11}


def test_entropy_second_rack_wins() -> None:
    """balanced placement; prioritize (using entropy) balanced domains; second rack wins"""
    nodes = [gpu_node("b1-r1-x1", 10, pods=20), gpu_node("b1-r1-x2", 5, pods=20)] + [
        gpu_node(f"b1-r2-x{i}", 5, pods=20) for i in (3, 4, 5)
    ]
    decision = run(nodes, L3, balanced(podset(15, gpu=1, preferred=RACK)))
    assert hosts(decision) == {"x3": 5, "x4": 5, "x5": 5}


def test_entropy_first_rack_wins() -> None:
    """balanced placement; prioritize (using entropy) balanced domains; first rack wins"""
    nodes = [gpu_node(f"b1-r1-x{i}", 8, pods=24) for i in (1, 2, 3)] + [
        gpu_node("b1-r2-x4", 16, pods=24),
        gpu_node("b1-r2-x5", 8, pods=24),
    ]
    decision = run(nodes, L3, balanced(podset(24, gpu=1, preferred=RACK)))
    assert hosts(decision) == {"x1": 8, "x2": 8, "x3": 8}


def test_two_levels_balance_on_the_highest_level() -> None:
    """balanced placement; two level topology; balance on the highest level"""
    layout = [
        ("r1", "x1", 21),
        ("r1", "x2", 9),
        ("r2", "x3", 11),
        ("r2", "x4", 10),
        ("r2", "x5", 10),
    ]
    nodes = [node(f"{r}-{h}", rack=r, host=h, gpu=gpu, pods=22) for r, h, gpu in layout]
    decision = run(nodes, (RACK, HOST), balanced(podset(23, gpu=1, preferred=RACK)))
    assert hosts(decision) == {"x1": 12, "x3": 11}


def test_select_correct_block_taking_pruning_into_account() -> None:
    """balanced placement; select correct block taking into account pruning. Two racks of b1,
    although rack r3 alone could hold the gang: balance beats the fewest racks."""
    layout = [
        ("b1-r1-x1", 5),
        ("b1-r1-x2", 5),
        ("b1-r2-x3", 5),
        ("b1-r2-x4", 5),
        ("b2-r3-x5", 10),
        ("b2-r3-x6", 4),
        ("b2-r3-x7", 4),
        ("b2-r3-x8", 4),
        ("b2-r4-x9", 5),
        ("b2-r5-x10", 5),
    ]
    nodes = [gpu_node(path, gpu, pods=20) for path, gpu in layout]
    decision = run(nodes, L3, balanced(podset(20, gpu=1, preferred=RACK)))
    assert hosts(decision) == {"x1": 5, "x2": 5, "x3": 5, "x4": 5}


def leader_and_workers(
    workers: int, leader_gpu: int = 1, level: str = RACK
) -> tuple[PodSetRequest, PodSetRequest]:
    leader = podset(1, "leader", gpu=leader_gpu, preferred=level, group="g")
    return leader, balanced(podset(workers, "workers", gpu=1, preferred=level, group="g"))


def test_leader_worker_set() -> None:
    """balanced placement; leader worker set"""
    nodes = [
        gpu_node("b1-r1-x1", 20, 24),
        gpu_node("b1-r1-x2", 15, 24),
        gpu_node("b1-r1-x3", 12, 24),
    ]
    leader, workers = leader_and_workers(25)
    decision = run(nodes, L3, leader, replace(workers, slices=podset(1, slice=(HOST, 5)).slices))
    assert hosts(decision, "leader") == {"x3": 1}
    assert hosts(decision, "workers") == {"x2": 15, "x3": 10}


@pytest.mark.parametrize(
    "first_gpus",
    [
        pytest.param(6, id="should not prune domain"),
        pytest.param(7, id="leader worker set does not reserve leader space on every node"),
    ],
)
def test_leader_keeps_worker_domains(first_gpus: int) -> None:
    """x2 cannot take T=5 workers and the leader, but still takes 5 workers."""
    nodes = [gpu_node("b1-r1-x1", first_gpus, 24), gpu_node("b1-r1-x2", 5, 24)]
    decision = run(nodes, L3, *leader_and_workers(10))
    assert hosts(decision, "leader") == {"x1": 1}
    assert hosts(decision, "workers") == {"x1": 5, "x2": 5}


def test_fallback_to_best_fit_when_leader_cannot_meet_threshold() -> None:
    """balanced placement; fallback to BestFit when leader worker set cannot meet threshold"""
    nodes = [
        gpu_node("b1-r1-x1", 3, 12),
        gpu_node("b1-r2-x2", 3, 12),
        gpu_node("b1-r3-x3", 8, 12),
        gpu_node("b2-r1-x4", 11, 12),
    ]
    leader, workers = leader_and_workers(7, leader_gpu=5, level=BLOCK)
    decision = run(nodes, L3, leader, workers)
    assert hosts(decision, "leader") == {"x3": 1}
    assert hosts(decision, "workers") == {"x1": 3, "x2": 1, "x3": 3}
    assert decision == run(nodes, L3, leader, replace(workers, balanced=False))


# --- fallback, scope and limits -----------------------------------------------------------


def same_as_best_fit(
    nodes: Sequence[NodeInfo], levels: Sequence[str], request: PodSetRequest
) -> PlacementDecision:
    decision = run(nodes, levels, balanced(request))
    assert decision == run(nodes, levels, request)
    return decision


def test_fallback_when_no_single_parent_holds_the_gang() -> None:
    """Each block holds 15 of 25: no parent of a rack fits, so BestFit climbs to the blocks."""
    nodes = [gpu_node("b1-r1-x1", 15), gpu_node("b2-r2-x2", 15)]
    decision = same_as_best_fit(nodes, L3, podset(25, gpu=1, preferred=RACK))
    assert hosts(decision) == {"x1": 15, "x2": 10}


def test_fallback_when_nothing_fits_keeps_the_best_fit_message() -> None:
    nodes = [gpu_node("b1-r1-x1", 15), gpu_node("b1-r2-x2", 15)]
    decision = same_as_best_fit(nodes, L3, podset(31, gpu=1, preferred=RACK))
    assert decision.message == 'topology "default" allows to fit only 30 out of 31 pod(s)'


def test_fallback_when_the_split_level_is_the_slice_level_above_the_lowest() -> None:
    """Kueue prunes the children of L by their slices; below the slice level they have none,
    so when L is the slice level and not the lowest, everything is pruned: BestFit."""
    nodes = [gpu_node("b1-r1-x1", 6), gpu_node("b1-r2-x2", 6)]
    decision = same_as_best_fit(nodes, L3, podset(8, gpu=1, preferred=RACK, slice=(RACK, 2)))
    assert hosts(decision) == {"x1": 6, "x2": 2}  # an even split would be 4 and 4


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(podset(25, gpu=1, required=RACK), id="required"),
        pytest.param(podset(25, gpu=1), id="unconstrained"),
    ],
)
def test_only_preferred_requests_are_balanced(request_: PodSetRequest) -> None:
    nodes = [gpu_node("b1-r1-x1", 15), gpu_node("b1-r1-x2", 15)]
    same_as_best_fit(nodes, L3, request_)


def test_limit_at_the_parent_level_allows_balancing() -> None:
    """A climb limit at the parent (block) leaves Kueue's parent within it."""
    nodes = [gpu_node("b1-r1-x1", 15), gpu_node("b1-r2-x2", 15)]
    request = replace(podset(25, gpu=1, preferred=RACK), limit=BLOCK)
    assert hosts(run(nodes, L3, balanced(request))) == {"x1": 13, "x2": 12}


def test_limit_at_the_preferred_level_falls_back() -> None:
    """A limit at the preferred level itself: a split over its domains would cross it."""
    nodes = [gpu_node("b1-r1-x1", 15), gpu_node("b1-r1-x2", 15), gpu_node("b1-r2-x3", 10)]
    request = replace(podset(20, gpu=1, preferred=RACK), limit=RACK)
    decision = same_as_best_fit(nodes, L3, request)
    assert hosts(decision) == {"x1": 15, "x2": 5}


def test_limit_at_level_zero_falls_back() -> None:
    """At level 0 Kueue balances over the whole tree, which is above any limit."""
    nodes = [gpu_node("b1-r1-x1", 15), gpu_node("b2-r2-x2", 15)]
    request = replace(podset(25, gpu=1, preferred=BLOCK), limit=BLOCK)
    decision = same_as_best_fit(nodes, L3, request)
    assert not decision.fits


def test_rack_lowest_splits_over_nodes_of_the_chosen_racks() -> None:
    """Rack is the lowest level: racks are Kueue's leaves; their nodes are filled afterwards."""
    nodes = [
        node("n1", "b1", "r1", gpu=8, pods=20),
        node("n2", "b1", "r1", gpu=8, pods=20),
        node("n3", "b1", "r2", gpu=10, pods=20),
    ]
    decision = run(nodes, L2, balanced(podset(18, gpu=1, preferred=RACK)))
    assert assigned(decision) == {("b1", "r1"): 9, ("b1", "r2"): 9}
    assert sum(decision.placements[0].node_counts.values()) == 18


# --- properties ---------------------------------------------------------------------------

PROPS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def gpu_clusters(draw: st.DrawFn) -> tuple[tuple[str, ...], list[NodeInfo]]:
    """Blocks of racks of nodes with 0-6 GPUs; names unrelated to paths."""
    levels = draw(st.sampled_from([L3, L2]))
    shape = [
        [draw(st.integers(1, 4)) for _ in range(draw(st.integers(1, 3)))]
        for _ in range(draw(st.integers(1, 3)))
    ]
    total = sum(sum(racks) for racks in shape)
    names = draw(st.permutations(range(total)))
    nodes: list[NodeInfo] = []
    for b, racks in enumerate(shape):
        for r, count in enumerate(racks):
            for _ in range(count):
                i = len(nodes)
                host = f"h{names[i]}" if levels == L3 else None
                gpu = draw(st.integers(0, 6))
                nodes.append(node(f"n{names[i]}", f"b{b}", f"r{r}", host, gpu=gpu, pods=100))
    return levels, nodes


def path(n: NodeInfo, levels: Sequence[str], level: int) -> tuple[str, ...]:
    return tuple(n.labels[key] for key in levels[: level + 1])


@PROPS
@given(cluster=gpu_clusters(), data=st.data())
def test_balanced_places_count_within_capacity_on_no_more_domains_than_needed(
    cluster: tuple[tuple[str, ...], list[NodeInfo]], data: st.DataObject
) -> None:
    """Exactly ``count`` pods, whole slices, within every node's GPUs; fits whenever BestFit
    fits; and at the level Kueue splits at (L+1 above the slice level, else L) every domain
    used is needed: the others used could not hold the gang. (Not at L itself: balance may
    use two racks where one would do, see test_select_correct_block_taking_pruning....)"""
    levels, nodes = cluster
    lowest = len(levels) - 1
    level = data.draw(st.integers(0, lowest), label="preferred level")
    slice_size = data.draw(st.sampled_from([1, 2]), label="slice size") if levels == L3 else 1
    capacity = sum(n.allocatable["example.com/gpu"] for n in nodes)
    count = data.draw(st.integers(1, capacity // slice_size + 1), label="slices") * slice_size
    request = podset(count, gpu=1, preferred=levels[level])
    if slice_size > 1:
        request = replace(request, slices=podset(1, slice=(HOST, slice_size)).slices)
    decision = run(nodes, levels, balanced(request))
    assert decision.fits or not run(nodes, levels, request).fits
    if not decision.fits:
        return
    by_name = {n.name: n for n in nodes}
    node_counts = decision.placements[0].node_counts
    assert sum(node_counts.values()) == count
    for name, pods in node_counts.items():
        assert pods <= by_name[name].allocatable["example.com/gpu"]
        assert pods % slice_size == 0  # host slices: whole slices per host

    split = level + 1 if level < lowest else level
    room: Counter[tuple[str, ...]] = Counter()
    for n in nodes:
        room[path(n, levels, split)] += n.allocatable["example.com/gpu"] // slice_size
    used = {path(by_name[name], levels, split) for name in node_counts}
    slices = count // slice_size
    for domain in used:
        assert sum(room[d] for d in used if d != domain) < slices, domain


@PROPS
@given(cluster=gpu_clusters(), data=st.data())
def test_balanced_leader_and_workers_stay_within_capacity(
    cluster: tuple[tuple[str, ...], list[NodeInfo]], data: st.DataObject
) -> None:
    levels, nodes = cluster
    level = data.draw(st.integers(0, len(levels) - 1), label="preferred level")
    capacity = sum(n.allocatable["example.com/gpu"] for n in nodes)
    workers = data.draw(st.integers(1, capacity + 1), label="workers")
    leader_gpu = data.draw(st.integers(1, 3), label="leader GPUs")
    leader, balanced_workers = leader_and_workers(workers, leader_gpu, levels[level])
    decision = run(nodes, levels, leader, balanced_workers)
    plain = run(nodes, levels, leader, replace(balanced_workers, balanced=False))
    assert decision.fits or not plain.fits
    if not decision.fits:
        return
    leader_nodes, worker_nodes = (p.node_counts for p in decision.placements)
    assert sum(leader_nodes.values()) == 1
    assert sum(worker_nodes.values()) == workers
    for n in nodes:
        used = leader_nodes.get(n.name, 0) * leader_gpu + worker_nodes.get(n.name, 0)
        assert used <= n.allocatable["example.com/gpu"]
