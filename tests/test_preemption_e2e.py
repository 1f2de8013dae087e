"""Preemption and reclamation on the real control plane: kube-apiserver, kube-scheduler and
the Job controller, with `serve` and its webhooks."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client

from tests import test_e2e
from tests.cluster import api_client, eventually
from tests.test_e2e import RACK, Pool, Serve, all_bound, condition, job, submit
from topogate.testing.localcluster import create_all

pytestmark = pytest.mark.cluster

cluster = test_e2e.cluster
serve = test_e2e.serve
pool = test_e2e.pool

REQUIRED_RACK = {"kueue.x-k8s.io/podset-required-topology": RACK}


def queue(pool: Pool, name: str, gpus: int, **spec: Any) -> dict[str, Any]:
    quota = {"name": "nvidia.com/gpu", "nominalQuota": gpus}
    return {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            **spec,
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": pool.name, "resources": [quota]}],
                }
            ],
        },
    }


def local_queue(pool: Pool, name: str, cluster_queue: str) -> dict[str, Any]:
    return {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": pool.namespace},
        "spec": {"clusterQueue": cluster_queue},
    }


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def with_priority(obj: dict[str, Any], name: str) -> dict[str, Any]:
    obj["spec"]["template"]["spec"]["priorityClassName"] = name
    return obj


def kubelet(pool: Pool) -> None:
    """What a kubelet does for a pod being deleted: confirms its end (no kubelet runs here,
    so a deleted pod would stay Terminating for ever)."""
    core = client.CoreV1Api(api_client(pool.plane))
    for pod in core.list_namespaced_pod(pool.namespace).items:
        if pod.metadata.deletion_timestamp is not None:
            try:
                core.delete_namespaced_pod(
                    pod.metadata.name, pool.namespace, grace_period_seconds=0
                )
            except client.ApiException as error:
                if error.status != 404:
                    raise


def bound_with_kubelet(pool: Pool, job_name: str, count: int) -> list[Any] | None:
    kubelet(pool)
    return all_bound(pool, f"batch.kubernetes.io/job-name={job_name}", count)


def urgent_job(priority: str, pod_spec: dict[str, Any], queue: str = "urgent") -> dict[str, Any]:
    """A 2-pod indexed Job of the priority class ``priority`` that requires a rack: what the
    kinds' e2e tests submit to preempt the job they admitted first."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "urgent", "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"annotations": REQUIRED_RACK},
                "spec": {"restartPolicy": "Never", **pod_spec, "priorityClassName": priority},
            },
        },
    }


def evicted_and_gone(pool: Pool, workload: str, selector: str, first: list[Any]) -> bool:
    """The Workload is evicted and holds no admission, and none of the pods ``first`` (found
    by ``selector``) is left; ends what is being deleted, as a kubelet would."""
    kubelet(pool)
    found = next(w for w in pool.workloads() if w["metadata"]["name"] == workload)
    gone = {p.metadata.uid for p in first}.isdisjoint({p.metadata.uid for p in pool.pods(selector)})
    return bool(
        condition(found, "Evicted") and not (found.get("status") or {}).get("admission") and gone
    )


def suspended(pool: Pool, name: str) -> bool:
    batch = client.BatchV1Api(api_client(pool.plane))
    return bool(batch.read_namespaced_job(name, pool.namespace).spec.suspend)


@pytest.fixture
def priorities(cluster: Any) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:6]
    low, high = f"low-{tag}", f"high-{tag}"
    create_all(cluster.kubeconfig, [priority_class(low, 10), priority_class(high, 1000)])
    return low, high


def test_a_high_priority_job_preempts_a_lower_one_and_runs_in_its_rack(
    serve: Serve, pool: Pool, priorities: tuple[str, str]
) -> None:
    low, high = priorities
    serve.start()
    pool.nodes({("b0", "r0"): 2})
    policy = {"preemption": {"withinClusterQueue": "LowerPriority"}}
    create_all(pool.plane.kubeconfig, [queue(pool, f"{pool.name}-p", 64, **policy)])
    create_all(pool.plane.kubeconfig, [local_queue(pool, "urgent", f"{pool.name}-p")])
    submit(pool, with_priority(job("filler", 2, annotations=REQUIRED_RACK, queue="urgent"), low))
    eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=filler", 2), 60)
    submit(pool, with_priority(job("urgent", 2, annotations=REQUIRED_RACK, queue="urgent"), high))
    victim = eventually(
        lambda: (w := pool.workload_of("filler")) and condition(w, "Evicted") and w, 60
    )
    assert condition(victim, "Evicted")["reason"] == "Preempted"
    assert condition(victim, "Preempted")["reason"] == "InClusterQueue"
    assert "urgent" in condition(victim, "Evicted")["message"]
    eventually(lambda: suspended(pool, "filler"), 30)
    pods = eventually(lambda: bound_with_kubelet(pool, "urgent", 2), 90)
    assert {p.spec.node_name for p in pods} == set(pool.node_labels())
    requeued = pool.workload_of("filler")
    assert requeued is not None and not requeued["status"].get("admission")
    assert condition(requeued, "Evicted")["status"] == "True"
    assert condition(requeued, "QuotaReserved")["status"] == "False"  # waiting in its queue
    # The urgent job goes: the victim is admitted again and runs, no longer evicted.
    batch = client.BatchV1Api(api_client(pool.plane))
    batch.delete_namespaced_job("urgent", pool.namespace, propagation_policy="Background")
    eventually(lambda: bound_with_kubelet(pool, "filler", 2), 90)
    again = pool.workload_of("filler")
    assert again is not None and condition(again, "Admitted")["status"] == "True"
    evicted = condition(again, "Evicted")
    assert evicted["status"] == "False" and evicted["message"].startswith("Previously: ")
    assert not suspended(pool, "filler")


def test_a_lender_reclaims_what_a_borrower_took(serve: Serve, pool: Pool) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 2, ("b0", "r1"): 2})
    cohort = f"c-{pool.name}"
    lender, borrower = f"{pool.name}-lender", f"{pool.name}-borrower"
    create_all(
        pool.plane.kubeconfig,
        [
            queue(pool, lender, 16, cohort=cohort, preemption={"reclaimWithinCohort": "Any"}),
            queue(pool, borrower, 16, cohort=cohort),
        ],
    )
    create_all(
        pool.plane.kubeconfig,
        [local_queue(pool, "lend", lender), local_queue(pool, "borrow", borrower)],
    )
    # The borrower takes the whole cohort (32 GPUs, 16 of them the lender's).
    submit(pool, job("b1", 2, annotations=REQUIRED_RACK, queue="borrow"))
    submit(pool, job("b2", 2, annotations=REQUIRED_RACK, queue="borrow"))
    eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=b1", 2), 60)
    eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=b2", 2), 60)
    submit(pool, job("mine", 2, annotations=REQUIRED_RACK, queue="lend"))
    pods = eventually(lambda: bound_with_kubelet(pool, "mine", 2), 90)
    labels = pool.node_labels()
    assert len({labels[p.spec.node_name][RACK] for p in pods}) == 1
    evicted = [n for n in ("b1", "b2") if condition(pool.workload_of(n), "Evicted")]
    assert len(evicted) == 1  # one of the borrower's jobs: its own nominal 16 stays
    assert condition(pool.workload_of(evicted[0]), "Preempted")["reason"] == ("InCohortReclamation")
