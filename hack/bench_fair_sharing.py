"""Benchmark one admission cycle with fair sharing on and off (prints figures; not a test).

A tree of ClusterQueues as Kueue's large-scale scenario has it (``--cohorts`` cohorts of
``--queues`` queues under one root holding no quota), each queue with a small nominal GPU
quota and ``--pending`` workloads of 1 GPU spread over the queues, quota-only (no topology):
the cycle's cost is the order and the quota, which is what fair sharing changes.

    python hack/bench_fair_sharing.py
    python hack/bench_fair_sharing.py --cohorts 10 --queues 100 --pending 50000
"""

from __future__ import annotations

import argparse
import time

from topogate.admission.cycle import Held, admission_cycle
from topogate.admission.lanes import PendingWorkload, QueueLanes
from topogate.admission.quota import CohortSpec, FlavorQuota, QueueSpec
from topogate.admission.request import PlacementDecision, PlacementRequest, PodSetRequest

GPU = "nvidia.com/gpu"


def quota_only(flavor: str, request: PlacementRequest, held: Held) -> PlacementDecision | None:
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cohorts", type=int, default=10)
    parser.add_argument("--queues", type=int, default=100, help="per cohort")
    parser.add_argument("--pending", type=int, default=5000)
    parser.add_argument("--nominal", type=int, default=4, help="GPUs per queue")
    args = parser.parse_args()
    cohorts = {"root": CohortSpec("root")}
    queues: dict[str, QueueSpec] = {}
    for c in range(args.cohorts):
        cohorts[f"org{c}"] = CohortSpec(f"org{c}", "root")
        for q in range(args.queues):
            name = f"org{c}-q{q}"
            flavor = FlavorQuota("gpu", {GPU: args.nominal})
            queues[name] = QueueSpec(name, "BestEffortFIFO", (flavor,), f"org{c}")
    names = sorted(queues)
    pending = [
        PendingWorkload(
            f"ns/w{i}",
            names[i % len(names)],
            0,
            f"{i:09d}",
            PlacementRequest(f"ns/w{i}", (PodSetRequest("main", 1, {GPU: 1}),)),
        )
        for i in range(args.pending)
    ]
    lanes = QueueLanes(pending)
    print(
        f"{len(queues)} ClusterQueues in {args.cohorts} cohorts, {args.pending} pending, "
        f"{args.nominal} GPUs each"
    )
    for fair in (False, True):
        started = time.perf_counter()
        result = admission_cycle(queues, lanes, {}, quota_only, cohorts=cohorts, fair_sharing=fair)
        took = time.perf_counter() - started
        print(
            f"fair sharing {'on ' if fair else 'off'}: {took:.2f} s per cycle, "
            f"{len(result.admitted)} admitted"
        )


if __name__ == "__main__":
    main()
