"""topogate.state: the owners of controller state, fed as the reflectors feed it."""

from __future__ import annotations

from typing import Any

import pytest

from topogate.admission.assignments import usage_from_admission
from topogate.api.errors import InputError
from topogate.api.topology_assignment import AssignedDomain, encode
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    JOBS,
    LOCAL_QUEUES,
    NODES,
    PODS,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
)
from topogate.state import ControllerState

RACK, HOST = "cloud.com/rack", "kubernetes.io/hostname"
Obj = dict[str, Any]


def node(name: str, rack: str, gpus: int = 8) -> Obj:
    return {
        "metadata": {"name": name, "labels": {RACK: rack, HOST: name}},
        "status": {
            "allocatable": {"cpu": "64", "nvidia.com/gpu": str(gpus), "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def template(gpus: int = 2) -> Obj:
    resources = {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}
    return {"spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]}}


def admitted(name: str, levels: list[str], domains: list[tuple[list[str], int]]) -> Obj:
    count = sum(n for _, n in domains)
    return {
        "metadata": {"name": name, "namespace": "ml", "resourceVersion": "7"},
        "spec": {"podSets": [{"name": "main", "count": count, "template": template()}]},
        "status": {
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "count": count,
                        "topologyAssignment": {
                            "levels": levels,
                            "domains": [{"values": v, "count": n} for v, n in domains],
                        },
                    }
                ],
            }
        },
    }


def state_with_nodes() -> ControllerState:
    state = ControllerState()
    on_node = state.handler(NODES)
    for name, rack in [("a1", "r1"), ("a2", "r1"), ("a3", "r1"), ("b1", "r2")]:
        on_node(None, node(name, rack))
    return state


def used_gpus(state: ControllerState) -> dict[str, int]:
    snapshot = state.ledger.snapshot()
    column = snapshot.resources.index("nvidia.com/gpu")
    return {
        name: int(snapshot.used[i, column])
        for i, name in enumerate(snapshot.node_names)
        if snapshot.used[i, column]
    }


def test_usage_from_admission_is_exact_per_host_and_spread_over_a_rack() -> None:
    nodes: dict[tuple[str, ...], list[str]] = {("r1",): ["a1", "a2", "a3"]}
    workload = admitted("w", [RACK, HOST], [(["r1", "a2"], 3)])
    assert usage_from_admission(workload, "w", lambda lv, v: nodes[tuple(v)]) == {
        "a2": {"cpu": 3000, "nvidia.com/gpu": 6, "pods": 3}
    }
    spread = admitted("w", [RACK], [(["r1"], 4)])
    per_node = usage_from_admission(spread, "w", lambda lv, v: nodes[tuple(v)])
    # Four pods over three nodes in name order, one per node per round.
    assert {n: u["pods"] for n, u in per_node.items()} == {"a1": 2, "a2": 1, "a3": 1}


def test_usage_from_admission_skips_a_template_it_cannot_read() -> None:
    workload = admitted("w", [RACK, HOST], [(["r1", "a1"], 1)])
    workload["spec"]["podSets"][0]["template"]["spec"]["containers"] = "not a list"
    assert usage_from_admission(workload, "w", lambda lv, v: []) == {}


def test_a_restart_reholds_admitted_workloads_from_their_status() -> None:
    state = state_with_nodes()
    on_workload = state.handler(WORKLOADS)
    on_workload(None, admitted("host", [RACK, HOST], [(["r1", "a1"], 2), (["r2", "b1"], 1)]))
    on_workload(None, admitted("rack", [RACK], [(["r1"], 3)]))
    assert state.ledger.held() == {"ml/host", "ml/rack"}
    assert used_gpus(state) == {"a1": 4 + 2, "a2": 2, "a3": 2, "b1": 2}
    assert state.ledger.admission_of("ml/host") is not None
    finished = admitted("rack", [RACK], [(["r1"], 3)])
    finished["status"]["conditions"] = [{"type": "Finished", "status": "True"}]
    on_workload(None, finished)
    assert state.ledger.held() == {"ml/host"}
    assert used_gpus(state) == {"a1": 4, "b1": 2}


def as_slices(workload: Obj) -> Obj:
    """The same admission in Kueue v1beta2's slices form (what topogate and Kueue write)."""
    for assignment in workload["status"]["admission"]["podSetAssignments"]:
        old = assignment["topologyAssignment"]
        domains = [AssignedDomain(tuple(d["values"]), d["count"]) for d in old["domains"]]
        assignment["topologyAssignment"] = encode(old["levels"], domains)
    return workload


def test_a_restart_reholds_slices_as_it_did_domains() -> None:
    state = state_with_nodes()
    on_workload = state.handler(WORKLOADS)
    host = as_slices(admitted("host", [RACK, HOST], [(["r1", "a1"], 2), (["r2", "b1"], 1)]))
    assert "slices" in host["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    on_workload(None, host)
    on_workload(None, as_slices(admitted("rack", [RACK], [(["r1"], 3)])))
    assert used_gpus(state) == {"a1": 4 + 2, "a2": 2, "a3": 2, "b1": 2}


def test_a_malformed_assignment_names_its_field_and_does_not_stop_the_watch() -> None:
    broken = as_slices(admitted("w", [RACK, HOST], [(["r1", "a1"], 2), (["r2", "b1"], 1)]))
    topology = broken["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    topology["slices"][0]["podCounts"] = {"universal": 1, "individual": [2, 1]}
    with pytest.raises(InputError) as caught:
        usage_from_admission(broken, "Workload ml/w", lambda lv, v: [])
    assert caught.value.where == "Workload ml/w"
    assert caught.value.field == (
        "status.admission.podSetAssignments[0].topologyAssignment.slices[0].podCounts"
    )
    state = state_with_nodes()
    state.handler(WORKLOADS)(None, broken)  # logged; nothing held, nothing raised
    assert used_gpus(state) == {}
    assert state.ledger.admission_of("ml/w") is not None


def test_the_node_index_follows_relabelled_nodes() -> None:
    state = state_with_nodes()
    assert state.catalogs.nodes_in_domain([RACK], ["r2"]) == ["b1"]
    state.handler(NODES)(node("a3", "r1"), node("a3", "r2"))
    assert state.catalogs.nodes_in_domain([RACK], ["r2"]) == ["a3", "b1"]
    assert state.catalogs.nodes_in_domain([RACK], ["r9"]) == []


def test_an_assumed_admission_holds_capacity_but_is_acted_on_only_once_written() -> None:
    state = state_with_nodes()
    admission = {"clusterQueue": "cq", "podSetAssignments": []}
    state.ledger.assume("ml/w", admission, {"a1": {"nvidia.com/gpu": 8}}, {})
    assert used_gpus(state) == {"a1": 8}
    assert state.ledger.reserved("ml/w") == admission
    assert state.ledger.admission_of("ml/w") is None  # the job sync and ungater wait for the write
    state.ledger.confirm("ml/w")
    assert state.ledger.admission_of("ml/w") == admission
    state.ledger.assume("ml/x", admission, {"b1": {"nvidia.com/gpu": 8}}, {})
    state.ledger.forget("ml/x")  # the write failed
    assert state.ledger.reserved("ml/x") is None
    assert used_gpus(state) == {"a1": 8}


def test_the_watch_replaces_our_written_admission() -> None:
    state = state_with_nodes()
    mine = {"clusterQueue": "cq", "podSetAssignments": []}
    state.ledger.assume("ml/w", mine, {"a1": {"nvidia.com/gpu": 8}}, {})
    state.ledger.confirm("ml/w")
    stored = admitted("w", [RACK, HOST], [(["r1", "a1"], 1)])
    state.handler(WORKLOADS)(None, stored)
    assert state.ledger.admission_of("ml/w") == stored["status"]["admission"]
    assert used_gpus(state) == {"a1": 8}  # held once, from our decision, not added again


def test_marked_pods_are_indexed_under_their_workload_and_not_counted_twice() -> None:
    state = state_with_nodes()
    pod = {
        "metadata": {
            "name": "p0",
            "namespace": "ml",
            "labels": {"topogate.dev/podset": "main"},
            "annotations": {"topogate.dev/workload": "w"},
        },
        "spec": {"nodeName": "a1", **template()["spec"]},
        "status": {"phase": "Running"},
    }
    state.handler(PODS)(None, pod)
    assert [p["metadata"]["name"] for p in state.store.pods_of("ml/w")] == ["p0"]
    assert "ml/w" in state.signals.take_ungates()
    assert used_gpus(state) == {}  # its usage is the workload's to hold
    state.handler(PODS)(pod, None)
    assert state.store.pods_of("ml/w") == []
    assert state.store.workloads_with_pods() == []


def test_the_catalog_is_parsed_once_per_change() -> None:
    state = ControllerState()
    state.handler(TOPOLOGIES)(
        None, {"metadata": {"name": "dc"}, "spec": {"levels": [{"nodeLabel": RACK}]}}
    )
    state.handler(RESOURCE_FLAVORS)(
        None,
        {"metadata": {"name": "tas"}, "spec": {"nodeLabels": {"p": "g"}, "topologyName": "dc"}},
    )
    queue = {
        "metadata": {"name": "cq"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "tas", "resources": [{"name": "cpu", "nominalQuota": 4}]}],
                }
            ]
        },
    }
    state.handler(CLUSTER_QUEUES)(None, queue)
    state.handler(LOCAL_QUEUES)(
        None, {"metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}}
    )
    first = state.catalogs.catalog()
    generation = state.catalogs.generation
    assert state.catalogs.catalog() is first  # nothing changed: not parsed again
    assert first.cluster_queue("ml", "q") == ("cq", "")
    assert first.flavor_topology("cq") == "dc"
    assert first.sources["dc"].level_keys == (RACK,)
    state.handler(LOCAL_QUEUES)(None, {"metadata": {"name": "r", "namespace": "ml"}, "spec": {}})
    assert state.catalogs.generation > generation
    assert state.catalogs.catalog() is not first
    assert state.catalogs.catalog().cluster_queue("ml", "r") == (
        None,
        "LocalQueue ml/r names no queue",
    )


def test_a_bad_queue_object_is_left_out_and_the_rest_still_parses() -> None:
    state = ControllerState()
    state.handler(CLUSTER_QUEUES)(
        None, {"metadata": {"name": "bad"}, "spec": {"resourceGroups": "nope"}}
    )
    state.handler(TOPOLOGIES)(
        None, {"metadata": {"name": "dc"}, "spec": {"levels": [{"nodeLabel": RACK}]}}
    )
    catalog = state.catalogs.catalog()
    assert "bad" not in catalog.queues
    assert "dc" in catalog.sources


def test_subscribers_see_each_event_after_it_is_applied() -> None:
    state = ControllerState()
    seen: list[tuple[str | None, bool]] = []

    def listener(old: Obj | None, new: Obj | None) -> None:
        name = (new or old or {}).get("metadata", {}).get("name")
        seen.append((name, "ml/j" in state.store.objects(JOBS)))

    state.subscribe(JOBS, listener)
    job = {"metadata": {"name": "j", "namespace": "ml"}}
    state.handler(JOBS)(None, job)
    state.handler(JOBS)(job, None)
    assert seen == [("j", True), ("j", False)]
    assert state.signals.take_jobs() == {("Job", "ml/j")}


def test_job_keys_cover_every_registered_kind() -> None:
    state = ControllerState()
    state.handler(JOBS)(None, {"metadata": {"name": "j", "namespace": "ml"}})
    assert sorted(state.store.job_keys()) == [("Job", "ml/j")]


def test_the_pending_queue_holds_what_waits_and_names_what_stopped() -> None:
    """The pending queue (the admission cycle's lanes) is the state's: a sync takes in what
    waits, and lets go of, and names, what stopped waiting (here: an admission assumed)."""
    state = state_with_nodes()
    state.handler(TOPOLOGIES)(
        None, {"metadata": {"name": "dc"}, "spec": {"levels": [{"nodeLabel": RACK}]}}
    )
    state.handler(RESOURCE_FLAVORS)(
        None,
        {"metadata": {"name": "tas"}, "spec": {"nodeLabels": {"p": "g"}, "topologyName": "dc"}},
    )
    quota = [{"name": r, "nominalQuota": 64} for r in ("cpu", "nvidia.com/gpu")]
    group = {
        "coveredResources": ["cpu", "nvidia.com/gpu"],
        "flavors": [{"name": "tas", "resources": quota}],
    }
    state.handler(CLUSTER_QUEUES)(
        None, {"metadata": {"name": "cq"}, "spec": {"resourceGroups": [group]}}
    )
    state.handler(LOCAL_QUEUES)(
        None, {"metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}}
    )
    waiting = {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ml", "resourceVersion": "1"},
        "spec": {
            "queueName": "q",
            "podSets": [{"name": "main", "count": 2, "template": template()}],
        },
    }
    state.handler(WORKLOADS)(None, waiting)
    assert state.pending.sync() == []
    assert dict(state.pending.problems) == {}
    assert [w.key for w in state.pending.lanes] == ["ml/w"]
    assert state.pending.sync() == [] and state.pending.holds("ml/w")  # nothing changed
    state.ledger.assume("ml/w", {"clusterQueue": "cq", "podSetAssignments": []}, {}, {})
    assert state.pending.sync() == ["ml/w"]
    assert not state.pending.holds("ml/w") and len(state.pending.lanes) == 0
