"""Flavor fungibility on the real control plane: `serve` reads a ClusterQueue's
``spec.flavorFungibility`` through the API server and chooses the flavor by it."""

from __future__ import annotations

from typing import Any

import pytest

from tests import test_e2e
from tests.cluster import eventually
from tests.test_e2e import POOL, RACK, Pool, Serve, all_bound, job, submit
from tests.test_preemption_e2e import local_queue
from topogate.testing.localcluster import create_all

pytestmark = pytest.mark.cluster

cluster = test_e2e.cluster
serve = test_e2e.serve
pool = test_e2e.pool

GPU = "nvidia.com/gpu"


def _queue(name: str, cohort: str, quotas: dict[str, int], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            **spec,
            "cohortName": cohort,
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {"name": flavor, "resources": [{"name": GPU, "nominalQuota": gpus}]}
                        for flavor, gpus in quotas.items()
                    ],
                }
            ],
        },
    }


def test_when_can_borrow_try_next_flavor_takes_the_flavor_within_nominal_quota(
    serve: Serve, pool: Pool
) -> None:
    """The queue's first flavor (the pool's) has no quota of its own, its cohort mate lends
    16 GPUs there; its second flavor (``-own``, on the same nodes) has 8 of its own. With
    ``whenCanBorrow: TryNextFlavor`` an 8-GPU Job is admitted on the second flavor; Kueue's
    default (``MayStopSearch``, the queue ``-plain``) borrows on the first."""
    serve.start()
    pool.nodes({("b0", "r0"): 2})
    own = f"{pool.name}-own"
    cohort = f"{pool.name}-co"
    flavor = {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "ResourceFlavor",
        "metadata": {"name": own},
        "spec": {"nodeLabels": {POOL: pool.name}, "topologyName": "e2e"},
    }
    fungible = f"{pool.name}-fungible"
    plain = f"{pool.name}-plain"
    create_all(
        pool.plane.kubeconfig,
        [
            flavor,
            _queue(f"{pool.name}-lender", cohort, {pool.name: 16, own: 0}),
            _queue(
                fungible,
                cohort,
                {pool.name: 0, own: 8},
                flavorFungibility={"whenCanBorrow": "TryNextFlavor"},
            ),
            _queue(plain, cohort, {pool.name: 0, own: 8}),
        ],
    )
    create_all(
        pool.plane.kubeconfig,
        [local_queue(pool, "fungible", fungible), local_queue(pool, "plain", plain)],
    )
    required = {"kueue.x-k8s.io/podset-required-topology": RACK}
    submit(pool, job("next", 1, annotations=required, queue="fungible"))
    eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=next", 1), 90)
    submit(pool, job("first", 1, annotations=required, queue="plain"))
    eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=first", 1), 90)

    def flavor_of(name: str) -> str:
        workload = pool.workload_of(name)
        assert workload is not None
        assignment = workload["status"]["admission"]["podSetAssignments"][0]
        return str(assignment["flavors"][GPU])

    assert flavor_of("next") == own
    assert flavor_of("first") == pool.name
