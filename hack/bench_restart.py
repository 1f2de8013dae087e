"""Restart cost: `serve` re-holds every admitted Workload from its status when the watch lists
them, on the event loop that also serves the webhooks and renews the Lease.

A cluster of 4 blocks x 16 racks x 64 hosts (4,096 nodes, 8 GPUs each) and 400 admitted
8-pod Workloads (half assigned per host, half per rack, where pods are spread over the rack's
nodes) are fed to the controller state as the reflectors feed it after a restart. Printed: the
time to apply the 400 Workload events (the loop is blocked that long), and that plus the one
capacity snapshot the first admission cycle builds.

    .venv/bin/python hack/bench_restart.py [--nodes-per-rack 64] [--workloads 400] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from topogate.api.topology_assignment import AssignedDomain, encode
from topogate.kube.resources import NODES, WORKLOADS
from topogate.state import ControllerState

BLOCK, RACK, HOST = "cloud.com/block", "cloud.com/rack", "kubernetes.io/hostname"


def node(name: str, block: int, rack: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {BLOCK: f"b{block}", RACK: f"b{block}-r{rack}", HOST: name},
        },
        "status": {
            "allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def workload(index: int, hosts: list[str], rack: tuple[str, str], per_host: bool) -> dict[str, Any]:
    # As the admitter writes them: Kueue v1beta2 slices, the host alone at a hostname level.
    if per_host:
        levels = [HOST]
        domains = [AssignedDomain((h,), 1) for h in hosts]
    else:
        levels = [BLOCK, RACK]
        domains = [AssignedDomain(rack, len(hosts))]
    template = {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "trainer",
                    "resources": {"requests": {"cpu": "8", "nvidia.com/gpu": "8"}},
                }
            ]
        }
    }
    return {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": f"wl-{index}", "namespace": "ml", "resourceVersion": str(index)},
        "spec": {"podSets": [{"name": "main", "count": len(hosts), "template": template}]},
        "status": {
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "count": len(hosts),
                        "topologyAssignment": encode(levels, domains),
                    }
                ],
            }
        },
    }


def cluster(blocks: int, racks: int, hosts: int) -> list[tuple[str, str, list[str]]]:
    out = []
    for b in range(blocks):
        for r in range(racks):
            names = [f"n-{b}-{r}-{h}" for h in range(hosts)]
            out.append((f"b{b}", f"b{b}-r{r}", names))
    return out


def once(args: argparse.Namespace) -> tuple[float, float, int]:
    state = ControllerState()
    on_node, on_workload = state.handler(NODES), state.handler(WORKLOADS)
    racks = cluster(4, 16, args.nodes_per_rack)
    for block, rack, names in racks:
        b, r = int(block[1:]), int(rack.rsplit("-r", 1)[1])
        for name in names:
            on_node(None, node(name, b, r))
    state.ledger.snapshot()  # the nodes' snapshot exists before the workloads arrive
    objects = []
    for i in range(args.workloads):
        block, rack, names = racks[i % len(racks)]
        start = (i // len(racks)) * 8 % len(names)
        hosts = names[start : start + 8]
        objects.append(workload(i, hosts, (block, rack), per_host=i % 2 == 0))
    started = time.perf_counter()
    for obj in objects:
        on_workload(None, obj)
    applied = time.perf_counter() - started
    snapshot = state.ledger.snapshot()
    with_snapshot = time.perf_counter() - started
    assert len(state.ledger.held()) == args.workloads
    return applied, with_snapshot, snapshot.node_count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes-per-rack", type=int, default=64)
    parser.add_argument("--workloads", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    runs = [once(args) for _ in range(args.repeat)]
    nodes = runs[0][2]
    applied = statistics.median(r[0] for r in runs) * 1000
    total = statistics.median(r[1] for r in runs) * 1000
    print(f"nodes {nodes}, admitted workloads {args.workloads}, median of {args.repeat} runs")
    print(f"re-hold from status (loop blocked):      {applied:8.1f} ms")
    print(f"re-hold + first cycle's snapshot build:   {total:8.1f} ms")


if __name__ == "__main__":
    main()
