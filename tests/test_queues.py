"""admission/cycle.py: queue order, StrictFIFO vs BestEffortFIFO, quota, shared capacity."""

from __future__ import annotations

import pytest

from tests.kit import GPU, L3, RACK, node, podset
from topogate.admission.cycle import FlavorTopology, SnapshotPlacer, admission_cycle
from topogate.admission.lanes import PendingWorkload
from topogate.admission.quota import FlavorQuota, QueueSpec, Usage
from topogate.admission.request import PlacementRequest
from topogate.api.models import ClusterQueue
from topogate.api.validation import parse_model
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree

NODES = [
    node(f"b1-r{r}-h{h}", "b1", f"r{r}", f"h{r}{h}", cpu=8000, gpu=8)
    for r in range(2)
    for h in range(2)
]


def _placer() -> SnapshotPlacer:
    snapshot = ClusterSnapshot.build(NODES)
    return SnapshotPlacer(
        snapshot, {"gpu": FlavorTopology(DomainTree.from_labels(snapshot, L3), "dc")}
    )


def _workload(
    key: str,
    pods: int,
    *,
    priority: int = 0,
    created: str = "2026-01-01T00:00:00Z",
    queue: str = "cq",
    required: str | None = RACK,
) -> PendingWorkload:
    request = PlacementRequest(key, (podset(pods, gpu=8, required=required),))
    return PendingWorkload(key, queue, priority, created, request)


def _queue(strategy: str = "BestEffortFIFO", gpus: int = 32, name: str = "cq") -> QueueSpec:
    return QueueSpec(name, strategy, (FlavorQuota("gpu", {GPU: gpus}),))


def test_priority_then_age_decides_who_goes_first() -> None:
    pending = [
        _workload("ns/old", 2, created="2026-01-01T00:00:00Z"),
        _workload("ns/new", 2, created="2026-01-02T00:00:00Z"),
        _workload("ns/urgent", 2, priority=10, created="2026-01-03T00:00:00Z"),
    ]
    result = admission_cycle({"cq": _queue(gpus=64)}, pending, {}, _placer())
    # Two racks of two 8-GPU hosts: only two rack-sized gangs fit.
    assert [a.key for a in result.admitted] == ["ns/urgent", "ns/old"]
    assert result.pending == {
        "ns/new": 'flavor gpu: main: topology "dc" doesn\'t allow to fit any of 2 pod(s). '
        'Total nodes: 4; excluded: resource "example.com/gpu": 4'
    }


def test_admissions_in_one_cycle_hold_capacity_for_the_next() -> None:
    result = admission_cycle(
        {"cq": _queue()}, [_workload("ns/a", 2), _workload("ns/b", 2)], {}, _placer()
    )
    assert [a.key for a in result.admitted] == ["ns/a", "ns/b"]
    placed = [a.decision.placements[0].node_counts for a in result.admitted if a.decision]
    hosts_a, hosts_b = set(placed[0]), set(placed[1])
    assert hosts_a.isdisjoint(hosts_b) and len(hosts_a | hosts_b) == 4
    # Each gang inside one rack, and the two in different racks.
    racks = [{name.split("-")[1] for name in hosts} for hosts in (hosts_a, hosts_b)]
    assert all(len(r) == 1 for r in racks) and racks[0] != racks[1]


def test_strict_fifo_blocks_behind_the_head_best_effort_lets_smaller_ones_by() -> None:
    pending = [
        _workload("ns/big", 3, created="2026-01-01T00:00:00Z"),
        _workload("ns/small", 1, created="2026-01-02T00:00:00Z"),
    ]
    strict = admission_cycle({"cq": _queue("StrictFIFO")}, pending, {}, _placer())
    assert strict.admitted == []
    assert strict.pending == {
        "ns/big": 'flavor gpu: main: topology "dc" allows to fit only 2 out of 3 pod(s)',
        "ns/small": "waiting behind ns/big (StrictFIFO)",
    }
    best = admission_cycle({"cq": _queue("BestEffortFIFO")}, pending, {}, _placer())
    assert [a.key for a in best.admitted] == ["ns/small"]
    assert best.pending == {
        "ns/big": 'flavor gpu: main: topology "dc" allows to fit only 2 out of 3 pod(s)'
    }


def test_quota_is_per_cluster_queue_and_held_until_released() -> None:
    usage: Usage = {("cq", "gpu"): {GPU: 24}}
    result = admission_cycle(
        {"cq": _queue(gpus=32)}, [_workload("ns/a", 2, required=None)], usage, _placer()
    )
    assert result.admitted == []
    assert (
        result.pending["ns/a"]
        == "insufficient quota for example.com/gpu in flavor gpu: needs 16, 8 available"
    )
    other = admission_cycle(
        {"other": _queue(gpus=32, name="other")},
        [_workload("ns/b", 2, queue="other", required=None)],
        usage,
        _placer(),
    )
    assert [a.key for a in other.admitted] == ["ns/b"]
    assert usage[("other", "gpu")] == {GPU: 16} and usage[("cq", "gpu")] == {GPU: 24}


def test_flavors_are_tried_in_order_and_uncovered_resources_are_named() -> None:
    queue = QueueSpec(
        "cq",
        "BestEffortFIFO",
        (FlavorQuota("cpu-only", {"cpu": 10_000}), FlavorQuota("gpu", {GPU: 64})),
    )
    result = admission_cycle({"cq": queue}, [_workload("ns/a", 1)], {}, _placer())
    assert [(a.key, a.flavor) for a in result.admitted] == [("ns/a", "gpu")]
    lone = QueueSpec("cq", "BestEffortFIFO", (FlavorQuota("cpu-only", {"cpu": 10_000}),))
    refused = admission_cycle({"cq": lone}, [_workload("ns/b", 1)], {}, _placer())
    assert refused.pending["ns/b"] == "flavor cpu-only does not cover example.com/gpu"
    missing = admission_cycle({}, [_workload("ns/c", 1)], {}, _placer())
    assert missing.pending["ns/c"] == "ClusterQueue cq does not exist"


def test_queue_spec_from_a_cluster_queue_object() -> None:
    queue = parse_model(
        ClusterQueue,
        {
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "queueingStrategy": "StrictFIFO",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", GPU],
                        "flavors": [
                            {
                                "name": "gpu",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "100"},
                                    {"name": GPU, "nominalQuota": 64},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        "ClusterQueue cq",
    )
    spec = QueueSpec.from_model(queue)
    assert spec.strategy == "StrictFIFO"
    assert spec.flavors == (FlavorQuota("gpu", {"cpu": 100_000, GPU: 64}),)


def test_a_malformed_status_is_read_as_absent_but_a_malformed_spec_is_refused() -> None:
    from pydantic import ValidationError

    from topogate.api.models import Cohort, LocalQueue

    bad_status = {"pendingWorkloads": "lots", "conditions": 7, "fairSharing": [1]}
    queue = ClusterQueue.model_validate(
        {"metadata": {"name": "cq"}, "spec": {"cohort": "c"}, "status": bad_status}
    )
    assert queue.status is None and queue.spec.cohort_of == "c"
    local = LocalQueue.model_validate(
        {
            "metadata": {"name": "lq", "namespace": "ns"},
            "spec": {"clusterQueue": "cq"},
            "status": bad_status,
        }
    )
    assert local.status is None and local.spec.cluster_queue == "cq"
    cohort = Cohort.model_validate({"metadata": {"name": "c"}, "status": "broken"})
    assert cohort.status is None
    # A good status is still read, and the spec stays strict.
    good = ClusterQueue.model_validate(
        {"metadata": {"name": "cq"}, "status": {"fairSharing": {"weightedShare": 3}}}
    )
    assert good.status is not None and good.status.fair_sharing is not None
    assert good.status.fair_sharing.weighted_share == 3
    with pytest.raises(ValidationError):
        ClusterQueue.model_validate({"metadata": {"name": "cq"}, "spec": {"cohort": 7}})
