"""Benchmark of exact GPU-set selection (admission/gpusets.py); prints figures.

    .venv/bin/python hack/bench_gpusets.py

For 8, 16 and 72 GPUs: random measured-looking matrices (a few bandwidth classes plus noise,
so ties are rare) and structured ones (NVSwitch boards: all links equal; a 72-GPU NVLink
domain of 18 trays x 4 GPUs), with 75% of the GPUs free, for several request sizes k.
Targets: 1 ms (8 GPUs), 10 ms (16), 100 ms (72).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from topogate.admission.gpusets import best_gpu_set


def random_matrix(n: int, rng: np.random.Generator) -> np.ndarray:
    classes = np.array([5.0, 16.0, 48.0, 96.0, 300.0])
    values = rng.choice(classes, size=(n, n)) * rng.uniform(0.97, 1.03, size=(n, n))
    return values


def nvlink_domain(n: int) -> np.ndarray:
    # 4 GPUs per tray at 900 GB/s, 450 GB/s across trays through the NVLink switches.
    bw = np.full((n, n), 450.0)
    for start in range(0, n, 4):
        bw[start : start + 4, start : start + 4] = 900.0
    return bw


def measure(matrix: np.ndarray, free: list[int], k: int, runs: int = 7) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        best_gpu_set(matrix, free, k)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    rng = np.random.default_rng(7)
    print(f"{'GPUs':>5} {'matrix':<10} {'k':>3} {'median ms':>10} {'worst of 20 ms':>15}")
    for n, ks in ((8, (2, 4, 6)), (16, (2, 4, 8, 12)), (72, (2, 4, 8, 16, 36))):
        for k in ks:
            samples = []
            for _ in range(20):
                matrix = random_matrix(n, rng)
                free = sorted(rng.choice(n, size=max(k, n * 3 // 4), replace=False).tolist())
                samples.append(measure(matrix, free, k, runs=3))
            print(
                f"{n:>5} {'random':<10} {k:>3} {statistics.median(samples):>10.3f}"
                f" {max(samples):>15.3f}"
            )
        structured = nvlink_domain(n) if n == 72 else np.full((n, n), 900.0)
        label = "nvlink72" if n == 72 else "nvswitch"
        for k in ks:
            free = sorted(rng.choice(n, size=max(k, n * 3 // 4), replace=False).tolist())
            ms = measure(structured, free, k)
            print(f"{n:>5} {label:<10} {k:>3} {ms:>10.3f} {'':>15}")


if __name__ == "__main__":
    main()
