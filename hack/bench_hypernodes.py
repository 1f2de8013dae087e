"""HyperNode topologies at size: forest build, tree, placement and label discovery.

A generated cluster: NODES nodes of 8 GPUs, 40 per tier-1 HyperNode (a leaf switch), 10 leaf
switches per tier-2 HyperNode (a spine), one tier-3 HyperNode on top. Prints medians of 5 runs.

    .venv/bin/python hack/bench_hypernodes.py [--nodes 10000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from topogate.admission.placement import place
from topogate.admission.request import Mode, PlacementRequest, PodSetRequest
from topogate.api.hypernodes import HyperNode, parse_hypernode
from topogate.cache.hypernodes import build_forest, discover
from topogate.cache.nodes import NodeInfo
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.sources import TopologySource
from topogate.clock import exact_budget

PER_LEAF, LEAVES_PER_SPINE = 40, 10


def _median_ms(work: Callable[[], Any], runs: int = 5) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = work()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), result


def _hypernode(name: str, tier: int, kind: str, members: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": {
            "tier": tier,
            "members": [{"type": kind, "selector": {"exactMatch": {"name": m}}} for m in members],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=10_000)
    args = parser.parse_args()
    count = args.nodes // PER_LEAF * PER_LEAF
    nodes = [
        NodeInfo(
            f"n{i}",
            labels={
                "kubernetes.io/hostname": f"n{i}",
                "example.com/spine": f"s{i // (PER_LEAF * LEAVES_PER_SPINE)}",
                "example.com/leaf": f"l{i // PER_LEAF}",
            },
            allocatable={"cpu": 96_000, "nvidia.com/gpu": 8, "pods": 110},
        )
        for i in range(count)
    ]
    leaves = count // PER_LEAF
    objects = [
        _hypernode(f"l{j}", 1, "Node", [f"n{i}" for i in range(j * PER_LEAF, (j + 1) * PER_LEAF)])
        for j in range(leaves)
    ]
    spines = (leaves + LEAVES_PER_SPINE - 1) // LEAVES_PER_SPINE
    objects += [
        _hypernode(
            f"s{k}",
            2,
            "HyperNode",
            [f"l{j}" for j in range(k * LEAVES_PER_SPINE, min((k + 1) * LEAVES_PER_SPINE, leaves))],
        )
        for k in range(spines)
    ]
    objects.append(_hypernode("top", 3, "HyperNode", [f"s{k}" for k in range(spines)]))
    print(f"{count} nodes, {len(objects)} HyperNodes (tiers 1-3)")

    parse_ms, hypernodes = _median_ms(lambda: [parse_hypernode(o) for o in objects])
    typed: list[HyperNode] = hypernodes
    forest_ms, forest = _median_ms(lambda: build_forest(typed, nodes))
    assert not forest.problems, forest.problems
    snapshot = ClusterSnapshot.build(nodes, [])
    source = TopologySource.from_forest(forest)
    tree_ms, tree = _median_ms(lambda: source.tree(snapshot))
    pods = PER_LEAF * LEAVES_PER_SPINE // 2  # half a spine: fits in tier 2, not in tier 1
    request = PlacementRequest(
        "bench",
        (
            PodSetRequest(
                "main",
                pods,
                {"nvidia.com/gpu": 8},
                mode=Mode.PREFERRED,
                level=source.level_keys[source.lowest_tier_level()],
                limit=source.level_keys[source.level_for_tier(2) or 0],
            ),
        ),
    )
    place_ms, decision = _median_ms(
        lambda: place(tree, snapshot, request, topology_name="hypernodes", exact=exact_budget())
    )
    assert decision.fits
    labels = ["example.com/spine", "example.com/leaf", "kubernetes.io/hostname"]
    discover_ms, found = _median_ms(lambda: discover(nodes, "bench", labels))
    print(f"parse {len(objects)} HyperNodes:      {parse_ms:8.1f} ms")
    print(f"build the forest:          {forest_ms:8.1f} ms")
    print(f"domain tree from paths:    {tree_ms:8.1f} ms")
    print(f"place {pods} pods (tier 1..2): {place_ms:8.1f} ms")
    print(f"discover from labels:      {discover_ms:8.1f} ms ({len(found)} HyperNodes)")


if __name__ == "__main__":
    main()
