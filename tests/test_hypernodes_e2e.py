"""HyperNodes on the real control plane: `serve`'s webhook refuses broken trees, its discovery
builds and maintains HyperNodes from node labels, and a Volcano-worded job is placed on them.

Each test labels its own nodes with label keys of its own, so discovery (which looks at every
node in the cluster) only sees that test's nodes.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests import test_e2e
from tests.cluster import api_client, eventually, fake_node
from tests.kit import hypernode_object
from tests.test_e2e import Serve, job
from topogate.testing.controlplane import ControlPlane
from topogate.testing.localcluster import create_all

pytestmark = pytest.mark.cluster

HN = ("topology.volcano.sh", "v1alpha1", "hypernodes")

# The end-to-end module's fixtures: the control plane with CRDs, and `serve` with webhooks.
cluster = test_e2e.cluster
serve = test_e2e.serve


def _hypernodes(plane: ControlPlane, type_name: str) -> dict[str, dict[str, Any]]:
    custom = client.CustomObjectsApi(api_client(plane))
    listed = custom.list_cluster_custom_object(
        *HN, label_selector=f"topogate.dev/network-topology-type={type_name}"
    )
    return {item["metadata"]["name"]: item for item in listed["items"]}


def test_webhook_refuses_a_cycle_and_accepts_a_parent_before_its_children(serve: Serve) -> None:
    serve.start()
    tag = uuid.uuid4().hex[:6]
    custom = client.CustomObjectsApi(api_client(serve.plane))
    # A parent first: its child does not exist yet, which is fine.
    custom.create_cluster_custom_object(
        *HN, hypernode_object(f"top-{tag}", 3, children=[f"mid-{tag}"])
    )
    custom.create_cluster_custom_object(
        *HN, hypernode_object(f"mid-{tag}", 2, children=[f"leaf-{tag}"])
    )
    with pytest.raises(client.ApiException) as refused:
        # leaf would name top as its child: top -> mid -> leaf -> top.
        custom.create_cluster_custom_object(
            *HN, hypernode_object(f"leaf-{tag}", 1, children=[f"top-{tag}"])
        )
    assert refused.value.status == 422
    message = json.loads(refused.value.body)["message"]
    assert f"HyperNode leaf-{tag}" in message and "cycle" in message, message
    with pytest.raises(client.ApiException) as bad_regex:
        obj = hypernode_object(f"rx-{tag}", 1)
        obj["spec"]["members"] = [{"type": "Node", "selector": {"regexMatch": {"pattern": "(a"}}}]
        custom.create_cluster_custom_object(*HN, obj)
    assert "regexMatch.pattern" in json.loads(bad_regex.value.body)["message"]


def test_discovery_builds_scoped_hypernodes_and_follows_relabelling(
    serve: Serve, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    block, rack = f"{tag}.example.com/block", f"{tag}.example.com/rack"
    config = {
        "networkTopologyDiscovery": [
            {
                "source": "label",
                "enabled": True,
                "interval": "10m",
                "config": {
                    "networkTopologyTypes": {
                        tag: [
                            {"nodeLabel": block},
                            {"nodeLabel": rack},
                            {"nodeLabel": "kubernetes.io/hostname"},
                        ]
                    }
                },
            }
        ]
    }
    path = tmp_path / "discovery.yaml"
    path.write_text(yaml.safe_dump(config))
    # rack r0 exists in both blocks: two HyperNodes, not one with two parents.
    layout = {("b0", "r0"): 2, ("b0", "r1"): 2, ("b1", "r0"): 2}
    names: dict[tuple[str, str], list[str]] = {}
    docs = []
    for (b, r), count in layout.items():
        for i in range(count):
            name = f"{tag}-{b}-{r}-{i}"
            names.setdefault((b, r), []).append(name)
            docs.append(fake_node(name, {block: b, rack: r}, gpus=8))
    docs.append(fake_node(f"{tag}-loose", {}, gpus=8))
    create_all(serve.plane.kubeconfig, docs)
    hand_made = hypernode_object(f"{tag}-manual", 1, [f"{tag}-loose"])
    hand_made["metadata"]["labels"] = {"topogate.dev/network-topology-type": tag}
    create_all(serve.plane.kubeconfig, [hand_made])
    serve.start(f"--hypernode-discovery={path}")

    def discovered(count: int) -> dict[str, dict[str, Any]] | None:
        found = {
            name: item
            for name, item in _hypernodes(serve.plane, tag).items()
            if (item["metadata"].get("labels") or {}).get("topogate.dev/network-topology-source")
            == "label"
        }
        ready = all((item.get("status") or {}).get("nodeCount") for item in found.values())
        return found if len(found) == count and ready else None

    found = eventually(lambda: discovered(5), 60)  # 2 blocks + 3 racks
    tiers = sorted((item["spec"]["tier"], item["status"]["nodeCount"]) for item in found.values())
    assert tiers == [(1, 2), (1, 2), (1, 2), (2, 2), (2, 4)]
    assert {item["spec"]["tierName"] for item in found.values()} == {block, rack}
    assert f"{tag}-manual" in _hypernodes(serve.plane, tag)  # never touched

    # Move one node of b1/r0 into a new rack b1/r9: a new HyperNode, counts follow.
    core = client.CoreV1Api(api_client(serve.plane))
    moved = names[("b1", "r0")][1]
    core.patch_node(moved, {"metadata": {"labels": {rack: "r9"}}})

    def after_move() -> dict[str, dict[str, Any]] | None:
        current = discovered(6)
        if current is None:
            return None
        counts = sorted((i["spec"]["tier"], i["status"]["nodeCount"]) for i in current.values())
        return current if counts == [(1, 1), (1, 1), (1, 2), (1, 2), (2, 2), (2, 4)] else None

    try:
        eventually(after_move, 60)
    except AssertionError:
        print(serve.log()[-3000:])
        for name, item in _hypernodes(serve.plane, tag).items():
            print(name, item["spec"], item.get("status"))
        raise
    # Remove the other b1/r0 node's labels: b1/r0 becomes stale and is deleted.
    core.patch_node(names[("b1", "r0")][0], {"metadata": {"labels": {rack: None, block: None}}})
    current = eventually(lambda: discovered(5), 60)
    rack_members = sorted(
        m["selector"]["exactMatch"]["name"]
        for item in current.values()
        if item["spec"]["tier"] == 1
        for m in item["spec"]["members"]
    )
    assert moved in rack_members and names[("b1", "r0")][0] not in rack_members
    assert f"{tag}-manual" in _hypernodes(serve.plane, tag)


def test_volcano_job_on_hypernodes_stays_within_its_tier(serve: Serve) -> None:
    serve.start()
    tag = uuid.uuid4().hex[:6]
    pool = f"{tag}.example.com/pool"
    # The seed's tree: s0..s3 (tier 1) of two nodes each, s4={s0,s1}, s5={s2,s3}, s6 on top.
    # n0 has room for no 8-GPU pod, so only s5 (n4-n7) can hold all four pods.
    nodes = [fake_node(f"{tag}-n{i}", {pool: "yes"}, gpus=4 if i == 0 else 8) for i in range(8)]
    tree = [
        hypernode_object(f"{tag}-s{i}", 1, [f"{tag}-n{2 * i}", f"{tag}-n{2 * i + 1}"])
        for i in range(4)
    ]
    tree += [
        hypernode_object(f"{tag}-s4", 2, children=[f"{tag}-s0", f"{tag}-s1"]),
        hypernode_object(f"{tag}-s5", 2, children=[f"{tag}-s2", f"{tag}-s3"]),
        hypernode_object(f"{tag}-s6", 3, children=[f"{tag}-s4", f"{tag}-s5"]),
    ]
    namespace = f"hn-{tag}"
    queue_objects = [
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ResourceFlavor",
            "metadata": {"name": f"hn-{tag}"},
            "spec": {"nodeLabels": {pool: "yes"}, "topologyName": "hypernodes"},
        },
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ClusterQueue",
            "metadata": {"name": f"hn-{tag}"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": f"hn-{tag}",
                                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1000}],
                            }
                        ],
                    }
                ]
            },
        },
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": namespace},
            "spec": {"clusterQueue": f"hn-{tag}"},
        },
    ]
    create_all(serve.plane.kubeconfig, nodes + tree + queue_objects)
    network = {
        "topogate.dev/network-topology": json.dumps({"mode": "hard", "highestTierAllowed": 2})
    }

    created = job("fits", 4, annotations=network)
    created["metadata"]["namespace"] = namespace
    create_all(serve.plane.kubeconfig, [created])
    core = client.CoreV1Api(api_client(serve.plane))

    def bound() -> list[Any] | None:
        listed = core.list_namespaced_pod(
            namespace, label_selector="batch.kubernetes.io/job-name=fits"
        )
        pods = [p for p in listed.items if p.spec.node_name]
        return pods if len(pods) == 4 else None

    pods = eventually(bound, 60)
    halves = {int(p.spec.node_name.rsplit("-n", 1)[1]) // 4 for p in pods}
    assert halves == {1}, [p.spec.node_name for p in pods]  # all inside s5
