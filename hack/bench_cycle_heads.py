"""The admission cycle's per-queue cost, in memory: `admission_cycle` alone (no admitter, no
placement: a quota-only placer) on Kueue's large-scale shape, 10 cohorts of 100 ClusterQueues
with --waiting one-pod Workloads each; prints the CPU time per cycle and how many borrowing
levels (`QuotaBook.borrows`) a cycle works out. Not a test.

    .venv/bin/python hack/bench_cycle_heads.py [--queues-per-cohort 100] [--waiting 6]

Two cases: "limited", the quota free and the cycle stopped at --limit admissions (serve's
admitter stops at what it may have ahead of its writes); "full", every queue at its nominal
quota and its cohort's pool taken but --free queues, no limit (the cycle tries every lane's
head once and passes the hopeless lanes).
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import time
from typing import Any

from topogate.admission.cycle import admission_cycle
from topogate.admission.lanes import PendingWorkload, QueueLanes
from topogate.admission.quota import CohortTree, FlavorQuota, QueueSpec, QuotaBook, Usage
from topogate.admission.request import PlacementRequest, PodSetRequest

CPU = "cpu"


def shape(cohorts: int, per_cohort: int, waiting: int) -> tuple[dict[str, QueueSpec], QueueLanes]:
    queues, pending = {}, []
    n = 0
    for c in range(cohorts):
        for i in range(per_cohort):
            name = f"cq-{c:02d}-{i:03d}"
            flavor = (FlavorQuota("default", {CPU: 4}),)
            queues[name] = QueueSpec(name, "BestEffortFIFO", flavor, f"cohort-{c:02d}")
            for w in range(waiting):
                key = f"ns-{c}-{i}/w{w}"
                request = PlacementRequest(key, (PodSetRequest("main", 1, {CPU: 1}),))
                stamp = f"2026-01-01T{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z"
                pending.append(PendingWorkload(key, name, w % 3, stamp, request))
                n += 1
    return queues, QueueLanes(pending)


def run(
    queues: dict[str, QueueSpec], lanes: QueueLanes, usage: Usage, limit: int | None, cycles: int
) -> tuple[list[float], int, int]:
    calls = [0]
    real = QuotaBook.borrows

    def counted(self: QuotaBook, *a: Any) -> int:
        calls[0] += 1
        return real(self, *a)

    QuotaBook.borrows = counted  # type: ignore[method-assign,assignment]
    times, admitted = [], 0
    # The admitter keeps the catalog's cohort tree between cycles (where the cycle takes one).
    kept: dict[str, Any] = {}
    if "tree" in inspect.signature(admission_cycle).parameters:
        kept["tree"] = CohortTree(queues)
    try:
        for _ in range(cycles):
            used = {k: dict(v) for k, v in usage.items()}
            started = time.process_time()
            result = admission_cycle(queues, lanes, used, lambda *a: None, limit=limit, **kept)
            times.append(time.process_time() - started)
            admitted = len(result.admitted)
    finally:
        QuotaBook.borrows = real  # type: ignore[method-assign]
    return times, calls[0] // cycles, admitted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cohorts", type=int, default=10)
    parser.add_argument("--queues-per-cohort", type=int, default=100)
    parser.add_argument("--waiting", type=int, default=6, help="Workloads waiting per queue")
    parser.add_argument("--limit", type=int, default=8, help="admissions per limited cycle")
    parser.add_argument("--free", type=int, default=4, help="queues with room when full")
    parser.add_argument("--cycles", type=int, default=30)
    args = parser.parse_args()
    queues, lanes = shape(args.cohorts, args.queues_per_cohort, args.waiting)
    full: Usage = {(name, "default"): {CPU: 4} for name in list(queues)[args.free :]}
    for case, usage, limit in (("limited", {}, args.limit), ("full", full, None)):
        times, borrows, admitted = run(queues, lanes, usage, limit, args.cycles)
        print(
            f"{case}: {len(queues)} queues, {len(lanes)} waiting, {admitted} admitted a cycle: "
            f"{statistics.median(times) * 1000:.2f} ms CPU median, {min(times) * 1000:.2f} least "
            f"of {len(times)} cycles, "
            f"{borrows} borrowing levels worked out a cycle"
        )


if __name__ == "__main__":
    main()
