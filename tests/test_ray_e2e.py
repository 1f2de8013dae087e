"""End to end on the real control plane with KubeRay's own operator (ray-operator, built by
hack/controlplane/build.sh with its CRDs): a queued RayCluster and a queued RayJob are
suspended by topogate's webhook, admitted as one Workload (head, worker groups, and a RayJob's
submitter), started with the marks on their templates; the operator makes the head and worker
pods (a RayJob's through the RayCluster it creates, which is not queued itself), the ungater
releases them into one rack and kube-scheduler binds them. Preempted, the object is
suspended again, the operator deletes its pods (a RayJob's whole cluster), and it is admitted
again once there is room. No kubelet runs here, so no Ray cluster gets Ready and no RayJob
submits or finishes (finished detection is unit-tested in tests/test_ray.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests import test_e2e
from tests import test_preemption_e2e as preempting
from tests.cluster import eventually
from tests.test_e2e import HOST, POOL, RACK, Pool, Serve, all_bound, condition, submit
from topogate.testing.controlplane import ControlPlane
from topogate.testing.localcluster import create_all

pytestmark = pytest.mark.cluster

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
QUEUE = "kueue.x-k8s.io/queue-name"
RAY_PODS = "ray.io/cluster"  # KubeRay labels every pod with its RayCluster

serve = test_e2e.serve
pool = test_e2e.pool


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    control_plane.start_kuberay()  # KubeRay's operator and CRDs, from its release
    test_e2e.install_e2e_topology(control_plane)
    yield control_plane


def pod_template(gpus: int, annotations: dict[str, str]) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "metadata": {"annotations": dict(annotations)},
        "spec": {
            "containers": [
                {"name": "ray", "image": "rayproject/ray:2.9.0", "resources": {"limits": limits}}
            ]
        },
    }


def cluster_spec(workers: int) -> dict[str, Any]:
    # Head and workers in one rack: the same required level and Kueue's group name on both.
    together = {REQUIRED: RACK, GROUP_NAME: "ray"}
    return {
        "headGroupSpec": {"rayStartParams": {}, "template": pod_template(8, together)},
        "workerGroupSpecs": [
            {
                "groupName": "gpu-workers",
                "replicas": workers,
                "minReplicas": 0,
                "maxReplicas": 8,
                "rayStartParams": {},
                "template": pod_template(8, together),
            }
        ],
    }


def raycluster(name: str, workers: int, queue: str = "q") -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": {QUEUE: queue}},
        "spec": cluster_spec(workers),
    }


def rayjob(name: str, workers: int, queue: str = "q") -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "labels": {QUEUE: queue}},
        "spec": {
            "entrypoint": "python -c 'print(1)'",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": cluster_spec(workers),
            # The submitter asks for no GPU (the queue covers GPUs only) and any rack.
            "submitterPodTemplate": {
                **pod_template(0, {REQUIRED: RACK}),
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "ray-job-submitter", "image": "rayproject/ray:2.9.0"}],
                },
            },
        },
    }


def racks_of(pool: Pool, pods: list[Any]) -> set[str]:
    labels = pool.node_labels()
    return {labels[p.spec.node_name][RACK] for p in pods}


def get(pool: Pool, plural: str, name: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(pool.api)
    found = custom.get_namespaced_custom_object("ray.io", "v1", pool.namespace, plural, name)
    assert isinstance(found, dict)
    return found


# The preempting Job's pod: one 8-GPU container, as the Ray pods.
URGENT_POD = pod_template(8, {})["spec"]


def preemption_queue(pool: Pool) -> str:
    """A queue that preempts by priority, and a priority class above the Ray objects'."""
    policy = {"preemption": {"withinClusterQueue": "LowerPriority"}}
    high_class = f"{pool.name}-high"
    create_all(
        pool.plane.kubeconfig,
        [
            preempting.queue(pool, f"{pool.name}-p", 64, **policy),
            preempting.local_queue(pool, "urgent", f"{pool.name}-p"),
            preempting.priority_class(high_class, 1000),
        ],
    )
    return high_class


def test_a_raycluster_lands_in_one_rack_head_and_workers_together(serve: Serve, pool: Pool) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 2, ("b0", "r1"): 3, ("b1", "r2"): 2})
    created = submit(pool, raycluster("ray", workers=2))
    assert created["spec"]["suspend"] is True  # the webhook holds it until it is admitted
    pods = eventually(lambda: all_bound(pool, RAY_PODS, 3), 120)
    assert racks_of(pool, pods) == {"r1"}  # the only rack with room for all three pods
    roles = sorted(p.metadata.labels["topogate.dev/podset"] for p in pods)
    assert roles == ["gpu-workers", "gpu-workers", "head"]
    [workload] = pool.workloads()
    assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [
        ("head", 1),
        ("gpu-workers", 2),
    ]
    assert condition(workload, "Admitted")["status"] == "True"  # type: ignore[index]
    assert get(pool, "rayclusters", "ray")["spec"]["suspend"] is False
    for pod in pods:
        assert not pod.spec.scheduling_gates
        assert pod.metadata.annotations["topogate.dev/workload"] == workload["metadata"]["name"]
        assert pod.spec.node_selector[HOST] == pod.spec.node_name
        assert pod.spec.node_selector[POOL] == pool.name  # the flavor's node label


def test_a_preempted_raycluster_is_suspended_loses_its_pods_and_runs_again(
    serve: Serve, pool: Pool
) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 3})
    high_class = preemption_queue(pool)
    submit(pool, raycluster("low", workers=2, queue="urgent"))
    first = eventually(lambda: all_bound(pool, RAY_PODS, 3), 120)
    [workload] = pool.workloads()
    submit(pool, preempting.urgent_job(high_class, URGENT_POD))
    eventually(
        lambda: preempting.evicted_and_gone(pool, workload["metadata"]["name"], RAY_PODS, first), 90
    )
    assert get(pool, "rayclusters", "low")["spec"]["suspend"] is True
    job_pods = eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=urgent", 2), 90)
    assert racks_of(pool, job_pods) == {"r0"}
    assert not pool.pods(RAY_PODS)  # suspended: the operator makes no pods

    batch = client.BatchV1Api(pool.api)
    batch.delete_namespaced_job("urgent", pool.namespace, propagation_policy="Background")

    def rebound() -> list[Any] | None:
        preempting.kubelet(pool)
        return all_bound(pool, RAY_PODS, 3)

    pods = eventually(rebound, 120)
    assert racks_of(pool, pods) == {"r0"}
    assert get(pool, "rayclusters", "low")["spec"]["suspend"] is False


def test_a_rayjob_runs_its_cluster_in_one_rack_and_is_requeued_when_preempted(
    serve: Serve, pool: Pool
) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 1, ("b1", "r1"): 3})
    high_class = preemption_queue(pool)
    created = submit(pool, rayjob("train", workers=2, queue="urgent"))
    assert created["spec"]["suspend"] is True
    pods = eventually(lambda: all_bound(pool, RAY_PODS, 3), 120)
    assert racks_of(pool, pods) == {"r1"}
    [workload] = pool.workloads()
    assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [
        ("head", 1),
        ("gpu-workers", 2),
        ("submitter", 1),
    ]
    assert workload["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
    # The RayCluster KubeRay made carries the RayJob's queue label, yet runs under the
    # RayJob's admission: not suspended, no Workload of its own.
    job = get(pool, "rayjobs", "train")
    assert job["spec"]["suspend"] is False
    made = get(pool, "rayclusters", job["status"]["rayClusterName"])
    assert made["metadata"]["labels"][QUEUE] == "urgent"
    assert not made["spec"].get("suspend")
    for pod in pods:
        assert pod.metadata.annotations["topogate.dev/workload"] == workload["metadata"]["name"]

    submit(pool, preempting.urgent_job(high_class, URGENT_POD))
    eventually(
        lambda: preempting.evicted_and_gone(pool, workload["metadata"]["name"], RAY_PODS, pods), 120
    )

    def suspended() -> bool:
        now = get(pool, "rayjobs", "train")
        status = (now.get("status") or {}).get("jobDeploymentStatus")
        return now["spec"]["suspend"] is True and status == "Suspended"

    eventually(suspended, 60)
    assert not pool.pods(RAY_PODS)  # its RayCluster is gone with its pods
    eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=urgent", 2), 90)
    batch = client.BatchV1Api(pool.api)
    batch.delete_namespaced_job("urgent", pool.namespace, propagation_policy="Background")

    def rebound() -> list[Any] | None:
        preempting.kubelet(pool)
        return all_bound(pool, RAY_PODS, 3)

    again = eventually(rebound, 120)
    assert racks_of(pool, again) == {"r1"}
    assert {p.metadata.uid for p in again}.isdisjoint({p.metadata.uid for p in pods})
