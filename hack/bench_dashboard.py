"""How long `serve --dashboard` takes to build its document from the controller's state, and
how large it is: the work done at most once a second, and only after a change.

    .venv/bin/python hack/bench_dashboard.py --blocks 8 --racks 16 --hosts 32 \
        --admitted 2000 --pending 1000
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from topogate.kube.resources import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    NODES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
)
from topogate.runtime.dashboard import document
from topogate.state import ControllerState

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"


def node(name: str, block: str, rack: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {BLOCK: block, RACK: rack, HOST: name, "pool": "g"}},
        "status": {
            "allocatable": {"cpu": "96", "memory": "1Ti", GPU: "8", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def workload(name: str, host: str | None) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"requests": {GPU: "8"}}}
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "queueName": "q",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [container]}},
                    "topologyRequest": {"required": RACK},
                }
            ],
        },
        "status": {},
    }
    if host is None:
        reason = {"type": "QuotaReserved", "status": "False", "message": "does not fit"}
        body["status"]["conditions"] = [reason]
        return body
    body["status"] = {
        "conditions": [{"type": "Admitted", "status": "True"}],
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": 1,
                    "flavors": {GPU: "tas"},
                    "resourceUsage": {GPU: "8"},
                    "topologyAssignment": {
                        "levels": [HOST],
                        "domains": [{"values": [host], "count": 1}],
                    },
                }
            ],
        },
    }
    return body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--racks", type=int, default=16, help="per block")
    parser.add_argument("--hosts", type=int, default=32, help="per rack")
    parser.add_argument("--admitted", type=int, default=2000)
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    state = ControllerState()
    names = []
    for b in range(args.blocks):
        for r in range(args.racks):
            for h in range(args.hosts):
                name = f"n-{b}-{r}-{h}"
                names.append(name)
                state.handler(NODES)(None, node(name, f"b{b}", f"b{b}-r{r}"))
    levels = [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]
    state.handler(TOPOLOGIES)(None, {"metadata": {"name": "dc"}, "spec": {"levels": levels}})
    flavor = {
        "metadata": {"name": "tas"},
        "spec": {"nodeLabels": {"pool": "g"}, "topologyName": "dc"},
    }
    state.handler(RESOURCE_FLAVORS)(None, flavor)
    quota = [{"name": GPU, "nominalQuota": 8 * len(names)}]
    group = {"coveredResources": [GPU], "flavors": [{"name": "tas", "resources": quota}]}
    state.handler(CLUSTER_QUEUES)(
        None, {"metadata": {"name": "cq"}, "spec": {"resourceGroups": [group]}}
    )
    state.handler(LOCAL_QUEUES)(
        None, {"metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}}
    )
    for i in range(args.admitted):
        state.handler(WORKLOADS)(None, workload(f"a{i}", names[i % len(names)]))
    for i in range(args.pending):
        state.handler(WORKLOADS)(None, workload(f"p{i}", None))
    times, size = [], 0
    for _ in range(args.repeat):
        started = time.perf_counter()
        body = json.dumps(document(state, leading=True), separators=(",", ":"))
        times.append(time.perf_counter() - started)
        size = len(body)
    print(
        f"nodes={len(names)} admitted={args.admitted} pending={args.pending}: document built "
        f"and serialised in median {statistics.median(times) * 1000:.0f} ms "
        f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}) over {args.repeat}; "
        f"{size / 1024:.0f} KiB of JSON"
    )


if __name__ == "__main__":
    main()
