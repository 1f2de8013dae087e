"""Benchmark partial admission (prints figures; not a test).

On bench_exact.py's 20,000-node cluster (bench_placement.py's generator: 10 blocks x 50 racks
x 40 hosts, about 70% of the GPUs busy), one admission cycle for a Job of 8-GPU pods that
requires one block and asks for more pods than any block has room for, with
``job-min-parallelism`` 1: the whole gang fails, then Kueue's binary search tries counts
until the largest that fits one block. Compared with a cycle admitting that count directly
(what a user would have to guess).

    python hack/bench_partial.py
    python hack/bench_partial.py --pods 4000 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench_exact import BLOCK, GPU, HOST, RACK, big_cluster  # run from hack/: its cluster

from topogate.admission.cycle import FlavorTopology, Held, SnapshotPlacer, admission_cycle
from topogate.admission.lanes import PendingWorkload
from topogate.admission.quota import FlavorQuota, QueueSpec
from topogate.admission.request import (
    Mode,
    PlacementDecision,
    PlacementRequest,
    PodSetRequest,
)
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree


def pending(pods: int, min_count: int | None) -> PendingWorkload:
    podset = PodSetRequest(
        "main", pods, {GPU: 8}, mode=Mode.REQUIRED, level=BLOCK, min_count=min_count
    )
    return PendingWorkload("ns/big", "cq", 0, "", PlacementRequest("ns/big", (podset,)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    nodes, pods = big_cluster()
    snapshot = ClusterSnapshot.build(nodes, pods)
    tree = DomainTree.from_labels(snapshot, (BLOCK, RACK, HOST))
    queues = {"cq": QueueSpec("cq", "BestEffortFIFO", (FlavorQuota("gpu", {GPU: 10**9}),))}
    probes = 0

    def run(workload: PendingWorkload) -> tuple[float, int]:
        nonlocal probes
        placer = SnapshotPlacer(snapshot, {"gpu": FlavorTopology(tree, "dc")}, exact=None)
        calls = 0

        def counted(flavor: str, request: PlacementRequest, held: Held) -> PlacementDecision | None:
            nonlocal calls
            calls += 1
            return placer(flavor, request, held)

        started = time.perf_counter()
        result = admission_cycle(queues, [workload], {}, counted)
        elapsed = time.perf_counter() - started
        admitted = result.admitted[0] if result.admitted else None
        count = admitted.request.podsets[0].count if admitted and admitted.request else -1
        if admitted and admitted.request is None:
            count = workload.request.podsets[0].count
        probes = calls
        return elapsed, count

    partial_times, count = [], -1
    for _ in range(args.repeats):
        elapsed, count = run(pending(args.pods, 1))
        partial_times.append(elapsed)
    partial_probes = probes
    direct_times = [run(pending(count, None))[0] for _ in range(args.repeats)]
    print(f"cluster: {len(nodes)} nodes, {len(pods)} busy pods; Job of {args.pods} 8-GPU pods")
    print(f"partial admission: {count} pods admitted in one block")
    print(
        f"  cycle with the search: {1000 * statistics.median(partial_times):.1f} ms "
        f"(median of {args.repeats}), {partial_probes} placements"
    )
    print(
        f"  cycle admitting {count} pods directly: "
        f"{1000 * statistics.median(direct_times):.1f} ms, 1 placement"
    )


if __name__ == "__main__":
    main()
