"""The node-failure shell against FakeKube: what it writes when a node of an admitted workload
fails, and what it does when a write fails."""

from __future__ import annotations

import copy

import aiohttp

from tests.kit import written_domains
from tests.test_shells import HOST, RACK, Harness, workload
from topogate.api import constants as c
from topogate.api.objects import condition
from topogate.controllers.nodefailures import NodeFailures
from topogate.kube.events import EventRecorder
from topogate.kube.resources import NODES, PODS, WORKLOADS

NOW = 1_800_000_000.0  # the shell's clock in these tests
LONG_AGO = "2026-01-01T00:00:00Z"  # well before NOW - grace


def add_node(h: Harness, name: str, rack: str) -> None:
    h.kube.seed(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {RACK: rack, HOST: name, "pool": "gpu"}},
            "status": {
                "allocatable": {"cpu": "32", "nvidia.com/gpu": "8", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )


def fail_node(h: Harness, name: str, since: str = LONG_AGO) -> None:
    stored = h.kube.stored(NODES, name)
    assert stored is not None
    broken = copy.deepcopy(stored)
    broken["status"]["conditions"] = [
        {"type": "Ready", "status": "Unknown", "lastTransitionTime": since}
    ]
    h.kube.seed(NODES, broken)


def bind_pods(h: Harness, name: str) -> None:
    """The workload's pods, bound where its admission put them (what the scheduler does)."""
    stored = h.kube.stored(WORKLOADS, name, "ml")
    assert stored is not None
    domains = stored["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    index = 0
    for domain in written_domains(domains):
        for _ in range(domain["count"]):
            h.kube.seed(
                PODS,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{name}-{index}",
                        "namespace": "ml",
                        "labels": {c.PODSET_LABEL: "main"},
                        "annotations": {c.WORKLOAD_ANNOTATION: name},
                    },
                    "spec": {"nodeName": domain["values"][-1], "containers": []},
                    "status": {"phase": "Running"},
                },
            )
            index += 1


async def admitted_on_rack_one(h: Harness) -> NodeFailures:
    """A 2-pod, 8-GPU-each workload required in one rack: admitted on n1 and n2 (rack r1)."""
    h.kube.seed(WORKLOADS, workload("w", count=2, gpus=8))
    h.deliver()
    admitter, events = h.admitter()
    await admitter.cycle()
    await events.drain()
    h.deliver()
    bind_pods(h, "w")
    h.deliver()
    return NodeFailures(
        h.kube, h.state, h.metrics, EventRecorder(h.kube, "test"), clock=lambda: NOW
    )


def hosts(h: Harness) -> dict[str, int]:
    stored = h.kube.stored(WORKLOADS, "w", "ml")
    assert stored is not None
    topology = stored["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    return {d["values"][-1]: d["count"] for d in written_domains(topology)}


async def test_a_failed_node_s_pods_move_to_a_spare_in_the_same_rack() -> None:
    h = Harness()
    shell = await admitted_on_rack_one(h)
    assert hosts(h) == {"n1": 1, "n2": 1}
    add_node(h, "n4", "r1")
    fail_node(h, "n1")
    h.deliver()
    assert await shell.sweep()
    stored = h.kube.stored(WORKLOADS, "w", "ml")
    assert stored is not None
    assert hosts(h) == {"n4": 1, "n2": 1}  # n3 (rack r2) was free too, but is not the rack
    assert stored["status"]["unhealthyNodes"] == [{"name": "n1"}]
    assert h.kube.stored(PODS, "w-0", "ml") is None  # its controller makes a new one
    assert h.kube.stored(PODS, "w-1", "ml") is not None
    held = h.state.ledger.workload_usage("ml/w")
    assert set(held) == {"n2", "n4"}
    assert h.state.ledger.admission_of("ml/w") == stored["status"]["admission"]
    h.deliver()
    assert shell.affected(shell.failed()) == []  # done: nothing left on n1


async def test_a_node_within_its_grace_period_is_left_alone() -> None:
    h = Harness()
    shell = await admitted_on_rack_one(h)
    add_node(h, "n4", "r1")
    fail_node(h, "n1", since="2027-01-15T07:59:50Z")  # 10 s before NOW
    h.deliver()
    assert shell.failed() == {}
    assert await shell.sweep()
    assert hosts(h) == {"n1": 1, "n2": 1}
    assert shell._next_deadline() == 20.0  # woken when the grace period ends


async def test_no_room_in_the_rack_evicts_with_the_reason() -> None:
    h = Harness()
    shell = await admitted_on_rack_one(h)
    fail_node(h, "n1")
    h.deliver()
    assert await shell.sweep()
    stored = h.kube.stored(WORKLOADS, "w", "ml")
    assert stored is not None
    evicted = condition(stored, "Evicted")
    assert evicted is not None and evicted["reason"] == "NodeFailures"
    assert evicted["message"].startswith(
        "Workload was evicted after node failures: no replacement for 1 pod(s) of PodSet "
        f"main lost on node n1: {RACK}=r1: "
    ), evicted["message"]
    assert stored["status"]["unhealthyNodes"] == [{"name": "n1"}]
    assert hosts(h) == {"n1": 1, "n2": 1}  # the job sync takes it back once its pods are gone


async def test_a_deleted_node_counts_at_once_and_a_reset_is_retried() -> None:
    h = Harness()
    shell = await admitted_on_rack_one(h)
    add_node(h, "n4", "r1")
    h.deliver()
    await h.kube.delete(NODES, "n1")
    h.deliver()
    assert set(shell.failed()) == {"n1"}
    h.kube.fail_next(
        "patch", aiohttp.ClientConnectionError("reset by peer"), resource="workloads/status"
    )
    assert not await shell.sweep()  # asks to be run again
    assert set(h.state.ledger.workload_usage("ml/w")) == {"n1", "n2"}  # the stored admission holds
    assert h.state.ledger.admission_of("ml/w") is not None
    assert hosts(h) == {"n1": 1, "n2": 1}
    assert await shell.sweep()
    assert hosts(h) == {"n4": 1, "n2": 1}
    assert set(h.state.ledger.workload_usage("ml/w")) == {"n2", "n4"}
