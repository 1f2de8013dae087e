"""The first admission cycle after the caches sync, in memory: what `serve` spends between a
Workload's arrival and its admission when it is the first one (issue #25 item 6's 1 s target);
prints figures.

    .venv/bin/python hack/bench_first_cycle.py [--nodes 100000] [--profile]

The objects are hack/bench_kwok.py's (8-GPU nodes in blocks of 50 racks of 40 hosts, 3% of the
GPUs held by 2-GPU background pods, its Topology/ResourceFlavor/ClusterQueue/LocalQueue),
slimmed and fed to the controller's state through its watch handlers as serve's reflectors
do. Then, per mode: the 32-pod rack-required Workload arrives and one `Admitter.decide()` runs
(CPU time of the cycle). ``cold``: straight after the caches synced (the cycle builds the
capacity snapshot and the domain trees). ``warm``: `Admitter.warm()` ran when the caches
synced, as serve does, so the cycle finds them built. Each mode in a fresh state; the
warm-up's own time is printed too. --profile prints cProfile's top entries of the cold cycle.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import random
import sys
import time
from pathlib import Path

from topogate.cache.nodes import slim_node, slim_pod
from topogate.controllers.admitter import Admitter
from topogate.kube.events import EventRecorder
from topogate.kube.resources import NODES, PODS, WORKLOADS, Obj
from topogate.metrics import Metrics
from topogate.state import ControllerState
from topogate.testing.fakekube import FakeKube

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kwok import (
    GPU,
    GPUS_PER_NODE,
    JOBS,
    RACK,
    REQUIRED,
    background_pod,
    node,
    node_name,
    queue_objects,
)


def synced_state(nodes: int, busy: float, pod_gpus: int) -> ControllerState:
    """The state as serve holds it once its caches synced (no Workload yet)."""
    state = ControllerState()
    on_node, on_pod = state.handler(NODES), state.handler(PODS)
    for index in range(nodes):
        on_node(None, slim_node(node(index, ready=True)))
    rng = random.Random(0)
    free = [GPUS_PER_NODE] * nodes
    for serial in range(int(nodes * GPUS_PER_NODE * busy) // pod_gpus):
        while True:
            index = rng.randrange(nodes)
            if free[index] >= pod_gpus:
                free[index] -= pod_gpus
                break
        pod = background_pod(f"bg{serial}", node_name(index), pod_gpus)
        pod["metadata"]["uid"] = f"uid-bg{serial}"
        pod["status"] = {"phase": "Running"}
        on_pod(None, slim_pod(pod))
    for resource, obj in queue_objects(nodes * GPUS_PER_NODE):
        state.handler(resource)(None, obj)
    return state


def first_workload(pods: int) -> Obj:
    container = {"name": "c", "image": "x", "resources": {"requests": {GPU: str(GPUS_PER_NODE)}}}
    return {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {
            "name": "first",
            "namespace": JOBS,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "resourceVersion": "1",
        },
        "spec": {
            "queueName": "q",
            "podSets": [
                {
                    "name": "main",
                    "count": pods,
                    "template": {
                        "metadata": {"annotations": {REQUIRED: RACK}},
                        "spec": {"containers": [container]},
                    },
                }
            ],
        },
    }


async def one(args: argparse.Namespace, warm: bool) -> tuple[float, float, int]:
    """(warm-up CPU s, first cycle CPU s, admitted) in a fresh state."""
    state, kube = synced_state(args.nodes, args.busy, args.pod_gpus), FakeKube()
    admitter = Admitter(kube, state, Metrics(), EventRecorder(kube, "bench"))
    warmed = 0.0
    if warm:
        started = time.process_time()
        admitter.warm()
        warmed = time.process_time() - started
    obj = first_workload(args.gang)
    kube.seed(WORKLOADS, obj)
    state.handler(WORKLOADS)(None, obj)
    profiler = cProfile.Profile() if args.profile and not warm else None
    started = time.process_time()
    if profiler is not None:
        profiler.enable()
    admitter.decide()
    if profiler is not None:
        profiler.disable()
    took = time.process_time() - started
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    admitted = sum(1 for key in state.ledger.held() if key.endswith("/first"))
    await admitter.settle()
    return warmed, took, admitted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--busy", type=float, default=0.03)
    parser.add_argument("--pod-gpus", type=int, default=2)
    parser.add_argument("--gang", type=int, default=32)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    for warm in (False, True):
        warmed, took, admitted = asyncio.run(one(args, warm))
        mode = "warm" if warm else "cold"
        extra = f" (warm-up at sync {warmed * 1000:.0f} ms CPU)" if warm else ""
        print(
            f"{args.nodes} nodes, {mode}: first cycle {took * 1000:.0f} ms CPU, "
            f"admitted {admitted}{extra}",
            flush=True,
        )


if __name__ == "__main__":
    main()
