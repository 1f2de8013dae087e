"""Partial admission on the real control plane: a Job annotated with Kueue's
``job-min-parallelism`` whose whole gang does not fit is admitted with the largest count that
fits its required rack; the job sync runs it with that parallelism (through the validating
webhook, which lets a Job run at exactly its minimum), the real Job controller creates that
many pods, and each is released into the rack and bound."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests import test_e2e, test_preemption_e2e
from tests.cluster import api_client, eventually
from tests.test_e2e import RACK, Pool, Serve, all_bound, condition, job, submit
from tests.test_preemption_e2e import (
    bound_with_kubelet,
    evicted_and_gone,
    local_queue,
    queue,
    suspended,
    urgent_job,
    with_priority,
)
from topogate.cli import main
from topogate.testing.localcluster import create_all

pytestmark = pytest.mark.cluster

cluster, serve, pool = test_e2e.cluster, test_e2e.serve, test_e2e.pool
priorities = test_preemption_e2e.priorities
MIN = "kueue.x-k8s.io/job-min-parallelism"
REQUIRED_RACK = {"kueue.x-k8s.io/podset-required-topology": RACK}


def test_a_job_with_min_parallelism_runs_the_pods_one_rack_holds(
    serve: Serve, pool: Pool, capsys: pytest.CaptureFixture[str]
) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 2, ("b0", "r1"): 3})
    wanted = job("part", 6, annotations={"kueue.x-k8s.io/podset-required-topology": RACK})
    wanted["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "3"}
    submit(pool, wanted)
    # Six 8-GPU pods in one rack do not fit; rack r1 holds three, the minimum.
    pods = eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=part", 3), 60)
    labels = pool.node_labels()
    assert {labels[p.spec.node_name][RACK] for p in pods} == {"r1"}
    for pod in pods:
        assert not pod.spec.scheduling_gates
        assert pod.spec.node_selector["kubernetes.io/hostname"] == pod.spec.node_name
    running = client.BatchV1Api(pool.api).read_namespaced_job("part", pool.namespace)
    assert running.spec is not None
    assert running.spec.parallelism == 3 and running.spec.completions == 6  # as in Kueue
    assert len(pool.pods("batch.kubernetes.io/job-name=part")) == 3  # no more pods than admitted
    workload = pool.workload_of("part")
    assert workload is not None
    assert (condition(workload, "Admitted") or {}).get("status") == "True"
    assert workload["spec"]["podSets"][0]["count"] == 6
    assert workload["spec"]["podSets"][0]["minCount"] == 3
    [assignment] = workload["status"]["admission"]["podSetAssignments"]
    assert assignment["count"] == 3
    assert assignment["resourceUsage"]["nvidia.com/gpu"] == "24"

    kubeconfig = str(serve.plane.kubeconfig)
    args = ["status", "part", "-n", pool.namespace, "--kubeconfig", kubeconfig]
    assert main(args) == 0
    assert "COUNT 3 of 6 (partial admission, minCount 3)" in capsys.readouterr().out


def test_a_preempted_partial_job_gets_its_parallelism_back_and_runs_again(
    serve: Serve, pool: Pool, priorities: tuple[str, str]
) -> None:
    """Evicted, the Job is suspended and then given its full parallelism back (two writes the
    validating webhook allows, as Kueue's); once the room is free it is admitted partially
    again and runs."""
    low, high = priorities
    serve.start()
    pool.nodes({("b0", "r0"): 2})
    policy = {"preemption": {"withinClusterQueue": "LowerPriority"}}
    create_all(pool.plane.kubeconfig, [queue(pool, f"{pool.name}-p", 64, **policy)])
    create_all(pool.plane.kubeconfig, [local_queue(pool, "urgent", f"{pool.name}-p")])
    partial = with_priority(job("part", 4, annotations=REQUIRED_RACK, queue="urgent"), low)
    partial["metadata"]["annotations"] = {MIN: "1"}
    submit(pool, partial)
    selector = "batch.kubernetes.io/job-name=part"
    first = eventually(lambda: all_bound(pool, selector, 2), 60)
    batch = client.BatchV1Api(api_client(pool.plane))

    def parallelism() -> int | None:
        spec = batch.read_namespaced_job("part", pool.namespace).spec
        return spec.parallelism if spec is not None else None

    assert parallelism() == 2
    evicted = pool.workload_of("part")
    assert evicted is not None
    submit(pool, urgent_job(high, job("urgent", 2)["spec"]["template"]["spec"]))
    eventually(lambda: evicted_and_gone(pool, evicted["metadata"]["name"], selector, first), 90)
    eventually(lambda: suspended(pool, "part") and parallelism() == 4, 60)
    eventually(lambda: bound_with_kubelet(pool, "urgent", 2), 90)
    batch.delete_namespaced_job("urgent", pool.namespace, propagation_policy="Background")
    eventually(lambda: bound_with_kubelet(pool, "part", 2), 90)
    assert parallelism() == 2 and not suspended(pool, "part")
    again = pool.workload_of("part")
    assert again is not None
    assert again["status"]["admission"]["podSetAssignments"][0]["count"] == 2
