"""One admission cycle with thousands waiting, in memory: the CPU time of `Admitter.decide()`
on Kueue's TAS scenario (hack/bench_kueue_scenario.py's objects) once the quota is full and
every other Workload waits, with and without finished Workloads still in the store; prints
figures.

    .venv/bin/python hack/bench_cycle.py [--cohorts 1] [--finished 3000] [--cycles 20]

A cycle of serve's loop words and compares the pending messages at most once a second
(``describe=True``); the others only decide (``describe=False``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from topogate.api.objects import is_finished
from topogate.controllers.admitter import Admitter
from topogate.kube.events import EventRecorder
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    NODES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
    Obj,
    Resource,
)
from topogate.metrics import Metrics
from topogate.state import ControllerState
from topogate.testing.fakekube import FakeKube

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kueue_scenario import (
    QUEUES_PER_COHORT,
    cluster_objects,
    counted,
    queue_name,
    workload,
)

BY_KIND: dict[str, Resource] = {
    "Node": NODES,
    "ClusterQueue": CLUSTER_QUEUES,
    "LocalQueue": LOCAL_QUEUES,
    "ResourceFlavor": RESOURCE_FLAVORS,
    "Topology": TOPOLOGIES,
}


def scenario(cohorts: int, finished: int) -> list[Obj]:
    """Kueue's Workloads, oldest first, and ``finished`` more already Finished."""
    out, n = [], 0
    for cohort in range(cohorts):
        for queue in range(QUEUES_PER_COHORT):
            namespace = queue_name(cohort, queue)
            for index, spec in enumerate(counted(1.0)):
                for i in range(spec[1] + finished // (QUEUES_PER_COHORT * 9 * cohorts)):
                    obj = workload(f"{spec[0]}-{index}-{i}", namespace, spec)
                    meta = obj["metadata"]
                    meta["creationTimestamp"] = (
                        f"2026-01-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z"
                    )
                    meta["resourceVersion"] = str(n + 1)
                    if i >= spec[1]:
                        cond = {"type": "Finished", "status": "True", "reason": "Done"}
                        obj["status"] = {"conditions": [cond]}
                    out.append(obj)
                    n += 1
    return out


async def measure(
    cohorts: int, finished: int, cycles: int, describe: bool
) -> tuple[int, list[float]]:
    state, kube = ControllerState(), FakeKube()
    for obj in cluster_objects(cohorts):
        resource = BY_KIND.get(obj["kind"])
        if resource is not None:
            state.handler(resource)(None, obj)
    on_workload = state.handler(WORKLOADS)
    for obj in scenario(cohorts, finished):
        kube.seed(WORKLOADS, obj)
        on_workload(None, obj)
    admitter = Admitter(kube, state, Metrics(), EventRecorder(kube, "bench"))
    admitter.decide()  # admits what the quota holds; the rest wait from now on
    await asyncio.sleep(0)
    times = []
    for _ in range(cycles):
        started = time.process_time()
        admitter.decide(describe=describe)
        times.append(time.process_time() - started)
    store = state.store.objects(WORKLOADS)
    waiting = [
        k for k, o in store.items() if not is_finished(o) and state.ledger.reserved(k) is None
    ]
    return len(waiting), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cohorts", type=int, default=1)
    parser.add_argument("--finished", type=int, default=3000, help="finished Workloads kept")
    parser.add_argument("--cycles", type=int, default=20)
    args = parser.parse_args()
    for finished in (0, args.finished):
        # serve's loop words the pending messages at most once a second (describe=True)
        for describe in (True, False):
            waiting, times = asyncio.run(measure(args.cohorts, finished, args.cycles, describe))
            print(
                f"{waiting} waiting, {finished} finished in the store: "
                f"decide(describe={describe}) "
                f"{statistics.median(times) * 1000:.1f} ms CPU median of {len(times)}"
            )


if __name__ == "__main__":
    main()
