"""The capacity snapshot and domain trees are built before the first Workload needs them:
when `serve`'s caches sync (before it reports ready), and again in the admitter's loop when
nodes change while no Workload waits, so the first admission does not pay for building them
(issue #25 item 6: about 2 s at 100,000 nodes)."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import pytest

from topogate.controllers import admitter as admitter_module
from topogate.controllers.admitter import Admitter
from topogate.kube.events import EventRecorder
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    NODES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
    Obj,
    Resource,
)
from topogate.metrics import Metrics
from topogate.state import ControllerState
from topogate.testing.fakekube import FakeKube

RACK, HOST = "topology/rack", "kubernetes.io/hostname"
API = "topogate.dev/v1alpha1"


def node(name: str, rack: str) -> Obj:
    resources = {"cpu": "8", "memory": "64Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {RACK: rack, HOST: name, "pool": "a"}},
        "status": {
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def queue_objects() -> list[tuple[Resource, Obj]]:
    quota = [{"name": "cpu", "nominalQuota": "64"}]
    group = {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": quota}]}
    return [
        (
            TOPOLOGIES,
            {
                "apiVersion": API,
                "kind": "Topology",
                "metadata": {"name": "t"},
                "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": HOST}]},
            },
        ),
        (
            RESOURCE_FLAVORS,
            {
                "apiVersion": API,
                "kind": "ResourceFlavor",
                "metadata": {"name": "f"},
                "spec": {"nodeLabels": {"pool": "a"}, "topologyName": "t"},
            },
        ),
        (
            CLUSTER_QUEUES,
            {
                "apiVersion": API,
                "kind": "ClusterQueue",
                "metadata": {"name": "cq"},
                "spec": {"namespaceSelector": {}, "resourceGroups": [group]},
            },
        ),
        (
            LOCAL_QUEUES,
            {
                "apiVersion": API,
                "kind": "LocalQueue",
                "metadata": {"name": "q", "namespace": "ml"},
                "spec": {"clusterQueue": "cq"},
            },
        ),
    ]


def workload(name: str, pods: int) -> Obj:
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "4"}}}
    annotations = {"kueue.x-k8s.io/podset-required-topology": RACK}
    return {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "resourceVersion": "1",
        },
        "spec": {
            "queueName": "q",
            "podSets": [
                {
                    "name": "main",
                    "count": pods,
                    "template": {
                        "metadata": {"annotations": annotations},
                        "spec": {"containers": [container]},
                    },
                }
            ],
        },
    }


def synced(nodes: int = 8) -> tuple[ControllerState, FakeKube, Admitter]:
    """The state as serve holds it when its caches synced: nodes and queues, no Workload."""
    state, kube = ControllerState(), FakeKube()
    for i in range(nodes):
        state.handler(NODES)(None, node(f"n{i}", f"r{i // 4}"))
    for resource, obj in queue_objects():
        state.handler(resource)(None, obj)
    return state, kube, Admitter(kube, state, Metrics(), EventRecorder(kube, "test"))


def trees(state: ControllerState) -> list[Any]:
    """The domain trees the catalog's topology sources hold (built for some snapshot)."""
    sources = state.catalogs.catalog().sources.values()
    return [tree for source in sources for (_, _, tree) in source._trees.values()]


def capacity_rebuilds(state: ControllerState) -> int:
    return int(state.ledger._capacity.rebuilds)


def capacity_builds(state: ControllerState) -> int:
    """Times the rows were built for new nodes: rebuilt, or patched for a few changed ones."""
    return int(state.ledger._capacity.rebuilds + state.ledger._capacity.patches)


async def test_the_warm_up_builds_what_the_first_cycle_reads() -> None:
    state, kube, admitter = synced()
    assert not state.ledger.snapshot_built() and trees(state) == []
    admitter.warm()
    assert state.ledger.snapshot_built() and not admitter.warm_needed()
    (tree,) = trees(state)
    assert capacity_rebuilds(state) == 1

    # The first Workload's cycle reads them as built: no rebuild, the same tree.
    obj = workload("w", 4)
    kube.seed(WORKLOADS, obj)
    state.handler(WORKLOADS)(None, obj)
    admitter.decide()
    assert state.ledger.reserved("ml/w") is not None
    assert capacity_rebuilds(state) == 1
    assert trees(state) == [tree]
    await admitter.settle()


async def test_a_node_change_while_nothing_waits_is_built_again_at_most_so_often(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, kube, admitter = synced()
    admitter.warm()
    (old_tree,) = trees(state)

    state.handler(NODES)(node("n0", "r0"), node("n0", "r9"))  # relabelled: new rows and tree
    assert not state.ledger.snapshot_built() and admitter.warm_needed()
    monkeypatch.setattr(admitter, "_warm_next", 0.0)  # due
    admitter.decide()  # the cycle the node's change wakes; nothing waits
    assert state.ledger.snapshot_built() and not admitter.warm_needed()
    assert capacity_builds(state) == 2
    (new_tree,) = trees(state)
    assert new_tree is not old_tree and "r9" in new_tree.value_table[0]

    # Another change right after: not built again before its time, but owed.
    state.handler(NODES)(None, node("n99", "r9"))
    admitter.decide()
    assert not state.ledger.snapshot_built() and admitter.warm_owed
    assert capacity_builds(state) == 2

    # A Workload's cycle builds them first: nothing is owed any more (the loop's timer
    # must not fire again and again for a warm-up that is not needed).
    obj = workload("w", 4)
    kube.seed(WORKLOADS, obj)
    state.handler(WORKLOADS)(None, obj)
    admitter.decide()
    assert state.ledger.snapshot_built() and not admitter.warm_owed
    await admitter.settle()


async def test_the_loop_wakes_for_an_owed_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admitter_module, "WARM_GAP_MIN", 0.2)
    state, _, admitter = synced()
    admitter.warm()
    state.handler(NODES)(None, node("n99", "r9"))
    loop = asyncio.create_task(admitter.run())
    try:
        state.signals.admit()
        deadline = time.monotonic() + 5
        while not state.ledger.snapshot_built():  # no event comes: the loop's own timer
            assert time.monotonic() < deadline, "the owed warm-up never ran"
            await asyncio.sleep(0.02)
        assert admitter.warmups == 2 and not admitter.warm_owed
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


async def test_serve_reports_ready_only_with_the_snapshot_built() -> None:
    from topogate.runtime.serve import Controller, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    kube = FakeKube()
    for i in range(8):
        kube.seed(NODES, node(f"n{i}", f"r{i // 4}"))
    for resource, obj in queue_objects():
        kube.seed(resource, obj)
    controller = Controller(parser.parse_args([]), kube, "test")
    readiness: list[tuple[bool, str]] = []
    built_when_ready: list[bool] = []
    stop = asyncio.Event()
    running = asyncio.create_task(controller.run(stop))
    try:
        deadline = time.monotonic() + 10
        while True:
            ready = controller.ready()
            readiness.append(ready)
            if ready[0]:
                built_when_ready.append(controller.state.ledger.snapshot_built())
                break
            assert time.monotonic() < deadline, f"never ready: {ready[1]}"
            await asyncio.sleep(0)
        assert built_when_ready == [True]
        assert trees(controller.state) != []
        assert controller.healthy() == (True, "ok")  # the finished warm-up is no failure
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
        await controller.close()
