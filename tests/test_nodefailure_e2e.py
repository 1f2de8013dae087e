"""Failed-node replacement on the real control plane: kube-apiserver, kube-scheduler and the
Job controller, with `serve` and its webhooks. No kubelet runs: a node is failed by writing its
Ready condition, as the node lifecycle would see a kubelet that stopped reporting."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kubernetes import client

from tests import test_e2e
from tests.cluster import eventually
from tests.kit import written_domains
from tests.test_e2e import RACK, Pool, Serve, condition, job, submit

pytestmark = pytest.mark.cluster

cluster = test_e2e.cluster
serve = test_e2e.serve
pool = test_e2e.pool

REQUIRED_RACK = {"kueue.x-k8s.io/podset-required-topology": RACK}


def fail(pool: Pool, node: str) -> None:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = {
        "type": "Ready",
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "lastTransitionTime": now,
    }
    core = client.CoreV1Api(pool.api)
    core.patch_node_status(node, {"status": {"conditions": [ready]}})


def kubelets_except(pool: Pool, dead: str) -> None:
    """What the kubelets of the healthy nodes do for a pod being deleted: confirm its end.
    The failed node's kubelet is gone, so its pods stay Terminating."""
    core = client.CoreV1Api(pool.api)
    for pod in core.list_namespaced_pod(pool.namespace).items:
        if pod.metadata.deletion_timestamp is not None and pod.spec.node_name != dead:
            try:
                core.delete_namespaced_pod(
                    pod.metadata.name, pool.namespace, grace_period_seconds=0
                )
            except client.ApiException as error:
                if error.status != 404:
                    raise


def live_bound(pool: Pool, name: str, count: int) -> list[Any] | None:
    """The job's pods not being deleted, when ``count`` of them are bound."""
    pods = [
        p
        for p in pool.pods(f"batch.kubernetes.io/job-name={name}")
        if p.metadata.deletion_timestamp is None
    ]
    bound = [p for p in pods if p.spec.node_name]
    return bound if len(pods) == count and len(bound) == count else None


def moved_off(pool: Pool, lost: str) -> list[Any] | None:
    bound = live_bound(pool, "train", 2)
    return bound if bound and lost not in {p.spec.node_name for p in bound} else None


def requeued_elsewhere(pool: Pool, dead: str) -> list[Any] | None:
    kubelets_except(pool, dead)
    bound = live_bound(pool, "train", 2)
    return bound if bound and dead not in {p.spec.node_name for p in bound} else None


def test_a_failed_node_s_pod_comes_back_in_the_same_rack(serve: Serve, pool: Pool) -> None:
    serve.start("--node-failure-grace=2")
    pool.nodes({("b0", "r0"): 3, ("b0", "r1"): 3})
    racks = {n: labels[RACK] for n, labels in pool.node_labels().items()}
    submit(pool, job("train", 2, annotations=REQUIRED_RACK))
    before = eventually(lambda: live_bound(pool, "train", 2), 60)
    nodes = sorted(p.spec.node_name for p in before)
    rack = racks[nodes[0]]
    assert {racks[n] for n in nodes} == {rack}
    lost = nodes[0]
    fail(pool, lost)
    after = eventually(lambda: moved_off(pool, lost), 60)
    moved = sorted(p.spec.node_name for p in after)
    assert {racks[n] for n in moved} == {rack}  # still one rack: the one it had
    assert nodes[1] in moved  # the pod on the healthy node stayed
    workload = pool.workload_of("train")
    assert workload is not None
    assert workload["status"]["unhealthyNodes"] == [{"name": lost}]
    assert condition(workload, "Evicted") is None
    domains = workload["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    assert lost not in [d["values"][-1] for d in written_domains(domains)]


def test_no_room_in_the_rack_evicts_and_requeues(serve: Serve, pool: Pool) -> None:
    serve.start("--node-failure-grace=2")
    pool.nodes({("b0", "r0"): 2, ("b0", "r1"): 2})
    submit(pool, job("train", 2, annotations=REQUIRED_RACK))
    before = eventually(lambda: live_bound(pool, "train", 2), 60)
    dead = before[0].spec.node_name
    fail(pool, dead)
    evicted = eventually(
        lambda: (w := pool.workload_of("train")) and condition(w, "Evicted") and w, 60
    )
    cond = condition(evicted, "Evicted")
    assert cond is not None and cond["reason"] == "NodeFailures"
    assert "no replacement for 1 pod(s) of PodSet" in cond["message"]
    # Requeued, and admitted again on the other rack (the failed node is not Ready).
    again = eventually(lambda: requeued_elsewhere(pool, dead), 90)
    racks = {n: labels[RACK] for n, labels in pool.node_labels().items()}
    assert len({racks[p.spec.node_name] for p in again}) == 1
