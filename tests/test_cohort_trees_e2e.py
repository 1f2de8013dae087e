"""Cohort trees on the real control plane: `serve` watches Cohort objects, refuses a cycle in
the tree, and admits with quota an ancestor cohort holds once the cycle is gone."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests import test_e2e
from tests.cluster import api_client, eventually
from tests.test_e2e import RACK, Pool, Serve, all_bound, condition, job, submit
from tests.test_preemption_e2e import local_queue, queue
from topogate.testing.localcluster import create_all

pytestmark = pytest.mark.cluster

cluster = test_e2e.cluster
serve = test_e2e.serve
pool = test_e2e.pool

REQUIRED_RACK = {"kueue.x-k8s.io/podset-required-topology": RACK}
GROUP, VERSION, PLURAL = "topogate.dev", "v1alpha1", "cohorts"


def cohort(pool: Pool, name: str, parent: str | None, gpus: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if gpus:
        quota = {"name": "nvidia.com/gpu", "nominalQuota": gpus}
        spec["resourceGroups"] = [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [{"name": pool.name, "resources": [quota]}],
            }
        ]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Cohort",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_a_cycle_stops_the_queue_and_an_ancestors_quota_admits_once_it_is_gone(
    serve: Serve, pool: Pool
) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 2})
    team, org = f"team-{pool.name}", f"org-{pool.name}"
    custom = client.CustomObjectsApi(api_client(pool.plane))
    # team -> org -> team: a cycle; org also holds 16 GPUs for its subtree.
    create_all(pool.plane.kubeconfig, [cohort(pool, team, org), cohort(pool, org, team, 16)])
    cq = f"{pool.name}-team"
    create_all(pool.plane.kubeconfig, [queue(pool, cq, 8, cohortName=team)])
    create_all(pool.plane.kubeconfig, [local_queue(pool, "team", cq)])
    # 16 GPUs: twice the queue's nominal quota, so only the tree's quota can admit it.
    submit(pool, job("big", 2, annotations=REQUIRED_RACK, queue="team"))
    waiting = eventually(
        lambda: (w := pool.workload_of("big")) and condition(w, "QuotaReserved") and w, 60
    )
    reserved = condition(waiting, "QuotaReserved")
    assert reserved is not None and reserved["message"] == (
        f"ClusterQueue {cq} is inactive: its Cohort {team} is in a cycle "
        f"({team} -> {org} -> {team})"
    )
    # The cycle is cut: org is the root, and its 16 GPUs are lent down to team.
    custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, org, {"spec": {"parentName": None}})
    pods = eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=big", 2), 90)
    assert len(pods) == 2
    admitted = pool.workload_of("big")
    assert admitted is not None
    assert admitted["status"]["admission"]["clusterQueue"] == cq
    # A root with limits is refused by the API server (the CRD's CEL rule), naming why.
    bad = cohort(pool, f"bad-{pool.name}", None, 8)
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 1
    with pytest.raises(client.ApiException) as refused:
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, bad)
    assert refused.value.status == 422
    assert "borrowingLimit and lendingLimit need a parentName" in str(refused.value.body)
