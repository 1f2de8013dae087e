"""End to end on the real control plane for Kubeflow Trainer v2's TrainJob
(trainer.kubeflow.org/v1alpha1), run by Kubeflow Trainer's own controller manager v2.2.1
(built by hack/controlplane/build.sh, with its CRDs and webhooks) on JobSet's controller:
`topogate serve` suspends a queued TrainJob, reads its PodSets from its
ClusterTrainingRuntime, admits them as one gang and starts it through its runtime patch;
the trainer makes the JobSet, JobSet's controller the Jobs, the Job controller the pods
(gated), the ungater releases them into one rack and kube-scheduler binds them. Preempted,
it is suspended again, its pods go, and it waits in its queue until it runs again.
"""

from __future__ import annotations

import json
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
from topogate.testing.controlplane import ControlPlane
from topogate.testing.localcluster import create_all

pytestmark = pytest.mark.cluster

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
QUEUE = "kueue.x-k8s.io/queue-name"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER = ("trainer.kubeflow.org", "v1alpha1")

serve = test_e2e.serve
pool = test_e2e.pool


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    control_plane.start_trainer()  # Kubeflow Trainer, its CRDs and webhooks, on JobSet's
    test_e2e.install_e2e_topology(control_plane)
    yield control_plane


def runtime(name: str, level: str = RACK) -> dict[str, Any]:
    """A torch ClusterTrainingRuntime: one replicated job, the trainer's ``node``, whose pods
    ask for one rack."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {"labels": {ANCESTOR: "trainer"}},
                                "spec": {
                                    "template": {
                                        "metadata": {"annotations": {REQUIRED: level}},
                                        "spec": {
                                            "restartPolicy": "Never",
                                            "containers": [
                                                {
                                                    "name": "node",
                                                    "image": "example.com/train:1",
                                                    "resources": {
                                                        "limits": {"nvidia.com/gpu": "8"}
                                                    },
                                                }
                                            ],
                                        },
                                    }
                                },
                            },
                        }
                    ]
                }
            },
        },
    }


def trainjob(name: str, runtime_name: str, nodes: int, queue: str = "q") -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": {QUEUE: queue}},
        "spec": {"runtimeRef": {"name": runtime_name}, "trainer": {"numNodes": nodes}},
    }


def read(pool: Pool, name: str) -> Any:
    custom = client.CustomObjectsApi(pool.api)
    return custom.get_namespaced_custom_object(*TRAINER, pool.namespace, "trainjobs", name)


def racks_of(pool: Pool, pods: list[Any]) -> set[str]:
    labels = pool.node_labels()
    return {labels[p.spec.node_name][RACK] for p in pods}


def selector(name: str) -> str:
    return f"jobset.sigs.k8s.io/jobset-name={name}"


def test_a_trainjob_lands_in_one_rack_through_the_jobset_the_trainer_makes(
    serve: Serve, pool: Pool
) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 2, ("b0", "r1"): 3, ("b1", "r2"): 2})
    create_all(pool.plane.kubeconfig, [runtime(f"{pool.name}-torch")])
    created = submit(pool, trainjob("finetune", f"{pool.name}-torch", nodes=3))
    assert created["spec"]["suspend"] is True  # the webhook suspended it
    pods = eventually(lambda: all_bound(pool, selector("finetune"), 3), 180)
    assert racks_of(pool, pods) == {"r1"}  # the only rack with room for all three nodes
    [workload] = pool.workloads()
    assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [("node", 3)]
    assert condition(workload, "Admitted")["status"] == "True"  # type: ignore[index]
    job = read(pool, "finetune")
    assert job["spec"]["suspend"] is False  # started
    [ours] = [p for p in job["spec"]["runtimePatches"] if p["manager"] == "topogate.dev/manager"]
    entries = ours["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert [e["name"] for e in entries] == ["node"]
    for pod in pods:
        assert not pod.spec.scheduling_gates
        assert pod.metadata.labels["topogate.dev/podset"] == "node"
        assert pod.metadata.annotations["topogate.dev/workload"] == workload["metadata"]["name"]
        assert pod.spec.node_selector[HOST] == pod.spec.node_name
        assert pod.spec.node_selector[POOL] == pool.name  # the flavor's node label
    # Ranked as the JobSet's pods: completion index 0..2 of its one child Job.
    ranks = sorted(p.metadata.labels["batch.kubernetes.io/job-completion-index"] for p in pods)
    assert ranks == ["0", "1", "2"]


def test_a_preempted_trainjob_is_suspended_loses_its_pods_and_runs_again(
    serve: Serve, pool: Pool
) -> None:
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
            runtime(f"{pool.name}-torch"),
        ],
    )
    submit(pool, trainjob("low", f"{pool.name}-torch", nodes=2, queue="urgent"))
    first = eventually(lambda: all_bound(pool, selector("low"), 2), 180)
    [workload] = pool.workloads()
    name = workload["metadata"]["name"]
    container = runtime("x")["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]
    submit(pool, urgent_job(high_class, container["spec"]["template"]["spec"]))
    eventually(lambda: evicted_and_gone(pool, name, selector("low"), first), 120)
    assert read(pool, "low")["spec"]["suspend"] is True
    job_pods = eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=urgent", 2), 90)
    assert racks_of(pool, job_pods) == {"r0"}

    batch = client.BatchV1Api(pool.api)
    batch.delete_namespaced_job("urgent", pool.namespace, propagation_policy="Background")

    def rebound() -> list[Any] | None:
        kubelet(pool)
        return all_bound(pool, selector("low"), 2)

    pods = eventually(rebound, 180)
    assert racks_of(pool, pods) == {"r0"}
    assert read(pool, "low")["spec"]["suspend"] is False
    again = next(w for w in pool.workloads() if w["metadata"]["name"] == name)
    assert condition(again, "Admitted")["status"] == "True"  # type: ignore[index]


def test_a_trainjob_whose_runtime_asks_for_an_unknown_level_is_refused_naming_it(
    serve: Serve, pool: Pool
) -> None:
    """topogate's validating webhook reads the runtime's templates as the Workload will and
    names the runtime's field; a TrainJob naming no runtime is refused at spec.runtimeRef."""
    serve.start()
    create_all(pool.plane.kubeconfig, [runtime(f"{pool.name}-row", level="example.com/row")])
    custom = client.CustomObjectsApi(pool.api)

    def refusal(job: dict[str, Any]) -> str | None:
        """The refusal, once the webhook has seen this test's queue and runtime (until then
        it leaves the job to the job sync); a dry run makes nothing."""
        job["metadata"]["namespace"] = pool.namespace
        try:
            custom.create_namespaced_custom_object(
                *TRAINER, pool.namespace, "trainjobs", job, dry_run="All"
            )
        except client.ApiException as refused:
            return str(json.loads(refused.body or "{}")["message"])
        return None

    message = eventually(lambda: refusal(trainjob("typo", f"{pool.name}-row", 2)), 30)
    assert "TrainJob" in message and "typo" in message, message
    assert (
        f"ClusterTrainingRuntime {pool.name}-row: spec.template.spec.replicatedJobs[0]"
        ".template.spec.template.metadata.annotations" in message
    ), message
    assert "'example.com/row' is not a level of topology" in message, message
    # The trainer's own webhook refuses it too ("spec.RuntimeRef"): whichever answers first.
    missing = refusal(trainjob("lost", f"{pool.name}-missing", 2))
    assert missing is not None and "spec.runtimeref" in missing.lower(), missing
