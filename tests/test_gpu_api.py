"""GPU annotations on the wire: node matrices and profiles, the minimum, allocations."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.test_gpusets import SEED
from topogate.admission.gpusets import best_gpu_set, pair_bandwidth
from topogate.api.errors import InputError
from topogate.api.gpus import (
    ALLOCATION_ANNOTATION,
    BANDWIDTH_ANNOTATION,
    PROFILE_ANNOTATION,
    PROFILES,
    Allocation,
    allocation_text,
    assignment_text,
    container_gpus,
    min_bandwidth,
    node_gpu_matrix,
    parse_allocation,
    parse_assignment,
    profile,
    split_by_container,
)
from topogate.cache.nodes import node_from_kube, pod_usage_from_kube
from topogate.cache.snapshot import CapacityCache

GPUS = {"nvidia.com/gpu": 8}


def node_object(annotations: dict[str, str], gpus: str = "8") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "annotations": annotations},
        "status": {
            "allocatable": {"nvidia.com/gpu": gpus, "cpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_a_matrix_annotation() -> None:
    matrix = node_gpu_matrix("n1", {BANDWIDTH_ANNOTATION: json.dumps(SEED)}, GPUS)
    assert matrix is not None and matrix[1][4] == 4.64


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[[0, 1]", "is not valid JSON: Expecting ',' delimiter: line 1 column 8 (char 7)"),
        ("{}", "must be a non-empty JSON list of rows (a square matrix)"),
        ("[[0, 1], [1]]", "row 1 must be a list of 2 numbers (the matrix is square)"),
        ('[[0, "fast"], [1, 0]]', "[0][1] must be a number (GB/s), not 'fast'"),
        ("[[0, true], [1, 0]]", "[0][1] must be a number (GB/s), not True"),
        ("[[0, -1], [1, 0]]", "[0][1] must be a finite, non-negative number of GB/s"),
        ("[[0, 1], [1, 0]]", "describes 2 GPUs but the node has 8 allocatable nvidia.com/gpu"),
    ],
)
def test_bad_matrices_name_the_node_and_the_annotation(value: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        node_gpu_matrix("n1", {BANDWIDTH_ANNOTATION: value}, GPUS)
    assert caught.value.describe() == (
        f"Node n1: metadata.annotations[{BANDWIDTH_ANNOTATION}]: {message}"
    )


def test_profiles() -> None:
    assert node_gpu_matrix("n1", {PROFILE_ANNOTATION: "nvswitch-8"}, GPUS) is profile("nvswitch-8")
    where = f"Node n1: metadata.annotations[{PROFILE_ANNOTATION}]: "
    with pytest.raises(InputError) as caught:
        node_gpu_matrix("n1", {PROFILE_ANNOTATION: "dgx"}, GPUS)
    assert caught.value.describe() == (
        where + "unknown GPU profile 'dgx' (known: nvlink-72, nvswitch-8, pcie-numa-8)"
    )
    with pytest.raises(InputError) as caught:
        node_gpu_matrix("n1", {PROFILE_ANNOTATION: "nvlink-72"}, GPUS)
    assert caught.value.describe() == (
        where + "describes 72 GPUs but the node has 8 allocatable nvidia.com/gpu"
    )
    with pytest.raises(InputError) as caught:
        node_gpu_matrix(
            "n1", {PROFILE_ANNOTATION: "nvswitch-8", BANDWIDTH_ANNOTATION: json.dumps(SEED)}, GPUS
        )
    assert caught.value.describe() == (
        where + f"set only one of {BANDWIDTH_ANNOTATION} and {PROFILE_ANNOTATION}"
    )
    assert node_gpu_matrix("n1", {}, GPUS) is None
    for name in PROFILES:
        pair = pair_bandwidth(profile(name))
        assert (pair == pair.T).all()
    pcie = profile("pcie-numa-8")
    assert pcie[0][1] > pcie[0][2] > pcie[0][4]  # switch pair > same NUMA > across
    choice = best_gpu_set(pcie, range(8), 4)
    assert choice is not None and choice.gpus == (0, 1, 2, 3)
    assert set(profile("nvlink-72")[0][1:]) == {900.0}


def test_one_bad_node_annotation_does_not_make_the_node_unreadable() -> None:
    node = node_from_kube(node_object({BANDWIDTH_ANNOTATION: "[[0]]"}))
    assert node.gpu_bandwidth is None and node.allocatable["nvidia.com/gpu"] == 8
    assert node.gpu_problem == (
        f"Node n1: metadata.annotations[{BANDWIDTH_ANNOTATION}]: describes 1 GPUs but the node "
        "has 8 allocatable nvidia.com/gpu"
    )
    good = node_from_kube(node_object({PROFILE_ANNOTATION: "pcie-numa-8"}))
    assert good.gpu_problem == "" and good.gpu_bandwidth == profile("pcie-numa-8")
    cache = CapacityCache()
    cache.upsert_node(node)
    cache.upsert_node(good.__class__(**{**_fields(good), "name": "n2"}))
    snapshot = cache.snapshot()
    assert snapshot.gpu.pair(0) is None and snapshot.gpu.free(1) == list(range(8))


def _fields(node: Any) -> dict[str, Any]:
    return {name: getattr(node, name) for name in node.__slots__}


@pytest.mark.parametrize(
    ("value", "ok"),
    [("40", 40.0), (" 12.5 ", 12.5), ("0", None), ("-3", None), ("fast", None), ("inf", None)],
)
def test_min_bandwidth(value: str, ok: float | None) -> None:
    template = {"metadata": {"annotations": {"topogate.dev/gpu-min-bandwidth": value}}}
    if ok is not None:
        assert min_bandwidth(template, "spec.template", "Job ns/j") == ok
        return
    with pytest.raises(InputError) as caught:
        min_bandwidth(template, "spec.template", "Job ns/j")
    assert caught.value.describe() == (
        "Job ns/j: spec.template.metadata.annotations[topogate.dev/gpu-min-bandwidth]: "
        f'Invalid value: {value!r}: must be a positive number of GB/s (e.g. "40")'
    )
    assert min_bandwidth({}, "spec.template", "Job ns/j") is None


def test_allocation_annotation_round_trip() -> None:
    text = '{"allocatedGPUs":{"0":["4","5"]},"visibleGPUs":["4","5","6","7"]}'
    allocation = parse_allocation(text)
    assert allocation == Allocation({0: (4, 5)}, (4, 5, 6, 7))
    assert allocation_text(allocation) == text
    assert allocation.gpus == {4, 5}
    for bad, message in (
        ("[]", "must be a JSON object with allocatedGPUs and visibleGPUs"),
        (
            '{"allocatedGPUs":{"0":["a"]}}',
            "allocatedGPUs must be a GPU index such as \"4\", not 'a'",
        ),
        (
            '{"allocatedGPUs":{"x":["1"]}}',
            "a container index must be a GPU index such as \"4\", not 'x'",
        ),
        (
            "{",
            "is not valid JSON: Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1)",
        ),
    ):
        with pytest.raises(ValueError) as caught:
            parse_allocation(bad)
        assert str(caught.value) == message


def test_assignment_annotation_round_trip() -> None:
    assignment = {"main": {"n1": ((0, 3), (1, 2))}}
    text = assignment_text(assignment)
    assert text == '{"main":{"n1":[["0","3"],["1","2"]]}}'
    assert parse_assignment(text) == assignment
    with pytest.raises(ValueError) as caught:
        parse_assignment('{"main": {"n1": [1, 2]}}')
    assert str(caught.value) == "main.n1: must be a list of lists of GPU indices"


def test_split_by_container() -> None:
    spec = {
        "containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": 2}}},
            {"name": "sidecar"},
            {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
        ]
    }
    assert container_gpus(spec) == [2, 0, 1]
    assert split_by_container((4, 5, 6), [2, 0, 1]) == {0: (4, 5), 2: (6,)}
    assert split_by_container((4, 5), [0]) == {0: (4, 5)}  # asked by an init container only


def test_pod_usage_carries_its_allocated_gpus() -> None:
    pod: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "annotations": {
                ALLOCATION_ANNOTATION: '{"allocatedGPUs":{"0":["4","5"]},"visibleGPUs":["4","5","6"]}'
            },
        },
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 2}}}],
        },
        "status": {"phase": "Running"},
    }
    usage = pod_usage_from_kube(pod)
    assert usage is not None and usage.gpus == {4, 5}
    pod["metadata"]["annotations"][ALLOCATION_ANNOTATION] = "nonsense"
    usage = pod_usage_from_kube(pod)
    assert usage is not None and usage.gpus == frozenset()
    assert usage.requests["nvidia.com/gpu"] == 2
