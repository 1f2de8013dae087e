"""End to end on the real control plane for Kubeflow's MPIJob (kubeflow.org/v2beta1), run by
Kubeflow's own mpi-operator v0.8.2 (built by hack/controlplane/build.sh, with its CRD):
`topogate serve` suspends a queued MPIJob through spec.runPolicy.suspend, admits its launcher
and workers as one gang, starts it; the operator makes the worker pods and the launcher Job
(kube-controller-manager's Job controller its pod), all gated by the templates topogate
marked; the ungater releases them into one rack, workers in replica-index order, and
kube-scheduler binds them. Preempted, it is suspended again, the operator deletes its workers
and suspends its launcher Job, and it waits in its queue until it runs again.

No kubelet runs here: pods are bound, never Running, so the launcher never starts mpirun and
the MPIJob never gets Running or Succeeded; what completes is admission, placement and
binding, eviction and requeue.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests import test_e2e
from tests.cluster import eventually
from tests.kit import written_domains
from tests.test_e2e import HOST, POOL, RACK, Pool, Serve, all_bound, condition, submit
from tests.test_preemption_e2e import (
    evicted_and_gone,
    kubelet,
    local_queue,
    priority_class,
    queue,
    urgent_job,
)
from topogate.testing import mpioperator
from topogate.testing.controlplane import ControlPlane
from topogate.testing.localcluster import create_all

pytestmark = pytest.mark.cluster

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
OFFSET = "kueue.x-k8s.io/pod-index-offset"
QUEUE = "kueue.x-k8s.io/queue-name"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_NAME = "training.kubeflow.org/job-name"
JOB_ROLE = "training.kubeflow.org/job-role"  # the mpi-operator's PodSet label: launcher, worker
PODSET = "topogate.dev/podset"

serve = test_e2e.serve
pool = test_e2e.pool


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    control_plane.start_mpi_operator()  # Kubeflow's operator and its v2beta1 CRD
    test_e2e.install_e2e_topology(control_plane)
    yield control_plane


def replica(replicas: int, gpus: int, name: str) -> dict[str, Any]:
    # Launcher and workers in one rack: the same required level and Kueue's group name on both.
    together = {REQUIRED: RACK, GROUP_NAME: "all"}
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "replicas": replicas,
        "restartPolicy": "Never",
        "template": {
            "metadata": {"annotations": together},
            "spec": {
                "containers": [
                    {"name": name, "image": "example.com/mpi:1", "resources": {"limits": limits}}
                ]
            },
        },
    }


def mpijob(
    name: str, workers: int, queue: str = "q", launcher_as_worker: bool = False
) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "labels": {QUEUE: queue}},
        "spec": {
            "slotsPerWorker": 8,
            "runLauncherAsWorker": launcher_as_worker,
            "mpiReplicaSpecs": {
                # A launcher that only runs mpirun asks no GPU; one that is also rank 0 does.
                "Launcher": replica(1, 8 if launcher_as_worker else 0, "launcher"),
                "Worker": replica(workers, 8, "worker"),
            },
        },
    }


def launcher_suspended(pool: Pool, name: str) -> bool:
    """The operator's launcher Job of MPIJob ``name`` is suspended."""
    batch = client.BatchV1Api(pool.api)
    launcher = batch.read_namespaced_job(f"{name}-launcher", pool.namespace)
    return bool(launcher.spec and launcher.spec.suspend)


def read(pool: Pool, name: str) -> Any:
    custom = client.CustomObjectsApi(pool.api)
    return custom.get_namespaced_custom_object(
        "kubeflow.org", "v2beta1", pool.namespace, "mpijobs", name
    )


def racks_of(pool: Pool, pods: list[Any]) -> set[str]:
    labels = pool.node_labels()
    return {labels[p.spec.node_name][RACK] for p in pods}


def launcher_assignment(workload: dict[str, Any]) -> dict[str, Any]:
    [assignment] = [
        a for a in workload["status"]["admission"]["podSetAssignments"] if a["name"] == "launcher"
    ]
    return dict(assignment)


def in_rank_order(workload: dict[str, Any], pods: list[Any], offset: int = 0) -> None:
    """Worker rank r (its replica-index less the offset) on the r-th slot the Workload's
    worker PodSet was assigned."""
    [assignment] = [
        a for a in workload["status"]["admission"]["podSetAssignments"] if a["name"] == "worker"
    ]
    slots = [
        d["values"][-1]
        for d in written_domains(assignment["topologyAssignment"])
        for _ in range(d["count"])
    ]
    workers = [p for p in pods if p.metadata.labels[PODSET] == "worker"]
    by_rank = {int(p.metadata.labels[REPLICA_INDEX]) - offset: p.spec.node_name for p in workers}
    assert [by_rank[r] for r in range(len(slots))] == slots


def test_an_mpijob_lands_in_one_rack_launcher_and_workers_together(
    serve: Serve, pool: Pool
) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 2, ("b0", "r1"): 3, ("b1", "r2"): 2})
    created = submit(pool, mpijob("allreduce", workers=3))
    assert created["spec"]["runPolicy"]["suspend"] is True  # the webhook suspended it
    selector = f"{JOB_NAME}=allreduce"
    pods = eventually(lambda: all_bound(pool, selector, 4), 120)
    assert racks_of(pool, pods) == {"r1"}  # the only rack with room for the three workers
    roles = sorted((p.metadata.labels[PODSET], p.metadata.labels[JOB_ROLE]) for p in pods)
    assert roles == [("launcher", "launcher")] + [("worker", "worker")] * 3
    [launcher] = [p for p in pods if p.metadata.labels[PODSET] == "launcher"]
    assert launcher.metadata.name.startswith("allreduce-launcher-")  # its Job's pod
    assert REPLICA_INDEX not in launcher.metadata.labels  # only a launcher-as-worker has one
    [workload] = pool.workloads()
    assert [p["name"] for p in workload["spec"]["podSets"]] == ["launcher", "worker"]
    assert [p["count"] for p in workload["spec"]["podSets"]] == [1, 3]
    assert workload["spec"]["podSets"][1]["topologyRequest"]["podIndexLabel"] == REPLICA_INDEX
    assert condition(workload, "Admitted")["status"] == "True"  # type: ignore[index]
    in_rank_order(workload, pods)
    job = read(pool, "allreduce")
    assert job["spec"]["runPolicy"]["suspend"] is False  # started
    assert {"type": "Created", "status": "True"}.items() <= job["status"]["conditions"][0].items()
    for pod in pods:
        assert not pod.spec.scheduling_gates
        assert pod.metadata.annotations["topogate.dev/workload"] == workload["metadata"]["name"]
        assert pod.spec.node_selector[HOST] == pod.spec.node_name
        if pod.metadata.labels[PODSET] == "worker":  # the flavor's node label
            assert pod.spec.node_selector[POOL] == pool.name
    # The launcher asks no resource the ClusterQueue covers: no flavor, so no flavor label on
    # it; its topology assignment alone puts it in the workers' rack.
    assert not launcher_assignment(workload).get("flavors")
    # No kubelet: the launcher's Job counts its pod active, the job never runs mpirun.
    assert not any(c["type"] == "Succeeded" for c in job["status"]["conditions"])


def test_a_launcher_that_is_also_a_worker_ranks_the_workers_from_one(
    serve: Serve, pool: Pool
) -> None:
    """runLauncherAsWorker: the launcher is rank 0 (replica-index 0), the operator numbers
    the workers 1..n, and the webhook's pod-index-offset makes them ranks 0..n-1 of their
    PodSet."""
    serve.start()
    pool.nodes({("b0", "r0"): 2, ("b0", "r1"): 3, ("b1", "r2"): 2})
    created = submit(pool, mpijob("hybrid", workers=2, launcher_as_worker=True))
    worker_template = created["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    assert worker_template["metadata"]["annotations"][OFFSET] == "1"
    pods = eventually(lambda: all_bound(pool, f"{JOB_NAME}=hybrid", 3), 120)
    assert racks_of(pool, pods) == {"r1"}  # three 8-GPU pods: the only rack with room
    indexes = sorted((p.metadata.labels[PODSET], p.metadata.labels[REPLICA_INDEX]) for p in pods)
    assert indexes == [("launcher", "0"), ("worker", "1"), ("worker", "2")]
    [workload] = pool.workloads()
    assert [p["count"] for p in workload["spec"]["podSets"]] == [1, 2]
    in_rank_order(workload, pods, offset=1)


def test_a_preempted_mpijob_is_suspended_loses_its_pods_and_runs_again(
    serve: Serve, pool: Pool
) -> None:
    """A higher-priority Job preempts it: topogate suspends the MPIJob, the operator deletes
    its workers and suspends its launcher Job (whose pod the Job controller deletes), its
    Workload waits in its queue, and once the Job is gone it is admitted and started again in
    the rack."""
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
    submit(pool, mpijob("low", workers=2, queue="urgent"))
    selector = f"{JOB_NAME}=low"
    first = eventually(lambda: all_bound(pool, selector, 3), 120)
    [workload] = pool.workloads()
    name = workload["metadata"]["name"]
    submit(pool, urgent_job(high_class, replica(1, 8, "trainer")["template"]["spec"]))
    eventually(lambda: evicted_and_gone(pool, name, selector, first), 90)
    assert read(pool, "low")["spec"]["runPolicy"]["suspend"] is True
    assert launcher_suspended(pool, "low")
    job_pods = eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=urgent", 2), 90)
    assert racks_of(pool, job_pods) == {"r0"}
    assert pool.pods(selector) == []  # suspended: the operator makes none while the Job runs

    batch = client.BatchV1Api(pool.api)
    batch.delete_namespaced_job("urgent", pool.namespace, propagation_policy="Background")

    def rebound() -> list[Any] | None:
        kubelet(pool)
        return all_bound(pool, selector, 3)

    pods = eventually(rebound, 120)
    assert racks_of(pool, pods) == {"r0"}
    assert read(pool, "low")["spec"]["runPolicy"]["suspend"] is False
    assert not launcher_suspended(pool, "low")
    again = next(w for w in pool.workloads() if w["metadata"]["name"] == name)
    assert condition(again, "Admitted")["status"] == "True"  # type: ignore[index]
    in_rank_order(again, pods)


def test_its_health_check_listens_on_the_port_the_plane_chose(cluster: ControlPlane) -> None:
    """Upstream serves it on 8080 of every interface; build.sh's binary takes the free port the
    plane gave it, so another plane on the machine can run the operator too."""
    port = eventually(lambda: mpioperator.health_port(cluster), 30)
    assert port != mpioperator.UPSTREAM_HEALTH_PORT, (
        "the operator ignores MPI_OPERATOR_HEALTH_PORT: built before build.sh added "
        "mpi-operator-health-port.go? run hack/controlplane/build.sh"
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as answer:
        assert answer.status == 200
