"""The local control plane itself: a real API server that the real scheduler binds through."""

from __future__ import annotations

import json
import subprocess

import pytest
from kubernetes import client

from tests.cluster import api_client, eventually, fake_node
from topogate.testing.controlplane import ControlPlane

pytestmark = pytest.mark.cluster


def test_api_server_is_real_and_enforces_validation(control_plane: ControlPlane) -> None:
    core = client.CoreV1Api(api_client(control_plane))
    # The server is the binary build.sh made (of the release it was asked for).
    assert control_plane.bin_dir is not None
    built = subprocess.run(
        [str(control_plane.bin_dir / "kube-apiserver"), "--version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    served = client.VersionApi(api_client(control_plane)).get_code().git_version
    assert built == ["Kubernetes", served] and served.startswith("v1.")
    names = {ns.metadata.name for ns in core.list_namespace().items}
    assert {"default", "kube-system"} <= names
    with pytest.raises(client.ApiException) as error:
        core.create_namespace({"metadata": {"name": "Not_A_Valid_Name"}})
    assert error.value.status == 422


def test_scheduler_binds_a_pod_to_a_fake_node(control_plane: ControlPlane) -> None:
    core = client.CoreV1Api(api_client(control_plane))
    core.create_node(fake_node("cp-node-1"))
    assert not core.read_node("cp-node-1").spec.taints  # TaintNodesByCondition is off
    core.create_namespace({"metadata": {"name": "cp-test"}})
    core.create_namespaced_pod(
        "cp-test",
        {
            "metadata": {"name": "p"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "cp-node-1"},
                "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ],
            },
        },
    )
    node = eventually(lambda: core.read_namespaced_pod("p", "cp-test").spec.node_name)
    assert node == "cp-node-1"


def test_the_binaries_are_found_through_build_sh_without_the_variable(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo and `hack/controlplane/start.sh` call binaries() with no $TOPOGATE_CONTROLPLANE_BIN:
    it must find the repository's build.sh (it printed a wrong path once the module moved)."""
    import os
    from pathlib import Path

    from topogate.testing.controlplane import BIN_ENV, binaries

    expected = os.environ.get(BIN_ENV)
    monkeypatch.delenv(BIN_ENV, raising=False)
    found = binaries()
    assert (found / "kube-apiserver").is_file()
    if expected:
        assert found == Path(expected)


def test_jobset_controller_runs_a_jobset_through_jobs_to_bound_pods(
    control_plane: ControlPlane,
) -> None:
    """JobSet's own controller, CRD and webhooks (from the release build.sh built): a plain
    JobSet, no topogate, becomes Jobs (JobSet's controller) and bound pods (the Job controller
    and the scheduler)."""
    control_plane.start_jobset()
    control_plane.start_jobset()  # a second call finds it running
    api = api_client(control_plane)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    core.create_node(fake_node("cp-jobset-node"))
    core.create_namespace({"metadata": {"name": "cp-jobset"}})
    custom = client.CustomObjectsApi(api)
    pod_spec = {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/hostname": "cp-jobset-node"},
        "containers": [{"name": "c", "image": "x"}],
    }
    made = custom.create_namespaced_custom_object(
        "jobset.x-k8s.io",
        "v1alpha2",
        "cp-jobset",
        "jobsets",
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "pair"},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "w",
                        "replicas": 2,
                        "template": {
                            "spec": {
                                "parallelism": 1,
                                "completions": 1,
                                "template": {"spec": pod_spec},
                            }
                        },
                    }
                ]
            },
        },
    )
    # JobSet's defaulting webhook answered (the CRD defaults none of these).
    template = made["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert template["completionMode"] == "Indexed"
    assert made["spec"]["successPolicy"] == {"operator": "All"}

    def jobs() -> list[str] | None:
        items = batch.list_namespaced_job("cp-jobset").items
        names = sorted(str(j.metadata.name) for j in items)
        # JobSet's controller creates the Jobs one by one: wait for both, not the first.
        return names if len(names) == 2 else None

    assert eventually(jobs, 30) == ["pair-w-0", "pair-w-1"]

    def bound() -> list[str] | None:
        pods = core.list_namespaced_pod("cp-jobset").items
        nodes = [p.spec.node_name for p in pods if p.spec.node_name]
        return nodes if len(nodes) == 2 else None

    assert eventually(bound, 60) == ["cp-jobset-node", "cp-jobset-node"]
    # JobSet's validating webhook answers too: a running JobSet's replicated jobs are
    # immutable (the CRD's own rules do not cover them).
    with pytest.raises(client.ApiException) as error:
        custom.patch_namespaced_custom_object(
            "jobset.x-k8s.io",
            "v1alpha2",
            "cp-jobset",
            "jobsets",
            "pair",
            [{"op": "replace", "path": "/spec/replicatedJobs/0/replicas", "value": 3}],
            _content_type="application/json-patch+json",
        )
    assert error.value.status == 422, error.value
    message = json.loads(error.value.body)["message"]
    assert message.startswith('admission webhook "vjobset.kb.io" denied the request'), message
    assert "field is immutable" in message, message


def test_lws_controller_runs_a_leaderworkerset_through_statefulsets_to_bound_pods(
    control_plane: ControlPlane,
) -> None:
    """LeaderWorkerSet's own controller, CRDs and webhooks (from the release build.sh built):
    a plain LeaderWorkerSet, no topogate, becomes a leader StatefulSet and one worker
    StatefulSet per leader (its controller), pods (the StatefulSet controller) labelled by its
    pod webhook, and bound pods (the scheduler)."""
    control_plane.start_lws()
    control_plane.start_lws()  # a second call finds it running
    api = api_client(control_plane)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.create_node(fake_node("cp-lws-node"))
    core.create_namespace({"metadata": {"name": "cp-lws"}})
    pod_spec = {
        "nodeSelector": {"kubernetes.io/hostname": "cp-lws-node"},
        "containers": [{"name": "c", "image": "x"}],
    }
    made = client.CustomObjectsApi(api).create_namespaced_custom_object(
        "leaderworkerset.x-k8s.io",
        "v1",
        "cp-lws",
        "leaderworkersets",
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "duo"},
            "spec": {
                "replicas": 2,
                "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": pod_spec}},
            },
        },
    )
    assert made["spec"]["networkConfig"]["subdomainPolicy"] == "Shared"  # its webhook's default

    def statefulsets() -> list[str] | None:
        names = sorted(
            str(s.metadata.name) for s in apps.list_namespaced_stateful_set("cp-lws").items
        )
        return names if len(names) == 3 else None

    assert eventually(statefulsets, 60) == ["duo", "duo-0", "duo-1"]

    def bound() -> list[tuple[str, str, str]] | None:
        pods = [p for p in core.list_namespaced_pod("cp-lws").items if p.spec.node_name]
        keys = "leaderworkerset.sigs.k8s.io/group-index", "leaderworkerset.sigs.k8s.io/worker-index"
        found = sorted((p.metadata.name, *(p.metadata.labels[k] for k in keys)) for p in pods)
        return found if len(found) == 4 else None

    assert eventually(bound, 60) == [
        ("duo-0", "0", "0"),
        ("duo-0-1", "0", "1"),
        ("duo-1", "1", "0"),
        ("duo-1-1", "1", "1"),
    ]
