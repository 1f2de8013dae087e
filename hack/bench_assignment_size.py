"""Bytes of a TopologyAssignment in the older ``domains`` form and in Kueue v1beta2's ``slices``
(what topogate writes now), and the time to encode and decode it.

A cluster of 100,000 nodes is named after one of several schemes seen in clouds (rotating
node pools, private-DNS IP names, random IDs, GKE pools in sorted order). A 10,000-pod gang, one
pod per node, takes 10,000 of them in topology order (consecutive hosts of the same racks,
every 23rd node skipped as busy). Printed per scheme: the JSON bytes of both forms, the ratio,
the number of slices, the CPU time to encode (the admitter's write) and to decode (what the
ungater, ``status`` and a restart read); then the largest number of nodes (1,000 steps, one pod
each) whose assignment still fits in etcd's 1.5 MiB per object, in each form.

    .venv/bin/python hack/bench_assignment_size.py [--nodes 100000] [--pods 10000] [--repeat 5]
        [--no-limit] [--scheme NAME ...]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from topogate.api.constants import HOSTNAME_LABEL
from topogate.api.topology_assignment import (
    AssignedDomain,
    decode,
    encode,
    encode_domains,
    wire_size,
)

ETCD_LIMIT = 3 * 1024 * 1024 // 2  # 1.5 MiB: etcd's default --max-request-bytes
CEILING = 400_000  # the largest cluster the limit search tries
STEP = 1_000


def _hex_ids(rnd: random.Random, count: int, length: int) -> list[str]:
    """Distinct random hex strings (deterministic for a seed)."""
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        value = f"{rnd.getrandbits(4 * length):0{length}x}"
        if value not in seen:
            seen.add(value)
            out.append(value)
    return out


def rotating_pools(nodes: int, pools: int) -> list[str]:
    """AKS-like names; consecutive nodes are in different pools (the hard case for runs)."""
    rnd = random.Random(pools)
    pool_ids, node_ids = _hex_ids(rnd, pools, 8), _hex_ids(rnd, nodes, 6)
    return [f"aks-np{i % pools:04d}-{pool_ids[i % pools]}-vmss{node_ids[i]}" for i in range(nodes)]


def private_dns(nodes: int) -> list[str]:
    """EKS-like ``ip-a-b-c-d.<region>.compute.internal`` over consecutive addresses."""
    return [
        f"ip-10-{i >> 16 & 255}-{i >> 8 & 255}-{i & 255}.us-west-2.compute.internal"
        for i in range(nodes)
    ]


def random_ids(nodes: int) -> list[str]:
    """On-premises names with nothing shared but the site: ``dc1-<8 random hex>``."""
    return [f"dc1-{h}" for h in _hex_ids(random.Random(1), nodes, 8)]


def gke_sorted(nodes: int) -> list[str]:
    """GKE node pools of 1,000 nodes, in sorted order (pool by pool)."""
    pools = -(-nodes // 1000)
    names = [
        f"gke-train-pool-{i % pools:04d}-{i % pools * 2654435761 & 0xFFFFFFFF:08x}-{i // pools:04x}"
        for i in range(nodes)
    ]
    return sorted(names)


SCHEMES: dict[str, Callable[[int], list[str]]] = {
    "rotating pools (1000)": lambda n: rotating_pools(n, 1000),
    "rotating pools (10)": lambda n: rotating_pools(n, 10),
    "private DNS (EKS)": private_dns,
    "random IDs": random_ids,
    "GKE pools, sorted": gke_sorted,
}


def gang(names: list[str], pods: int) -> list[AssignedDomain]:
    """``pods`` pods, one per node, on consecutive nodes from the middle, every 23rd busy."""
    start = len(names) // 3
    out: list[AssignedDomain] = []
    for i, name in enumerate(names[start:] + names[:start]):
        if i % 23 != 22:
            out.append(AssignedDomain((name,), 1))
        if len(out) == pods:
            break
    return out


def _cpu(fn: Callable[[], object], repeat: int) -> float:
    """Median CPU seconds of a call (CPU, not wall: the wall clock of a shared machine
    counts other processes too)."""
    times = []
    for _ in range(repeat):
        began = time.process_time()
        fn()
        times.append(time.process_time() - began)
    return statistics.median(times)


def one_gang(name: str, names: list[str], pods: int, repeat: int) -> None:
    levels = [HOSTNAME_LABEL]
    domains = gang(names, pods)
    written = encode(levels, domains)
    assert decode(written).domains == tuple(domains)
    old, new = wire_size(encode_domains(levels, domains)), wire_size(written)
    encode_s = _cpu(lambda: encode(levels, domains), repeat)
    decode_s = _cpu(lambda: decode(written), repeat)
    print(
        f"{name:<24} {old:>11,} {new:>11,} {old / new:>6.1f}x {len(written['slices']):>7,}"
        f" {encode_s * 1000:>10.1f} {decode_s * 1000:>10.1f}"
    )


def largest_fit(names: list[str], size: Callable[[list[AssignedDomain]], int]) -> int:
    """The most nodes (in STEP steps, one pod each) whose assignment is within ETCD_LIMIT."""
    low, high = 0, len(names) // STEP  # low fits (0 nodes do); find the last step that fits
    domains = [AssignedDomain((n,), 1) for n in names]
    if size(domains) <= ETCD_LIMIT:
        return len(names)
    while high - low > 1:
        middle = (low + high) // 2
        if size(domains[: middle * STEP]) <= ETCD_LIMIT:
            low = middle
        else:
            high = middle
    return low * STEP


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-limit", action="store_true", help="skip the 1.5 MiB search")
    parser.add_argument("--scheme", action="append", choices=sorted(SCHEMES))
    args = parser.parse_args()
    chosen = args.scheme or list(SCHEMES)
    print(f"{args.pods:,} pods, one per node, on a cluster of {args.nodes:,} nodes")
    print(
        f"{'naming':<24} {'domains B':>11} {'slices B':>11} {'ratio':>7} {'slices':>7}"
        f" {'encode ms':>10} {'decode ms':>10}  (CPU time, median)"
    )
    for name in chosen:
        one_gang(name, SCHEMES[name](args.nodes), args.pods, args.repeat)
    if args.no_limit:
        return
    print(f"\nlargest assignment within 1.5 MiB ({ETCD_LIMIT:,} bytes), one pod per node")
    print(f"{'naming':<24} {'domains':>10} {'slices':>10}")
    for name in chosen:
        names = SCHEMES[name](CEILING)
        old = largest_fit(names, lambda d: wire_size(encode_domains([HOSTNAME_LABEL], d)))
        new = largest_fit(names, lambda d: wire_size(encode([HOSTNAME_LABEL], d)))
        shown = f"{new:>10,}" if new < CEILING else f"{'>' + format(CEILING, ','):>10}"
        print(f"{name:<24} {old:>10,} {shown}")


if __name__ == "__main__":
    main()
