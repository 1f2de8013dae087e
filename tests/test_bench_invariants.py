"""The side-by-side bench's invariant checker (hack/bench_invariants.py) catches what it claims
to: an admission past the queue's borrowing limit or the cohort's quota, a node over its
allocatable, a required rack split, a slice split; and lets valid admissions pass."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from topogate.api.topology_assignment import AssignedDomain, encode

RACK, HOST = "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
Obj = dict[str, Any]


def _module() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "hack/bench_invariants.py"
    spec = importlib.util.spec_from_file_location("bench_invariants", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_invariants", module)
    spec.loader.exec_module(module)
    return module


inv = _module()


def queue(name: str, nominal: str, borrowing: str | None = None, cohort: str = "c") -> Obj:
    quota: Obj = {"name": "cpu", "nominalQuota": nominal}
    if borrowing is not None:
        quota["borrowingLimit"] = borrowing
    return {
        "metadata": {"name": name},
        "spec": {
            "cohort": cohort,
            "resourceGroups": [{"flavors": [{"name": "f", "resources": [quota]}]}],
        },
    }


def node(name: str, rack: str, cpu: str = "8") -> Obj:
    return {
        "metadata": {"name": name, "labels": {RACK: rack, HOST: name}},
        "status": {"allocatable": {"cpu": cpu}},
    }


def admitted(
    name: str,
    cq: str,
    placed: dict[str, int],
    cpu: str = "1",
    annotations: dict[str, str] | None = None,
) -> Obj:
    count = sum(placed.values())
    topology = encode([HOST], [AssignedDomain((n,), c) for n, c in placed.items()])
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {
                        "metadata": {"annotations": annotations or {}},
                        "spec": {"containers": [{"resources": {"requests": {"cpu": cpu}}}]},
                    },
                }
            ]
        },
        "status": {
            "admission": {
                "clusterQueue": cq,
                "podSetAssignments": [
                    {
                        "name": "main",
                        "count": count,
                        "flavors": {"cpu": "f"},
                        "topologyAssignment": topology,
                    }
                ],
            },
            "conditions": [{"type": "Admitted", "status": "True"}],
        },
    }


def checker(*queues: Obj) -> Any:
    c = inv.Checker()
    for q in queues:
        c.add_cluster_queue(q)
    for n in (node("a1", "ra"), node("a2", "ra"), node("b1", "rb")):
        c.add_node(n)
    return c


def test_valid_admissions_pass_and_a_finished_one_gives_its_quota_back() -> None:
    c = checker(queue("q", "4", "0"))
    c.observe(admitted("w1", "q", {"a1": 2, "a2": 2}), "ns/w1")
    assert c.violations == []
    done = admitted("w1", "q", {"a1": 2, "a2": 2})
    done["status"]["conditions"].append({"type": "Finished", "status": "True"})
    c.observe(done, "ns/w1")
    c.observe(admitted("w2", "q", {"b1": 4}), "ns/w2")
    assert c.violations == []
    assert c.checked == 2


def test_past_the_borrowing_limit_is_a_violation() -> None:
    c = checker(queue("q", "2", "1"), queue("other", "10"))
    c.observe(admitted("w", "q", {"a1": 4}), "ns/w")
    assert len(c.violations) == 1
    assert "borrowingLimit" in c.violations[0]


def test_past_the_cohorts_quota_is_a_violation() -> None:
    c = checker(queue("q1", "2"), queue("q2", "2"))
    c.observe(admitted("w1", "q1", {"a1": 3}), "ns/w1")
    assert c.violations == []  # borrows 1 of q2's 2
    c.observe(admitted("w2", "q2", {"b1": 2}), "ns/w2")
    assert len(c.violations) == 1
    assert "cohort c uses" in c.violations[0]


def test_a_node_past_its_allocatable_is_a_violation() -> None:
    c = checker(queue("q", "100"))
    c.observe(admitted("w1", "q", {"a1": 6}), "ns/w1")
    c.observe(admitted("w2", "q", {"a1": 3}), "ns/w2")
    assert len(c.violations) == 1
    assert "node a1 holds 9000m" in c.violations[0]


def test_a_required_rack_split_over_two_racks_is_a_violation() -> None:
    c = checker(queue("q", "100"))
    required = {"kueue.x-k8s.io/podset-required-topology": RACK}
    c.observe(admitted("ok", "q", {"a1": 1, "a2": 1}, annotations=required), "ns/ok")
    assert c.violations == []
    c.observe(admitted("split", "q", {"a1": 1, "b1": 1}, annotations=required), "ns/split")
    assert len(c.violations) == 1
    assert "required in one" in c.violations[0]


def test_a_slice_split_over_two_racks_is_a_violation() -> None:
    c = checker(queue("q", "100"))
    slices = {
        "kueue.x-k8s.io/podset-slice-required-topology": RACK,
        "kueue.x-k8s.io/podset-slice-size": "2",
    }
    c.observe(admitted("ok", "q", {"a1": 1, "a2": 1, "b1": 2}, annotations=slices), "ns/ok")
    assert c.violations == []
    c.observe(admitted("split", "q", {"a1": 1, "b1": 1}, annotations=slices), "ns/split")
    assert len(c.violations) == 1
    assert "slices of 2" in c.violations[0]


def test_kueues_topology_request_field_is_checked_as_the_annotations() -> None:
    c = checker(queue("q", "100"))
    split = admitted("split", "q", {"a1": 1, "b1": 1})
    split["spec"]["podSets"][0]["topologyRequest"] = {"required": RACK}
    c.observe(split, "ns/split")
    sliced = admitted("sliced", "q", {"a2": 1, "b1": 1})
    sliced["spec"]["podSets"][0]["topologyRequest"] = {
        "podSetSliceRequiredTopology": RACK,
        "podSetSliceSize": 2,
    }
    c.observe(sliced, "ns/sliced")
    assert len(c.violations) == 2
    assert "required in one" in c.violations[0]
    assert "slices of 2" in c.violations[1]


def test_shared_hostname_labels_leave_the_placement_unverified_not_violated() -> None:
    c = inv.Checker()
    c.add_cluster_queue(queue("q", "1"))
    for name, rack in (("r1-n0", "ra"), ("r2-n0", "rb")):
        shared = node(name, rack)
        shared["metadata"]["labels"][HOST] = "node-0"  # as Kueue's generator labels them
        c.add_node(shared)
    c.observe(admitted("w", "q", {"node-0": 2}), "ns/w")
    assert c.unplaceable == 1
    assert len(c.violations) == 1  # the quota is still checked: 2 CPU against 1
    assert "cohort c uses 2000m" in c.violations[0]


def test_a_quota_violation_names_the_workloads_that_held_quota_there_then() -> None:
    c = checker(queue("q1", "1", "1"), queue("q2", "1", "1"), queue("other", "4", cohort="d"))
    c.observe(admitted("w1", "q1", {"a1": 1}), "ns/w1")
    c.observe(admitted("w2", "q2", {"a2": 1}), "ns/w2")
    c.observe(admitted("x", "other", {"b1": 1}), "ns/x")  # another cohort: not a holder
    done = admitted("w1", "q1", {"a1": 1})
    done["status"]["conditions"].append({"type": "Finished", "status": "True"})
    c.observe(done, "ns/w1")  # gave its quota back: not a holder either
    c.observe(admitted("w3", "q1", {"b1": 2}), "ns/w3")  # 3 CPU in a cohort of 2
    assert len(c.violations) == 1
    assert "held by 2: ns/w2 (q2 1000m), ns/w3 (q1 2000m)" in c.violations[0]
    assert c.details == [
        {
            "violation": c.violations[0],
            "resource": "f/cpu",
            "holders": {
                "ns/w2": {"queue": "q2", "milli": 1000},
                "ns/w3": {"queue": "q1", "milli": 2000},
            },
        }
    ]
    assert c.seen == {"ns/w1", "ns/w2", "ns/w3", "ns/x"} and c.finished == {"ns/w1"}


def test_a_violation_message_names_the_first_holders_and_counts_the_rest() -> None:
    c = checker(queue("q", "2", "0"))
    for i in range(20):
        c.observe(admitted(f"w{i:02}", "q", {"b1": 1}, cpu="100m"), f"ns/w{i:02}")
    c.observe(admitted("late", "q", {"b1": 1}, cpu="100m"), "ns/late")
    assert len(c.violations) == 2  # the queue's borrowing limit, and its one-queue cohort's
    assert "borrowingLimit" in c.violations[0]
    # In key order: ns/late, then ns/w00 to ns/w10 make the first 12.
    assert c.violations[0].endswith(f"ns/w10 (q 100m) and {21 - inv.SHOWN} more")
    assert len(c.details[0]["holders"]) == 21
