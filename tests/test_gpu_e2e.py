"""GPU sets on the real control plane: the admitter records them on the Workload, the ungater
writes each pod's share in the patch that releases it, and a second job gets other GPUs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests import test_e2e as e2e
from tests.cluster import eventually, fake_node
from tests.test_gpusets import SEED
from topogate.api.gpus import (
    ALLOCATION_ANNOTATION,
    ASSIGNMENT_ANNOTATION,
    BANDWIDTH_ANNOTATION,
    PROFILE_ANNOTATION,
)
from topogate.testing.localcluster import create_all

pytestmark = pytest.mark.cluster

cluster = e2e.cluster
serve = e2e.serve
pool = e2e.pool
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
MINIMUM = "topogate.dev/gpu-min-bandwidth"


def _node(pool: e2e.Pool, suffix: str, annotations: dict[str, str]) -> str:
    labels = {e2e.BLOCK: "b0", e2e.RACK: "r0", e2e.POOL: pool.name}
    node = fake_node(f"{pool.name}-{suffix}", labels)
    node["metadata"]["annotations"] = annotations
    create_all(pool.plane.kubeconfig, [node])
    return str(node["metadata"]["name"])


def _allocation(pod: Any) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((pod.metadata.annotations or {})[ALLOCATION_ANNOTATION])
    return value


def test_gpu_sets_travel_from_admission_to_the_pods(serve: e2e.Serve, pool: e2e.Pool) -> None:
    serve.start()
    measured = _node(pool, "measured", {BANDWIDTH_ANNOTATION: json.dumps(SEED)})
    _node(pool, "pcie", {PROFILE_ANNOTATION: "pcie-numa-8"})
    wants = {REQUIRED: e2e.HOST, MINIMUM: "40"}
    e2e.submit(pool, e2e.job("pair", 2, gpus=2, annotations=wants))
    pods = eventually(lambda: e2e.all_bound(pool, "batch.kubernetes.io/job-name=pair", 2), 60)
    assert {p.spec.node_name for p in pods} == {measured}  # PCIe cannot reach 40 GB/s
    allocations = [_allocation(p) for p in pods]
    assert sorted(a["allocatedGPUs"]["0"] for a in allocations) == [["0", "3"], ["1", "2"]]
    assert all(a["visibleGPUs"] == ["0", "1", "2", "3"] for a in allocations)
    workload = pool.workload_of("pair")
    assert workload is not None
    recorded = json.loads(workload["metadata"]["annotations"][ASSIGNMENT_ANNOTATION])
    assert recorded == {"main": {measured: [["0", "3"], ["1", "2"]]}}
    # A second job on the same node gets the other four GPUs, never one of the first job's.
    e2e.submit(pool, e2e.job("quad", 1, gpus=4, annotations=wants))
    (quad,) = eventually(lambda: e2e.all_bound(pool, "batch.kubernetes.io/job-name=quad", 1), 60)
    assert quad.spec.node_name == measured
    assert _allocation(quad) == {
        "allocatedGPUs": {"0": ["4", "5", "6", "7"]},
        "visibleGPUs": ["4", "5", "6", "7"],
    }
