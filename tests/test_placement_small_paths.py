"""The placement core's small-array paths and its eligibility kept per tree give exactly what
the plain numpy code and a fresh tree give (property tests against the from-scratch answer)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from topogate.admission import placement
from topogate.admission.placement import _lexsort, place
from topogate.admission.request import (
    Mode,
    PlacementDecision,
    PlacementRequest,
    PodSetRequest,
    SliceLayer,
)
from topogate.api.podspec import NodeConstraints, Taint, Toleration
from topogate.cache.nodes import NodeInfo, PodUsage
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree

BLOCK, RACK, HOST = "block", "rack", "kubernetes.io/hostname"
LEVELS = [BLOCK, RACK, HOST]
TAINT = Taint("health", "bad", "NoSchedule")


@contextmanager
def numpy_only() -> Iterator[None]:
    """Every domain list takes the numpy path (the code the small paths replace)."""
    kept = placement._SMALL
    placement._SMALL = -1
    try:
        yield
    finally:
        placement._SMALL = kept


node_st = st.tuples(
    st.integers(min_value=0, max_value=1),  # block
    st.integers(min_value=0, max_value=2),  # rack in the block
    st.integers(min_value=0, max_value=8),  # free CPUs
    st.sampled_from(["ok", "ok", "ok", "tainted", "not-ready", "cordoned"]),
    st.booleans(),  # labelled fast
)
podset_st = st.tuples(
    st.integers(min_value=1, max_value=12),  # pods
    st.integers(min_value=1, max_value=3),  # CPUs per pod
    st.sampled_from([Mode.REQUIRED, Mode.PREFERRED, Mode.UNCONSTRAINED]),
    st.sampled_from([BLOCK, RACK, None]),
    st.sampled_from([0, 1, 2]),  # slice size at the rack (0: no slices)
    st.booleans(),  # tolerates the taint
    st.booleans(),  # selects fast nodes
    st.booleans(),  # balanced
)


def _snapshot(nodes: list[tuple[int, int, int, str, bool]]) -> ClusterSnapshot:
    infos = []
    for i, (block, rack, _, state, fast) in enumerate(nodes):
        labels = {BLOCK: f"b{block}", RACK: f"r{block}-{rack}", HOST: f"h{i}"}
        if fast:
            labels["speed"] = "fast"
        infos.append(
            NodeInfo(
                f"n{i}",
                labels,
                {"cpu": 8000, "pods": 110},
                taints=(TAINT,) if state == "tainted" else (),
                ready=state != "not-ready",
                unschedulable=state == "cordoned",
            )
        )
    usage = [PodUsage(f"ns/p{i}", f"n{i}", {"cpu": (8 - n[2]) * 1000}) for i, n in enumerate(nodes)]
    return ClusterSnapshot.build(infos, usage)


def _request(
    podsets: list[tuple[int, int, Mode, str | None, int, bool, bool, bool]],
) -> PlacementRequest:
    made = []
    for index, (count, cpus, mode, level, size, tolerates, fast, balanced) in enumerate(podsets):
        slices = (SliceLayer(RACK, size),) if size else ()
        if slices and count % size:
            count = count // size * size or size
        if mode is Mode.UNCONSTRAINED or (slices and level == HOST):
            level = None
        constraints = NodeConstraints(
            tolerations=(Toleration("health", "Equal", "bad", "NoSchedule"),) if tolerates else (),
            node_selector={"speed": "fast"} if fast else {},
        )
        made.append(
            PodSetRequest(
                f"ps{index}",
                count,
                {"cpu": cpus * 1000},
                mode=mode
                if level is not None or mode is Mode.UNCONSTRAINED
                else Mode.UNCONSTRAINED,
                level=level,
                slices=slices,
                constraints=constraints,
                balanced=balanced and mode is Mode.PREFERRED and level is not None,
            )
        )
    return PlacementRequest("ns/w", tuple(made))


def _place(
    tree: DomainTree, snapshot: ClusterSnapshot, request: PlacementRequest
) -> PlacementDecision:
    return place(tree, snapshot, request, topology_name="t")


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.lists(node_st, min_size=1, max_size=40),
    requests=st.lists(st.lists(podset_st, min_size=1, max_size=3), min_size=1, max_size=4),
)
def test_small_paths_and_kept_eligibility_answer_as_the_plain_code(
    nodes: list[tuple[int, int, int, str, bool]],
    requests: list[list[tuple[int, int, Mode, str | None, int, bool, bool, bool]]],
) -> None:
    snapshot = _snapshot(nodes)
    kept_tree = DomainTree.from_labels(snapshot, LEVELS)  # kept across the requests
    for podsets in requests:
        request = _request(podsets)
        got = _place(kept_tree, snapshot, request)
        with numpy_only():
            expected = _place(DomainTree.from_labels(snapshot, LEVELS), snapshot, request)
        assert got == expected
        if got.fits:  # the next request sees this one's usage, as in a cycle
            usage: dict[str, dict[str, int]] = {}
            for placed, podset in zip(got.placements, request.podsets, strict=True):
                for node, pods in placed.node_counts.items():
                    usage.setdefault(node, {})["cpu"] = pods * podset.requests["cpu"]
            snapshot = snapshot.with_usage(usage)


def test_kept_eligibility_follows_a_new_snapshots_node_states() -> None:
    nodes = [(0, 0, 8, "ok", False), (0, 1, 8, "ok", False)]
    before = _snapshot(nodes)
    tree = DomainTree.from_labels(before, LEVELS)
    request = PlacementRequest("ns/w", (PodSetRequest("ps", 2, {"cpu": 4000}),))
    assert _place(tree, before, request).fits
    tainted = [(0, 0, 8, "tainted", False), (0, 1, 8, "not-ready", False)]
    after = _place(tree, _snapshot(tainted), request)
    assert not after.fits
    assert after.exclusions is not None and after.exclusions.not_ready == 1
    assert after.exclusions.taints == {"health=bad:NoSchedule": 1}


def test_a_failures_exclusions_do_not_leak_into_the_next_answer() -> None:
    snapshot = _snapshot([(0, 0, 1, "ok", False), (0, 1, 8, "ok", False)])
    tree = DomainTree.from_labels(snapshot, LEVELS)
    big = PlacementRequest("ns/w", (PodSetRequest("ps", 9, {"cpu": 2000}),))
    first = _place(tree, snapshot, big)
    assert first.exclusions is not None and first.exclusions.resources == {"cpu": 1}
    small = PlacementRequest("ns/w", (PodSetRequest("ps", 9, {"cpu": 1000}),))
    second = _place(tree, snapshot, small)
    fresh = _place(DomainTree.from_labels(snapshot, LEVELS), snapshot, small)
    assert second == fresh
    assert first.exclusions.resources == {"cpu": 1}  # the first answer is not touched either


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(min_value=placement._SMALL + 1, max_value=2_000),
    widths=st.lists(st.integers(min_value=1, max_value=2**40), min_size=1, max_size=4),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_packed_lexsort_on_many_domains_is_numpys(n: int, widths: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = [rng.permutation(n).astype(np.int64)]  # the path rank: unique
    keys += [rng.integers(-w, w, n).astype(np.int64) for w in widths]
    assert _lexsort(keys).tolist() == np.lexsort(keys).tolist()
