"""Fair-sharing preemption on the real control plane (`serve --fair-sharing`): two teams under
one org Cohort; the busy team borrows the idle team's quota; when the idle team comes back with
a rack-bound gang that needs more than its own quota, fair sharing takes the borrower's
lowest-priority work (classical preemption would refuse: the gang must borrow to fit) and the
gang runs in one rack, its pods bound there by kube-scheduler."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests import test_e2e, test_preemption_e2e
from tests.cluster import eventually
from tests.test_cohort_trees_e2e import cohort
from tests.test_e2e import RACK, Pool, Serve, all_bound, condition, job, submit
from tests.test_preemption_e2e import (
    bound_with_kubelet,
    local_queue,
    queue,
    suspended,
    with_priority,
)
from topogate.testing.localcluster import create_all

pytestmark = pytest.mark.cluster

cluster = test_e2e.cluster
serve = test_e2e.serve
pool = test_e2e.pool
priorities = test_preemption_e2e.priorities

REQUIRED_RACK = {"kueue.x-k8s.io/podset-required-topology": RACK}


def _job(name: str, pods: int, queue_name: str, priority: str) -> dict[str, Any]:
    return with_priority(job(name, pods, annotations=REQUIRED_RACK, queue=queue_name), priority)


def _bound(pool: Pool, job_name: str, count: int) -> Callable[[], list[Any] | None]:
    return lambda: all_bound(pool, f"batch.kubernetes.io/job-name={job_name}", count)


def test_a_returning_team_takes_back_its_share_by_fair_sharing_and_runs_in_one_rack(
    serve: Serve, pool: Pool, priorities: tuple[str, str]
) -> None:
    low, high = priorities
    serve.start("--fair-sharing")
    pool.nodes({("b0", "r0"): 4, ("b0", "r1"): 4})  # 64 GPUs, 32 per rack
    org = f"org-{pool.name}"
    idle, busy = f"{pool.name}-research", f"{pool.name}-product"
    reclaim = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    create_all(pool.plane.kubeconfig, [cohort(pool, org, None)])
    create_all(
        pool.plane.kubeconfig,
        [
            queue(pool, idle, 16, cohortName=org, preemption=reclaim),
            queue(pool, busy, 48, cohortName=org),
        ],
    )
    create_all(
        pool.plane.kubeconfig,
        [local_queue(pool, "research", idle), local_queue(pool, "product", busy)],
    )
    # The busy team takes the whole org: a rack-wide low-priority gang and two high ones.
    submit(pool, _job("product-low", 4, "product", low))
    eventually(_bound(pool, "product-low", 4), 90)
    for name in ("product-high-1", "product-high-2"):
        submit(pool, _job(name, 2, "product", high))
        eventually(_bound(pool, name, 2), 90)
    # The idle team returns with 24 GPUs in one rack: 8 more than its nominal quota, so it
    # borrows to fit, which only fair sharing allows here (borrowWithinCohort is Never).
    submit(pool, _job("research", 3, "research", low))
    victim = eventually(
        lambda: (w := pool.workload_of("product-low")) and condition(w, "Evicted") and w, 90
    )
    preempted = condition(victim, "Preempted")
    assert preempted is not None and preempted["reason"] == "InCohortFairSharing"
    assert "Fair Sharing within the cohort" in preempted["message"]
    eventually(lambda: suspended(pool, "product-low"), 30)
    pods = eventually(lambda: bound_with_kubelet(pool, "research", 3), 120)
    labels = pool.node_labels()
    racks = {labels[p.spec.node_name][RACK] for p in pods}
    assert len(racks) == 1  # the gang runs inside one rack
    for name in ("product-high-1", "product-high-2"):  # the higher-priority work stays
        kept = pool.workload_of(name)
        assert kept is not None and not condition(kept, "Evicted")
        assert all_bound(pool, f"batch.kubernetes.io/job-name={name}", 2)
    admitted = pool.workload_of("research")
    assert admitted is not None and admitted["status"]["admission"]["clusterQueue"] == idle
