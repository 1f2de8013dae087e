"""Benchmark what fair sharing's status costs `serve` per wording (at most once a second):
every ClusterQueue's and Cohort's share over the quota held now (``tree_shares``), and the
tree `status --queues` draws (``queue_tree``). Prints figures; not a test.

A tree as Kueue's large-scale scenario has it: ``--cohorts`` cohorts of ``--queues`` queues
under one root holding no quota, each queue with ``--nominal`` GPUs, every other queue
using twice its quota (borrowing) and the rest idle (lending).

    python hack/bench_fair_status.py
    python hack/bench_fair_status.py --cohorts 10 --queues 100 --repeat 5
"""

from __future__ import annotations

import argparse
import time

from topogate.admission.fairshare import tree_shares
from topogate.admission.queuetree import queue_tree
from topogate.admission.quota import CohortSpec, CohortTree, FlavorQuota, QueueSpec, QuotaBook

GPU = "nvidia.com/gpu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cohorts", type=int, default=10)
    parser.add_argument("--queues", type=int, default=100, help="per cohort")
    parser.add_argument("--nominal", type=int, default=4, help="GPUs per queue")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cohorts = {"root": CohortSpec("root")}
    queues: dict[str, QueueSpec] = {}
    usage: dict[tuple[str, str], dict[str, int]] = {}
    for c in range(args.cohorts):
        cohorts[f"org{c}"] = CohortSpec(f"org{c}", "root")
        for q in range(args.queues):
            name = f"org{c}-q{q}"
            flavor = FlavorQuota("gpu", {GPU: args.nominal, "cpu": 64_000})
            queues[name] = QueueSpec(name, "BestEffortFIFO", (flavor,), f"org{c}")
            if q % 2 == 0:
                usage[(name, "gpu")] = {GPU: 2 * args.nominal, "cpu": 8_000}
    print(f"{len(queues)} ClusterQueues in {args.cohorts} cohorts, half of them borrowing")
    for label, work in (
        ("tree_shares (serve, per wording)", lambda book: tree_shares(book)),
        (
            "queue_tree with shares (status --queues)",
            lambda book: queue_tree(book, {}, {}, {}, True),
        ),
    ):
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            # A new book and tree each time, as serve builds them from the state.
            work(QuotaBook(queues, usage, CohortTree(queues, cohorts)))
            times.append(time.perf_counter() - started)
        times.sort()
        print(
            f"{label}: median {times[len(times) // 2] * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms"
        )


if __name__ == "__main__":
    main()
