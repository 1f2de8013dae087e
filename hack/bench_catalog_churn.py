"""What the state pays while a thousand queues are created under waiting Workloads, as in
Kueue's large-scale scenario: ClusterQueues and LocalQueues arrive one by one through the
watch handlers while Workloads wait on them, and the pending queue is synced as the admitter
syncs it (a cycle every ~20 ms, here after every ``--per-sync`` queue objects).

Prints the CPU seconds of the catalog builds and of the syncs, and how many Workloads were
translated. Runs against whatever ``topogate`` imports (PYTHONPATH picks another checkout):

    .venv/bin/python hack/bench_catalog_churn.py --queues 1000 --workloads 6000
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import topogate.state.waiting as waiting
from topogate.admission.podsets import translate
from topogate.kube.resources import CLUSTER_QUEUES, LOCAL_QUEUES, RESOURCE_FLAVORS, WORKLOADS
from topogate.state import ControllerState


def workload(name: str, namespace: str, rv: int) -> dict[str, Any]:
    template = {
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]
        }
    }
    return {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv)},
        "spec": {
            "queueName": "lq",
            "podSets": [{"name": "main", "count": 1, "template": template}],
        },
    }


def cluster_queue(i: int) -> dict[str, Any]:
    quota = [{"name": "cpu", "nominalQuota": 100}, {"name": "memory", "nominalQuota": "100Gi"}]
    group = {"coveredResources": ["cpu", "memory"], "flavors": [{"name": "f", "resources": quota}]}
    spec = {"cohort": f"cohort{i % 10}", "resourceGroups": [group], "namespaceSelector": {}}
    return {"metadata": {"name": f"cq{i}", "resourceVersion": str(i)}, "spec": spec}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--workloads", type=int, default=6000)
    parser.add_argument("--per-sync", type=int, default=2, help="queue objects between syncs")
    args = parser.parse_args()

    translated = [0]
    real = translate

    def counting(*a: Any, **k: Any) -> Any:
        translated[0] += 1
        return real(*a, **k)

    vars(waiting)["translate"] = counting  # counted where the pending queue calls it
    state = ControllerState()
    state.handler(RESOURCE_FLAVORS)(None, {"metadata": {"name": "f"}, "spec": {}})
    on_workload = state.handler(WORKLOADS)
    for n in range(args.workloads):
        on_workload(None, workload(f"w{n}", f"ns{n % args.queues}", n))
    state.pending.sync()
    start = translated[0]

    build = sync = 0.0
    syncs = 0
    arrivals = 0
    on_cq, on_lq = state.handler(CLUSTER_QUEUES), state.handler(LOCAL_QUEUES)
    for i in range(args.queues):
        for handler, obj in (
            (on_cq, cluster_queue(i)),
            (
                on_lq,
                {
                    "metadata": {"name": "lq", "namespace": f"ns{i}"},
                    "spec": {"clusterQueue": f"cq{i}"},
                },
            ),
        ):
            handler(None, obj)
            arrivals += 1
            if arrivals % args.per_sync == 0 or i == args.queues - 1:
                t0 = time.process_time()
                state.catalogs.catalog()  # the cycle asks for it first
                t1 = time.process_time()
                state.pending.sync()
                t2 = time.process_time()
                build += t1 - t0
                sync += t2 - t1
                syncs += 1
    lanes = len(state.pending.lanes)
    print(f"queues {args.queues}, workloads {args.workloads}, syncs {syncs}")
    print(f"catalog builds: {build:.2f} s CPU ({1000 * build / syncs:.2f} ms a sync)")
    print(f"pending syncs:  {sync:.2f} s CPU ({1000 * sync / syncs:.2f} ms a sync)")
    print(f"translated: {translated[0] - start} Workloads; in lanes at the end: {lanes}")


if __name__ == "__main__":
    main()
