"""Kubernetes' own gangs end to end (`serve --native-gangs`), on a control plane of its own
that serves ``scheduling.k8s.io/v1alpha2`` PodGroups with the 1.36 feature gates on, so the
real kube-scheduler binds a gang all or nothing.

The capacity race: the ungater waits ``--ungate-interval`` before it releases the pods of an
admitted Job; in that window a pod of another scheduler takes the whole of one of the gang's
nodes. With native gangs no pod of the gang binds; without them, the others do.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests import test_e2e
from tests.cluster import api_client, drop_webhooks, eventually
from tests.test_e2e import BLOCK, RACK, Pool, Serve, all_bound, condition, job, submit
from topogate.api.topology_assignment import decode
from topogate.testing.controlplane import ControlPlane, free_port
from topogate.testing.localcluster import create_all

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane.start(tmp_path_factory.mktemp("gangplane"), workloads=True)
    try:
        plane.start_jobset()  # JobSet's controller, webhooks and CRD, from its release
        test_e2e.install_e2e_topology(plane)
        yield plane
    finally:
        plane.stop()


serve = test_e2e.serve  # on this module's plane: fixtures resolve `cluster` here


@pytest.fixture
def pool(cluster: ControlPlane) -> Pool:
    name = f"p{uuid.uuid4().hex[:6]}"
    made = Pool(cluster, name, f"gangs-{name}")
    made.setup()
    return made


def podgroups(pool: Pool) -> list[dict[str, Any]]:
    custom = client.CustomObjectsApi(pool.api)
    found: Any = custom.list_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", pool.namespace, "podgroups"
    )
    return list(found["items"])


SELECTOR = "batch.kubernetes.io/job-name=gang"


def test_admitted_job_gets_a_podgroup_its_pods_join_and_all_bind(serve: Serve, pool: Pool) -> None:
    serve.start()  # auto: this plane serves PodGroups
    pool.nodes({("b0", "r0"): 1, ("b0", "r1"): 3})
    submit(pool, job("gang", 3, annotations={"kueue.x-k8s.io/podset-required-topology": RACK}))
    pods = eventually(lambda: all_bound(pool, SELECTOR, 3), 60)
    workload = pool.workload_of("gang")
    assert workload is not None
    groups = podgroups(pool)
    assert len(groups) == 1, groups
    group = groups[0]
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    # The deepest level the admission's domains share: the rack.
    assert group["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    owner = group["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Workload", workload["metadata"]["uid"])
    for pod in pods:
        assert pod.spec.scheduling_group.pod_group_name == group["metadata"]["name"]
    assert {pool.node_labels()[p.spec.node_name][RACK] for p in pods} == {"r1"}
    # Owned by the Workload: deleting the Job (and so its Workload) deletes the group too
    # (kept by kube's podgroup-protection finalizer while its pods, here never stopped by a
    # kubelet, are there).
    batch = client.BatchV1Api(pool.api)
    batch.delete_namespaced_job("gang", pool.namespace, propagation_policy="Background")
    eventually(lambda: all(g["metadata"].get("deletionTimestamp") for g in podgroups(pool)), 60)


def take_node(pool: Pool, node: str) -> None:
    """Another scheduler's pod (bound by nodeName) takes all of ``node``'s GPUs."""
    other = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"other-{node}"[:63], "namespace": pool.namespace},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "c",
                    "image": "example.com/other:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ],
        },
    }
    create_all(pool.plane.kubeconfig, [other])


def test_a_native_podgroup_is_queued_admitted_and_bound_in_one_rack(
    serve: Serve, pool: Pool
) -> None:
    """Pods a user joined to a PodGroup of their own (a gang of 3, one rack) and queued: one
    Workload, held until its PodGroup exists, admitted into the one rack with room, bound
    there whole; topogate writes no PodGroup of its own."""
    serve.start()  # auto: this plane serves PodGroups
    pool.nodes({("b0", "r0"): 1, ("b0", "r1"): 3})
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"native-{i}",
                "namespace": pool.namespace,
                "labels": {"kueue.x-k8s.io/queue-name": "q", "app": "native"},
            },
            "spec": {
                "schedulingGroup": {"podGroupName": "native"},
                "containers": [
                    {
                        "name": "c",
                        "image": "example.com/trainer:1",
                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    }
                ],
            },
        }
        for i in range(3)
    ]
    create_all(pool.plane.kubeconfig, pods)
    held = pool.pods("app=native")
    assert len(held) == 3 and all(p.spec.scheduling_gates for p in held)
    time.sleep(2)
    assert pool.workloads() == []  # its PodGroup is not there yet: no gang to queue
    group = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "native", "namespace": pool.namespace},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 3}},
            "schedulingConstraints": {"topology": [{"key": RACK}]},
        },
    }
    create_all(pool.plane.kubeconfig, [group])
    bound = eventually(lambda: all_bound(pool, "app=native", 3), 60)
    assert {pool.node_labels()[p.spec.node_name][RACK] for p in bound} == {"r1"}
    [workload] = pool.workloads()
    assert workload["metadata"]["name"] == "native"
    assert condition(workload, "Admitted")
    assert [p["count"] for p in workload["spec"]["podSets"]] == [3]
    assert [g["metadata"]["name"] for g in podgroups(pool)] == ["native"]


def test_a_jobsets_podsets_bind_as_one_gang_through_one_podgroup(serve: Serve, pool: Pool) -> None:
    """Two replicated jobs (two PodSets), one PodGroup: every pod of the JobSet joins the
    Workload's group, a gang of all three, so kube-scheduler binds all of them or none."""
    serve.start()
    pool.nodes({("b0", "r0"): 1, ("b0", "r1"): 3})
    rack = {"kueue.x-k8s.io/podset-required-topology": RACK}
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "ring", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "leader",
                    "replicas": 1,
                    "template": {"spec": job("l", 1, annotations=rack)["spec"]},
                },
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {"spec": job("w", 2, annotations=rack)["spec"]},
                },
            ]
        },
    }
    submit(pool, jobset)
    pods = eventually(lambda: all_bound(pool, "jobset.sigs.k8s.io/jobset-name=ring", 3), 90)
    workload = pool.workload_of("ring")
    assert workload is not None
    assert [p["name"] for p in workload["spec"]["podSets"]] == ["leader", "workers"]
    [group] = podgroups(pool)
    assert group["metadata"]["name"] == workload["metadata"]["name"]
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert {p.spec.scheduling_group.pod_group_name for p in pods} == {group["metadata"]["name"]}
    racks = {pool.node_labels()[p.spec.node_name][RACK] for p in pods}
    key = RACK if len(racks) == 1 else BLOCK  # the deepest level both PodSets' domains share
    assert group["spec"]["schedulingConstraints"] == {"topology": [{"key": key}]}


def _race(serve: Serve, pool: Pool, mode: str) -> list[Any]:
    """Admit a 2-pod gang onto a rack of two 8-GPU nodes, take one node whole before its pods
    are released, and return the gang's pods once the scheduler has tried them all."""
    serve.start(f"--native-gangs={mode}", "--ungate-interval=8")
    nodes = pool.nodes({("b0", "r0"): 2})
    submit(pool, job("gang", 2, annotations={"kueue.x-k8s.io/podset-required-topology": RACK}))
    eventually(lambda: condition(pool.workload_of("gang"), "Admitted"), 30)
    take_node(pool, nodes[0])

    def tried() -> list[Any] | None:
        pods = pool.pods(SELECTOR)
        if len(pods) != 2 or any(p.spec.scheduling_gates for p in pods):
            return None  # not all released yet
        unschedulable = [
            p
            for p in pods
            if any(
                c.type == "PodScheduled" and c.reason == "Unschedulable"
                for c in p.status.conditions or []
            )
        ]
        return pods if unschedulable else None

    eventually(tried, 60)
    time.sleep(3)  # anything the scheduler would still bind, bound by now
    return pool.pods(SELECTOR)


def test_capacity_taken_after_admission_binds_no_pod_of_a_native_gang(
    serve: Serve, pool: Pool
) -> None:
    pods = _race(serve, pool, "on")
    assert [p.metadata.name for p in pods if p.spec.node_name] == []
    assert all(p.spec.scheduling_group is not None for p in pods)
    group = podgroups(pool)[0]
    scheduled = [
        c
        for c in (group.get("status") or {}).get("conditions") or []
        if c["type"] == "PodGroupScheduled"
    ]
    assert scheduled and scheduled[0]["status"] == "False", group.get("status")


def test_capacity_taken_after_admission_binds_part_of_a_gang_without_native_gangs(
    serve: Serve, pool: Pool
) -> None:
    pods = _race(serve, pool, "off")
    assert len([p for p in pods if p.spec.node_name]) == 1
    assert all(p.spec.scheduling_group is None for p in pods)
    assert podgroups(pool) == []


def _assigned_nodes(workload: dict[str, Any]) -> list[str]:
    """The hosts of the first PodSet's admitted topology assignment."""
    assignment = workload["status"]["admission"]["podSetAssignments"][0]
    parsed = decode(assignment["topologyAssignment"])
    return [d.values[-1] for d in parsed.domains]


def test_a_native_gang_the_scheduler_cannot_bind_is_evicted_and_runs_in_another_rack(
    serve: Serve, pool: Pool
) -> None:
    serve.start("--native-gangs=on", "--ungate-interval=8", "--gang-unschedulable-grace=3")
    pool.nodes({("b0", "r0"): 2, ("b0", "r1"): 2})
    submit(pool, job("gang", 2, annotations={"kueue.x-k8s.io/podset-required-topology": RACK}))
    admitted = eventually(
        lambda: (w := pool.workload_of("gang")) and condition(w, "Admitted") and w, 30
    )
    labels = pool.node_labels()
    hosts = _assigned_nodes(admitted)
    rack = labels[hosts[0]][RACK]
    take_node(pool, hosts[0])  # before the ungater releases the pods (8 s)

    # The eviction is read from its Event: the requeued Workload may be admitted again (and
    # its Evicted condition turned over) sooner than a poll of the condition would see it.
    def eviction_event() -> dict[str, Any] | None:
        events: Any = client.CustomObjectsApi(pool.api).list_namespaced_custom_object(
            "events.k8s.io", "v1", pool.namespace, "events"
        )
        found = [e for e in events["items"] if e.get("reason") == "GangUnschedulable"]
        return found[0] if found else None

    eviction = eventually(eviction_event, 60)
    assert eviction["type"] == "Warning"
    assert (eviction.get("regarding") or {}).get("name") == admitted["metadata"]["name"]
    message = eviction["note"]
    assert f"in {RACK}={rack}:" in message, message
    assert "kube-scheduler cannot bind PodGroup" in message and "PodSet main" in message
    # None of the gang bound in the rack it could not have whole (the other rack's release
    # waits the 8 s ungate interval).
    assert [p.metadata.name for p in pool.pods(SELECTOR) if p.spec.node_name] == []
    # Requeued with the rack's capacity as now seen: the whole gang binds in the other rack.
    pods = eventually(lambda: all_bound(pool, SELECTOR, 2), 90)
    assert {labels[p.spec.node_name][RACK] for p in pods} == ({"r0", "r1"} - {rack})
    assert all(p.spec.scheduling_group is not None for p in pods)


def test_the_standalone_webhook_joins_marked_pods_to_their_workloads_group(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    """`topogate webhook` (no `serve`) discovers the served PodGroups as `serve` does and sets
    the group on the pods it marks."""
    port = free_port()
    argv = [
        sys.executable, "-m", "topogate", "webhook", "--host", "127.0.0.1", "--port", str(port),
        "--cert-dir", str(tmp_path / "certs"), "--ip", "127.0.0.1",
        "--kubeconfig", str(cluster.kubeconfig), "--register-url", f"https://127.0.0.1:{port}",
    ]  # fmt: skip
    with open(tmp_path / "webhook.log", "w") as log:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        assert process.stdout is not None
        said = [process.stdout.readline(), process.stdout.readline()]
        assert said[0].startswith("native gangs on (scheduling.k8s.io/v1alpha2"), said
        assert "webhooks ready" in said[1], (tmp_path / "webhook.log").read_text()
        namespace = f"hook-{uuid.uuid4().hex[:6]}"
        api = api_client(cluster)
        create_all(
            cluster.kubeconfig,
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}],
        )
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "namespace": namespace,
                "labels": {"topogate.dev/podset": "main"},
                "annotations": {"topogate.dev/workload": "job-x-1a2b3"},
            },
            "spec": {"containers": [{"name": "c", "image": "example.com/x:1"}]},
        }

        def created() -> Any:
            create_all(cluster.kubeconfig, [pod])  # retried until the webhook is registered
            return client.CoreV1Api(api).read_namespaced_pod("p", namespace)

        stored = eventually(created, 30, interval=1)
        assert stored.spec.scheduling_group.pod_group_name == "job-x-1a2b3"
        assert [g.name for g in stored.spec.scheduling_gates] == ["topogate.dev/topology"]
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
        drop_webhooks(cluster)


def test_native_gangs_on_without_podgroups_served_exits_2_naming_what_to_turn_on(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """The shared plane runs without the feature gates: `on` is refused before anything runs."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "topogate",
            "serve",
            f"--kubeconfig={control_plane.kubeconfig}",
            "--native-gangs=on",
            "--ops-port=0",
            "--metrics-port=-1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "--native-gangs" in done.stderr
    assert "--runtime-config=scheduling.k8s.io/v1alpha2=true" in done.stderr
    assert "Traceback" not in done.stderr
