"""The CRDs: generated from the models, installed on the real API server, enforced there."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from topogate.api.topology_assignment import AssignedDomain, decode, encode

ROOT = Path(__file__).resolve().parent.parent
BASES = ROOT / "config" / "crd" / "bases"


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "gen_manifests", ROOT / "hack" / "gen_manifests.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_manifests_match_the_code() -> None:
    rendered: dict[str, str] = _generator().rendered()
    committed = {
        name: (ROOT / "config" / name).read_text()
        for name in rendered
        if (ROOT / "config" / name).exists()
    }
    assert committed == rendered, "config/ drifted from the code: run python hack/gen_manifests.py"
    stale = {p.name for p in BASES.glob("*.yaml")} - {n.split("/")[-1] for n in rendered}
    assert not stale, f"CRDs no model generates: {stale}"


def _create(
    api: client.ApiClient, plural: str, body: dict[str, Any], namespace: str | None = None
) -> Any:
    custom = client.CustomObjectsApi(api)
    if namespace:
        return custom.create_namespaced_custom_object(
            "topogate.dev", "v1alpha1", namespace, plural, body
        )
    return custom.create_cluster_custom_object("topogate.dev", "v1alpha1", plural, body)


def _refused(
    api: client.ApiClient, plural: str, body: dict[str, Any], namespace: str | None = None
) -> str:
    with pytest.raises(client.ApiException) as error:
        _create(api, plural, body, namespace)
    assert error.value.status == 422, error.value.body
    return str(error.value.body)


def _topology(name: str, *levels: str) -> dict[str, Any]:
    return {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }


pytestmark = pytest.mark.cluster


def test_topology_rules_are_enforced_by_the_api_server(crds: client.ApiClient) -> None:
    created = _create(
        crds, "topologies", _topology("crd-ok", "cloud.com/block", "kubernetes.io/hostname")
    )
    assert created["spec"]["levels"][1]["nodeLabel"] == "kubernetes.io/hostname"
    assert "must be unique" in _refused(crds, "topologies", _topology("crd-dup", "a", "a"))
    assert "lowest level" in _refused(
        crds, "topologies", _topology("crd-host", "kubernetes.io/hostname", "a")
    )
    assert "spec.levels" in _refused(crds, "topologies", _topology("crd-empty"))
    assert "nodeLabel" in _refused(crds, "topologies", _topology("crd-bad", "no spaces allowed"))


def test_resource_flavor_needs_node_labels_with_a_topology(crds: client.ApiClient) -> None:
    body = {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "crd-rf"},
        "spec": {"topologyName": "crd-ok"},
    }
    assert "at least one nodeLabel is required" in _refused(crds, "resourceflavors", body)
    body["spec"]["nodeLabels"] = {"pool": "gpu"}
    _create(crds, "resourceflavors", body)
    custom = client.CustomObjectsApi(crds)
    with pytest.raises(client.ApiException) as error:
        custom.patch_cluster_custom_object(
            "topogate.dev",
            "v1alpha1",
            "resourceflavors",
            "crd-rf",
            {"spec": {"topologyName": "other"}},
        )
    assert "topologyName is immutable" in str(error.value.body)


def test_cluster_queue_strategy_and_covered_resources(crds: client.ApiClient) -> None:
    def queue(name: str, strategy: str, resources: list[str]) -> dict[str, Any]:
        return {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "queueingStrategy": strategy,
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "h100",
                                "resources": [{"name": r, "nominalQuota": 8} for r in resources],
                            }
                        ],
                    }
                ],
            },
        }

    _create(crds, "clusterqueues", queue("crd-cq", "StrictFIFO", ["cpu", "nvidia.com/gpu"]))
    assert "Unsupported value" in _refused(
        crds, "clusterqueues", queue("crd-cq2", "Random", ["cpu", "nvidia.com/gpu"])
    )
    assert "exactly the covered resources" in _refused(
        crds, "clusterqueues", queue("crd-cq3", "StrictFIFO", ["cpu"])
    )


def test_workload_status_subresource_and_short_names(crds: client.ApiClient) -> None:
    client.CoreV1Api(crds).create_namespace({"metadata": {"name": "crd-ns"}})
    body = {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "w"},
        "spec": {
            "podSets": [
                {"name": "main", "count": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}
            ]
        },
        "status": {"conditions": [{"type": "Admitted", "status": "True", "reason": "x"}]},
    }
    created = _create(crds, "workloads", body, "crd-ns")
    assert "status" not in created  # status is a subresource: ignored on create
    assert created["spec"]["podSets"][0]["template"]["spec"]["containers"] == [{"name": "c"}]
    body["spec"]["podSets"][0]["count"] = -1
    body["metadata"]["name"] = "w2"
    assert "count" in _refused(crds, "workloads", body, "crd-ns")
    extensions = client.ApiextensionsV1Api(crds)
    names = extensions.read_custom_resource_definition("workloads.topogate.dev").spec.names
    assert names.short_names == ["wl"]


def test_cohort_fields_are_stored_and_limits_need_a_cohort(crds: client.ApiClient) -> None:
    def queue(name: str, **spec: Any) -> dict[str, Any]:
        limits = spec.pop("limits", {})
        return {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                **spec,
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "h100",
                                "resources": [
                                    {"name": "nvidia.com/gpu", "nominalQuota": 8, **limits}
                                ],
                            }
                        ],
                    }
                ],
            },
        }

    limits = {"borrowingLimit": 4, "lendingLimit": "2"}
    stored = _create(crds, "clusterqueues", queue("crd-cohort", cohortName="team", limits=limits))
    quota = stored["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert stored["spec"]["cohortName"] == "team"
    assert (quota["borrowingLimit"], quota["lendingLimit"]) == (4, "2")
    assert "borrowingLimit and lendingLimit need a cohort" in _refused(
        crds, "clusterqueues", queue("crd-cohort2", limits=limits)
    )
    assert "cohort and cohortName must agree" in _refused(
        crds, "clusterqueues", queue("crd-cohort3", cohort="a", cohortName="b")
    )


def test_the_api_server_stores_slices_keeps_domains_and_refuses_a_malformed_slice(
    crds: client.ApiClient,
) -> None:
    client.CoreV1Api(crds).create_namespace({"metadata": {"name": "crd-ta"}})
    custom = client.CustomObjectsApi(crds)
    hosts = [AssignedDomain((f"gke-p-{p}-n{n:03d}",), 1 + n % 2) for p in "ab" for n in range(40)]
    written = encode(["kubernetes.io/hostname"], hosts)
    old = {"levels": ["r"], "domains": [{"values": ["r1"], "count": 2}]}

    def admit(name: str, topology: dict[str, Any]) -> Any:
        body = {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "Workload",
            "metadata": {"name": name},
            "spec": {"podSets": [{"name": "main", "count": 2, "template": {"spec": {}}}]},
        }
        _create(crds, "workloads", body, "crd-ta")
        status = {
            "admission": {
                "podSetAssignments": [{"name": "main", "count": 2, "topologyAssignment": topology}]
            }
        }
        return custom.patch_namespaced_custom_object_status(
            "topogate.dev", "v1alpha1", "crd-ta", "workloads", name, {"status": status}
        )

    def stored(name: str) -> Any:
        got = custom.get_namespaced_custom_object(
            "topogate.dev", "v1alpha1", "crd-ta", "workloads", name
        )
        return got["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]

    admit("slices", written)
    assert stored("slices") == written  # nothing pruned
    assert decode(stored("slices")).domains == tuple(hosts)
    admit("domains", old)  # written by an earlier release: kept, not pruned
    assert stored("domains") == old
    first = written["slices"][0]
    short = {**first, "podCounts": {"individual": [1]}}
    no_level = {**first, "valuesPerLevel": [{}]}
    for name, slices, says in [
        ("w-short", [short], "podCounts.individual must have length equal to domainCount"),
        ("w-none", [no_level], "exactly one of the fields in [universal individual] must be set"),
    ]:
        with pytest.raises(client.ApiException) as error:
            admit(name, {"levels": ["kubernetes.io/hostname"], "slices": slices})
        assert error.value.status == 422, error.value.body
        assert says in str(error.value.body)
    with pytest.raises(client.ApiException) as error:
        admit("w-both", {**written, "domains": old["domains"]})
    assert "set either slices or domains, not both" in str(error.value.body)


def test_flavor_fungibility_is_stored_and_its_rules_enforced(crds: client.ApiClient) -> None:
    def queue(name: str, fungibility: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {"resourceGroups": [], "flavorFungibility": fungibility},
        }

    pob = {"whenCanBorrow": "TryNextFlavor", "preference": "PreemptionOverBorrowing"}
    stored = _create(crds, "clusterqueues", queue("crd-fungible", pob))
    assert stored["spec"]["flavorFungibility"] == pob
    refused = _refused(
        crds, "clusterqueues", queue("crd-fungible2", {"whenCanPreempt": "Sometimes"})
    )
    assert "spec.flavorFungibility.whenCanPreempt: Unsupported value" in refused
    # preference with whenCanBorrow left to its default (MayStopSearch) is refused.
    assert "preference can only be set when both whenCanBorrow and whenCanPreempt" in _refused(
        crds, "clusterqueues", queue("crd-fungible3", {"preference": "PreemptionOverBorrowing"})
    )
