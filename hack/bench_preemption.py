"""Preemption at the scale of Kueue #13148 (about 40 s cycles at ~2k nodes, ~700 victims).

2,000 nodes (5 blocks x 10 racks x 40 hosts, 8 GPUs each) run 700 low-priority workloads of
2 or 3 pods x 8 GPUs (the cluster is full); one high-priority gang of --pods x 8 GPUs that
requires a rack arrives. Printed: the time to choose the victims (candidates, order, the
simulated fits on the snapshot without them), the number of victims and of simulations.

Three paths, all printed by default, on the same 700 candidates: classical (the gang's own
ClusterQueue runs the 700, ``withinClusterQueue: LowerPriority``); fair (``serve
--fair-sharing``: the same queue in a cohort with a second, idle one; the target queue is
chosen by share before every victim, and the fit is found by galloping over the sequence);
fair-reclaim (the 700 run in the second queue, which has no quota and borrows the whole
cluster; the gang's queue reclaims from it, target by share at every victim).

    .venv/bin/python hack/bench_preemption.py [--pods 32] [--repeat 5] [--path all]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time
from collections.abc import Sequence

from topogate.admission.fairpreemption import plan_fair_preemption
from topogate.admission.lanes import PendingWorkload
from topogate.admission.placement import place
from topogate.admission.preemption import Preemption, Running, plan_preemption
from topogate.admission.quota import (
    ANY,
    LOWER_PRIORITY,
    FlavorQuota,
    PreemptionPolicy,
    QueueSpec,
    Usage,
)
from topogate.admission.request import Mode, PlacementDecision, PlacementRequest, PodSetRequest
from topogate.cache.nodes import NodeInfo
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree
from topogate.clock import exact_budget

BLOCK, RACK, HOST = "cloud.com/block", "cloud.com/rack", "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
PerNode = dict[str, dict[str, dict[str, int]]]  # workload -> node -> resource -> amount


def cluster(seed: int) -> tuple[list[NodeInfo], list[Running], PerNode]:
    nodes = [
        NodeInfo(
            f"n{b}-{r}-{h}",
            {BLOCK: f"b{b}", RACK: f"b{b}-r{r}", HOST: f"n{b}-{r}-{h}"},
            {GPU: 8, "pods": 110, "cpu": 96_000},
        )
        for b in range(5)
        for r in range(10)
        for h in range(40)
    ]
    rng = random.Random(seed)
    names = [n.name for n in nodes]
    running: list[Running] = []
    per_node: PerNode = {}
    cursor = 0
    for i in range(700):
        # 2 or 3 pods (2.86 on average): 700 workloads fill the 2,000 nodes.
        pods = min(3 if rng.random() < 0.857 else 2, len(names) - cursor)
        if pods <= 0:
            break
        placed = names[cursor : cursor + pods]
        cursor += pods
        key = f"ml/low-{i}"
        per_node[key] = {n: {GPU: 8, "pods": 1, "cpu": 8_000} for n in placed}
        running.append(
            Running(
                key,
                "team",
                "h100",
                rng.randint(0, 10),
                f"2026-01-01T{i // 60 % 24:02d}:{i % 60:02d}:00Z",
                {GPU: 8 * pods, "cpu": 8_000 * pods},
                nodes=frozenset(placed),
            )
        )
    return nodes, running, per_node


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--path", choices=("classical", "fair", "fair-reclaim", "all"), default="all"
    )
    args = parser.parse_args()
    nodes, running, per_node = cluster(1)
    held: dict[str, dict[str, int]] = {}
    for workload_usage in per_node.values():
        for node, amounts in workload_usage.items():
            slot = held.setdefault(node, {})
            for k, v in amounts.items():
                slot[k] = slot.get(k, 0) + v
    base = ClusterSnapshot.build(nodes, [], held)
    tree = DomainTree.from_labels(base, (BLOCK, RACK, HOST))
    podset = PodSetRequest(
        "main", args.pods, {GPU: 8, "cpu": 8_000}, mode=Mode.REQUIRED, level=RACK
    )
    request = PlacementRequest("ml/urgent", (podset,))
    preemptor = PendingWorkload("ml/urgent", "team", 1000, "2026-01-02T00:00:00Z", request)
    gpus, cpu = sum(r.usage[GPU] for r in running), sum(r.usage["cpu"] for r in running)

    def simulate(flavor: str, removed: Sequence[Running]) -> PlacementDecision | None:
        freed: dict[str, dict[str, int]] = {}
        for victim in removed:
            for node, amounts in per_node[victim.key].items():
                slot = freed.setdefault(node, {})
                for k, v in amounts.items():
                    slot[k] = slot.get(k, 0) + v
        return place(
            tree, base.without_usage(freed), request, topology_name="dc", exact=exact_budget()
        )

    assert not simulate("h100", []).fits  # type: ignore[union-attr]

    def classical() -> Preemption | None:
        quota = FlavorQuota("h100", {GPU: 16_000, "cpu": 16_000_000})  # the cluster, exactly
        queue = QueueSpec("team", "BestEffortFIFO", (quota,))
        usage: Usage = {("team", "h100"): {GPU: gpus, "cpu": cpu}}
        policy = PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY)
        return plan_preemption(preemptor, queue, policy, {"team": queue}, usage, running, simulate)

    # Fair sharing: the same queue in a cohort with a second, idle queue; the target queue is
    # chosen by share before every victim (the gang's own, as the other borrows nothing).
    whole = {GPU: 16_000, "cpu": 16_000_000}
    within = PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY, reclaim_within_cohort=ANY)
    fair_queues = {
        "team": QueueSpec("team", "BestEffortFIFO", (FlavorQuota("h100", whole),), "org", within),
        "other": QueueSpec("other", "BestEffortFIFO", (FlavorQuota("h100", {GPU: 0}),), "org"),
    }
    fair_usage: Usage = {("team", "h100"): {GPU: gpus, "cpu": cpu}}

    def fair() -> Preemption | None:
        queue = fair_queues["team"]
        return plan_fair_preemption(preemptor, queue, fair_queues, fair_usage, running, simulate)

    # Fair sharing, reclaiming: the 700 run in "other" (no quota of its own, borrowing the
    # whole cluster from "team", which is idle); the gang reclaims from "other".
    lent = {
        "team": QueueSpec("team", "BestEffortFIFO", (FlavorQuota("h100", whole),), "org", within),
        "other": QueueSpec("other", "BestEffortFIFO", (FlavorQuota("h100", {GPU: 0}),), "org"),
    }
    lent_running = [dataclasses.replace(r, cluster_queue="other") for r in running]
    lent_usage: Usage = {("other", "h100"): {GPU: gpus, "cpu": cpu}}

    def fair_reclaim() -> Preemption | None:
        return plan_fair_preemption(
            preemptor, lent["team"], lent, lent_usage, lent_running, simulate
        )

    print(
        f"{len(nodes)} nodes, {len(running)} running low-priority workloads, a gang of "
        f"{args.pods} x 8 GPUs requiring a rack"
    )
    paths = {"classical": classical, "fair": fair, "fair-reclaim": fair_reclaim}
    for name in paths if args.path == "all" else (args.path,):
        timings, plan = [], None
        for _ in range(args.repeat):
            started = time.perf_counter()
            plan = paths[name]()
            timings.append(time.perf_counter() - started)
        assert plan is not None, name
        assert plan.decision is not None and plan.decision.fits, (name, plan)
        racks = {n.rsplit("-", 1)[0] for p in plan.decision.placements for n in p.node_counts}
        reasons = sorted({v.reason for v in plan.victims})
        print(
            f"{name}: median {statistics.median(timings) * 1000:.1f} ms over {args.repeat} "
            f"runs (min {min(timings) * 1000:.1f}); {len(plan.victims)} victims "
            f"({', '.join(reasons)}), {plan.placements} simulated placements; "
            f"placed in {sorted(racks)}"
        )


if __name__ == "__main__":
    main()
