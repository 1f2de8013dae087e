"""Steps for the capacity cache's property tests (test_cache_incremental, test_cache_node_patch):
pods, held workloads, GPU assignments, removed nodes and snapshots, as hypothesis strategies and
one applier. Each test brings its own node step (the node patch test varies many more fields)
and its pods' requests."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hypothesis import strategies as st

from tests.kit import GPU, running
from topogate.cache.nodes import NodeInfo, PodUsage
from topogate.cache.snapshot import CapacityCache

Step = tuple[Any, ...]
SNAPSHOT = st.just(("snapshot",))


def usage_steps(
    names: list[str], requests: st.SearchStrategy[Mapping[str, int]]
) -> list[st.SearchStrategy[Step]]:
    """A node removed, a pod (on ``names`` or a node that never comes, asking ``requests``,
    maybe holding a GPU) bound or gone, a workload's usage held or released, its GPUs."""
    return [
        st.tuples(st.just("drop-node"), st.sampled_from(names)),
        st.tuples(
            st.just("pod"),
            st.integers(0, 7),
            st.sampled_from([*names, "ghost"]),
            requests,
            st.booleans(),
        ),
        st.tuples(st.just("drop-pod"), st.integers(0, 7)),
        st.tuples(st.just("hold"), st.integers(0, 3), st.sampled_from(names), st.integers(0, 8)),
        st.tuples(st.just("release"), st.integers(0, 3)),
        st.tuples(st.just("gpus"), st.integers(0, 3), st.sampled_from(names), st.integers(0, 7)),
    ]


def apply(cache: CapacityCache, step: Step, node: Callable[[Step], NodeInfo]) -> None:
    """One step; a ("node", ...) step is upserted as ``node`` makes it."""
    kind = step[0]
    if kind == "node":
        cache.upsert_node(node(step))
    elif kind == "drop-node":
        cache.remove_node(step[1])
    elif kind == "pod":
        _, index, where, requests, holds_gpu = step
        usage = running(where, f"p{index}", **requests)
        gpus = frozenset({index % 4}) if holds_gpu else frozenset()
        cache.upsert_pod(PodUsage(usage.key, where, usage.requests, gpus), f"p{index}")
    elif kind == "drop-pod":
        cache.upsert_pod(None, f"p{step[1]}")
    elif kind == "hold":
        _, index, where, amount = step
        cache.set_workload_usage(f"w{index}", {where: {GPU: amount, "pods": 1}})
    elif kind == "release":
        cache.release_workload(f"w{step[1]}")
    elif kind == "gpus":
        _, index, where, gpu = step
        cache.set_workload_gpus(f"w{index}", {"main": {where: ((gpu,),)}})
    elif kind == "snapshot":
        cache.snapshot()
    else:
        raise ValueError(f"unknown step {step!r}")
