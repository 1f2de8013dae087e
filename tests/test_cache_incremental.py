"""The capacity cache's incremental snapshots equal a rebuild from scratch, whatever happened."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import cache_steps
from tests.cache_steps import SNAPSHOT, usage_steps
from tests.kit import GPU, node, running
from topogate.cache.nodes import NodeInfo
from topogate.cache.snapshot import CapacityCache, ClusterSnapshot
from topogate.cache.sources import TopologySource

NAMES = [f"n{i}" for i in range(5)]
op = st.one_of(
    st.tuples(st.just("node"), st.sampled_from(NAMES), st.integers(1, 16), st.booleans()),
    *usage_steps(
        NAMES,
        st.tuples(st.integers(0, 4), st.sampled_from([GPU, "example.com/fpga"])).map(
            lambda amount_of: {amount_of[1]: amount_of[0]}
        ),
    ),
    SNAPSHOT,
)


def make_node(step: tuple[Any, ...]) -> NodeInfo:
    _, name, gpus, ready = step
    return node(name, "b", "r", name, gpu=gpus, cpu=4000, ready=ready)


def apply(cache: CapacityCache, step: tuple[Any, ...]) -> None:
    cache_steps.apply(cache, step, make_node)


def same(a: ClusterSnapshot, b: ClusterSnapshot) -> None:
    assert a.node_names == b.node_names
    columns = sorted(set(a.resources) | set(b.resources))
    for name in columns:  # column order may differ; a column all zero may exist in one only
        left = a.used[:, a.resource_index[name]] if name in a.resource_index else 0
        right = b.used[:, b.resource_index[name]] if name in b.resource_index else 0
        shape = (a.node_count,)
        assert np.array_equal(np.broadcast_to(left, shape), np.broadcast_to(right, shape)), name
    assert np.array_equal(a.ready, b.ready)
    assert dict(a.gpu.taken) == dict(b.gpu.taken)


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=40))
def test_an_incremental_snapshot_equals_a_rebuild(steps: list[tuple[Any, ...]]) -> None:
    cache = CapacityCache()
    for done, step in enumerate(steps, 1):
        apply(cache, step)
        fresh = CapacityCache()
        for earlier in steps[:done]:
            apply(fresh, earlier)
        fresh._invalidate()  # a rebuild from the dicts
        same(cache.snapshot(), fresh.snapshot())


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=40), st.sampled_from([3, 1 << 16]))
def test_events_held_back_between_snapshots_add_up_to_a_rebuild(
    steps: list[tuple[Any, ...]], limit: int
) -> None:
    """Pod usage is noted and added when the next snapshot is taken (or when ``limit``
    deltas wait): many events between two snapshots, a snapshot handed out before them
    unchanged, and the result equal to a rebuild."""
    import topogate.cache.snapshot as module

    saved, module.PENDING_LIMIT = module.PENDING_LIMIT, limit
    try:
        cache = CapacityCache()
        handed: list[tuple[ClusterSnapshot, np.ndarray]] = []
        for step in steps:
            apply(cache, step)
            if step[0] == "snapshot":
                taken = cache.snapshot()
                handed.append((taken, taken.used.copy()))
        fresh = CapacityCache()
        for step in steps:
            apply(fresh, step)
        fresh._invalidate()
        same(cache.snapshot(), fresh.snapshot())
        for taken, before in handed:
            assert np.array_equal(taken.used, before)
    finally:
        module.PENDING_LIMIT = saved


def test_a_snapshot_handed_out_never_changes() -> None:
    cache = CapacityCache()
    cache.upsert_node(node("a", "b", "r", "a", gpu=8))
    first = cache.snapshot()
    before = first.used.copy()
    cache.upsert_pod(running("a", "p", **{GPU: 4}), "p")
    cache.set_workload_usage("w", {"a": {GPU: 2}})
    assert np.array_equal(first.used, before)
    assert cache.snapshot().used[0, cache.snapshot().resource_index[GPU]] == 6
    assert cache.rebuilds == 1  # the pod and the workload were applied in place


def test_a_node_change_patches_its_row_without_a_rebuild(monkeypatch: Any) -> None:
    cache = CapacityCache()
    cache.upsert_node(node("a", "b", "r", "a", gpu=8))
    cache.snapshot()
    cache.upsert_node(node("a", "b", "r", "a", gpu=8))  # the same: nothing to do
    cache.snapshot()
    assert cache.rebuilds == 1 and cache.patches == 0
    changed: NodeInfo = node("a", "b", "r2", "a", gpu=8)
    cache.upsert_node(changed)
    column = cache.snapshot().label("cloud.com/topology-rack")
    assert [column.values[c] for c in column.codes] == ["r2"]
    assert cache.rebuilds == 1 and cache.patches == 1


def test_a_topology_tree_is_built_again_only_when_the_nodes_change() -> None:
    """A cycle runs on a new snapshot after every admission: its tree is the last one while
    only usage changed, and a new one once a node's labels did."""
    source = TopologySource(
        "t", "labels", ("cloud.com/topology-block", "cloud.com/topology-rack"), (1, 2)
    )
    cache = CapacityCache()
    cache.upsert_node(node("a", "b", "r", "a", gpu=8))
    cache.upsert_node(node("c", "b", "r", "c", gpu=8))
    first = source.tree(cache.snapshot())
    cache.set_workload_usage("w", {"a": {GPU: 2}})
    assert source.tree(cache.snapshot()) is first
    assert source.tree(cache.snapshot(), {"x": "y"}) is not first  # another filter, its own
    cache.upsert_node(node("c", "b", "r2", "c", gpu=8))
    second = source.tree(cache.snapshot())
    assert second is not first
    assert second.value_table[1] == ["r", "r2"]
