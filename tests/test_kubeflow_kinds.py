"""Kubeflow's v1 kinds (api/kinds/kubeflow.py): PyTorchJob (kubeflow.org/v1) and MPIJob
(kubeflow.org/v2beta1), translated as Kueue's kubeflowjob and mpijob integrations do: PodSet
names, counts and order, the replica-index rank label, suspend through spec.runPolicy,
finished by condition, and MPIJob's runLauncherAsWorker offset written by the webhook.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from typing import Any

import pytest

from tests import test_shells as shells
from topogate.admission.integration import desired_workload
from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.jobs import workload_from_object
from topogate.api.keywarnings import key_warnings
from topogate.api.kinds import MPIJOB, PYTORCHJOB, pod_podset
from topogate.api.objects import condition
from topogate.controllers.jobsync import JobSync
from topogate.kube.events import EventRecorder
from topogate.kube.resources import JOB_RESOURCES, PODS, WORKLOADS
from topogate.ungater.ranks import Domain, PodView, plan_ungates
from topogate.webhooks.review import Review, mutate

Obj = dict[str, Any]
RACK = "topology.kubernetes.io/rack"
REQUIRED = f"{c.KUEUE_GROUP}/{c.REQUIRED_TOPOLOGY}"
OFFSET = c.POD_INDEX_OFFSET
REPLICA_INDEX = "training.kubeflow.org/replica-index"


def template(annotations: dict[str, str] | None = None) -> Obj:
    return {
        "metadata": {"annotations": {REQUIRED: RACK} if annotations is None else annotations},
        "spec": {"containers": [{"name": "pytorch", "image": "x"}]},
    }


def pytorchjob(**specs: Obj | None) -> Obj:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": "finetune",
            "namespace": "ml",
            "uid": "u-1",
            "labels": {"kueue.x-k8s.io/queue-name": "team"},
        },
        "spec": {"pytorchReplicaSpecs": specs},
    }


def mpijob(run_launcher_as_worker: bool | None = None, **specs: Obj | None) -> Obj:
    obj = pytorchjob()
    obj["apiVersion"], obj["kind"] = "kubeflow.org/v2beta1", "MPIJob"
    obj["spec"] = {"mpiReplicaSpecs": specs}
    if run_launcher_as_worker is not None:
        obj["spec"]["runLauncherAsWorker"] = run_launcher_as_worker
    return obj


def podsets(obj: Obj) -> list[tuple[str, int]]:
    return [(p.name, p.count) for p in workload_from_object(obj).workload.spec.pod_sets]


# -- PodSets --------------------------------------------------------------------------------


def test_a_pytorchjob_is_master_then_worker_lower_cased_whatever_the_map_order() -> None:
    obj = pytorchjob(
        Worker={"replicas": 7, "template": template()},
        Master={"replicas": 1, "template": template()},
    )
    assert podsets(obj) == [("master", 1), ("worker", 7)]


def test_replicas_default_to_one_and_an_absent_type_has_no_podset() -> None:
    assert podsets(pytorchjob(Worker={"template": template()})) == [("worker", 1)]
    assert podsets(pytorchjob(Master={"template": template()}, Worker=None)) == [("master", 1)]


def test_an_mpijob_is_launcher_then_worker() -> None:
    obj = mpijob(
        Worker={"replicas": 8, "template": template()},
        Launcher={"replicas": 1, "template": template({})},
    )
    assert podsets(obj) == [("launcher", 1), ("worker", 8)]


def test_an_mpijobs_other_replica_types_have_no_podset_as_in_kueue() -> None:
    """Kueue's MPIJob webhook tests admit an "Extra" replica spec (the PodSets read Launcher
    and Worker only); the training-operator refuses a PyTorchJob's, and so does topogate."""
    obj = mpijob(
        True,
        Launcher={"template": template({})},
        Worker={"replicas": 2, "template": template()},
        Extra={},
    )
    assert podsets(obj) == [("launcher", 1), ("worker", 2)]
    with pytest.raises(InputError, match="Unsupported value: 'Extra'"):
        workload_from_object(pytorchjob(Worker={"template": template()}, Extra={}))


def test_topology_is_read_per_replica_template_and_ranked_by_replica_index() -> None:
    obj = pytorchjob(
        Master={"replicas": 1, "template": template({})},
        Worker={"replicas": 4, "template": template()},
    )
    body = desired_workload(obj, lambda name: None)
    master, worker = body["spec"]["podSets"]
    assert "topologyRequest" not in master
    assert worker["topologyRequest"]["required"] == RACK
    assert worker["topologyRequest"]["podIndexLabel"] == REPLICA_INDEX
    assert body["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"


def test_a_pod_names_its_podset_by_its_replica_type_label() -> None:
    assert pod_podset({"training.kubeflow.org/replica-type": "worker"}) == "worker"
    # The mpi-operator (v2) writes no replica-type: its pods name their role.
    mpi_pod = {
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": "allreduce",
        "training.kubeflow.org/job-role": "launcher",
    }
    assert pod_podset(mpi_pod) == "launcher"


@pytest.mark.parametrize(
    ("specs", "field", "message"),
    [
        (
            {"master": {"template": template()}},
            "spec.pytorchReplicaSpecs[master]",
            "Unsupported value: 'master': supported values: Master, Worker",
        ),
        ({}, "spec.pytorchReplicaSpecs", "must have one of Master, Worker"),
        ({"Worker": 3}, "spec.pytorchReplicaSpecs[Worker]", "must be an object"),
        ({"Worker": {}}, "spec.pytorchReplicaSpecs[Worker].template", "is required"),
        (
            {"Worker": {"replicas": -1, "template": template()}},
            "spec.pytorchReplicaSpecs[Worker].replicas",
            "-1 must be a non-negative integer",
        ),
    ],
)
def test_bad_replica_specs_are_refused_naming_the_field(
    specs: Obj, field: str, message: str
) -> None:
    with pytest.raises(InputError) as refused:
        workload_from_object(pytorchjob(**specs))
    assert refused.value.field == field
    assert message in refused.value.describe()
    assert "PyTorchJob ml/finetune" in refused.value.describe()


def test_a_bad_topology_key_names_the_replica_template() -> None:
    obj = pytorchjob(
        Worker={
            "template": template({REQUIRED: RACK, f"{c.KUEUE_GROUP}/{c.PREFERRED_TOPOLOGY}": RACK})
        }
    )
    with pytest.raises(InputError) as refused:
        workload_from_object(obj)
    assert "spec.pytorchReplicaSpecs[Worker].template.metadata.annotations" in str(
        refused.value.describe()
    )


def test_a_key_on_the_object_is_a_misplaced_key() -> None:
    obj = pytorchjob(Worker={"template": template()})
    obj["metadata"]["annotations"] = {REQUIRED: RACK}
    assert key_warnings(obj) == [
        f"metadata.annotations[{REQUIRED}]: not read on the PyTorchJob; move it to "
        "spec.pytorchReplicaSpecs[*].template.metadata.annotations"
    ]


# -- suspend, start, finish -----------------------------------------------------------------


def review(obj: Obj) -> Review:
    return Review.parse(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "r",
                "kind": {"group": "kubeflow.org", "version": "v1", "kind": obj["kind"]},
                "operation": "CREATE",
                "namespace": "ml",
                "object": obj,
            },
        }
    )


def patch_of(obj: Obj) -> list[Obj]:
    answer = mutate(review(obj))["response"]
    if "patch" not in answer:
        return []
    ops: list[Obj] = json.loads(base64.b64decode(answer["patch"]))
    return ops


def test_the_webhook_suspends_a_queued_pytorchjob_through_its_run_policy() -> None:
    obj = pytorchjob(Worker={"template": template()})
    assert patch_of(obj) == [{"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}]
    obj["spec"]["runPolicy"] = {"cleanPodPolicy": "None"}
    assert patch_of(obj) == [{"op": "add", "path": "/spec/runPolicy/suspend", "value": True}]
    obj["spec"]["runPolicy"]["suspend"] = True
    assert patch_of(obj) == []
    assert PYTORCHJOB.is_suspended(obj)
    # Not queued: left alone.
    del obj["metadata"]["labels"]
    obj["spec"]["runPolicy"]["suspend"] = False
    assert patch_of(obj) == []


def test_finished_is_the_succeeded_or_failed_condition() -> None:
    obj = pytorchjob(Worker={"template": template()})
    assert PYTORCHJOB.finished(obj) is None
    obj["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    assert PYTORCHJOB.finished(obj) is None
    obj["status"]["conditions"].append({"type": "Succeeded", "status": "False"})
    assert PYTORCHJOB.finished(obj) is None
    obj["status"]["conditions"].append({"type": "Failed", "status": "True"})
    assert PYTORCHJOB.finished(obj) == "Failed"
    # A batch/v1 Job's word is not a Kubeflow job's.
    obj["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert MPIJOB.finished(obj) is None
    obj["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    assert MPIJOB.finished(obj) == "Succeeded"


# -- MPIJob's runLauncherAsWorker -----------------------------------------------------------


def test_run_launcher_as_worker_makes_workers_rank_from_one() -> None:
    """As Kueue's MPIJob webhook: the operator numbers workers from 1 (the launcher is 0)."""
    obj = mpijob(
        True,
        Launcher={"template": template({})},
        Worker={"replicas": 2, "template": template()},
    )
    suspend = {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}
    offset = {
        "op": "add",
        "path": "/spec/mpiReplicaSpecs/Worker/template/metadata/annotations/"
        "kueue.x-k8s.io~1pod-index-offset",
        "value": "1",
    }
    assert patch_of(obj) == [suspend, offset]
    # A worker template without annotations, or without metadata, gets them whole.
    bare = copy.deepcopy(obj)
    del bare["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    assert patch_of(bare)[1] == {
        "op": "add",
        "path": "/spec/mpiReplicaSpecs/Worker/template/metadata/annotations",
        "value": {OFFSET: "1"},
    }
    del bare["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]
    assert patch_of(bare)[1]["value"] == {"annotations": {OFFSET: "1"}}


def test_no_offset_without_run_launcher_as_worker_or_without_workers() -> None:
    specs = {"Launcher": {"template": template({})}, "Worker": {"template": template()}}
    suspend = [{"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}]
    assert patch_of(mpijob(None, **copy.deepcopy(specs))) == suspend
    assert patch_of(mpijob(False, **copy.deepcopy(specs))) == suspend
    # No worker: nothing to offset.
    assert patch_of(mpijob(True, Launcher={"template": template({})})) == suspend


def test_workers_of_a_launcher_in_a_podset_group_rank_from_one_too() -> None:
    """Kueue leaves the offset off when the launcher names a PodSet group (its ungater
    offsets the group's larger PodSet); topogate's ungater ranks each PodSet alone, so the
    webhook writes it, and the operator's workers 1..11 rank 0..10 by index, not by name
    (worker-10 sorts before worker-2)."""
    group = {f"{c.KUEUE_GROUP}/{c.GROUP_NAME}": "g", REQUIRED: RACK}
    obj = mpijob(
        True,
        Launcher={"template": template(dict(group))},
        Worker={"replicas": 11, "template": template(dict(group))},
    )
    offset = patch_of(obj)[1]
    assert offset["path"].endswith(
        "/Worker/template/metadata/annotations/kueue.x-k8s.io~1pod-index-offset"
    )
    pods = [
        PodView(
            f"hybrid-worker-{i}", f"u{i}", {REPLICA_INDEX: str(i + 1)}, {OFFSET: "1"}, gated=True
        )
        for i in range(11)
    ]
    hosts = [Domain((f"h{r}",), 1) for r in range(11)]
    plan = plan_ungates(["host"], hosts, pods, count=11, index_label=REPLICA_INDEX)
    assert {u.pod: u.node_selector["host"] for u in plan} == {
        f"hybrid-worker-{i}": f"h{i}" for i in range(11)
    }
    # Without it, index 11 is out of range: name order, worker-10 on the third host.
    bare = [dataclasses.replace(p, annotations={}) for p in pods]
    greedy = plan_ungates(["host"], hosts, bare, count=11, index_label=REPLICA_INDEX)
    assert {u.pod: u.node_selector["host"] for u in greedy}["hybrid-worker-10"] == "h2"


def test_priority_is_the_run_policys_class_then_the_templates() -> None:
    """Kueue's Kubeflow PriorityClass: runPolicy.schedulingPolicy.priorityClass first, then
    the replica templates' priorityClassName in Kueue's order; the Kueue label above all."""
    values = {"low": 10, "high": 1000, "urgent": 5000}
    worker = template()
    worker["spec"]["priorityClassName"] = "low"
    obj = pytorchjob(Worker={"template": worker})
    assert desired_workload(obj, values.get)["spec"]["priority"] == 10
    master = template()
    master["spec"]["priorityClassName"] = "urgent"
    obj["spec"]["pytorchReplicaSpecs"]["Master"] = {"template": master}
    assert desired_workload(obj, values.get)["spec"]["priority"] == 5000  # Master first
    obj["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": "high"}}
    assert desired_workload(obj, values.get)["spec"]["priority"] == 1000
    obj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "low"
    assert desired_workload(obj, values.get)["spec"]["priority"] == 10


# -- the job sync against FakeKube ----------------------------------------------------------


def gpu_template(gpus: int) -> Obj:
    resources = {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}
    return {
        "metadata": {"annotations": {REQUIRED: shells.RACK}},
        "spec": {"containers": [{"name": "pytorch", "image": "x", "resources": resources}]},
    }


@pytest.mark.parametrize(
    ("obj", "names"),
    [
        (
            pytorchjob(
                Master={"template": gpu_template(4)},
                Worker={"replicas": 2, "template": gpu_template(4)},
            ),
            ["master", "worker"],
        ),
        (
            mpijob(
                None,
                Launcher={"template": gpu_template(0)},
                Worker={"replicas": 3, "template": gpu_template(4)},
            ),
            ["launcher", "worker"],
        ),
    ],
    ids=["PyTorchJob", "MPIJob"],
)
async def test_job_sync_carries_a_kubeflow_job_from_queued_to_started_to_finished(
    obj: Obj, names: list[str]
) -> None:
    h = shells.Harness()
    obj = copy.deepcopy(obj)
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    resource = JOB_RESOURCES[obj["kind"]]
    name = obj["metadata"]["name"]
    h.kube.seed(resource, obj)  # running without an admission (no webhook here)
    h.deliver()
    events = EventRecorder(h.kube, "test")
    sync = JobSync(h.kube, h.state, events)
    await sync.reconcile(obj["kind"], f"ml/{name}")
    job = h.kube.stored(resource, name, "ml")
    assert job is not None and job["spec"]["runPolicy"] == {"suspend": True}
    assert "suspend" not in job["spec"]  # not a Kubeflow field
    [created] = h.kube.objects(WORKLOADS)
    assert [p["name"] for p in created["spec"]["podSets"]] == names
    h.deliver()
    admitter, _ = h.admitter()
    await admitter.cycle()
    h.deliver()
    await sync.reconcile(obj["kind"], f"ml/{name}")
    job = h.kube.stored(resource, name, "ml")
    assert job is not None and job["spec"]["runPolicy"]["suspend"] is False
    kind = PYTORCHJOB if obj["kind"] == "PyTorchJob" else MPIJOB
    for podset, template in kind.pod_templates(copy.deepcopy(job)):
        assert template["metadata"]["labels"][c.PODSET_LABEL] == podset
        assert template["spec"]["schedulingGates"] == [{"name": c.TOPOLOGY_GATE}]
        assert template["spec"]["nodeSelector"] == {"pool": "gpu"}
    h.deliver()
    done = copy.deepcopy(job)
    done["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    h.kube.seed(resource, done)
    h.deliver()
    await sync.reconcile(obj["kind"], f"ml/{name}")
    await events.drain()
    stored = h.kube.stored(WORKLOADS, created["metadata"]["name"], "ml")
    finished = condition(stored, "Finished")
    assert finished is not None and finished["reason"] == "Succeeded"


async def test_the_end_of_a_marked_pod_brings_its_job_back() -> None:
    """An evicted job is requeued once its pods are gone; the training-operator writes
    nothing on the PyTorchJob when they are, so the pod's deletion must signal the job."""
    h = shells.Harness()
    body = desired_workload(pytorchjob(Worker={"template": gpu_template(4)}), lambda n: None)
    h.kube.seed(WORKLOADS, body)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "finetune-worker-0",
            "namespace": "ml",
            "labels": {c.PODSET_LABEL: "worker"},
            "annotations": {c.WORKLOAD_ANNOTATION: body["metadata"]["name"]},
        },
        "spec": {"containers": []},
    }
    h.kube.seed(PODS, pod)
    h.deliver()
    h.state.signals.take_jobs()
    running = copy.deepcopy(pod)
    running["status"] = {"phase": "Running"}
    h.kube.seed(PODS, running)
    h.deliver()
    assert h.state.signals.take_jobs() == set()  # a live pod's change is not the job's
    await h.kube.delete(PODS, "finetune-worker-0", "ml")
    h.deliver()
    assert h.state.signals.take_jobs() == {("PyTorchJob", "ml/finetune")}
