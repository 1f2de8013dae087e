"""End to end on the real control plane, for the kinds with no suspend switch: a
LeaderWorkerSet run by LeaderWorkerSet's own controller (sigs.k8s.io/lws, built by
hack/controlplane/build.sh, with its CRD and webhooks), and a plain pod group. `topogate serve`
gates their pods on creation, admits each group as one gang, the ungater releases the pods
into their domain and the real kube-scheduler binds them; an evicted LeaderWorkerSet group
loses its pods (its StatefulSets make them again, gated) and waits in its queue again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests import test_e2e
from tests.cluster import eventually
from tests.test_e2e import HOST, POOL, RACK, Pool, Serve, all_bound, condition, submit
from tests.test_preemption_e2e import (
    evicted_and_gone,
    kubelet,
    local_queue,
    priority_class,
    queue,
    urgent_job,
)
from topogate.api.kinds.lws import group_workload_name
from topogate.testing.controlplane import ControlPlane
from topogate.testing.localcluster import create_all

pytestmark = pytest.mark.cluster

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
QUEUE = "kueue.x-k8s.io/queue-name"

serve = test_e2e.serve
pool = test_e2e.pool


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    control_plane.start_lws()  # LeaderWorkerSet's controller, webhooks and CRDs, from its release
    test_e2e.install_e2e_topology(control_plane)
    yield control_plane


def pod_template(gpus: int, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"annotations": dict(annotations)},
        "spec": {
            "containers": [
                {
                    "name": "server",
                    "image": "example.com/server:1",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ]
        },
    }


def leaderworkerset(name: str, size: int, replicas: int = 1, queue: str = "q") -> dict[str, Any]:
    # Leader and workers in one rack: the same required level and Kueue's group name on both.
    together = {REQUIRED: RACK, GROUP_NAME: "group"}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": {QUEUE: queue}},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": pod_template(8, together),
                "workerTemplate": pod_template(8, together),
            },
        },
    }


def racks_of(pool: Pool, pods: list[Any]) -> set[str]:
    labels = pool.node_labels()
    return {labels[p.spec.node_name][RACK] for p in pods}


def test_a_leaderworkerset_group_lands_in_one_rack_leader_and_workers_together(
    serve: Serve, pool: Pool
) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 2, ("b0", "r1"): 3, ("b1", "r2"): 2})
    created = submit(pool, leaderworkerset("infer", size=3))
    assert "suspend" not in created["spec"]  # no suspend switch: its pods are gated instead
    selector = "leaderworkerset.sigs.k8s.io/name=infer"
    pods = eventually(lambda: all_bound(pool, selector, 3), 90)
    assert racks_of(pool, pods) == {"r1"}  # the only rack with room for the whole group
    roles = sorted(p.metadata.labels["topogate.dev/podset"] for p in pods)
    assert roles == ["leader", "worker", "worker"]
    name = group_workload_name("infer", 0)
    [workload] = pool.workloads()
    assert workload["metadata"]["name"] == name
    assert [p["name"] for p in workload["spec"]["podSets"]] == ["leader", "worker"]
    assert [p["count"] for p in workload["spec"]["podSets"]] == [1, 2]
    assert condition(workload, "Admitted")["status"] == "True"  # type: ignore[index]
    for pod in pods:
        assert not pod.spec.scheduling_gates
        assert pod.metadata.annotations["topogate.dev/workload"] == name
        assert pod.spec.node_selector[HOST] == pod.spec.node_name
        assert pod.spec.node_selector[POOL] == pool.name  # the flavor's node label


def test_a_plain_pod_group_is_admitted_as_one_gang(serve: Serve, pool: Pool) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 1, ("b0", "r1"): 2})
    core = client.CoreV1Api(pool.api)

    def member(i: int) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"gang-{i}",
                "namespace": pool.namespace,
                "labels": {QUEUE: "q", "kueue.x-k8s.io/pod-group-name": "gang", "rank": str(i)},
                "annotations": {
                    "kueue.x-k8s.io/pod-group-total-count": "2",
                    "kueue.x-k8s.io/pod-group-pod-index-label": "rank",
                    REQUIRED: RACK,
                },
            },
            "spec": {"restartPolicy": "Never", **pod_template(8, {})["spec"]},
        }

    first = submit(pool, member(0))
    assert first["spec"]["schedulingGates"] == [{"name": "topogate.dev/topology"}]
    # One pod of two: no Workload yet, and the pod stays gated.
    with pytest.raises(AssertionError):
        eventually(lambda: pool.workloads(), 3)
    submit(pool, member(1))
    pods = eventually(lambda: all_bound(pool, "kueue.x-k8s.io/pod-group-name=gang", 2), 60)
    assert racks_of(pool, pods) == {"r1"}
    [workload] = pool.workloads()
    assert workload["metadata"]["name"] == "gang"
    assert sorted(r["name"] for r in workload["metadata"]["ownerReferences"]) == [
        "gang-0",
        "gang-1",
    ]
    for pod in pods:
        assert (
            pod.metadata.labels["kueue.x-k8s.io/pod-group-pod-index"] == pod.metadata.labels["rank"]
        )
    # Both succeed: the group is finished.
    for pod in pods:
        pod_status = {"status": {"phase": "Succeeded"}}
        core.patch_namespaced_pod_status(pod.metadata.name, pool.namespace, pod_status)
    eventually(lambda: condition(pool.workloads()[0], "Finished"), 30)


def test_an_evicted_leaderworkerset_group_loses_its_pods_and_waits_again(
    serve: Serve, pool: Pool
) -> None:
    """A higher-priority Job preempts the group: topogate deletes its pods, LeaderWorkerSet's
    StatefulSets make them again (gated by the webhook), and the group waits until the Job
    is gone, then runs again in the rack."""
    serve.start()
    pool.nodes({("b0", "r0"): 2})
    policy = {"preemption": {"withinClusterQueue": "LowerPriority"}}
    high_class = f"{pool.name}-high"
    create_all(
        pool.plane.kubeconfig,
        [
            queue(pool, f"{pool.name}-p", 64, **policy),
            local_queue(pool, "urgent", f"{pool.name}-p"),
            priority_class(high_class, 1000),
        ],
    )
    submit(pool, leaderworkerset("low", size=2, queue="urgent"))
    selector = "leaderworkerset.sigs.k8s.io/name=low"
    first = eventually(lambda: all_bound(pool, selector, 2), 90)
    name = group_workload_name("low", 0)
    submit(pool, urgent_job(high_class, pod_template(8, {})["spec"]))
    eventually(lambda: evicted_and_gone(pool, name, selector, first), 60)
    job_pods = eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=urgent", 2), 90)
    assert racks_of(pool, job_pods) == {"r0"}

    # The StatefulSets made the group's pods again: gated, not bound, while the Job runs.
    def remade() -> list[Any] | None:
        pods = pool.pods(selector)
        return pods if len(pods) == 2 else None

    again = eventually(remade, 60)
    assert all(p.spec.scheduling_gates and not p.spec.node_name for p in again)
    # The Job ends and is deleted: the group is admitted again and runs in the rack.
    batch = client.BatchV1Api(pool.api)
    batch.delete_namespaced_job("urgent", pool.namespace, propagation_policy="Background")

    def rebound() -> list[Any] | None:
        kubelet(pool)
        return all_bound(pool, selector, 2)

    pods = eventually(rebound, 90)
    assert racks_of(pool, pods) == {"r0"}
    again_admitted = next(w for w in pool.workloads() if w["metadata"]["name"] == name)
    assert condition(again_admitted, "Admitted")["status"] == "True"  # type: ignore[index]


def test_a_single_queued_pod_is_admitted_alone(serve: Serve, pool: Pool) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 1})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "solo", "labels": {QUEUE: "q"}, "annotations": {REQUIRED: RACK}},
        "spec": {"restartPolicy": "Never", **pod_template(8, {})["spec"]},
    }
    created = submit(pool, pod)
    assert created["spec"]["schedulingGates"] == [{"name": "topogate.dev/topology"}]
    [bound] = eventually(lambda: all_bound(pool, "", 1), 60)
    [workload] = pool.workloads()
    assert workload["metadata"]["name"].startswith("pod-solo-")
    assert bound.metadata.annotations["topogate.dev/workload"] == workload["metadata"]["name"]
