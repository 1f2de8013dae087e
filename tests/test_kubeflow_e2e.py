"""End to end on the real control plane for Kubeflow's PyTorchJob (kubeflow.org/v1), run by
Kubeflow's own training-operator v1.8.1 (built by hack/controlplane/build.sh, with its CRD and
validating webhook): `topogate serve` suspends a queued PyTorchJob through
spec.runPolicy.suspend, admits its master and workers as one gang, starts it, the operator
makes the pods (gated by topogate's webhook), the ungater releases them into one rack in
replica-index order and kube-scheduler binds them. Preempted, it is suspended again, the
operator deletes its pods, and it waits in its queue until it runs again.
"""

from __future__ import annotations

import json
import urllib.error
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
from topogate.testing import trainingoperator
from topogate.testing.controlplane import ControlPlane
from topogate.testing.localcluster import create_all

pytestmark = pytest.mark.cluster

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
QUEUE = "kueue.x-k8s.io/queue-name"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
REPLICA_TYPE = "training.kubeflow.org/replica-type"

serve = test_e2e.serve
pool = test_e2e.pool


@pytest.fixture(scope="module")
def rotator_file_before() -> bool:
    """Whether the path in /tmp the operator's cert rotator looks for had a file before the
    plane started the operator (another run's, left as it is)."""
    return trainingoperator.ROTATOR_CERT.exists()


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, rotator_file_before: bool) -> Iterator[ControlPlane]:
    control_plane.start_training_operator()  # Kubeflow's operator, CRD and webhook
    test_e2e.install_e2e_topology(control_plane)
    yield control_plane


def replica(replicas: int, gpus: int = 8) -> dict[str, Any]:
    # Master and workers in one rack: the same required level and Kueue's group name on both.
    together = {REQUIRED: RACK, GROUP_NAME: "all"}
    return {
        "replicas": replicas,
        "restartPolicy": "Never",
        "template": {
            "metadata": {"annotations": together},
            "spec": {
                "containers": [
                    {
                        "name": "pytorch",  # the operator's webhook wants one so named
                        "image": "example.com/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ]
            },
        },
    }


def pytorchjob(name: str, workers: int, queue: str = "q") -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": {QUEUE: queue}},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}},
    }


def read(pool: Pool, name: str) -> Any:
    custom = client.CustomObjectsApi(pool.api)
    return custom.get_namespaced_custom_object(
        "kubeflow.org", "v1", pool.namespace, "pytorchjobs", name
    )


def served(plane: ControlPlane, group_version: str, plural: str) -> bool:
    """Whether the API server serves ``plural`` in ``group_version`` (its discovery)."""
    try:
        found = plane.request("GET", f"/apis/{group_version}")
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return False
        raise
    return any(r["name"] == plural for r in found.get("resources") or [])


def racks_of(pool: Pool, pods: list[Any]) -> set[str]:
    labels = pool.node_labels()
    return {labels[p.spec.node_name][RACK] for p in pods}


def test_a_pytorchjob_lands_in_one_rack_master_and_workers_together(
    serve: Serve, pool: Pool
) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 2, ("b0", "r1"): 3, ("b1", "r2"): 2})
    created = submit(pool, pytorchjob("finetune", workers=2))
    assert created["spec"]["runPolicy"]["suspend"] is True  # the webhook suspended it
    selector = "training.kubeflow.org/job-name=finetune"
    pods = eventually(lambda: all_bound(pool, selector, 3), 120)
    assert racks_of(pool, pods) == {"r1"}  # the only rack with room for the whole gang
    roles = sorted(
        (p.metadata.labels["topogate.dev/podset"], p.metadata.labels[REPLICA_INDEX]) for p in pods
    )
    assert roles == [("master", "0"), ("worker", "0"), ("worker", "1")]
    [workload] = pool.workloads()
    assert [p["name"] for p in workload["spec"]["podSets"]] == ["master", "worker"]
    assert [p["count"] for p in workload["spec"]["podSets"]] == [1, 2]
    assert workload["spec"]["podSets"][1]["topologyRequest"]["podIndexLabel"] == REPLICA_INDEX
    assert condition(workload, "Admitted")["status"] == "True"  # type: ignore[index]
    assert read(pool, "finetune")["spec"]["runPolicy"]["suspend"] is False  # started
    for pod in pods:
        assert not pod.spec.scheduling_gates
        assert pod.metadata.labels[REPLICA_TYPE] == pod.metadata.labels["topogate.dev/podset"]
        assert pod.metadata.annotations["topogate.dev/workload"] == workload["metadata"]["name"]
        assert pod.spec.node_selector[HOST] == pod.spec.node_name
        assert pod.spec.node_selector[POOL] == pool.name  # the flavor's node label


def test_a_preempted_pytorchjob_is_suspended_loses_its_pods_and_runs_again(
    serve: Serve, pool: Pool
) -> None:
    """A higher-priority Job preempts it: topogate suspends the PyTorchJob, the operator
    deletes its pods, its Workload waits in its queue, and once the Job is gone it is
    admitted and started again in the rack."""
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
    submit(pool, pytorchjob("low", workers=1, queue="urgent"))
    selector = "training.kubeflow.org/job-name=low"
    first = eventually(lambda: all_bound(pool, selector, 2), 120)
    [workload] = pool.workloads()
    name = workload["metadata"]["name"]
    submit(pool, urgent_job(high_class, replica(1)["template"]["spec"]))
    eventually(lambda: evicted_and_gone(pool, name, selector, first), 90)
    assert read(pool, "low")["spec"]["runPolicy"]["suspend"] is True
    job_pods = eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=urgent", 2), 90)
    assert racks_of(pool, job_pods) == {"r0"}
    assert pool.pods(selector) == []  # suspended: the operator makes none while the Job runs

    batch = client.BatchV1Api(pool.api)
    batch.delete_namespaced_job("urgent", pool.namespace, propagation_policy="Background")

    def rebound() -> list[Any] | None:
        kubelet(pool)
        return all_bound(pool, selector, 2)

    pods = eventually(rebound, 120)
    assert racks_of(pool, pods) == {"r0"}
    assert read(pool, "low")["spec"]["runPolicy"]["suspend"] is False
    again = next(w for w in pool.workloads() if w["metadata"]["name"] == name)
    assert condition(again, "Admitted")["status"] == "True"  # type: ignore[index]


def test_a_pytorchjob_asking_for_an_unknown_level_is_refused_naming_its_template(
    serve: Serve, pool: Pool
) -> None:
    """topogate's validating webhook reads the replica templates as the Workload will, and
    names the one at fault; MPIJob (kubeflow.org/v2beta1, which training-operator does not
    serve) is logged once as not watched (no crash loop) when this plane lacks its CRD, and
    never when test_mpijob_e2e installed it on the shared plane first."""
    mpijobs_served = served(pool.plane, "kubeflow.org/v2beta1", "mpijobs")
    serve.start()
    job = pytorchjob("typo", workers=1)
    for spec in job["spec"]["pytorchReplicaSpecs"].values():  # one group: both alike
        spec["template"]["metadata"]["annotations"][REQUIRED] = "example.com/row"
    job["metadata"]["namespace"] = pool.namespace
    custom = client.CustomObjectsApi(pool.api)

    def refusal() -> str | None:
        """The webhook's refusal, once it has seen this test's queue (until then it leaves
        the job to the admitter, which reports it as Pending); a dry run makes nothing."""
        try:
            custom.create_namespaced_custom_object(
                "kubeflow.org", "v1", pool.namespace, "pytorchjobs", job, dry_run="All"
            )
        except client.ApiException as refused:
            return str(json.loads(refused.body or "{}")["message"])
        return None

    message = eventually(refusal, 30)
    assert "PyTorchJob" in message and "typo" in message, message
    assert "spec.pytorchReplicaSpecs[Master].template.metadata.annotations" in message, message
    assert "'example.com/row' is not a level of topology" in message, message
    said = [line for line in serve.log().splitlines() if "mpijobs" in line and "served" in line]
    if mpijobs_served:
        assert said == [], said
    else:
        assert len(said) == 1 and "its CRD is not installed" in said[0], said


def test_the_operator_leaves_nothing_in_tmp(
    cluster: ControlPlane, rotator_file_before: bool
) -> None:
    """Its cert rotator looks once, at start, for a file at a fixed path in /tmp: the plane
    writes it for that moment only (its certificates live in the plane's directory)."""
    log = (cluster.directory / f"{trainingoperator.NAME}.log").read_bytes()
    assert trainingoperator.ROTATOR_SATISFIED in log  # the file was there when it looked
    assert trainingoperator.ROTATOR_CERT.exists() == rotator_file_before
    if not rotator_file_before:
        assert not trainingoperator.ROTATOR_CERT.parents[1].exists()  # nor its directories
