"""The capacity cache's snapshot refresh after pod churn: incremental against a rebuild.

    .venv/bin/python hack/bench_snapshot.py [--nodes 20000 100000] [--pods-per-node 4]

For each size: nodes in blocks of racks, pods bound to them, admitted workloads holding
usage; then 1% of the pods are replaced (deleted, and as many new ones bound elsewhere) and
the next snapshot is taken. Prints the time to apply the churn (the watch handlers' share:
the events are made before the clock starts),
the snapshot after it, and a full rebuild of the same state (what every change cost before
the cache was incremental), medians of 5 rounds.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from topogate.cache.nodes import NodeInfo, PodUsage
from topogate.cache.snapshot import CapacityCache

LABELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")


def cluster(nodes: int, pods_per_node: int, rng: random.Random) -> tuple[CapacityCache, int]:
    cache = CapacityCache()
    for i in range(nodes):
        name = f"n{i:06d}"
        labels = dict(zip(LABELS, (f"b{i // 4096}", f"r{i // 64}", name), strict=True))
        allocatable = {"cpu": 96_000, "memory": 2**40, "pods": 110, "nvidia.com/gpu": 8}
        cache.upsert_node(NodeInfo(name, labels, allocatable))
    serial = 0
    for i in range(nodes):
        for _ in range(pods_per_node):
            requests = {"cpu": rng.choice([500, 1000, 4000]), "memory": 2**30}
            cache.upsert_pod(PodUsage(f"p{serial}", f"n{i:06d}", requests), f"p{serial}")
            serial += 1
    for w in range(nodes // 64):  # one admitted 8-node gang per rack's worth of nodes
        held = {f"n{(w * 64 + k) % nodes:06d}": {"nvidia.com/gpu": 8, "pods": 1} for k in range(8)}
        cache.set_workload_usage(f"w{w}", held)
    return cache, serial


Event = tuple[PodUsage | None, str]


def churn(serial: int, count: int, pods: int, nodes: int, rng: random.Random) -> list[Event]:
    """The watch events of replacing ``count`` pods: a delete, and a new pod bound elsewhere."""
    events: list[Event] = []
    for _ in range(count):
        events.append((None, f"p{rng.randrange(pods)}"))
        node = f"n{rng.randrange(nodes):06d}"
        events.append((PodUsage(f"p{serial}", node, {"cpu": 1000}), f"p{serial}"))
        serial += 1
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--pods-per-node", type=int, default=4)
    args = parser.parse_args()
    rng = random.Random(7)
    for nodes in args.nodes:
        cache, serial = cluster(nodes, args.pods_per_node, rng)
        cache.snapshot()
        count = serial // 100  # 1% of the pods
        applied, refreshed, rebuilt = [], [], []
        for _ in range(5):
            events = churn(serial, count, serial, nodes, rng)  # made before the clock starts
            serial += count
            started = time.perf_counter()
            for pod, key in events:
                cache.upsert_pod(pod, key)
            applied.append(time.perf_counter() - started)
            started = time.perf_counter()
            cache.snapshot()
            refreshed.append(time.perf_counter() - started)
            cache._invalidate()  # the state as before: a rebuild from the dicts
            started = time.perf_counter()
            cache.snapshot()
            rebuilt.append(time.perf_counter() - started)

        def ms(values: list[float]) -> str:
            return f"{statistics.median(values) * 1000:.1f} ms"

        print(
            f"{nodes:>7} nodes, {serial:>7} pods, 1% churn ({count} pods replaced): "
            f"applied {ms(applied)}, snapshot {ms(refreshed)}; full rebuild {ms(rebuilt)}"
        )


if __name__ == "__main__":
    main()
