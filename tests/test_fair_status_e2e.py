"""Fair sharing's status on the real control plane: `serve --fair-sharing` writes
``status.fairSharing.weightedShare`` on a borrowing ClusterQueue and its Cohort (the CRDs'
status subresources take it), and says once that Kueue's Cohorts are not served here."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests import test_e2e
from tests.cluster import api_client, eventually
from tests.test_cohort_trees_e2e import GROUP, PLURAL, VERSION, cohort
from tests.test_e2e import RACK, Pool, Serve, all_bound, job, submit
from tests.test_preemption_e2e import local_queue, queue
from topogate.testing.localcluster import create_all

pytestmark = pytest.mark.cluster

cluster = test_e2e.cluster
serve = test_e2e.serve
pool = test_e2e.pool


def _share(obj: Any) -> int | None:
    share = ((obj.get("status") or {}).get("fairSharing") or {}).get("weightedShare")
    return share if isinstance(share, int) else None


def test_serve_writes_the_weighted_share_of_a_borrowing_queue_and_cohort(
    serve: Serve, pool: Pool
) -> None:
    serve.start("--fair-sharing")
    pool.nodes({("b0", "r0"): 2})
    team, org = f"team-{pool.name}", f"org-{pool.name}"
    # org (16 GPUs of its own) > team > a (8 GPUs), b (none).
    create_all(pool.plane.kubeconfig, [cohort(pool, org, None, 16), cohort(pool, team, org)])
    a, b = f"{pool.name}-a", f"{pool.name}-b"
    create_all(pool.plane.kubeconfig, [queue(pool, a, 8, cohortName=team)])
    create_all(pool.plane.kubeconfig, [queue(pool, b, 0, cohortName=team)])
    create_all(pool.plane.kubeconfig, [local_queue(pool, "a", a)])
    # 16 GPUs on a: it borrows 8 of the 24 team could lend it (ceil(333.3) = 334 per mille);
    # team uses 16 of its own 8, borrowing 8 of org's 24: 334 too; org is a root: 0.
    required = {"kueue.x-k8s.io/podset-required-topology": RACK}
    submit(pool, job("big", 2, annotations=required, queue="a"))
    eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=big", 2), 90)
    custom = client.CustomObjectsApi(api_client(pool.plane))

    def shares() -> dict[str, int | None] | None:
        found = {
            name: _share(custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name))
            for name in (a, b)
        }
        for name in (team, org):
            found[name] = _share(custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name))
        return found if None not in found.values() else None

    assert eventually(shares, 60) == {a: 334, b: 0, team: 334, org: 0}, serve.log()
    # Kueue's Cohort CRD is not installed on this plane: not watched, said once.
    said = "cohorts.kueue.x-k8s.io (kueue.x-k8s.io/v1beta2): not served"
    assert (serve.directory / "serve.log").read_text().count(said) == 1, serve.log()
