"""One node changed while Workloads wait: the next snapshot and the placer's domain tree.

    .venv/bin/python hack/bench_node_change.py [--nodes 100000] [--rounds 5]

The cluster is hack/bench_snapshot.py's (nodes in blocks of racks, 4 pods a node, admitted
workloads holding usage). A snapshot and the tree of its block/rack/hostname topology are built
first (a warm `serve`); then, per case, one node changes as a watch event would bring it (a
taint added, allocatable changed, cordoned, a label outside the topology changed, its rack
label changed, a node added, a node removed) and the next snapshot plus the tree over it are
taken. Prints the median per case over ``--rounds`` (each round changes another node), the
cache's full rebuilds over all rounds, and whether the tree was kept.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

from bench_snapshot import LABELS, cluster

from topogate.api.podspec import Taint
from topogate.cache.nodes import NodeInfo
from topogate.cache.snapshot import CapacityCache
from topogate.cache.sources import TopologySource

Change = Callable[[CapacityCache, NodeInfo, int], None]


def taint(cache: CapacityCache, node: NodeInfo, serial: int) -> None:
    cache.upsert_node(replace(node, taints=(Taint("health", f"bad-{serial}", "NoSchedule"),)))


def allocatable(cache: CapacityCache, node: NodeInfo, serial: int) -> None:
    cache.upsert_node(replace(node, allocatable={**node.allocatable, "nvidia.com/gpu": 7}))


def cordon(cache: CapacityCache, node: NodeInfo, serial: int) -> None:
    cache.upsert_node(replace(node, unschedulable=True))


def other_label(cache: CapacityCache, node: NodeInfo, serial: int) -> None:
    cache.upsert_node(replace(node, labels={**node.labels, "example.com/health": f"h{serial}"}))


def rack_label(cache: CapacityCache, node: NodeInfo, serial: int) -> None:
    cache.upsert_node(replace(node, labels={**node.labels, LABELS[1]: f"moved{serial}"}))


def added(cache: CapacityCache, node: NodeInfo, serial: int) -> None:
    name = f"{node.name}-new"
    cache.upsert_node(replace(node, name=name, labels={**node.labels, LABELS[2]: name}))


def removed(cache: CapacityCache, node: NodeInfo, serial: int) -> None:
    cache.remove_node(node.name)


def many(change: Change, count: int) -> Change:
    """``change`` on ``count`` nodes at once (a health check flagging a row of racks, a batch
    of nodes joining)."""

    def changed(cache: CapacityCache, node: NodeInfo, serial: int) -> None:
        nodes = cache.nodes()
        at = nodes.index(node)
        for other in nodes[at : at + count]:
            change(cache, other, serial)

    return changed


CASES: dict[str, Change] = {
    "taint added": taint,
    "allocatable changed": allocatable,
    "cordoned": cordon,
    "other label changed": other_label,
    "rack label changed": rack_label,
    "node added": added,
    "node removed": removed,
    "256 tainted": many(taint, 256),
    "256 added": many(added, 256),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(7)
    for nodes in args.nodes:
        cache, _ = cluster(nodes, 4, rng)
        source = TopologySource("t", "labels", LABELS, (2, 1, 0))
        tree = source.tree(cache.snapshot())
        print(f"{nodes} nodes:")
        for case, change in CASES.items():
            took: list[float] = []
            snaps: list[float] = []
            rebuilds, kept = cache.rebuilds, 0
            for serial in range(args.rounds):
                node = cache.nodes()[rng.randrange(len(cache.nodes()))]
                change(cache, node, serial)
                started = time.perf_counter()
                snapshot = cache.snapshot()
                snaps.append(time.perf_counter() - started)
                fresh = source.tree(snapshot)
                took.append(time.perf_counter() - started)
                kept += fresh is tree
                tree = fresh
            print(
                f"  {case:<20} snapshot {statistics.median(snaps) * 1000:7.1f} ms,"
                f" + tree {statistics.median(took) * 1000:7.1f} ms"
                f"  (rebuilds {cache.rebuilds - rebuilds}/{args.rounds},"
                f" tree kept {kept}/{args.rounds})"
            )


if __name__ == "__main__":
    main()
