"""The ungater writes each released pod's GPU allocation in the patch that sends it to its node."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from topogate.api import constants as c
from topogate.api.gpus import ALLOCATION_ANNOTATION, ASSIGNMENT_ANNOTATION, GpuAssignment
from topogate.kube.resources import PODS, WORKLOADS
from topogate.metrics import Metrics
from topogate.state import ControllerState
from topogate.testing.fakekube import FakeKube
from topogate.ungater.controller import Ungater
from topogate.ungater.gpus import gpu_allocations, visible_gpus
from topogate.ungater.ranks import Ungate

HOST = "kubernetes.io/hostname"
KEY = "ns/wl"
ADMISSION = {
    "clusterQueue": "q",
    "podSetAssignments": [
        {
            "name": "main",
            "count": 3,
            "topologyAssignment": {
                "levels": [HOST],
                "domains": [{"values": ["n1"], "count": 2}, {"values": ["n2"], "count": 1}],
            },
        }
    ],
}
ASSIGNMENT: GpuAssignment = {"main": {"n1": ((0, 3), (1, 2)), "n2": ((4, 5),)}}


def pod(
    index: int,
    *,
    gated: bool = True,
    node: str | None = None,
    allocation: str | None = None,
    containers: list[int] | None = None,
    phase: str = "Pending",
) -> dict[str, Any]:
    annotations = {c.WORKLOAD_ANNOTATION: "wl"}
    if allocation is not None:
        annotations[ALLOCATION_ANNOTATION] = allocation
    spec: dict[str, Any] = {
        "containers": [
            {"name": f"c{i}", "image": "x", "resources": {"limits": {"nvidia.com/gpu": n}}}
            for i, n in enumerate(containers or [2])
        ]
    }
    if gated:
        spec["schedulingGates"] = [{"name": c.TOPOLOGY_GATE}]
    if node is not None:
        spec["nodeSelector"] = {HOST: node}
    return {
        "metadata": {
            "name": f"wl-{index}",
            "namespace": "ns",
            "uid": f"uid-{index}",
            "labels": {c.PODSET_LABEL: "main", c.JOB_COMPLETION_INDEX: str(index)},
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def patches(kube: FakeKube) -> dict[str, list[dict[str, Any]]]:
    """Each pod's JSON patch, by pod name (every write the ungater made is one)."""
    calls = kube.calls_of("patch")
    assert all(call.resource == "pods" for call in calls)
    return {str(call.name): call.body for call in calls}


def ungater_with(
    pods: list[dict[str, Any]], hold: bool = True, gpus: GpuAssignment = ASSIGNMENT
) -> tuple[Ungater, FakeKube]:
    """An ungater over a state fed as `serve` feeds it. ``hold``: the admitter has just
    assumed the admission (sets held in the capacity cache); otherwise the Workload was
    admitted before a restart and the state re-holds its sets from its annotation."""
    state = ControllerState()
    workload: dict[str, Any] = {
        "metadata": {"name": "wl", "namespace": "ns", "annotations": {}},
        "spec": {},
    }
    if hold:
        state.ledger.assume(KEY, ADMISSION, {}, gpus)
        state.ledger.confirm(KEY)  # written: the ungater acts on it
    else:
        workload["metadata"]["annotations"][ASSIGNMENT_ANNOTATION] = json.dumps(
            {"main": {"n1": [["0", "3"], ["1", "2"]], "n2": [["4", "5"]]}}
        )
        workload["status"] = {"admission": ADMISSION}
    state.handler(WORKLOADS)(None, workload)
    kube = FakeKube()
    for p in pods:
        state.handler(PODS)(None, kube.seed(PODS, p))
    ungater = Ungater(kube, state, Metrics())
    return ungater, kube


def allocation_of(patch: list[dict[str, Any]]) -> dict[str, Any]:
    ops = [op for op in patch if "annotations" in op["path"]]
    assert len(ops) == 1
    op = ops[0]
    assert op["op"] == "add"
    assert op["path"] == "/metadata/annotations/topogate.dev~1gpu-allocation"
    value: dict[str, Any] = json.loads(op["value"])
    return value


def test_each_pod_gets_the_next_set_of_its_node_in_the_same_patch() -> None:
    ungater, kube = ungater_with([pod(0), pod(1), pod(2)])
    asyncio.run(ungater.round([KEY]))
    assert sorted(patches(kube)) == ["wl-0", "wl-1", "wl-2"]
    patch = patches(kube)["wl-0"]
    assert patch[0]["op"] == "test" and patch[1]["path"] == "/spec/schedulingGates"
    assert {"op": "add", "path": "/spec/nodeSelector", "value": {HOST: "n1"}} in patch
    assert allocation_of(patch) == {
        "allocatedGPUs": {"0": ["0", "3"]},
        "visibleGPUs": ["0", "1", "2", "3"],
    }
    assert allocation_of(patches(kube)["wl-1"])["allocatedGPUs"] == {"0": ["1", "2"]}
    assert allocation_of(patches(kube)["wl-2"]) == {
        "allocatedGPUs": {"0": ["4", "5"]},
        "visibleGPUs": ["4", "5"],
    }


def test_sets_held_by_released_siblings_are_skipped() -> None:
    held = '{"allocatedGPUs":{"0":["0","3"]},"visibleGPUs":["0","1","2","3"]}'
    pods = [pod(0, gated=False, node="n1", allocation=held), pod(1), pod(2)]
    ungater, kube = ungater_with(pods, hold=False)  # after a restart: from the annotation
    asyncio.run(ungater.round([KEY]))
    assert sorted(patches(kube)) == ["wl-1", "wl-2"]
    assert allocation_of(patches(kube)["wl-1"])["allocatedGPUs"] == {"0": ["1", "2"]}


def test_a_finished_sibling_gives_its_set_back() -> None:
    held = '{"allocatedGPUs":{"0":["0","3"]},"visibleGPUs":["0","1","2","3"]}'
    replaced = pod(0, gated=False, node="n1", allocation=held, phase="Failed")
    replacement = pod(0)
    replacement["metadata"]["name"], replacement["metadata"]["uid"] = "wl-0-b", "uid-0b"
    sets = {"n1": ((0, 3), (1, 2))}
    ungates = [Ungate("wl-0-b", "uid-0b", {HOST: "n1"})]
    given = gpu_allocations(sets, visible_gpus(ASSIGNMENT), [replaced, replacement], ungates)
    assert json.loads(given["uid-0b"])["allocatedGPUs"] == {"0": ["0", "3"]}


def test_gpus_are_split_over_containers_in_order() -> None:
    two = pod(0, containers=[1, 0, 1])
    ungates = [Ungate("wl-0", "uid-0", {HOST: "n1"})]
    given = gpu_allocations({"n1": ((0, 3),)}, {"n1": (0, 3)}, [two], ungates)
    assert json.loads(given["uid-0"]) == {
        "allocatedGPUs": {"0": ["0"], "2": ["3"]},
        "visibleGPUs": ["0", "3"],
    }


def test_pods_without_sets_are_patched_as_before() -> None:
    ungater, kube = ungater_with([pod(0), pod(1), pod(2)], gpus={})
    asyncio.run(ungater.round([KEY]))
    assert len(patches(kube)) == 3  # every pod is still released
    for patch in patches(kube).values():
        assert not [op for op in patch if "annotations" in op["path"]]


def test_a_pod_without_annotations_gets_the_map() -> None:
    ungater, kube = ungater_with([pod(0)])
    plan = ungater.plan(KEY)
    assert plan and plan[0][1].gpu_allocation is not None
    bare = copy.deepcopy(plan[0][0])
    bare["metadata"].pop("annotations")  # the op must create the map, not add a key to it
    asyncio.run(ungater._patch(KEY, bare, plan[0][1]))
    op = patches(kube)["wl-0"][-1]
    assert op["path"] == "/metadata/annotations"
    assert set(op["value"]) == {ALLOCATION_ANNOTATION}
