"""cache/nodes.py's slim_node and slim_pod: what `serve` keeps of watched Nodes and Pods
reads the same as the whole object wherever topogate reads it, and is much smaller."""

from __future__ import annotations

import copy
import json
import tracemalloc
from typing import Any

import pytest

from topogate.api.errors import InputError
from topogate.api.gpus import ALLOCATION_ANNOTATION
from topogate.api.objects import condition, labels_changed
from topogate.cache.nodes import node_from_kube, pod_usage_from_kube, slim_node, slim_pod

TIME = "2026-11-26T19:50:00Z"
CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


def fields(*names: str) -> dict[str, Any]:
    return {f"f:{n}": {} for n in names}


def kwok_node(name: str, ready: str = "True") -> dict[str, Any]:
    """A Node as the API server serves it after KWOK's node-initialize stage."""
    resources = {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8", "pods": "110"}
    condition_fields = {
        f'k:{{"type":"{t}"}}': fields(
            ".", "lastHeartbeatTime", "lastTransitionTime", "message", "reason", "status", "type"
        )
        for t in CONDITIONS
    }
    node_info: tuple[str, ...] = (
        "architecture",
        "bootID",
        "containerRuntimeVersion",
        "kernelVersion",
    )
    node_info += ("kubeProxyVersion", "kubeletVersion", "machineID", "operatingSystem")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": "5b8c8c1e-5d0a-4a7e-9c1c-0d2e1f3a4b5c",
            "resourceVersion": "123456",
            "creationTimestamp": TIME,
            "labels": {"topology/rack": "r3", "kubernetes.io/hostname": name},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "managedFields": [
                {
                    "manager": "bench",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": TIME,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:annotations": fields(".", "kwok.x-k8s.io/node"),
                            "f:labels": fields(".", "topology/rack", "kubernetes.io/hostname"),
                        }
                    },
                },
                {
                    "manager": "kwok",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": TIME,
                    "fieldsType": "FieldsV1",
                    "subresource": "status",
                    "fieldsV1": {
                        "f:status": {
                            "f:addresses": fields(".", "address", "type"),
                            "f:allocatable": fields(*resources),
                            "f:capacity": fields(*resources),
                            "f:conditions": condition_fields,
                            "f:daemonEndpoints": {"f:kubeletEndpoint": fields("Port")},
                            "f:nodeInfo": fields(*node_info),
                            "f:phase": {},
                        }
                    },
                },
            ],
        },
        "spec": {"taints": [{"key": "gpu", "value": "x", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": resources,
            "capacity": resources,
            "phase": "Running",
            "conditions": [
                {
                    "type": t,
                    "status": ready if t == "Ready" else "False",
                    "lastHeartbeatTime": TIME,
                    "lastTransitionTime": TIME,
                    "reason": f"Kubelet{t}",
                    "message": f"kubelet reports {t}",
                }
                for t in CONDITIONS
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10247}},
            "nodeInfo": {k: "kwok-v0.8.0" for k in node_info},
        },
    }


def running_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": {"app": "x"},
            "annotations": {ALLOCATION_ANNOTATION: "0,1"},
            "managedFields": [{"manager": "kwok", "fieldsV1": {"f:status": fields("phase")}}],
        },
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "c", "ready": True, "state": {"running": {}}}],
            "podIP": "10.0.0.7",
            "podIPs": [{"ip": "10.0.0.7"}],
            "hostIP": "10.0.0.1",
            "hostIPs": [{"ip": "10.0.0.1"}],
        },
    }


@pytest.mark.parametrize("ready", ["True", "False", "Unknown"])
def test_a_slim_node_reads_as_the_whole_one(ready: str) -> None:
    whole = kwok_node("n1", ready)
    slim = slim_node(copy.deepcopy(whole))
    assert node_from_kube(slim) == node_from_kube(whole)
    assert condition(slim, "Ready") == condition(whole, "Ready")  # node failures read it
    assert not labels_changed(whole, slim)
    assert slim["metadata"]["annotations"] == whole["metadata"]["annotations"]
    assert "managedFields" not in slim["metadata"]
    assert set(slim["status"]) == {"allocatable", "capacity", "conditions"}
    assert [c["type"] for c in slim["status"]["conditions"]] == ["Ready"]


def test_a_node_without_a_ready_condition_stays_without_one() -> None:
    whole = kwok_node("n1")
    whole["status"]["conditions"] = [
        c for c in whole["status"]["conditions"] if c["type"] != "Ready"
    ]
    slim = slim_node(whole)
    assert slim["status"]["conditions"] == []
    assert node_from_kube(slim).ready is False
    assert condition(slim, "Ready") is None


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("status", "conditions"), "Ready"),
        (("status",), ["not", "an", "object"]),
        (("status", "allocatable", "nvidia.com/gpu"), "eight"),
        (("metadata",), "n1"),
        (("metadata", "labels"), ["rack"]),
    ],
)
def test_a_malformed_node_is_refused_with_the_same_words(path: tuple[str, ...], value: Any) -> None:
    whole = kwok_node("n1")
    parent = whole
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    with pytest.raises(InputError) as refused_whole:
        node_from_kube(whole)
    with pytest.raises(InputError) as refused_slim:
        node_from_kube(slim_node(copy.deepcopy(whole)))
    assert refused_slim.value.describe() == refused_whole.value.describe()


def test_a_slim_pod_counts_as_the_whole_one() -> None:
    whole = running_pod("p")
    slim = slim_pod(copy.deepcopy(whole))
    assert pod_usage_from_kube(slim) == pod_usage_from_kube(whole)
    assert slim["spec"] == whole["spec"]
    assert slim["status"] == {"phase": "Running", "conditions": whole["status"]["conditions"]}
    assert "managedFields" not in slim["metadata"]
    assert {k: v for k, v in slim["metadata"].items()} == {
        k: v for k, v in whole["metadata"].items() if k != "managedFields"
    }


def test_slim_leaves_its_input_alone() -> None:
    # The reflector hands the slim copy on; the decoded event must not be half-trimmed.
    node, pod = kwok_node("n1"), running_pod("p")
    node_before, pod_before = copy.deepcopy(node), copy.deepcopy(pod)
    slim_node(node)
    slim_pod(pod)
    assert node == node_before and pod == pod_before


def test_a_slim_node_takes_under_a_third_of_the_memory() -> None:
    # 100,000 KWOK nodes were 2.3 GB of decoded JSON: past serve's 1 GB target on their own.
    text = json.dumps(kwok_node("n000000"))

    def held(transform: Any) -> float:
        tracemalloc.start()
        try:
            kept = [
                transform(json.loads(text.replace("n000000", f"n{i:06d}"))) for i in range(2000)
            ]
            size = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert len(kept) == 2000
        return size / 2000

    assert held(slim_node) < held(lambda node: node) / 3


async def test_serve_keeps_slim_nodes_and_pods() -> None:
    import argparse

    from topogate.kube.resources import NODES, PODS, WORKLOADS
    from topogate.runtime.serve import Controller, add_arguments
    from topogate.testing.fakekube import FakeKube

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    kube = FakeKube()
    kube.seed(NODES, kwok_node("n1"))
    kube.seed(PODS, running_pod("p"))
    controller = Controller(parser.parse_args([]), kube, "test")
    for resource in (NODES, PODS, WORKLOADS):
        await controller.reflectors[resource.key]._list()

    node = controller.state.store.objects(NODES)["n1"]
    assert "managedFields" not in node["metadata"] and "nodeInfo" not in node["status"]
    pod = controller.state.store.objects(PODS)["ml/p"]
    assert "managedFields" not in pod["metadata"] and "containerStatuses" not in pod["status"]
    assert controller.reflectors[WORKLOADS.key].transform is None  # written back: kept whole
