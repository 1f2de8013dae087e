"""Benchmark the placement core on generated GPU clusters (prints figures; not a test).

Each size runs in a fresh process so peak RSS is its own. For every size it builds the
cache snapshot and domain tree from NodeInfo records, then plans gangs of 8-GPU pods:
the issue's case (5,000 pods, required block) and two that fit.

    python hack/bench_placement.py                  # 20,000 and 100,000 nodes
    python hack/bench_placement.py --size 20000     # one size
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import subprocess
import sys
import time

from topogate.admission.placement import place
from topogate.admission.request import Mode, PlacementRequest, PodSetRequest
from topogate.cache.nodes import NodeInfo, PodUsage
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree
from topogate.clock import exact_budget

BLOCK, RACK, HOST = "cloud.com/topology-block", "cloud.com/topology-rack", "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
# Busy GPUs per node, drawn independently: about 28% of all GPUs in use, fragmented.
BUSY = [(0, 0.55), (1, 0.05), (2, 0.10), (4, 0.10), (8, 0.20)]
SHAPES = {20_000: (10, 50, 40), 100_000: (50, 50, 40)}


def cluster(
    blocks: int,
    racks: int,
    hosts: int,
    seed: int = 7,
    busy: list[tuple[int, float]] = BUSY,
) -> tuple[list[NodeInfo], list[PodUsage]]:
    """Nodes of 8 GPUs with busy GPUs drawn from ``busy`` ((GPUs, weight) pairs)."""
    rng = random.Random(seed)
    nodes: list[NodeInfo] = []
    pods: list[PodUsage] = []
    choices, weights = zip(*busy, strict=True)
    for b in range(blocks):
        for r in range(racks):
            for h in range(hosts):
                name = f"n-b{b}-r{r}-h{h}"
                nodes.append(
                    NodeInfo(
                        name,
                        {BLOCK: f"b{b}", RACK: f"r{r}", HOST: name},
                        {"cpu": 96_000, "memory": 2**40, "pods": 110, GPU: 8},
                    )
                )
                taken = rng.choices(choices, weights)[0]
                if taken:
                    pods.append(PodUsage(f"ns/{name}", name, {GPU: taken, "cpu": taken * 10_000}))
    return nodes, pods


def workload(count: int, mode: Mode, level: str | None) -> PlacementRequest:
    podset = PodSetRequest(
        "workers", count, {GPU: 8, "cpu": 80_000, "memory": 800 * 2**30}, mode=mode, level=level
    )
    return PlacementRequest("bench", (podset,))


def run_size(size: int, repeats: int) -> None:
    blocks, racks, hosts = SHAPES.get(size, (max(1, size // 2000), 50, 40))
    nodes, pods = cluster(blocks, racks, hosts)
    start = time.perf_counter()
    snapshot = ClusterSnapshot.build(nodes, pods)
    built = time.perf_counter()
    tree = DomainTree.from_labels(snapshot, [BLOCK, RACK, HOST])
    treed = time.perf_counter()
    free_gpus = int(snapshot.free[:, snapshot.resource_index[GPU]].sum())
    print(
        f"{len(nodes):,} nodes ({blocks} blocks x {racks} racks x {hosts} hosts), "
        f"{len(pods):,} running pods, {free_gpus:,} of {8 * len(nodes):,} GPUs free"
    )
    print(
        f"  snapshot build {1000 * (built - start):8.1f} ms   "
        f"domain tree {1000 * (treed - built):8.1f} ms"
    )
    cases = [
        ("5000 pods x 8 GPU, required block", workload(5000, Mode.REQUIRED, BLOCK)),
        ("1000 pods x 8 GPU, required block", workload(1000, Mode.REQUIRED, BLOCK)),
        ("5000 pods x 8 GPU, preferred rack", workload(5000, Mode.PREFERRED, RACK)),
    ]
    for label, request in cases:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            decision = place(tree, snapshot, request, topology_name="bench", exact=exact_budget())
            times.append(time.perf_counter() - t0)
        if decision.fits:
            outcome = f"fits on {len(decision.placements[0].domains):,} nodes"
        else:
            outcome = f"no fit: {decision.message[:70]}"
        print(
            f"  plan {label:<36} median {1000 * statistics.median(times):7.1f} ms "
            f"(min {1000 * min(times):6.1f}, {repeats} runs)  {outcome}"
        )
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak RSS {peak_mib:,.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, help="nodes; default: 20000 and 100000")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if args.size:
        run_size(args.size, args.repeats)
        return
    for size in SHAPES:
        subprocess.run(
            [sys.executable, __file__, "--size", str(size), "--repeats", str(args.repeats)],
            check=True,
        )


if __name__ == "__main__":
    main()
