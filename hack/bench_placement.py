"""Benchmark the placement core on generated clusters (prints figures; not a test).

Each size runs in a fresh process so peak RSS is its own. For every size and scenario it
builds the cache snapshot and domain tree from NodeInfo records, then plans gangs:

- ``gpu``: 8-GPU nodes, about 28% of the GPUs busy in 1/2/4/8-GPU chunks (10 or 50 blocks x 50
  racks x 40 hosts); 8-GPU pods, the issue's cases (5,000 pods required block, 1,000 required
  block, 5,000 preferred rack) and an unconstrained one;
- ``kueue-snapshot``: the shape of Kueue's ``BenchmarkTASFlavorSnapshot``
  (pkg/cache/scheduler/tas_flavor_snapshot_bench_test.go): CPU nodes (96 CPU, 384Gi, 110
  pods), 16 nodes a rack, 16 racks a block, a 1-CPU/1Gi non-TAS pod on every node; Kueue's
  benchmark times only the snapshot build, so gangs of half-node pods are added;
- ``kueue-scheduler``: the shape of Kueue's ``BenchmarkSchedulerTAS``
  (pkg/scheduler/scheduler_tas_bench_test.go): 30 resources a node (10 CPU, 100Gi, 28 extended
  resources of 10), blocks of sqrt(N) nodes, 8 node groups, an unconstrained gang of pods at
  50% of a node selecting group 1; the nodes are half used (Kueue's fills them to force
  preemption, which is not placement).

    python hack/bench_placement.py                  # 20,000 and 100,000 nodes
    python hack/bench_placement.py --size 20000     # one size
    python hack/bench_placement.py --kueue          # and Kueue v0.19.0's Go code on the same
                                                    # input, same sitting (builds it once:
                                                    # hack/kueue/placement/build.sh)
    python hack/bench_placement.py --kueue --sittings 3   # median of three, with the spread

With --kueue the figures go to hack/results/issue25-placement/<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topogate.admission.placement import place
from topogate.admission.request import Mode, PlacementDecision, PlacementRequest, PodSetRequest
from topogate.api.podspec import NodeConstraints
from topogate.cache.nodes import NodeInfo, PodUsage
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree
from topogate.clock import exact_budget

BLOCK, RACK, HOST = "cloud.com/topology-block", "cloud.com/topology-rack", "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
GI = 2**30
# Busy GPUs per node, drawn independently: about 28% of all GPUs in use, fragmented.
BUSY = [(0, 0.55), (1, 0.05), (2, 0.10), (4, 0.10), (8, 0.20)]
SHAPES = {20_000: (10, 50, 40), 100_000: (50, 50, 40)}
HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "issue25-placement"
KUEUE_TIMEOUT = 1800  # seconds for one Go run (100,000 nodes, every case, all repeats)


def cluster(
    blocks: int,
    racks: int,
    hosts: int,
    seed: int = 7,
    busy: list[tuple[int, float]] = BUSY,
) -> tuple[list[NodeInfo], list[PodUsage]]:
    """Nodes of 8 GPUs with busy GPUs drawn from ``busy`` ((GPUs, weight) pairs)."""
    rng = random.Random(seed)
    nodes: list[NodeInfo] = []
    pods: list[PodUsage] = []
    choices, weights = zip(*busy, strict=True)
    for b in range(blocks):
        for r in range(racks):
            for h in range(hosts):
                name = f"n-b{b}-r{r}-h{h}"
                nodes.append(
                    NodeInfo(
                        name,
                        {BLOCK: f"b{b}", RACK: f"r{r}", HOST: name},
                        {"cpu": 96_000, "memory": 2**40, "pods": 110, GPU: 8},
                    )
                )
                taken = rng.choices(choices, weights)[0]
                if taken:
                    pods.append(PodUsage(f"ns/{name}", name, {GPU: taken, "cpu": taken * 10_000}))
    return nodes, pods


def workload(count: int, mode: Mode, level: str | None) -> PlacementRequest:
    podset = PodSetRequest(
        "workers", count, {GPU: 8, "cpu": 80_000, "memory": 800 * GI}, mode=mode, level=level
    )
    return PlacementRequest("bench", (podset,))


@dataclass
class Case:
    label: str
    request: PlacementRequest


@dataclass
class Scenario:
    nodes: list[NodeInfo]
    pods: list[PodUsage]
    levels: list[str]
    cases: list[Case]
    describe: str


def _podset(
    count: int,
    requests: dict[str, int],
    mode: Mode,
    level: str | None,
    selector: dict[str, str] | None = None,
) -> PlacementRequest:
    constraints = NodeConstraints(node_selector=selector or {})
    podset = PodSetRequest(
        "workers", count, requests, mode=mode, level=level, constraints=constraints
    )
    return PlacementRequest("bench", (podset,))


def gpu_scenario(size: int) -> Scenario:
    blocks, racks, hosts = SHAPES.get(size, (max(1, size // 2000), 50, 40))
    nodes, pods = cluster(blocks, racks, hosts)
    gpu_pod = {GPU: 8, "cpu": 80_000, "memory": 800 * GI}
    cases = [
        Case("5000 pods x 8 GPU, required block", workload(5000, Mode.REQUIRED, BLOCK)),
        Case("1000 pods x 8 GPU, required block", workload(1000, Mode.REQUIRED, BLOCK)),
        Case("5000 pods x 8 GPU, preferred rack", workload(5000, Mode.PREFERRED, RACK)),
        Case("5000 pods x 8 GPU, unconstrained", _podset(5000, gpu_pod, Mode.UNCONSTRAINED, None)),
    ]
    return Scenario(
        nodes,
        pods,
        [BLOCK, RACK, HOST],
        cases,
        f"gpu: {blocks} blocks x {racks} racks x {hosts} hosts",
    )


def kueue_snapshot_scenario(size: int) -> Scenario:
    """Kueue's BenchmarkTASFlavorSnapshot nodes (16 a rack, 16 racks a block), 1-CPU pods."""
    nodes: list[NodeInfo] = []
    pods: list[PodUsage] = []
    for i in range(size):
        rack = i // 16
        name = f"node-{i}"
        labels = {BLOCK: f"block-{rack // 16}", RACK: f"rack-{rack}", HOST: name}
        nodes.append(NodeInfo(name, labels, {"cpu": 96_000, "memory": 384 * GI, "pods": 110}))
        pods.append(PodUsage(f"default/bg-{i}", name, {"cpu": 1000, "memory": GI}))
    half = {"cpu": 47_000, "memory": 190 * GI}  # two a node beside the background pod
    cases = [
        Case("4000 pods x 47 CPU, required block", _podset(4000, half, Mode.REQUIRED, BLOCK)),
        Case("512 pods x 47 CPU, required block", _podset(512, half, Mode.REQUIRED, BLOCK)),
        Case("4000 pods x 47 CPU, preferred rack", _podset(4000, half, Mode.PREFERRED, RACK)),
    ]
    return Scenario(nodes, pods, [BLOCK, RACK, HOST], cases, "kueue-snapshot: 16 x 16 x N/256")


def kueue_scheduler_scenario(size: int, seed: int = 11) -> Scenario:
    """Kueue's BenchmarkSchedulerTAS nodes (30 resources, sqrt(N) a block, 8 groups), half used."""
    rng = random.Random(seed)
    extended = [f"example.com/res-{r}" for r in range(2, 30)]
    branching = max(int(math.sqrt(size)), 1)
    nodes: list[NodeInfo] = []
    pods: list[PodUsage] = []
    block, index = 0, 0
    for i in range(size):
        index += 1
        if index == branching:
            index, block = 0, block + 1
        name = f"node-{block}-{index}"
        labels = {
            BLOCK: f"b-{block}",
            HOST: name,
            "tas-node": "true",
            "node-group": f"group-{block % 8 + 1}",
        }
        allocatable = {"cpu": 10_000, "memory": 100 * GI, "pods": 110}
        allocatable.update({r: 10 for r in extended})
        nodes.append(NodeInfo(name, labels, allocatable))
        used = rng.randint(0, 10)  # CPUs (and as many of each extended resource) in use
        if used:
            requests = {"cpu": used * 1000, "memory": used * 10 * GI}
            requests.update({r: used for r in extended})
            pods.append(PodUsage(f"default/wl-{i}", name, requests))
    half = {"cpu": 5000, "memory": 50 * GI}
    half.update({r: 5 for r in extended})
    selector = {"node-group": "group-1"}
    count = max(200, size // 50)
    cases = [
        Case(
            f"{count} pods x 50% node, unconstrained, group-1",
            _podset(count, half, Mode.UNCONSTRAINED, None, selector),
        ),
        Case(
            f"{count} pods x 50% node, preferred block, group-1",
            _podset(count, half, Mode.PREFERRED, BLOCK, selector),
        ),
    ]
    return Scenario(
        nodes, pods, [BLOCK, HOST], cases, f"kueue-scheduler: blocks of {branching}, 30 resources"
    )


SCENARIOS: dict[str, Callable[[int], Scenario]] = {
    "gpu": gpu_scenario,
    "kueue-snapshot": kueue_snapshot_scenario,
    "kueue-scheduler": kueue_scheduler_scenario,
}


def answer(decision: PlacementDecision) -> dict[str, Any]:
    if not decision.fits:
        return {"fits": False, "reason": decision.message}
    placed = decision.placements[0]
    return {
        "fits": True,
        "levels": list(placed.levels),
        "domains": sorted([list(d.values), d.count] for d in placed.domains),
        "produced_by": decision.produced_by,
        "exact": str(decision.exact),
    }


def kueue_input(scenario: Scenario, repeats: int) -> dict[str, Any]:
    cases = []
    for case in scenario.cases:
        (podset,) = case.request.podsets
        cases.append(
            {
                "name": case.label,
                "count": podset.count,
                "requests": dict(podset.requests),
                "mode": str(podset.mode),
                "level": podset.level or "",
                "node_selector": dict(podset.constraints.node_selector),
            }
        )
    return {
        "levels": scenario.levels,
        "nodes": [
            {"name": n.name, "labels": n.labels, "allocatable": n.allocatable}
            for n in scenario.nodes
        ],
        "pods": [
            {"name": p.key.split("/")[-1], "node": p.node_name, "requests": p.requests}
            for p in scenario.pods
        ],
        "cases": cases,
        "repeats": repeats,
        "flavor": {"node_labels": {}},
    }


def kueue_binary() -> str:
    script = HERE / "kueue" / "placement" / "build.sh"
    built = subprocess.run([str(script)], capture_output=True, text=True, timeout=3600)
    if built.returncode != 0 or not built.stdout.strip():
        sys.exit(f"bench_placement: {script} failed:\n{built.stderr.strip()}")
    return built.stdout.strip().splitlines()[-1]


def run_kueue(binary: str, scenario: Scenario, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-placement-") as tmp:
        source, target = Path(tmp) / "in.json", Path(tmp) / "out.json"
        source.write_text(json.dumps(kueue_input(scenario, repeats)))
        subprocess.run(
            [binary, "-in", str(source), "-out", str(target)],
            check=True,
            timeout=KUEUE_TIMEOUT,
        )
        result: dict[str, Any] = json.loads(target.read_text())
        return result


def agree(ours: dict[str, Any], theirs: dict[str, Any]) -> str:
    """'same', or what differs (the fit, or the domains and counts)."""
    if ours["fits"] != theirs["fits"]:
        return f"differ: ours fits={ours['fits']}, Kueue's fits={theirs['fits']}"
    if not ours["fits"]:
        return "same (no fit)"
    kueue_domains = sorted([d["values"], d["count"]] for d in theirs.get("domains") or [])
    if ours["domains"] == kueue_domains:
        return "same"
    return f"differ: {len(ours['domains'])} domains here, {len(kueue_domains)} in Kueue's answer"


def run_size(size: int, repeats: int, scenarios: list[str], kueue: str | None) -> dict[str, Any]:
    report: dict[str, Any] = {"size": size, "scenarios": []}
    for name in scenarios:
        scenario = SCENARIOS[name](size)
        nodes, pods = scenario.nodes, scenario.pods
        builds, trees = [], []
        for _ in range(repeats if kueue else 1):
            start = time.perf_counter()
            snapshot = ClusterSnapshot.build(nodes, pods)
            built = time.perf_counter()
            tree = DomainTree.from_labels(snapshot, scenario.levels)
            # The free capacity in the tree's node order, kept with the snapshot (as Kueue's
            # snapshot build computes each leaf's free capacity): counted in the build.
            snapshot.free_rows(tree.nodes)
            treed = time.perf_counter()
            builds.append(1000 * (built - start))
            trees.append(1000 * (treed - built))
        print(f"{len(nodes):,} nodes, {scenario.describe}, {len(pods):,} running pods")
        print(
            f"  snapshot build {statistics.median(builds):8.1f} ms   "
            f"domain tree {statistics.median(trees):8.1f} ms"
        )
        theirs: dict[str, Any] | None = None
        if kueue:
            theirs = run_kueue(kueue, scenario, repeats)
            ours_build = statistics.median(b + t for b, t in zip(builds, trees, strict=True))
            print(
                f"  Kueue snapshot build {theirs['build_ms']:8.1f} ms (CPU "
                f"{theirs['build_cpu_ms']:.1f})   ours (snapshot + tree) / Kueue "
                f"{ours_build / theirs['build_ms']:.2f}x"
            )
        entry: dict[str, Any] = {
            "scenario": name,
            "describe": scenario.describe,
            "nodes": len(nodes),
            "pods": len(pods),
            "build_ms": statistics.median(builds),
            "tree_ms": statistics.median(trees),
            "cases": [],
        }
        if theirs:
            entry["kueue_build_ms"] = theirs["build_ms"]
        for index, case in enumerate(scenario.cases):
            times, cpu_times = [], []
            decision = PlacementDecision(fits=False)
            for _ in range(repeats):
                c0, t0 = time.process_time(), time.perf_counter()
                decision = place(
                    tree, snapshot, case.request, topology_name="bench", exact=exact_budget()
                )
                times.append(1000 * (time.perf_counter() - t0))
                cpu_times.append(1000 * (time.process_time() - c0))
            ours = answer(decision)
            median = statistics.median(times)
            cpu = statistics.median(cpu_times)
            if decision.fits:
                outcome = f"fits on {len(decision.placements[0].domains):,} nodes"
            else:
                outcome = f"no fit: {decision.message[:60]}"
            row: dict[str, Any] = {
                "case": case.label,
                "ms": median,
                "times_ms": times,
                "cpu_ms": cpu,
                "cpu_times_ms": cpu_times,
                "outcome": outcome,
                "exact": ours.get("exact", ""),
            }
            line = (
                f"  plan {case.label:<44} {median:7.1f} ms (min {min(times):6.1f}, {repeats} runs)"
            )
            if theirs:
                kcase = theirs["cases"][index]
                row["kueue_ms"] = kcase["median_ms"]
                row["kueue_times_ms"] = kcase["times_ms"]
                row["ratio"] = median / kcase["median_ms"]
                row["kueue_cpu_ms"] = kcase["cpu_median_ms"]
                row["cpu_ratio"] = cpu / max(kcase["cpu_median_ms"], 1e-3)
                row["answers"] = agree(
                    ours, {"fits": kcase["fits"], "domains": kcase.get("domains")}
                )
                line += (
                    f"  Kueue {kcase['median_ms']:7.1f} ms  {row['ratio']:.2f}x"
                    f"  (CPU {cpu:6.1f} / {kcase['cpu_median_ms']:6.1f} ms"
                    f" = {row['cpu_ratio']:.2f}x)  {row['answers']}"
                )
            else:
                line += f"  {outcome}"
            print(line)
            if theirs and not row["answers"].startswith("same"):
                print(
                    f"    ours: {outcome}; Kueue: {theirs['cases'][index].get('reason') or 'fits'}"
                )
            entry["cases"].append(row)
        report["scenarios"].append(entry)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report["peak_rss_mib"] = peak_mib
    print(f"  peak RSS {peak_mib:,.0f} MiB (this process)")
    return report


def summarise(sittings: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per size, scenario and case: the median over sittings and the spread (min..max)."""
    rows = []
    first = sittings[0]
    for s_index, size_report in enumerate(first):
        for c_index, scenario in enumerate(size_report["scenarios"]):
            for k_index, case in enumerate(scenario["cases"]):
                picked = [s[s_index]["scenarios"][c_index]["cases"][k_index] for s in sittings]
                row = {
                    "size": size_report["size"],
                    "scenario": scenario["scenario"],
                    "case": case["case"],
                    "ms": statistics.median(p["ms"] for p in picked),
                    "ms_spread": [min(p["ms"] for p in picked), max(p["ms"] for p in picked)],
                }
                if "kueue_ms" in case:
                    ratios = [p["ratio"] for p in picked]
                    cpu_ratios = [p["cpu_ratio"] for p in picked]
                    row.update(
                        cpu_ms=statistics.median(p["cpu_ms"] for p in picked),
                        kueue_cpu_ms=statistics.median(p["kueue_cpu_ms"] for p in picked),
                        cpu_ratio=statistics.median(cpu_ratios),
                        cpu_ratio_spread=[min(cpu_ratios), max(cpu_ratios)],
                        kueue_ms=statistics.median(p["kueue_ms"] for p in picked),
                        kueue_ms_spread=[
                            min(p["kueue_ms"] for p in picked),
                            max(p["kueue_ms"] for p in picked),
                        ],
                        ratio=statistics.median(ratios),
                        ratio_spread=[min(ratios), max(ratios)],
                        answers=sorted({p["answers"] for p in picked}),
                    )
                rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, help="nodes; default: 20000 and 100000")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--scenario", action="append", choices=sorted(SCENARIOS), help="default: all"
    )
    parser.add_argument("--kueue", action="store_true", help="time Kueue v0.19.0's Go code too")
    parser.add_argument("--kueue-binary", help=argparse.SUPPRESS)  # set for the child process
    parser.add_argument("--sittings", type=int, default=1, help="with --kueue: repeat and median")
    parser.add_argument("--json", help=argparse.SUPPRESS)  # child: where to write its report
    args = parser.parse_args()
    scenarios = args.scenario or list(SCENARIOS)
    if args.size and not args.kueue:
        run_size(args.size, args.repeats, scenarios, None)
        return
    if args.size and args.kueue_binary:
        report = run_size(args.size, args.repeats, scenarios, args.kueue_binary)
        if args.json:
            Path(args.json).write_text(json.dumps(report))
        return
    binary = kueue_binary() if args.kueue else None
    load_at_start = list(os.getloadavg())
    sizes = [args.size] if args.size else list(SHAPES)
    sittings: list[list[dict[str, Any]]] = []
    for sitting in range(args.sittings if binary else 1):
        if args.sittings > 1:
            print(f"--- sitting {sitting + 1} of {args.sittings}")
        reports = []
        for size in sizes:
            command = [
                sys.executable,
                __file__,
                "--size",
                str(size),
                "--repeats",
                str(args.repeats),
            ]
            for name in scenarios:
                command += ["--scenario", name]
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                if binary:
                    command += ["--kueue", "--kueue-binary", binary, "--json", out.name]
                subprocess.run(command, check=True)
                if binary:
                    reports.append(json.loads(Path(out.name).read_text()))
        sittings.append(reports)
    if not binary:
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = RESULTS / f"{stamp}.json"
    record = {
        "command": " ".join(["python", "hack/bench_placement.py", *sys.argv[1:]]),
        "kueue": "v0.19.0",
        "loadavg_start": load_at_start,  # 1, 5 and 15 minutes: a shared machine
        "loadavg_end": list(os.getloadavg()),
        "cpus": os.cpu_count(),
        "repeats": args.repeats,
        "summary": summarise(sittings),
        "sittings": sittings,
    }
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"\nwrote {path.relative_to(HERE.parent)}")
    for row in record["summary"]:
        if "ratio" in row:
            print(
                f"  {row['size']:>7,} {row['scenario']:<16} {row['case']:<44} "
                f"{row['ms']:7.1f} / {row['kueue_ms']:7.1f} ms = {row['ratio']:.2f}x "
                f"[{row['ratio_spread'][0]:.2f}-{row['ratio_spread'][1]:.2f}]  CPU "
                f"{row['cpu_ms']:6.1f} / {row['kueue_cpu_ms']:6.1f} ms = {row['cpu_ratio']:.2f}x "
                f"[{row['cpu_ratio_spread'][0]:.2f}-{row['cpu_ratio_spread'][1]:.2f}]  "
                f"{', '.join(row['answers'])}"
            )


if __name__ == "__main__":
    main()
