"""The placement core's fast paths give exactly what the plain code they replace gives."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topogate.admission.exact import Regions, per_node_count
from topogate.admission.placement import _lexsort
from topogate.admission.request import DomainCount
from topogate.cache.nodes import NodeInfo, PodUsage
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree

BLOCK, RACK, HOST = "block", "rack", "kubernetes.io/hostname"


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(min_value=0, max_value=60),
    widths=st.lists(st.integers(min_value=1, max_value=2**40), min_size=1, max_size=4),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_lexsort_is_numpys_when_the_first_key_is_unique(
    n: int, widths: list[int], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    keys = [rng.permutation(n).astype(np.int64)]  # the path rank: unique
    keys += [rng.integers(-w, w, n).astype(np.int64) for w in widths]  # some too wide to pack
    assert _lexsort(keys).tolist() == np.lexsort(keys).tolist()


def test_lexsort_falls_back_for_float_keys() -> None:
    keys = [np.array([2, 0, 1]), np.array([0.5, 0.5, -1.0])]
    assert _lexsort(keys).tolist() == np.lexsort(keys).tolist() == [2, 1, 0]


@settings(max_examples=100, deadline=None)
@given(
    rows=st.integers(min_value=1, max_value=30),
    columns=st.integers(min_value=1, max_value=8),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_per_node_count_is_the_minimum_over_requested_columns(
    rows: int, columns: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    free = rng.integers(0, 2**40, (rows, columns)).astype(np.int64)
    request = rng.integers(0, 2**20, columns).astype(np.int64)
    request[rng.random(columns) < 0.3] = 0  # unrequested resources do not count
    used = np.flatnonzero(request > 0)
    got = per_node_count(np.asfortranarray(free), request)
    if used.size:
        assert got.tolist() == np.min(free[:, used] // request[used], axis=1).tolist()
    else:
        assert (got == np.iinfo(np.int32).max).all()


def test_many_domain_counts_equal_the_constructed_ones() -> None:
    values = [("a",), ("b", "c")]
    made = DomainCount.many(values, [3, 4], [0, 7])
    assert made == (DomainCount(("a",), 3, 0), DomainCount(("b", "c"), 4, 7))
    assert hash(made[1]) == hash(DomainCount(("b", "c"), 4, 7))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made[0].count = 5  # type: ignore[misc]
    with pytest.raises(ValueError, match="differ in length"):
        DomainCount.many(values, [3], [0, 7])


def _tree(hostnames: bool) -> tuple[ClusterSnapshot, DomainTree]:
    nodes = []
    for i in range(12):
        labels = {BLOCK: f"b{i % 2}", RACK: f"r{i % 3}"}
        if hostnames:
            labels[HOST] = f"host-{i}"
        nodes.append(NodeInfo(f"node-{11 - i}", labels, {"cpu": 1000 + i, "pods": 10}))
    snapshot = ClusterSnapshot.build(nodes, [PodUsage("ns/p", "node-3", {"cpu": 500})])
    levels = [BLOCK, RACK, HOST] if hostnames else [BLOCK, RACK]
    return snapshot, DomainTree.from_labels(snapshot, levels)


@pytest.mark.parametrize("hostnames", [True, False])
def test_tree_names_paths_and_values_match_one_at_a_time(hostnames: bool) -> None:
    snapshot, tree = _tree(hostnames)
    positions = np.arange(len(tree.nodes))[::-1]
    expected = [snapshot.node_names[int(tree.nodes[p])] for p in positions]
    assert tree.node_names(snapshot.node_names, positions) == expected
    for level in range(tree.depth):
        domains = np.arange(tree.size(level))[::-1]
        assert tree.paths(level, domains) == [tree.path(level, int(d)) for d in domains]
        assert tree.values(level, domains) == [tree.value(level, int(d)) for d in domains]
        assert tree.value_tuples(level, domains) == [(tree.value(level, int(d)),) for d in domains]


def test_free_rows_is_kept_read_only_for_the_same_rows() -> None:
    snapshot, tree = _tree(True)
    rows = snapshot.free_rows(tree.nodes)
    assert rows.tolist() == snapshot.free[tree.nodes].tolist()
    assert snapshot.free_rows(tree.nodes) is rows  # the same tree: kept
    assert not rows.flags.writeable
    other = tree.nodes.copy()
    assert snapshot.free_rows(other) is not rows  # other rows: computed afresh


@pytest.mark.parametrize("hostnames", [True, False])
def test_region_union_is_in_full_path_order(hostnames: bool) -> None:
    _, tree = _tree(hostnames)
    regions = Regions(tree)
    rank = tree.lexrank[tree.node_level][tree.member_domain[tree.node_level]]
    for level in range(tree.depth):
        picked = [(level, d) for d in range(tree.size(level))[::-2]]
        nodes = np.concatenate([regions.nodes(r) for r in picked])
        expected = nodes[np.argsort(rank[nodes], kind="stable")]
        assert regions.union(picked).tolist() == expected.tolist()
    mixed = [(1, 0), (0, 1)]
    nodes = np.concatenate([regions.nodes(r) for r in mixed])
    expected = nodes[np.argsort(rank[nodes], kind="stable")]
    assert regions.union(mixed).tolist() == expected.tolist()
