"""Benchmark the exact second pass of the placement core (prints figures; not a test).

1. Its time on the 20,000-node cluster of bench_placement.py (10 blocks x 50 racks x 40
   hosts), filled to about 70% of its GPUs, for a JobSet of 8 replicated jobs x 64 pods that
   each require a rack: the greedy pass, then the second pass's joint fit forced
   (``joint_fit``), which it would run only when the greedy pass missed; and the same
   JobSet preferring racks, greedy alone and with the second pass.
2. On random small clusters (2-12 nodes, gangs of 2-4 PodSets each required in a rack or a
   block): how often a gang fits but the greedy pass says it does not (the miss rate), before
   and after the second pass with its default 50 ms budget. Whether a gang fits is decided
   by the second pass with a 10 s budget (tests/test_exact.py checks it against brute force).
3. Random preferred gangs (PodSets preferring a host, a rack or a block): blocks, racks
   and hosts used, greedy against the second pass, and how many answers use more domains
   than greedy at a level above the requested one (tests/test_exact_levels.py checks the
   second pass's lexicographic optimum against brute force).

    python hack/bench_exact.py
    python hack/bench_exact.py --cases 500 --repeats 5
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time
from collections.abc import Callable
from functools import partial

from bench_placement import cluster  # run from hack/: its generator, its labels

from topogate.admission.exact import EXACT_BUDGET, ExactBudget
from topogate.admission.placement import joint_fit, place
from topogate.admission.request import (
    ExactOutcome,
    Mode,
    PlacementDecision,
    PlacementRequest,
    PodSetRequest,
    SliceLayer,
)
from topogate.cache.nodes import NodeInfo, PodUsage
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree
from topogate.clock import exact_budget

BLOCK, RACK, HOST = "cloud.com/topology-block", "cloud.com/topology-rack", "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
# Busy GPUs per node: on average 5.6 of 8 (70%), fragmented.
BUSY = [(0, 0.05), (2, 0.10), (4, 0.20), (6, 0.35), (8, 0.30)]


def big_cluster(seed: int = 7) -> tuple[list[NodeInfo], list[PodUsage]]:
    """bench_placement's 20,000-node cluster (10 x 50 x 40), 70% of the GPUs busy."""
    return cluster(10, 50, 40, seed, busy=BUSY)


def jobset(jobs: int = 8, pods: int = 64, gpus: int = 1, pairs: bool = False) -> PlacementRequest:
    podsets = tuple(
        PodSetRequest(
            f"job-{j}",
            pods,
            {GPU: gpus, "cpu": 8_000},
            mode=Mode.REQUIRED,
            level=RACK,
            slices=(SliceLayer(HOST, 2),) if pairs else (),
        )
        for j in range(jobs)
    )
    return PlacementRequest("jobset", podsets)


def timed(
    call: Callable[[], PlacementDecision], repeats: int
) -> tuple[float, float, PlacementDecision]:
    times = []
    decision: PlacementDecision | None = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        decision = call()
        times.append(time.perf_counter() - t0)
    assert decision is not None
    return 1000 * statistics.median(times), 1000 * min(times), decision


def bench_big(repeats: int) -> None:
    nodes, pods = big_cluster()
    snapshot = ClusterSnapshot.build(nodes, pods)
    tree = DomainTree.from_labels(snapshot, [BLOCK, RACK, HOST])
    free = int(snapshot.free[:, snapshot.resource_index[GPU]].sum())
    print(f"{len(nodes):,} nodes, {free:,} of {8 * len(nodes):,} GPUs free")
    for gpus in (1, 2):
        print(f"JobSet: 8 replicated jobs x 64 pods ({gpus} GPU each), each required in a rack")
        bench_jobset(tree, snapshot, jobset(gpus=gpus), repeats)
    # Eight jobs that can only share one rack (the topology is that rack): a plain packing
    # proves it; with pods in pairs per host (a slice layer) it takes the ILP.
    one_rack = DomainTree.from_labels(snapshot, [BLOCK, RACK, HOST], {BLOCK: "b0", RACK: "r0"})
    rack_free = int(snapshot.free[one_rack.nodes, snapshot.resource_index[GPU]].sum())
    per_job = max(2, rack_free * 7 // 10 // 2 // 8 // 2 * 2)  # 2-GPU pods, ~70% of the rack
    for pairs in (False, True):
        print(
            f"JobSet: 8 jobs x {per_job} pods (2 GPU each{', in pairs per host' if pairs else ''})"
            f" sharing one rack of 40 nodes ({rack_free} GPUs free)"
        )
        bench_jobset(one_rack, snapshot, jobset(pods=per_job, gpus=2, pairs=pairs), repeats)


def bench_jobset(
    tree: DomainTree, snapshot: ClusterSnapshot, request: PlacementRequest, repeats: int
) -> None:
    median, low, greedy = timed(
        lambda: place(tree, snapshot, request, topology_name="b", exact=exact_budget(0)), repeats
    )
    label = "greedy pass"
    print(f"  {label:<27} median {median:7.1f} ms (min {low:6.1f})  fits={greedy.fits}")
    # The joint fit forced (it runs by itself only after a miss), unlimited and at 50 ms; the
    # figures include the greedy pass that comes first.
    for label, budget in (
        ("greedy + second (no limit)", 60.0),
        ("greedy + second (50 ms)", EXACT_BUDGET),
    ):
        call = partial(
            joint_fit,
            tree,
            snapshot,
            request,
            topology_name="b",
            exact=ExactBudget(budget, time.perf_counter),
        )
        median, low, exact = timed(call, repeats)
        print(
            f"  {label:<27} median {median:7.1f} ms (min {low:6.1f})  fits={exact.fits} "
            f"exact={exact.exact.value}"
        )


def small_case(rng: random.Random) -> tuple[list[NodeInfo], PlacementRequest]:
    nodes = []
    for r in range(rng.randint(1, 3)):
        for h in range(rng.randint(1, 4)):
            name = f"r{r}-h{h}"
            labels = {BLOCK: "b1" if r < 2 else "b2", RACK: f"r{r}", HOST: name}
            allocatable = {
                "cpu": rng.choice([1000, 2000, 3000, 4000]),
                "memory": rng.choice([1, 2, 4]) * 2**30,
                "pods": rng.choice([2, 4, 10]),
                GPU: rng.choice([0, 2, 4, 8]),
            }
            nodes.append(NodeInfo(name, labels, allocatable))
    podsets = []
    for i in range(rng.randint(2, 4)):
        requests = {
            "cpu": rng.choice([0, 500, 1000, 2000]),
            "memory": rng.choice([0, 2**29, 2**30]),
            GPU: rng.choice([0, 1, 2, 3]),
        }
        level = rng.choice([RACK, RACK, BLOCK])
        podsets.append(
            PodSetRequest(
                f"p{i}",
                rng.randint(1, 3),
                {k: v for k, v in requests.items() if v},
                mode=Mode.REQUIRED,
                level=level,
            )
        )
    return nodes, PlacementRequest("gang", tuple(podsets))


def bench_small(cases: int, seed: int = 11) -> None:
    rng = random.Random(seed)
    fits = greedy_misses = exact_misses = budget_outs = 0
    spent: list[float] = []
    for _ in range(cases):
        nodes, request = small_case(rng)
        snapshot = ClusterSnapshot.build(nodes)
        tree = DomainTree.from_labels(snapshot, [BLOCK, RACK, HOST])
        truth = place(tree, snapshot, request, topology_name="s", exact=exact_budget(10.0))
        greedy = place(tree, snapshot, request, topology_name="s", exact=exact_budget(0))
        t0 = time.perf_counter()
        exact = place(tree, snapshot, request, topology_name="s", exact=exact_budget())
        if exact.exact is not ExactOutcome.NOT_RUN:
            spent.append(1000 * (time.perf_counter() - t0))
        budget_outs += exact.exact is ExactOutcome.BUDGET
        if truth.fits:
            fits += 1
            greedy_misses += not greedy.fits
            exact_misses += not exact.fits
    print(f"{cases} random small gangs (2-12 nodes, 2-4 PodSets required in a rack or block)")
    print(f"  fit at all: {fits}")
    print(f"  greedy pass missed: {greedy_misses} ({100 * greedy_misses / max(fits, 1):.1f}%)")
    print(
        f"  after the second pass (50 ms): {exact_misses} "
        f"({100 * exact_misses / max(fits, 1):.1f}%), budget ran out {budget_outs} time(s)"
    )
    if spent:
        print(
            f"  place() when the second pass ran: median {statistics.median(spent):.1f} ms, "
            f"max {max(spent):.1f} ms ({len(spent)} cases)"
        )


LEVELS = (BLOCK, RACK, HOST)


def per_level(
    nodes: list[NodeInfo], request: PlacementRequest, decision: PlacementDecision
) -> list[tuple[int, ...]]:
    """Per PodSet, the blocks, racks and hosts (down to its own level) its pods use."""
    path = {n.name: tuple(n.labels[key] for key in LEVELS) for n in nodes}
    placed = {p.name: p.node_counts for p in decision.placements}
    out = []
    for podset in request.podsets:
        depth = LEVELS.index(podset.level or HOST) + 1
        hosts = placed[podset.name]
        out.append(tuple(len({path[h][: lv + 1] for h in hosts}) for lv in range(depth)))
    return out


def preferred_case(rng: random.Random) -> tuple[list[NodeInfo], PlacementRequest]:
    """1-3 blocks of 1-3 racks; each rack either several 1-GPU hosts or one or two hosts of
    2-4 GPUs (so the roomiest rack or block is not always the one needing the fewest domains
    below it); 1-3 PodSets of 2-6 one-GPU pods preferring a host, a rack or a block."""
    nodes = []
    for b in range(rng.randint(1, 3)):
        for r in range(rng.randint(1, 3)):
            small = rng.random() < 0.5
            for h in range(rng.randint(2, 4) if small else rng.randint(1, 2)):
                name = f"b{b}-r{r}-h{h}"
                labels = {BLOCK: f"b{b}", RACK: f"b{b}-r{r}", HOST: name}
                gpus = 1 if small else rng.choice([2, 3, 4])
                nodes.append(NodeInfo(name, labels, {"cpu": 8000, "pods": 10, GPU: gpus}))
    podsets = tuple(
        PodSetRequest(
            f"p{i}",
            rng.randint(2, 6),
            {GPU: 1, "cpu": rng.choice([100, 1000])},
            mode=Mode.PREFERRED,
            level=rng.choice([HOST, HOST, RACK, RACK, BLOCK]),
        )
        for i in range(rng.choice([1, 2, 2, 3]))
    )
    return nodes, PlacementRequest("gang", podsets)


def bench_preferred(cases: int, seed: int = 13) -> None:
    """Preferred gangs (``preferred_case``): the domains used per level, greedy against the
    second pass (50 ms)."""
    rng = random.Random(seed)
    fit = changed = worse_above = budget_outs = 0
    totals = {"greedy": [0, 0, 0], "second": [0, 0, 0]}
    for _ in range(cases):
        nodes, request = preferred_case(rng)
        snapshot = ClusterSnapshot.build(nodes)
        tree = DomainTree.from_labels(snapshot, [BLOCK, RACK, HOST])
        greedy = place(tree, snapshot, request, topology_name="s", exact=exact_budget(0))
        exact = place(tree, snapshot, request, topology_name="s", exact=exact_budget())
        budget_outs += exact.exact is ExactOutcome.BUDGET
        if not (greedy.fits and exact.fits):
            continue
        fit += 1
        changed += exact.produced_by == "exact"
        before, after = per_level(nodes, request, greedy), per_level(nodes, request, exact)
        for name, vectors in (("greedy", before), ("second", after)):
            for vector in vectors:
                for lv, count in enumerate(vector):
                    totals[name][lv] += count
        # More domains than greedily at a level above the one a PodSet asked for.
        worse_above += any(
            any(a > b for a, b in zip(mine[:-1], theirs[:-1], strict=True))
            for mine, theirs in zip(after, before, strict=True)
        )
    print(
        f"{cases} random preferred gangs (1-3 blocks x 1-3 racks, 1-3 PodSets at host/rack/block)"
    )
    print(
        f"  fit greedily: {fit}; the second pass changed {changed} "
        f"({100 * changed / max(fit, 1):.1f}%); budget ran out {budget_outs} time(s)"
    )
    for name, label in (("greedy", "greedy pass"), ("second", "second pass")):
        blocks, racks, hosts = totals[name]
        print(f"  {label}: {blocks} blocks, {racks} racks, {hosts} hosts (summed over PodSets)")
    print(f"  answers with more domains than greedy above the requested level: {worse_above}")


def bench_preferred_big(repeats: int) -> None:
    """Preferred gangs on the 20,000-node cluster: 8 PodSets x 64 pods, each preferring a
    rack, of 1 GPU (each fits a rack) and of 4 GPUs (each spreads over racks)."""
    nodes, pods = big_cluster()
    snapshot = ClusterSnapshot.build(nodes, pods)
    tree = DomainTree.from_labels(snapshot, [BLOCK, RACK, HOST])
    for gpus in (1, 4):
        podsets = jobset(gpus=gpus).podsets
        request = PlacementRequest(
            "jobset", tuple(dataclasses.replace(p, mode=Mode.PREFERRED) for p in podsets)
        )
        print(f"JobSet: 8 replicated jobs x 64 pods ({gpus} GPU each), each preferring a rack")
        for label, seconds in (("greedy pass", 0.0), ("greedy + second (50 ms)", EXACT_BUDGET)):
            budget = exact_budget(seconds)
            call = partial(place, tree, snapshot, request, topology_name="b", exact=budget)
            median, low, decision = timed(call, repeats)
            print(
                f"  {label:<27} median {median:7.1f} ms (min {low:6.1f})  "
                f"fits={decision.fits} exact={decision.exact.value}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import scipy.optimize  # noqa: F401  (its import, ~0.7 s once per process, is not timed)

    bench_big(args.repeats)
    bench_preferred_big(args.repeats)
    bench_small(args.cases)
    bench_preferred(args.cases)


if __name__ == "__main__":
    main()
