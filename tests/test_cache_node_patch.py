"""Node changes are patched into the capacity cache's rows, not rebuilt: the result equals a
rebuild from scratch field by field, snapshots handed out never change, and domain trees are
kept while their label columns are."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import cache_steps
from tests.cache_steps import SNAPSHOT, usage_steps
from tests.kit import GPU, node, running
from topogate.api.gpus import Matrix
from topogate.api.podspec import Taint
from topogate.cache.nodes import NodeInfo
from topogate.cache.snapshot import CapacityCache, ClusterSnapshot
from topogate.cache.sources import TopologySource

BLOCK, RACK, HOST = "cloud.com/topology-block", "cloud.com/topology-rack", "kubernetes.io/hostname"
NAMES = [f"n{i}" for i in range(6)]
TAINTS = [
    (),
    (Taint("health", "bad", "NoSchedule"),),
    (Taint("health", "bad", "NoSchedule"), Taint("gpu", "", "NoExecute")),
]


def matrix(speed: float) -> Matrix:
    return tuple(tuple(speed if i != j else 0.0 for j in range(8)) for i in range(8))


MATRICES: list[Matrix | None] = [None, matrix(100.0), matrix(400.0)]

node_op = st.tuples(
    st.just("node"),
    st.sampled_from(NAMES),
    st.sampled_from(["r0", "r1"]),  # its rack: a domain label
    st.sampled_from([None, "ok", "bad"]),  # a label no topology uses
    st.integers(0, len(TAINTS) - 1),
    st.booleans(),  # ready
    st.booleans(),  # cordoned
    st.sampled_from([4000, 8000]),
    st.sampled_from([0, 8]),
    st.integers(0, len(MATRICES) - 1),
    st.booleans(),  # has a resource no node had (a new column)
)
op = st.one_of(
    node_op,
    node_op,
    *usage_steps(NAMES, st.integers(0, 4).map(lambda amount: {GPU: amount, "cpu": 100})),
    SNAPSHOT,
    SNAPSHOT,
)


def make_node(step: tuple[Any, ...]) -> NodeInfo:
    _, name, rack, health, taints, ready, cordoned, cpu, gpus, gpu_matrix, fpga = step
    info = node(
        name,
        "b",
        rack,
        name,
        cpu=cpu,
        gpu=gpus,
        labels={"health": health} if health else {},
        taints=TAINTS[taints],
        ready=ready,
        unschedulable=cordoned,
        extra={"example.com/fpga": 1} if fpga else None,
    )
    return replace(info, gpu_bandwidth=MATRICES[gpu_matrix])


def apply(cache: CapacityCache, step: tuple[Any, ...]) -> None:
    cache_steps.apply(cache, step, make_node)


def column(s: ClusterSnapshot, matrix_name: str, name: str) -> Any:
    """A resource's column as a vector (zero when the snapshot has no such column)."""
    at = s.resource_index.get(name)
    values: Any = getattr(s, matrix_name)
    return values[:, at] if at is not None else np.zeros(s.node_count, dtype=np.int64)


def identical(a: ClusterSnapshot, b: ClusterSnapshot) -> None:
    """Every field, as the core reads it (codes may be numbered differently)."""
    assert a.node_names == b.node_names
    assert a.node_index == b.node_index == {n: i for i, n in enumerate(a.node_names)}
    assert a.resource_index == {r: i for i, r in enumerate(a.resources)}
    for name in sorted(set(a.resources) | set(b.resources)):
        for part in ("allocatable", "used", "free"):
            assert np.array_equal(column(a, part, name), column(b, part, name)), (part, name)
    assert np.array_equal(a.ready, b.ready)
    assert np.array_equal(a.unschedulable, b.unschedulable)
    assert [a.taint_sets[c] for c in a.taints] == [b.taint_sets[c] for c in b.taints]
    for key in set(a.labels) | set(b.labels):
        left, right = a.label(key), b.label(key)
        assert [left.values[c] if c >= 0 else None for c in left.codes] == [
            right.values[c] if c >= 0 else None for c in right.codes
        ], key
        for code, value in enumerate(left.values):
            assert left.index[value] == code
    for row in range(a.node_count):
        pa, pb = a.gpu.pair(row), b.gpu.pair(row)
        assert (pa is None) == (pb is None), row
        if pa is not None and pb is not None:
            assert np.array_equal(pa, pb), row
    assert dict(a.gpu.taken) == dict(b.gpu.taken)


def rebuilt(steps: list[tuple[Any, ...]]) -> ClusterSnapshot:
    fresh = CapacityCache()
    for step in steps:
        apply(fresh, step)
    fresh._invalidate()  # a rebuild from the dicts
    return fresh.snapshot()


def frozen(s: ClusterSnapshot) -> tuple[Any, ...]:
    """Copies of everything a snapshot holds, to show it never changed."""
    return (
        list(s.node_names),
        dict(s.node_index),
        s.allocatable.copy(),
        s.used.copy(),
        s.ready.copy(),
        s.unschedulable.copy(),
        s.taints.copy(),
        list(s.taint_sets),
        {k: (c.codes.copy(), list(c.values), dict(c.index)) for k, c in s.labels.items()},
        s.gpu.code.copy(),
        len(s.gpu.pairs),
        dict(s.gpu.taken),
    )


def same_frozen(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    for left, right in zip(a, b, strict=True):
        if isinstance(left, np.ndarray):
            assert np.array_equal(left, right)
        elif isinstance(left, dict) and left and isinstance(next(iter(left.values())), tuple):
            assert left.keys() == right.keys()
            for key in left:
                assert np.array_equal(left[key][0], right[key][0])
                assert left[key][1:] == right[key][1:]
        else:
            assert left == right


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=50))
def test_patched_rows_equal_a_rebuild_and_handed_out_snapshots_never_change(
    steps: list[tuple[Any, ...]],
) -> None:
    cache = CapacityCache()
    handed: list[tuple[ClusterSnapshot, tuple[Any, ...]]] = []
    for done, step in enumerate(steps, 1):
        apply(cache, step)
        if step[0] == "snapshot":
            taken = cache.snapshot()
            identical(taken, rebuilt(steps[:done]))
            handed.append((taken, frozen(taken)))
    identical(cache.snapshot(), rebuilt(steps))
    for taken, before in handed:
        same_frozen(frozen(taken), before)


def gpu_node(name: str, rack: str = "r", **changes: Any) -> NodeInfo:
    return replace(node(name, "b", rack, name, cpu=8000, gpu=8), **changes)


def warm_cache(count: int = 8) -> CapacityCache:
    cache = CapacityCache()
    for i in range(count):
        cache.upsert_node(gpu_node(f"n{i}", rack=f"r{i // 4}"))
        cache.upsert_pod(running(f"n{i}", f"p{i}", **{GPU: 2}), f"p{i}")
    cache.set_workload_usage("w", {"n1": {GPU: 4, "pods": 1}})
    cache.snapshot()
    return cache


def test_a_taint_cordon_or_allocatable_change_patches_one_row_and_keeps_the_tree() -> None:
    cache = warm_cache()
    source = TopologySource("t", "labels", (BLOCK, RACK, HOST), (2, 1, 0))
    tree = source.tree(cache.snapshot())
    changes: list[dict[str, Any]] = [
        {"taints": TAINTS[1]},
        {"unschedulable": True},
        {"ready": False},
        {"allocatable": {"cpu": 8000, "pods": 10, GPU: 4}},
        {"labels": {BLOCK: "b", RACK: "r0", HOST: "n1", "health": "bad"}},
    ]
    for change in changes:
        before = cache.snapshot()
        kept = frozen(before)
        cache.upsert_node(replace(cache.node("n1") or gpu_node("n1"), **change))
        after = cache.snapshot()
        assert after is not before
        assert cache.rebuilds == 1  # the first snapshot only
        assert source.tree(after) is tree
        same_frozen(frozen(before), kept)
    assert cache.patches == len(changes)
    snapshot = cache.snapshot()
    row = snapshot.node_index["n1"]
    assert snapshot.taint_sets[snapshot.taints[row]] == TAINTS[1]
    assert snapshot.unschedulable[row] and not snapshot.ready[row]
    assert snapshot.free[row, snapshot.resource_index[GPU]] == 0  # 4 GPUs, 2 + 4 held
    assert cache.built


def test_a_rack_change_or_a_node_added_or_removed_is_patched_and_the_tree_rebuilt() -> None:
    cache = warm_cache()
    source = TopologySource("t", "labels", (BLOCK, RACK, HOST), (2, 1, 0))
    tree = source.tree(cache.snapshot())
    cache.upsert_node(gpu_node("n1", rack="r9"))
    assert not cache.built  # a warm-up (tree) is owed
    moved = source.tree(cache.snapshot())
    assert moved is not tree and cache.built
    assert moved.find(("b", "r9", "n1")) is not None
    cache.upsert_pod(running("n3a", "early", **{GPU: 3}), "early")  # before its node came
    cache.upsert_node(gpu_node("n3a"))
    cache.remove_node("n5")
    snapshot = cache.snapshot()
    assert cache.rebuilds == 1 and cache.patches == 2
    assert "n5" not in snapshot.node_index
    assert snapshot.used[snapshot.node_index["n3a"], snapshot.resource_index[GPU]] == 3
    assert source.tree(snapshot).find(("b", "r", "n3a")) is not None
    steps_state = CapacityCache()
    for info in cache.nodes():
        steps_state.upsert_node(info)
    for i in range(8):
        steps_state.upsert_pod(running(f"n{i}", f"p{i}", **{GPU: 2}), f"p{i}")
    steps_state.upsert_pod(running("n3a", "early", **{GPU: 3}), "early")
    steps_state.set_workload_usage("w", {"n1": {GPU: 4, "pods": 1}})
    identical(snapshot, steps_state.snapshot())


def test_a_new_resource_many_changes_or_stale_tables_rebuild(monkeypatch: Any) -> None:
    import topogate.cache.snapshot as module

    cache = warm_cache()
    cache.upsert_node(gpu_node("n2", allocatable={"cpu": 8000, "example.com/fpga": 2}))
    snapshot = cache.snapshot()
    assert cache.rebuilds == 2 and "example.com/fpga" in snapshot.resource_index
    monkeypatch.setattr(module, "PATCH_LIMIT", 3)
    for i in range(4):
        cache.upsert_node(gpu_node(f"n{i}", taints=TAINTS[1]))
    cache.snapshot()
    assert cache.rebuilds == 3 and cache.patches == 0
    monkeypatch.setattr(module, "APPEND_LIMIT", 1)
    cache.upsert_node(gpu_node("n0", taints=TAINTS[2]))  # a taint set new to the table
    cache.snapshot()
    assert cache.rebuilds == 3 and cache.patches == 1
    cache.upsert_node(gpu_node("n1", labels={"health": "x"}))  # and a label value: two
    snapshot = cache.snapshot()
    assert cache.rebuilds == 4 and cache.patches == 1
    assert snapshot.label("health").values == ["x"]  # the rebuild dropped what none uses


def test_an_added_node_counts_the_pods_bound_to_it_before_it_came() -> None:
    """Pods bound to a node the rows lack are kept per node once a node was added (so the
    next added node needs no look through every pod): kept as they come and go, and looked
    for again once a removed node's pods are strays too."""
    cache = warm_cache()
    cache.upsert_node(gpu_node("n8"))
    cache.snapshot()  # the first added node: every pod looked at once
    cache.upsert_pod(running("n9", "early", **{GPU: 3}), "early")
    cache.upsert_pod(running("n9", "gone", **{GPU: 1}), "gone")
    cache.upsert_pod(None, "gone")
    cache.upsert_node(gpu_node("n9"))
    snapshot = cache.snapshot()
    at = snapshot.resource_index[GPU]
    assert snapshot.used[snapshot.node_index["n9"], at] == 3
    cache.remove_node("n2")  # its pod p2 stays bound to it
    cache.snapshot()
    cache.upsert_node(gpu_node("n2"))
    snapshot = cache.snapshot()
    assert snapshot.used[snapshot.node_index["n2"], at] == 2
    assert cache.rebuilds == 1 and cache.patches == 4
    steps = [*cache.nodes()]
    fresh = CapacityCache()
    for info in steps:
        fresh.upsert_node(info)
    for key, pod in cache._pods.items():
        fresh.upsert_pod(pod, key)
    fresh.set_workload_usage("w", {"n1": {GPU: 4, "pods": 1}})
    identical(snapshot, fresh.snapshot())
