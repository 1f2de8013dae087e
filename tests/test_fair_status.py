"""Fair sharing's status (``serve --fair-sharing``): ``status.fairSharing.weightedShare`` on
ClusterQueues and Cohorts, as Kueue's ClusterQueue and Cohort controllers write it (its
``WeightedShare``: the precise weighted share rounded up, the int64 maximum at weight 0),
written by the admitter's shell through FakeKube; and Kueue's v1beta2 Cohorts read beside
topogate's."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.test_shells import Harness, workload
from topogate.admission.fairshare import MAX_INT64, tree_shares
from topogate.admission.quota import CohortSpec, CohortTree, FlavorQuota, QueueSpec, QuotaBook
from topogate.controllers.admitter import Admitter
from topogate.controllers.fairstatus import written_share
from topogate.kube.errors import KubeError
from topogate.kube.events import EventRecorder
from topogate.kube.resources import CLUSTER_QUEUES, COHORTS, KUEUE_COHORTS, WORKLOADS
from topogate.state import status_only

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"


def _queue(name: str, cohort: str, gpus: int, weight: float | None = None) -> QueueSpec:
    return QueueSpec(
        name, "BestEffortFIFO", (FlavorQuota("f", {GPU: gpus}),), cohort, weight=weight
    )


def test_tree_shares_of_queues_and_cohorts() -> None:
    """org (root) > team > {a: 8, b: 16}, and org > other > {c: 8}. a uses 20 GPUs: 12
    borrowed, of what team could lend it (team's potential: the tree's 32), 375 per mille;
    team uses 20 of its 24, borrows nothing; roots and lenders are 0."""
    queues = {q.name: q for q in (_queue("a", "team", 8), _queue("b", "team", 16))}
    queues["c"] = _queue("c", "other", 8)
    cohorts = {n: CohortSpec(n, "org") for n in ("team", "other")}
    book = QuotaBook(queues, {("a", "f"): {GPU: 20}}, CohortTree(queues, cohorts))
    by_queue, by_cohort = tree_shares(book)
    assert {n: s.rounded for n, s in by_queue.items()} == {"a": 375, "b": 0, "c": 0}
    assert {n: s.rounded for n, s in by_cohort.items()} == {"team": 0, "other": 0, "org": 0}
    # team past its own subtree: 28 of 24, 4 borrowed from org's 32, 125 per mille, weight 2.
    team = CohortSpec("team", "org", weight=2)
    book = QuotaBook(queues, {("a", "f"): {GPU: 28}}, CohortTree(queues, {**cohorts, "team": team}))
    assert tree_shares(book)[1]["team"].rounded == 63  # 62.5, rounded up as Kueue does
    # A borrower of weight 0: Kueue writes the int64 maximum.
    zero = {**queues, "a": _queue("a", "team", 8, weight=0)}
    book = QuotaBook(zero, {("a", "f"): {GPU: 9}}, CohortTree(zero, cohorts))
    assert tree_shares(book)[0]["a"].rounded == MAX_INT64


def _cq(name: str, gpus: int, cohort: str) -> Obj:
    quotas = [{"name": "cpu", "nominalQuota": 64}, {"name": GPU, "nominalQuota": gpus}]
    return {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": cohort,
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", GPU],
                    "flavors": [{"name": "tas", "resources": quotas}],
                }
            ],
        },
    }


def _cohort(name: str, parent: str | None, api_version: str = "topogate.dev/v1alpha1") -> Obj:
    spec = {"parentName": parent} if parent else {}
    return {"apiVersion": api_version, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def _tree(fair_sharing: bool = True) -> tuple[Harness, Admitter]:
    """cq (8 GPUs) and lender (16) in Cohort team under Cohort org; a Workload of 3 x 4
    GPUs on cq: it borrows 4 of the 24 team could lend, 167 per mille (166.7 rounded up)."""
    h = Harness()
    h.kube.seed(CLUSTER_QUEUES, _cq("cq", 8, "team"))
    h.kube.seed(CLUSTER_QUEUES, _cq("lender", 16, "team"))
    h.kube.seed(COHORTS, _cohort("team", "org"))
    h.kube.seed(COHORTS, _cohort("org", None))
    h.kube.seed(WORKLOADS, workload("w", count=3))
    h.deliver()
    events = EventRecorder(h.kube, "test")
    admitter = Admitter(
        h.kube, h.state, h.metrics, events, pending_qps=1000, fair_sharing=fair_sharing
    )
    return h, admitter


def _shares(h: Harness) -> dict[str, int | None]:
    found: dict[str, int | None] = {}
    for resource in (CLUSTER_QUEUES, COHORTS):
        for obj in h.kube.objects(resource):
            found[f"{resource.plural}/{obj['metadata']['name']}"] = written_share(obj)
    return found


def _share_writes(h: Harness) -> list[str]:
    return [
        f"{c.resource} {c.name}"
        for c in h.kube.calls_of("patch")
        if c.resource in ("clusterqueues/status", "cohorts/status")
    ]


async def test_serve_writes_weighted_shares_once_per_change() -> None:
    h, admitter = _tree()
    await admitter.cycle()
    assert _shares(h) == {
        "clusterqueues/cq": 167,
        "clusterqueues/lender": 0,
        "cohorts/team": 0,
        "cohorts/org": 0,
    }
    generation = h.state.catalogs.generation
    h.deliver()  # the watch brings the writes back: status only, no new catalog
    assert h.state.catalogs.generation == generation
    writes = len(_share_writes(h))
    await admitter.cycle()
    assert len(_share_writes(h)) == writes  # unchanged: nothing written again


async def test_a_share_write_that_fails_is_written_by_a_later_cycle() -> None:
    h, admitter = _tree()
    h.kube.fail_next("patch", KubeError(503, "ServiceUnavailable", "later"), 1, "clusterqueues")
    await admitter.cycle()
    assert admitter.shares.failures == 1
    assert h.state.signals.admit_event.is_set()  # the failure asks for another cycle
    await admitter.cycle()
    assert _shares(h)["clusterqueues/cq"] == 167


@pytest.mark.parametrize("status", [403, 422])
async def test_a_share_write_refused_is_not_tried_again_until_the_share_changes(
    status: int,
) -> None:
    # Each refusal asked for another cycle, whose shares queued the same write again: an
    # admission cycle and a refused write per token of --pending-status-qps, for ever.
    h, admitter = _tree()
    refusal = KubeError(status, "Forbidden" if status == 403 else "Invalid", "no")
    h.kube.fail_next("patch", refusal, 2, "clusterqueues/status")  # cq's and lender's
    await admitter.cycle()
    assert admitter.shares.failures == 2
    writes = len(_share_writes(h))
    await admitter.cycle()
    assert len(_share_writes(h)) == writes  # the same body is not sent again
    assert _shares(h)["clusterqueues/cq"] is None
    # A new share is written: cq borrows more.
    h.kube.seed(WORKLOADS, workload("w2", count=1))
    h.deliver()
    await admitter.cycle()
    assert _shares(h)["clusterqueues/cq"] not in (None, 167)


async def test_a_weight_past_a_floats_range_is_infinite_not_a_crash() -> None:
    # float() of a 1e400 quantity raised OverflowError out of the catalog (build_catalog
    # leaves out only what raises ValueError): every admission cycle and webhook view failed.
    h, admitter = _tree()
    queue = h.kube.objects(CLUSTER_QUEUES)[0]
    assert queue["metadata"]["name"] == "cq"
    queue["spec"]["fairSharing"] = {"weight": "1e400"}
    h.kube.seed(CLUSTER_QUEUES, queue)
    cohort = _cohort("team", "org")
    cohort["spec"]["fairSharing"] = {"weight": "1e400"}
    h.kube.seed(COHORTS, cohort)
    h.deliver()
    await admitter.cycle()
    assert h.state.ledger.admission_of("ml/w") is not None
    assert _shares(h)["clusterqueues/cq"] == 0  # as Kueue: an infinite weight, a share of 0


async def test_fair_sharing_off_writes_nothing_and_removes_an_old_share() -> None:
    h, admitter = _tree(fair_sharing=False)
    stale = copy.deepcopy(_cq("lender", 16, "team"))
    stale["status"] = {"fairSharing": {"weightedShare": 5}}
    h.kube.seed(CLUSTER_QUEUES, stale)
    h.deliver()
    await admitter.cycle()
    assert _share_writes(h) == ["clusterqueues/status lender"]
    assert all(share is None for share in _shares(h).values())


async def test_kueue_cohorts_are_read_and_written_and_topogates_win_a_name() -> None:
    h, admitter = _tree()
    kueue = "kueue.x-k8s.io/v1beta2"
    h.kube.seed(KUEUE_COHORTS, _cohort("org", "top", kueue))  # shadowed by topogate's org
    h.kube.seed(KUEUE_COHORTS, _cohort("top", None, kueue))
    h.deliver()
    assert set(h.state.catalogs.catalog().cohorts) == {"team", "org", "top"}
    assert h.state.catalogs.catalog().cohorts["org"].parent is None  # topogate's org
    await admitter.cycle()
    top = h.kube.stored(KUEUE_COHORTS, "top")
    shadowed = h.kube.stored(KUEUE_COHORTS, "org")
    assert top is not None and shadowed is not None
    assert written_share(top) == 0
    assert written_share(shadowed) is None  # topogate's org got it


def test_a_status_only_update_is_told_apart() -> None:
    old = _cq("cq", 8, "team")
    old["metadata"]["resourceVersion"] = "1"
    new = copy.deepcopy(old)
    new["metadata"]["resourceVersion"] = "2"
    new["status"] = {"fairSharing": {"weightedShare": 3}}
    assert status_only(old, new)
    new["spec"]["cohortName"] = "other"
    assert not status_only(old, new)
    assert not status_only(None, old)


async def test_a_queue_made_again_under_its_old_name_gets_its_share_again() -> None:
    h, admitter = _tree()
    await admitter.cycle()
    h.deliver()
    await h.kube.delete(CLUSTER_QUEUES, "lender")
    h.deliver()
    await admitter.cycle()  # the share said for the old lender is forgotten
    h.kube.seed(CLUSTER_QUEUES, _cq("lender", 16, "team"))
    h.deliver()
    await admitter.cycle()
    assert _shares(h)["clusterqueues/lender"] == 0
