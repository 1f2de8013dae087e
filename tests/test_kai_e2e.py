"""KAI-Scheduler's Topology on the real control plane: `serve` starts on a cluster without
KAI's CRD, follows KAI Topologies once the CRD is installed, and places a Job written for KAI
(annotations on the Job, as KAI documents them) on the KAI Topology it names."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client

from tests import test_e2e
from tests.cluster import api_client, eventually, fake_node
from tests.test_e2e import Serve, job
from topogate.testing.localcluster import create_all, install_crds

pytestmark = pytest.mark.cluster

# The end-to-end module's fixtures: the control plane with topogate's CRDs (not KAI's), and
# `serve` with webhooks.
cluster = test_e2e.cluster
serve = test_e2e.serve


def _queue_objects(tag: str, pool: str, namespace: str) -> list[dict[str, Any]]:
    # The flavor names no topology: the job names KAI's, as a KAI user's job does.
    quota = [{"name": "nvidia.com/gpu", "nominalQuota": 1000}]
    return [
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ResourceFlavor",
            "metadata": {"name": f"kai-{tag}"},
            "spec": {"nodeLabels": {pool: "yes"}},
        },
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ClusterQueue",
            "metadata": {"name": f"kai-{tag}"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": f"kai-{tag}", "resources": quota}],
                    }
                ]
            },
        },
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": namespace},
            "spec": {"clusterQueue": f"kai-{tag}"},
        },
    ]


def test_serve_places_a_kai_job_on_a_kai_topology_once_its_crd_exists(serve: Serve) -> None:
    serve.start()  # no KAI CRD yet: serve must come up and stay up without it
    tag = uuid.uuid4().hex[:6]
    pool, zone, rack = (
        f"{tag}.example.com/pool",
        f"{tag}.example.com/zone",
        f"{tag}.example.com/rack",
    )
    # Rack r0: one node too small for an 8-GPU pod; rack r1: two nodes of 8 GPUs. A job of two
    # 8-GPU pods that requires one rack fits only in r1.
    layout = [("r0", 4), ("r0", 8), ("r1", 8), ("r1", 8)]
    nodes = [
        fake_node(f"{tag}-n{i}", {pool: "yes", zone: "z0", rack: r}, gpus=gpus)
        for i, (r, gpus) in enumerate(layout)
    ]
    namespace = f"kai-{tag}"
    create_all(serve.plane.kubeconfig, nodes + _queue_objects(tag, pool, namespace))

    created = job("fits", 2)
    created["metadata"]["namespace"] = namespace
    created["metadata"]["annotations"] = {
        "kai.scheduler/topology": f"topo-{tag}",
        "kai.scheduler/topology-required-placement": rack,
    }
    create_all(serve.plane.kubeconfig, [created])

    install_crds(serve.plane.kubeconfig, kai=True)
    kai_topology = {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": f"topo-{tag}"},
        "spec": {
            "levels": [
                {"nodeLabel": zone},
                {"nodeLabel": rack},
                {"nodeLabel": "kubernetes.io/hostname"},
            ]
        },
    }
    create_all(serve.plane.kubeconfig, [kai_topology])
    core = client.CoreV1Api(api_client(serve.plane))

    def bound() -> list[Any] | None:
        listed = core.list_namespaced_pod(
            namespace, label_selector="batch.kubernetes.io/job-name=fits"
        )
        pods = [p for p in listed.items if p.spec is not None and p.spec.node_name]
        return pods if len(pods) == 2 else None

    try:
        # The KAI watch looks for its CRD again every 30 s.
        pods = eventually(bound, 90)
    except AssertionError:
        print(serve.log())
        raise
    assert sorted(p.spec.node_name for p in pods) == [f"{tag}-n2", f"{tag}-n3"]  # rack r1
