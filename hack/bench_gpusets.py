"""Benchmark of exact GPU-set selection (admission/gpusets.py); prints figures.

    .venv/bin/python hack/bench_gpusets.py

For 8, 16 and 72 GPUs: random measured-looking matrices (a few bandwidth classes plus noise,
so ties are rare: the hard case for the bounds) and structured ones (NVSwitch boards: all links
equal; a 72-GPU domain of 18 trays x 4 with faster links inside a tray, a harder shape than the
uniform ``nvlink-72`` profile), with 75% of the GPUs free, for several request sizes k. Then
the joint choice for several pods of one job on one node (group, then split into pods).
Targets per selection: 1 ms (8 GPUs), 10 ms (16), 100 ms (72); the summary compares the worst
time seen for each size with its target.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable

import numpy as np

from topogate.admission.gpusets import best_gpu_set, joint_gpu_sets
from topogate.admission.placement import place
from topogate.admission.request import Mode, PlacementRequest, PodSetRequest
from topogate.api.gpus import profile
from topogate.cache.nodes import NodeInfo, PodUsage
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree
from topogate.clock import exact_budget

TARGET_MS = {8: 1.0, 16: 10.0, 72: 100.0}


def random_matrix(n: int, rng: np.random.Generator) -> np.ndarray:
    classes = np.array([5.0, 16.0, 48.0, 96.0, 300.0])
    values = rng.choice(classes, size=(n, n)) * rng.uniform(0.97, 1.03, size=(n, n))
    return values


def trays(n: int) -> np.ndarray:
    # 4 GPUs per tray at 900 GB/s, 450 GB/s across trays.
    bw = np.full((n, n), 450.0)
    for start in range(0, n, 4):
        bw[start : start + 4, start : start + 4] = 900.0
    return bw


def measure(run: Callable[[], object], runs: int = 7) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def placement(rng: np.random.Generator, nodes: int = 2000) -> None:
    """The core on ``nodes`` 8-GPU nodes (a third each: measured-like, PCIe, NVSwitch), a
    quarter of them with 2 or 4 GPUs already taken, from a fresh snapshot (nothing cached)."""
    measured = tuple(tuple(row) for row in random_matrix(8, rng).tolist())
    matrices = [measured, profile("pcie-numa-8"), profile("nvswitch-8")]
    infos, pods = [], []
    for i in range(nodes):
        name = f"n{i}"
        infos.append(
            NodeInfo(
                name,
                {"rack": f"r{i // 40}", "kubernetes.io/hostname": name},
                {"nvidia.com/gpu": 8, "pods": 110},
                gpu_bandwidth=matrices[i % 3],
            )
        )
        busy = int(rng.choice([0, 0, 0, 0, 0, 0, 2, 4]))
        if busy:
            taken = frozenset(int(g) for g in rng.choice(8, size=busy, replace=False))
            pods.append(PodUsage(f"ns/p{i}", name, {"nvidia.com/gpu": busy}, gpus=taken))
    print(f"{'pods x GPUs':<12} {'minimum':>8} {'median ms':>10}")
    for count, k in ((500, 2), (200, 4)):
        for minimum in (None, 40.0):
            request = PodSetRequest(
                "main",
                count,
                {"nvidia.com/gpu": k},
                mode=Mode.PREFERRED,
                level="rack",
                gpu_min_bandwidth=minimum,
            )

            times: list[float] = []
            for _ in range(5):
                snapshot = ClusterSnapshot.build(infos, pods)
                tree = DomainTree.from_labels(snapshot, ["rack", "kubernetes.io/hostname"])
                started = time.perf_counter()
                decision = place(
                    tree,
                    snapshot,
                    PlacementRequest("w", (request,)),
                    topology_name="t",
                    exact=exact_budget(),
                )
                times.append(time.perf_counter() - started)
                assert decision.fits, decision.message
            shown = "-" if minimum is None else f"{minimum:g}"
            print(f"{f'{count} x {k}':<12} {shown:>8} {statistics.median(times) * 1000:>10.1f}")


def main() -> None:
    rng = np.random.default_rng(7)
    worst: dict[int, float] = dict.fromkeys(TARGET_MS, 0.0)  # best_gpu_set
    worst_joint: dict[int, float] = dict.fromkeys(TARGET_MS, 0.0)  # joint_gpu_sets
    print("best set of k free GPUs (best_gpu_set)")
    print(f"{'GPUs':>5} {'matrix':<10} {'k':>3} {'median ms':>10} {'worst of 20 ms':>15}")
    for n, ks in ((8, (2, 4, 6)), (16, (2, 4, 8, 12)), (72, (2, 4, 8, 16, 36))):
        for k in ks:
            samples = []
            for _ in range(20):
                matrix = random_matrix(n, rng)
                free = sorted(rng.choice(n, size=max(k, n * 3 // 4), replace=False).tolist())
                samples.append(measure(functools.partial(best_gpu_set, matrix, free, k), runs=3))
            worst[n] = max(worst[n], max(samples))
            print(
                f"{n:>5} {'random':<10} {k:>3} {statistics.median(samples):>10.3f}"
                f" {max(samples):>15.3f}"
            )
        structured = trays(n) if n == 72 else np.full((n, n), 900.0)
        label = "trays72" if n == 72 else "nvswitch"
        for k in ks:
            free = sorted(rng.choice(n, size=max(k, n * 3 // 4), replace=False).tolist())
            ms = measure(functools.partial(best_gpu_set, structured, free, k))
            worst[n] = max(worst[n], ms)
            print(f"{n:>5} {label:<10} {k:>3} {ms:>10.3f} {'':>15}")
    print()
    print("joint sets for several pods of one job on one node (joint_gpu_sets)")
    print(f"{'GPUs':>5} {'matrix':<10} {'pods':<14} {'median ms':>10} {'worst of 10 ms':>15}")
    for n, shapes in ((8, ([2, 2], [2, 2, 2, 2], [4, 4])), (16, ([2] * 8, [4] * 4, [8, 8]))):
        for sizes in shapes:
            samples = []
            for _ in range(10):
                matrix = random_matrix(n, rng)
                samples.append(
                    measure(functools.partial(joint_gpu_sets, matrix, range(n), sizes), runs=3)
                )
            worst_joint[n] = max(worst_joint[n], max(samples))
            label = (
                "x".join(str(s) for s in sizes)
                if len(set(sizes)) > 1
                else (f"{len(sizes)}x{sizes[0]}")
            )
            print(
                f"{n:>5} {'random':<10} {label:<14} {statistics.median(samples):>10.3f}"
                f" {max(samples):>15.3f}"
            )
    print()
    print("placement on 2,000 GPU nodes with matrices (place, counts + tie-break + choice)")
    placement(rng)
    print()
    for n, target in TARGET_MS.items():
        verdict = "ok" if worst[n] <= target else "OVER"
        joint = f", joint split worst {worst_joint[n]:.3f} ms" if worst_joint[n] else ""
        print(
            f"{n:>3} GPUs: best-set worst {worst[n]:8.3f} ms, target {target:g} ms: {verdict}"
            f"{joint}"
        )


if __name__ == "__main__":
    main()
