"""Property-based tests of the pure placement core, on small random clusters.

Every expectation here is computed independently, in plain Python over the generated
``NodeInfo``/``PodUsage`` records: per-node free capacity, eligibility (ready, schedulable,
blocking taints tolerated) and per-domain capacities. The core is only ever called via
``tests.kit.run``.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kit import BLOCK, GPU, HOST, L2, L3, RACK, node, podset, run, running
from topogate.admission.request import Mode, PlacementDecision, PodSetRequest
from topogate.api.podspec import Taint, Toleration
from topogate.cache.nodes import NodeInfo, PodUsage

# Seconds of wall time the exact pass never needs on these small shapes.
UNLIMITED = 60.0

PODS = "pods"
BLOCKING = ("NoSchedule", "NoExecute")

TAINTS = (
    Taint("dedicated", "gpu", "NoSchedule"),
    Taint("dedicated", "cpu", "NoSchedule"),
    Taint("spot", "", "NoExecute"),
    Taint("soft", "", "PreferNoSchedule"),  # never blocks
)
TOLERATIONS = (
    Toleration("dedicated", "Equal", "gpu", "NoSchedule"),
    Toleration("dedicated", "Exists", "", ""),
    Toleration("spot", "Exists", "", "NoExecute"),
    Toleration("spot", "Exists", "", "NoSchedule"),  # wrong effect: tolerates nothing here
)

PROPS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True)
class Cluster:
    levels: tuple[str, ...]
    nodes: tuple[NodeInfo, ...]
    pods: tuple[PodUsage, ...]

    @property
    def by_name(self) -> dict[str, NodeInfo]:
        return {n.name: n for n in self.nodes}

    def path(self, n: NodeInfo, level: int | None = None) -> tuple[str, ...]:
        """The node's label values on levels 0..level (default: all topology levels)."""
        last = len(self.levels) - 1 if level is None else level
        return tuple(n.labels[key] for key in self.levels[: last + 1])


# --- strategies ----------------------------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    levels = draw(st.sampled_from([L3, L2]))
    has_gpu = draw(st.booleans())
    roomy = draw(st.booleans())  # half the clusters have big nodes, so gangs fit and spread
    shape = [
        [draw(st.integers(1, 4)) for _ in range(draw(st.integers(1, 3)))]
        for _ in range(draw(st.integers(1, 3)))
    ]
    total = sum(sum(racks) for racks in shape)
    # Names and hostnames unrelated to the path, so no ordering can lean on them.
    names = draw(st.permutations(range(total)))
    hostnames = draw(st.permutations(range(total)))
    nodes: list[NodeInfo] = []
    pods: list[PodUsage] = []
    i = 0
    for b, racks in enumerate(shape):
        for r, count in enumerate(racks):
            for _ in range(count):
                name = f"node-{names[i]:02d}"
                gpu = draw(st.one_of(st.none(), st.integers(0, 8))) if has_gpu else None
                n = node(
                    name,
                    f"b{b + 1}",
                    f"r{r + 1}",  # rack values repeat across blocks: domains are paths
                    f"h{hostnames[i]:02d}",
                    cpu=draw(st.integers(16 if roomy else 0, 32)) * 250,
                    pods=draw(st.integers(4 if roomy else 1, 10)),
                    gpu=gpu,
                    taints=draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique=True))
                    if draw(st.integers(0, 2)) == 0
                    else (),
                    ready=draw(st.integers(0, 9)) > 0,
                    unschedulable=draw(st.integers(0, 9)) == 0,
                )
                nodes.append(n)
                for j in range(draw(st.integers(0, 2))):
                    use: dict[str, int] = {"cpu": draw(st.integers(0, 12)) * 250}
                    if gpu and draw(st.booleans()):
                        use[GPU] = draw(st.integers(0, gpu))
                    pods.append(running(name, f"{name}-{j}", **use))
                i += 1
    return Cluster(levels, tuple(nodes), tuple(pods))


@st.composite
def podsets(draw: st.DrawFn, levels: Sequence[str], name: str = "main") -> PodSetRequest:
    count = draw(st.sampled_from(range(1, 13)))  # uniform: bigger gangs spread more
    cpu = draw(st.sampled_from([500, 500, 750, 1000, 1000, 1250, 1500, 2000, 2500, 3000, 4000]))
    gpu = draw(st.integers(1, 4)) if draw(st.integers(0, 3)) == 0 else None
    mode = draw(st.sampled_from(list(Mode)))
    level: int | None = draw(st.integers(0, len(levels) - 1))
    if mode is Mode.UNCONSTRAINED and draw(st.booleans()):
        level = None  # what the planner builds for an unconstrained PodSet
    layers: list[tuple[str, int]] = []
    if draw(st.booleans()):
        lowest = 0 if level is None else level
        slice_level = draw(st.integers(lowest, len(levels) - 1))
        size = draw(st.sampled_from([d for d in range(1, count + 1) if count % d == 0]))
        layers.append((levels[slice_level], size))
        if slice_level < len(levels) - 1 and draw(st.booleans()):
            # An inner layer: strictly lower, its size dividing the outer one.
            inner_level = draw(st.integers(slice_level + 1, len(levels) - 1))
            inner = draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
            layers.append((levels[inner_level], inner))
    tolerations = draw(st.lists(st.sampled_from(TOLERATIONS), max_size=3, unique=True))
    request = podset(
        count,
        name,
        cpu=cpu,
        gpu=gpu,
        layers=layers,
        tolerations=tolerations,
    )
    key = None if level is None else levels[level]
    return replace(request, mode=mode, level=key)


@st.composite
def single(draw: st.DrawFn) -> tuple[Cluster, PodSetRequest]:
    cluster = draw(clusters())
    return cluster, draw(podsets(cluster.levels))


@st.composite
def double(draw: st.DrawFn) -> tuple[Cluster, PodSetRequest, PodSetRequest]:
    cluster = draw(clusters())
    return cluster, draw(podsets(cluster.levels, "a")), draw(podsets(cluster.levels, "b"))


# --- an independent model ------------------------------------------------------------------


def tolerates(t: Toleration, taint: Taint) -> bool:
    if t.effect and t.effect != taint.effect:
        return False
    if not t.key:
        return t.operator == "Exists"
    return t.key == taint.key and (t.operator == "Exists" or t.value == taint.value)


def is_eligible(n: NodeInfo, ps: PodSetRequest) -> bool:
    if not n.ready or n.unschedulable:
        return False
    tolerations = ps.constraints.tolerations
    return all(
        any(tolerates(t, taint) for t in tolerations)
        for taint in n.taints
        if taint.effect in BLOCKING
    )


def used_on(cluster: Cluster) -> dict[str, Counter[str]]:
    used: dict[str, Counter[str]] = {n.name: Counter() for n in cluster.nodes}
    for pod in cluster.pods:
        used[pod.node_name].update(pod.requests)
        used[pod.node_name][PODS] += 1
    return used


def per_pod(ps: PodSetRequest) -> dict[str, int]:
    return {**{k: v for k, v in ps.requests.items() if v > 0}, PODS: 1}


def capacity(cluster: Cluster, ps: PodSetRequest) -> dict[str, int]:
    """Pods of ``ps`` that fit on each node on their own (0 where not eligible)."""
    used = used_on(cluster)
    out: dict[str, int] = {}
    for n in cluster.nodes:
        if not is_eligible(n, ps):
            out[n.name] = 0
            continue
        free = {r: max(n.allocatable.get(r, 0) - used[n.name][r], 0) for r in per_pod(ps)}
        out[n.name] = min(free[r] // amount for r, amount in per_pod(ps).items())
    return out


def layer_specs(cluster: Cluster, ps: PodSetRequest) -> list[tuple[int, int]]:
    """[(level index, size)] outermost first; no slices: the lowest level, size 1."""
    if ps.slices:
        return [(cluster.levels.index(layer.level), layer.size) for layer in ps.slices]
    return [(len(cluster.levels) - 1, 1)]


def slices_by_domain(cluster: Cluster, ps: PodSetRequest, level: int) -> dict[tuple[str, ...], int]:
    """Whole outer slices each domain of ``level`` (at or above the outer slice level) can hold.

    Innermost first: a domain of an inner layer offers its pods rounded down to that layer's
    size; the next layer out sums what its inner domains offer.
    """
    caps = capacity(cluster, ps)
    layers = layer_specs(cluster, ps)
    pods: Counter[tuple[str, ...]] = Counter()
    for n in cluster.nodes:
        pods[cluster.path(n, layers[-1][0])] += caps[n.name]
    for (outer_level, _), (_, size) in zip(layers[-2::-1], layers[:0:-1], strict=True):
        rounded: Counter[tuple[str, ...]] = Counter()
        for path, p in pods.items():
            rounded[path[: outer_level + 1]] += p // size * size
        pods = rounded
    outer_size = layers[0][1]
    out: Counter[tuple[str, ...]] = Counter()
    for path, p in pods.items():
        out[path[: level + 1]] += p // outer_size
    return dict(out)


# --- checks --------------------------------------------------------------------------------


def check_valid(cluster: Cluster, podsets_: Sequence[PodSetRequest], d: PlacementDecision) -> None:
    """Property 1: any plan that fits respects capacity, eligibility and its own bookkeeping."""
    assert d.fits, d.message
    assert [p.name for p in d.placements] == [ps.name for ps in podsets_]
    by_name = cluster.by_name
    used = used_on(cluster)
    demand: dict[str, Counter[str]] = {n.name: Counter() for n in cluster.nodes}
    hostname_lowest = cluster.levels[-1] == HOST
    for ps, placement in zip(podsets_, d.placements, strict=True):
        counts = placement.node_counts
        assert sum(counts.values()) == ps.count
        assert sum(dc.count for dc in placement.domains) == ps.count
        assert all(c > 0 for c in counts.values())
        for name, c in counts.items():
            n = by_name[name]
            assert is_eligible(n, ps), (name, n)
            for r, amount in per_pod(ps).items():
                demand[name][r] += c * amount
        # The domains are the node counts rolled up to the lowest topology level, in path order.
        rolled: Counter[tuple[str, ...]] = Counter()
        for name, c in counts.items():
            rolled[cluster.path(by_name[name])] += c
        expected = sorted(rolled.items())
        if hostname_lowest:
            assert placement.levels == (HOST,)
            expected = [((path[-1],), c) for path, c in expected]
        else:
            assert placement.levels == cluster.levels
        assert [(dc.values, dc.count) for dc in placement.domains] == expected
        if not hostname_lowest:
            values = [dc.values for dc in placement.domains]
            assert values == sorted(values)
    for n in cluster.nodes:
        for r, amount in demand[n.name].items():
            assert used[n.name][r] + amount <= n.allocatable.get(r, 0), (n.name, r)


def check_constraint(cluster: Cluster, ps: PodSetRequest, d: PlacementDecision) -> None:
    """Property 2: the requested level and the slices are honoured."""
    placement = next(p for p in d.placements if p.name == ps.name)
    by_name = cluster.by_name
    placed = [(by_name[name], c) for name, c in placement.node_counts.items()]
    for s_level, size in layer_specs(cluster, ps):
        per_domain: Counter[tuple[str, ...]] = Counter()
        for n, c in placed:
            per_domain[cluster.path(n, s_level)] += c
        assert all(c % size == 0 for c in per_domain.values()), (s_level, size, per_domain)
    if ps.mode is Mode.UNCONSTRAINED:
        return
    assert ps.level is not None
    need = ps.count // layer_specs(cluster, ps)[0][1]
    # Required: one domain of the level. Preferred climbs one level at a time: the deepest
    # level (at or above the requested one) with a domain holding every slice gets them all.
    # Either way BestFit takes the tightest such domain (fewest whole slices that suffice).
    for level in range(cluster.levels.index(ps.level), -1, -1):
        room = slices_by_domain(cluster, ps, level)
        if max(room.values()) >= need or ps.mode is Mode.REQUIRED:
            paths = {cluster.path(n, level) for n, _ in placed}
            assert len(paths) == 1, (level, paths)
            assert room[paths.pop()] == min(v for v in room.values() if v >= need), room
            return
    # Preferred, and no single domain anywhere: the top level spreads over the fewest
    # domains (largest first).
    tops = sorted(slices_by_domain(cluster, ps, 0).values(), reverse=True)
    fewest = next(k for k in range(1, len(tops) + 1) if sum(tops[:k]) >= need)
    assert len({cluster.path(n, 0) for n, _ in placed}) == fewest


def after(cluster: Cluster, ps: PodSetRequest, d: PlacementDecision) -> Cluster:
    """The cluster with ``ps``'s placed pods added as running pods (what a later PodSet sees)."""
    placement = next(p for p in d.placements if p.name == ps.name)
    extra = [
        running(name, f"{ps.name}-{name}-{i}", **ps.requests)
        for name, c in placement.node_counts.items()
        for i in range(c)
    ]
    return replace(cluster, pods=cluster.pods + tuple(extra))


def expected_fit(cluster: Cluster, ps: PodSetRequest) -> bool:
    """Property 3's oracle: per-node capacity, whole slices per slice-level domain."""
    need = ps.count // layer_specs(cluster, ps)[0][1]
    if ps.mode is Mode.REQUIRED:
        assert ps.level is not None
        domains = slices_by_domain(cluster, ps, cluster.levels.index(ps.level))
        return max(domains.values()) >= need
    return sum(slices_by_domain(cluster, ps, 0).values()) >= need


Layout = list[tuple[str, tuple[str, ...], list[tuple[tuple[str, ...], int]], dict[str, int]]]


def outcome(d: PlacementDecision) -> tuple[bool, str, str | None, object]:
    return d.fits, d.message, d.podset, d.exclusions


def layout(d: PlacementDecision) -> Layout:
    return [
        (p.name, p.levels, [(dc.values, dc.count) for dc in p.domains], dict(p.node_counts))
        for p in d.placements
    ]


def summary(d: PlacementDecision) -> tuple[object, Layout]:
    return outcome(d), layout(d)


# --- properties ----------------------------------------------------------------------------


@PROPS
@given(single())
def test_single_podset_valid_honoured_and_complete(case: tuple[Cluster, PodSetRequest]) -> None:
    cluster, ps = case
    # The greedy pass (Kueue's) is what check_constraint specifies; the exact second pass may
    # move a preferred PodSet onto fewer domains (tests/test_exact_levels.py), validly.
    d = run(cluster.nodes, cluster.levels, ps, pods=cluster.pods, exact_budget=0)
    assert d.fits == expected_fit(cluster, ps), (d.message, capacity(cluster, ps))
    if d.fits:
        check_valid(cluster, [ps], d)
        check_constraint(cluster, ps, d)
    else:
        assert d.placements == ()
        assert d.message
        assert d.podset == ps.name
    second = run(cluster.nodes, cluster.levels, ps, pods=cluster.pods)
    assert second.fits == d.fits
    if second.fits:
        check_valid(cluster, [ps], second)
    if ps.mode is not Mode.PREFERRED or second.produced_by == "greedy":
        assert summary(second) == summary(d)


@PROPS
@given(single(), st.randoms(use_true_random=False))
def test_node_order_does_not_matter(
    case: tuple[Cluster, PodSetRequest], rnd: random.Random
) -> None:
    cluster, ps = case
    nodes, pods = list(cluster.nodes), list(cluster.pods)
    rnd.shuffle(nodes)
    rnd.shuffle(pods)
    # Both passes, each on its own: the greedy one (Kueue's), and the exact one at a budget
    # no shape here runs out of. At the production budget (wall time) one run may finish the
    # exact pass and the other not on a loaded machine, which is load, not node order.
    for budget in (0, UNLIMITED):
        first = run(cluster.nodes, cluster.levels, ps, pods=cluster.pods, exact_budget=budget)
        second = run(nodes, cluster.levels, ps, pods=pods, exact_budget=budget)
        assert summary(first) == summary(second), f"exact_budget={budget}"


@PROPS
@given(double(), st.randoms(use_true_random=False))
def test_two_podsets_all_or_nothing(
    case: tuple[Cluster, PodSetRequest, PodSetRequest], rnd: random.Random
) -> None:
    cluster, a, b = case
    # This specifies the greedy pass (Kueue's): the exact second pass may fit what it misses
    # (tests/test_exact.py).
    d = run(cluster.nodes, cluster.levels, a, b, pods=cluster.pods, exact_budget=0)
    alone = run(cluster.nodes, cluster.levels, a, pods=cluster.pods, exact_budget=0)
    if alone.fits:
        # The second PodSet sees the first one's pods; it fits iff the oracle says so there.
        rest = after(cluster, a, alone)
        assert d.fits == expected_fit(rest, b), d.message
    else:
        assert not d.fits
    if d.fits:
        check_valid(cluster, [a, b], d)
        check_constraint(cluster, a, d)
        check_constraint(rest, b, d)
        # Earlier PodSets take capacity first: the first is placed as if alone.
        assert layout(alone) == layout(d)[:1]
    else:
        # All or nothing: no placement at all, and a message naming the PodSet and reason.
        assert d.placements == ()
        assert d.message
        assert d.podset == (b.name if alone.fits else a.name)
        if not alone.fits:
            assert outcome(alone) == outcome(d)
    nodes = list(cluster.nodes)
    rnd.shuffle(nodes)
    shuffled = run(nodes, cluster.levels, a, b, pods=cluster.pods, exact_budget=0)
    assert summary(shuffled) == summary(d)


def test_rack_values_repeat_across_blocks() -> None:
    """Sanity of the model: rack r1 of b1 and rack r1 of b2 are two domains."""
    nodes = [node("n1", "b1", "r1", "h1", cpu=1000), node("n2", "b2", "r1", "h2", cpu=1000)]
    cluster = Cluster(L3, tuple(nodes), ())
    ps = podset(2, cpu=1000, required=RACK)
    assert not expected_fit(cluster, ps)
    assert not run(nodes, L3, ps).fits
    assert run(nodes, L3, podset(2, cpu=1000, preferred=RACK)).fits
    assert expected_fit(cluster, podset(2, cpu=1000, required=BLOCK)) is False


def test_count_not_multiple_of_slice_size_is_refused() -> None:
    nodes = [node(f"n{i}", "b1", "r1", f"h{i}", cpu=4000) for i in range(3)]
    d = run(nodes, L3, podset(5, cpu=1000, slice=(RACK, 2)))
    assert not d.fits
    assert d.message == "pod count 5 is not a multiple of the slice size 2"
