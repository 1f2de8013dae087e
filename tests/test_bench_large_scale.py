"""The side-by-side bench's large-scale scenario (hack/bench_kueue_scenario.py --scenario
large-scale): Kueue's configs/large-scale generator config read into the same sets on both
sides, scaled per queue, quota only (no nodes, no Topology, a flavor without labels), and its
admissions (no topology assignment) checked against quota, borrowing and the cohort."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

Obj = dict[str, Any]


def _module() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "hack/bench_kueue_scenario.py"
    spec = importlib.util.spec_from_file_location("bench_kueue_scenario", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_kueue_scenario", module)
    spec.loader.exec_module(module)
    return module


bench = _module()


def config() -> Obj:
    """The shape of Kueue v0.19.0's configs/large-scale/generator.yaml."""

    def wl_set(count: int, interval: int, cls: str, runtime: int, priority: int, cpu: int) -> Obj:
        workload = {"className": cls, "runtimeMs": runtime, "priority": priority, "request": cpu}
        return {"count": count, "creationIntervalMs": interval, "workloads": [workload]}

    queues = {
        "className": "cq",
        "count": 100,
        "nominalQuota": 20,
        "borrowingLimit": 100,
        "reclaimWithinCohort": "Any",
        "withinClusterQueue": "LowerPriority",
        "workloadsSets": [
            wl_set(35, 60, "small", 150, 50, 1),
            wl_set(11, 300, "medium", 350, 100, 5),
            wl_set(4, 700, "large", 700, 200, 20),
        ],
    }
    return {"cohorts": [{"className": "cohort", "count": 10, "queuesSets": [queues]}]}


def test_the_config_becomes_one_pod_sets_on_a_quota_only_flavor() -> None:
    scenario = bench.large_scale(config())
    assert scenario.name == "large-scale" and not scenario.topology
    assert scenario.queues_per_cohort == 100 and scenario.flavor == "rf"
    assert (scenario.nominal, scenario.borrowing) == ("20", "100")
    assert scenario.preemption == ("Any", "LowerPriority")
    assert [s[:7] for s in scenario.sets] == [
        ("small", 35, 60, 150, 50, "1", 1),
        ("medium", 11, 300, 350, 100, "5", 1),
        ("large", 4, 700, 700, 200, "20", 1),
    ]


def test_a_config_with_a_topology_is_not_the_quota_only_scenario() -> None:
    with pytest.raises(SystemExit, match="one cohort set of one queue set"):
        bench.large_scale({**config(), "topology": {"levels": []}})


def test_scale_shrinks_the_workloads_per_queue_only() -> None:
    sets = bench.counted(0.2, bench.large_scale(config()).sets)
    assert [(s[0], s[1]) for s in sets] == [("small", 7), ("medium", 2), ("large", 1)]
    assert [s[2:] for s in sets] == [s[2:] for s in bench.large_scale(config()).sets]


def test_the_objects_are_queues_and_a_flavor_without_nodes() -> None:
    scenario = bench.large_scale(config())
    objs = bench.cluster_objects(2, scenario=scenario)
    kinds = [o["kind"] for o in objs]
    assert "Node" not in kinds and "Topology" not in kinds
    assert objs[0] == {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "rf"},
        "spec": {},
    }
    queues = [o for o in objs if o["kind"] == "ClusterQueue"]
    assert len(queues) == 200 and queues[-1]["metadata"]["name"] == "cq-0-99-cohort-1"
    assert queues[-1]["spec"]["cohort"] == "cohort-1"
    flavor = queues[0]["spec"]["resourceGroups"][0]["flavors"][0]
    assert flavor == {
        "name": "rf",
        "resources": [{"name": "cpu", "nominalQuota": "20", "borrowingLimit": "100"}],
    }
    wl = bench.workload("small-0-0-0", "cq-0-0-cohort-0", scenario.sets[0])
    podset = wl["spec"]["podSets"][0]
    assert podset["count"] == 1 and podset["template"]["metadata"]["annotations"] == {}
    assert podset["template"]["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1"}}


def kueue_admitted(name: str, queue: str, cpu: str) -> Obj:
    """A Kueue v1beta2 Workload of one pod admitted on "rf", no topology assignment."""
    container = {"name": "c", "resources": {"requests": {"cpu": cpu}}}
    return {
        "metadata": {"name": name, "namespace": queue},
        "spec": {
            "podSets": [
                {"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}
            ]
        },
        "status": {
            "admission": {
                "clusterQueue": queue,
                "podSetAssignments": [{"name": "main", "count": 1, "flavors": {"cpu": "rf"}}],
            }
        },
    }


def test_quota_only_admissions_are_checked_against_borrowing_and_the_cohort() -> None:
    scenario = bench.large_scale(config())
    checker = bench.Checker()
    for obj in bench.cluster_objects(1, scenario=scenario):
        if obj["kind"] == "ClusterQueue":
            # As Kueue's generator writes it (v1beta2: cohortName).
            spec = {**obj["spec"], "cohortName": obj["spec"].pop("cohort")}
            checker.add_cluster_queue({**obj, "spec": spec})
    queue = "cq-0-0-cohort-0"
    for i in range(6):  # 6 x 20 CPU: nominal 20 + borrowingLimit 100, exactly
        checker.observe(kueue_admitted(f"large-{i}", queue, "20"), f"{queue}/large-{i}")
    assert checker.checked == 6 and checker.violations == []
    checker.observe(kueue_admitted("small-0", queue, "1"), f"{queue}/small-0")
    holders = [f"{queue}/large-{i} ({queue} 20000m)" for i in range(6)]
    assert checker.violations == [
        f"{queue}/small-0: {queue} uses 121000m of ('rf', 'cpu'), over nominal 20000m "
        f"+ borrowingLimit 100000m; held by 7: {', '.join(holders)}, "
        f"{queue}/small-0 ({queue} 1000m)"
    ]
