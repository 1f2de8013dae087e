"""Microbenchmark of serve's once-a-second work at Kueue's large-scale shape (1,000
ClusterQueues in 10 cohorts, fair sharing off): the per-queue gauges, the fair-sharing status
clear, the pending messages' update, and an ungater round for admitted Workloads without pods.
Each is timed as it is now and, where it changed, as a walk from scratch (the old way), with a
few Workloads changing between calls as in a throttled run.

    .venv/bin/python hack/bench_persec.py [--queues 1000] [--held 3000] [--waiting 3000]

Prints microseconds per call (median of --repeat calls). A loaded machine inflates all figures
alike; compare the columns, not runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from topogate.controllers.admitter import Admitter
from topogate.controllers.fairstatus import written_share
from topogate.kube.events import EventRecorder
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    COHORTS,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    WORKLOADS,
)
from topogate.metrics import Metrics
from topogate.state import ControllerState
from topogate.testing.fakekube import FakeKube
from topogate.ungater.controller import Ungater

Obj = dict[str, Any]
API = "topogate.dev/v1alpha1"


def cluster_queue(name: str, cohort: str) -> Obj:
    quota = [{"name": "cpu", "nominalQuota": 10_000}]
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohort": cohort,
            "resourceGroups": [
                {"coveredResources": ["cpu"], "flavors": [{"name": "rf", "resources": quota}]}
            ],
        },
    }


def workload(name: str, cq: str, admitted: bool) -> Obj:
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}
    obj: Obj = {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": cq,
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "queueName": cq,
            "podSets": [
                {"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}
            ],
        },
    }
    if admitted:
        assignment = {"name": "main", "count": 1, "flavors": {"cpu": "rf"}}
        assignment["resourceUsage"] = {"cpu": "1"}
        when = "2026-01-01T00:00:00Z"
        obj["status"] = {
            "admission": {"clusterQueue": cq, "podSetAssignments": [assignment]},
            "conditions": [
                {"type": t, "status": "True", "reason": t, "lastTransitionTime": when}
                for t in ("QuotaReserved", "Admitted")
            ],
        }
    return obj


def old_gauges(admitter: Admitter, metrics: Metrics, gauged: dict[tuple[str, str], int]) -> None:
    """The walk over every queue and held admission (before the change feeds)."""
    queues = admitter.state.catalogs.catalog().queues
    counts = dict.fromkeys(queues, 0)
    lanes = admitter.state.pending.lanes
    for name in lanes.names():
        counts[name] = len(lanes.lane(name))
    for name, count in counts.items():
        if gauged.get(("pending", name)) != count:
            gauged[("pending", name)] = count
            metrics.pending_workloads.labels(name).set(count)
    held = dict.fromkeys(queues, 0)
    for key in admitter.state.ledger.held():
        admission = admitter.state.ledger.reserved(key) or {}
        cq = str(admission.get("clusterQueue") or "")
        held[cq] = held.get(cq, 0) + 1
    for name, count in held.items():
        if gauged.get(("admitted", name)) != count:
            gauged[("admitted", name)] = count
            metrics.admitted_workloads.labels(name).set(count)


def old_clear(state: ControllerState) -> None:
    """The walk over every ClusterQueue and Cohort object (before the change feed)."""
    _ = {
        (resource, name): None
        for resource in (CLUSTER_QUEUES, COHORTS)
        for name, obj in state.store.objects(resource).items()
        if written_share(obj) is not None
    }


def timed(repeat: int, between: Callable[[int], None], call: Callable[[], object]) -> float:
    times = []
    for i in range(repeat):
        between(i)
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--held", type=int, default=3000)
    parser.add_argument("--waiting", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()

    state = ControllerState()
    kube = FakeKube()

    def put(resource: Any, obj: Obj) -> None:
        state.handler(resource)(None, obj)

    put(RESOURCE_FLAVORS, {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": "rf"}})
    names = [f"cq-{i}" for i in range(args.queues)]
    for i, name in enumerate(names):
        put(CLUSTER_QUEUES, cluster_queue(name, f"cohort-{i % 10}"))
        local = {"name": name, "namespace": name}
        put(
            LOCAL_QUEUES,
            {
                "apiVersion": API,
                "kind": "LocalQueue",
                "metadata": local,
                "spec": {"clusterQueue": name},
            },
        )
    for i in range(args.held):
        put(WORKLOADS, workload(f"held-{i}", names[i % len(names)], True))
    for i in range(args.waiting):
        put(WORKLOADS, workload(f"wait-{i}", names[i % len(names)], False))
    admitter = Admitter(kube, state, Metrics(), EventRecorder(kube, "bench"))
    state.pending.sync()
    catalog = state.catalogs.catalog()
    admitter._gauges(catalog.queues, {})

    finished = {"type": "Finished", "status": "True", "reason": "Succeeded"}

    def change(i: int) -> None:
        """A held Workload finishes and a new one waits: a second of a throttled run."""
        old = state.store.objects(WORKLOADS)[f"{names[i % len(names)]}/held-{i}"]
        new = {**old, "status": {**old["status"], "conditions": [finished]}}
        state.handler(WORKLOADS)(old, new)
        put(WORKLOADS, workload(f"new-{i}", names[(i * 7) % len(names)], False))
        state.pending.sync()

    old_metrics = Metrics()
    gauged: dict[tuple[str, str], int] = {}
    old_gauges(admitter, old_metrics, gauged)
    print(f"queues {args.queues}, held {args.held}, waiting {args.waiting}; us per call, median")
    new = timed(args.repeat, change, lambda: admitter._gauges(catalog.queues, {}))
    old = timed(args.repeat, lambda i: None, lambda: old_gauges(admitter, old_metrics, gauged))
    print(f"  gauges                  old {old:10.0f}   new {new:10.0f}")
    admitter.shares.clear()
    new = timed(args.repeat, lambda i: None, admitter.shares.clear)
    old = timed(args.repeat, lambda i: None, lambda: old_clear(state))
    print(f"  fair-sharing clear      old {old:10.0f}   new {new:10.0f}")
    pending = {key: "waits for quota" for key in state.pending.problems} | {
        entry.key: f"couldn't assign flavors to pod set main: {entry.key}"
        for entry in state.pending.lanes
    }
    admitter.messages.update(pending)  # queued once; each later call compares only
    now = timed(args.repeat, lambda i: None, lambda: admitter.messages.update(pending))
    merge = timed(args.repeat, lambda i: None, lambda: {**state.pending.problems, **pending})
    print(f"  pending messages update {'':14} now {now:10.0f}   (the merge {merge:.0f})")
    ungater = Ungater(kube, state, Metrics())
    held = [f"{names[i % len(names)]}/held-{i}" for i in range(args.repeat, args.held)][:200]
    now = timed(args.repeat, lambda i: None, lambda: [ungater.plan(key) for key in held])
    print(f"  ungater plan x{len(held)} (no pods) {'':3} now {now:10.0f}")
    for task in admitter.messages.describers:
        task.cancel()


if __name__ == "__main__":
    asyncio.run(main())
