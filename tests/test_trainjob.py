"""Kubeflow Trainer v2's TrainJob (api/kinds/trainer.py), translated as Kueue's trainjob
integration does: PodSets from the referenced runtime's JobSet template (names, counts,
order, numNodes), topology keys from the runtime's pod templates or the TrainJob's runtime
patches, a missing runtime named by spec.runtimeRef, and admission written through
topogate's own runtime patch. The lookup seam: `serve`'s state, the webhook and `plan`.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests import test_shells as shells
from tests.kit import review_for
from topogate.admission.integration import desired_workload
from topogate.admission.podsets import Catalog, build_catalog
from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.jobs import workload_from_object
from topogate.api.keywarnings import key_warnings
from topogate.api.kinds import TRAINJOB, PodSetsInfo, job_kind_by_plural
from topogate.api.kinds.base import Lookup
from topogate.api.kinds.trainer import MANAGER
from topogate.cli import main
from topogate.controllers.jobsync import JobSync
from topogate.kube.events import EventRecorder
from topogate.kube.resources import EVENTS, JOB_RESOURCES, READ_RESOURCES, WORKLOADS
from topogate.state import ControllerState
from topogate.testing.fakekube import FakeKube
from topogate.webhooks.review import Review, mutate, validate
from topogate.webhooks.stateview import state_view

Obj = dict[str, Any]
RACK = "topology.kubernetes.io/rack"
REQUIRED = f"{c.KUEUE_GROUP}/{c.REQUIRED_TOPOLOGY}"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


def job_template(name: str, annotations: Mapping[str, str] | None = None, **job_spec: Any) -> Obj:
    meta: Obj = {"labels": {ANCESTOR: "trainer"}} if name == "node" else {}
    pod_meta = {"annotations": dict(annotations)} if annotations else {}
    return {
        "name": name,
        "template": {
            "metadata": meta,
            "spec": {
                **job_spec,
                "template": {
                    "metadata": pod_meta,
                    "spec": {
                        "priorityClassName": "high" if name == "node" else None,
                        "containers": [
                            {
                                "name": name,
                                "image": "x",
                                "resources": {"requests": {"cpu": "1"}},
                            }
                        ],
                    },
                },
            },
        },
    }


def runtime(ml: Obj | None = None, *jobs: Obj, kind: str = "ClusterTrainingRuntime") -> Obj:
    replicated = list(jobs) or [
        job_template("dataset-initializer"),
        job_template("node", {REQUIRED: RACK}),
    ]
    meta: Obj = {"name": "torch"}
    if kind == "TrainingRuntime":
        meta["namespace"] = "ml"
    spec: Obj = {"template": {"spec": {"replicatedJobs": replicated}}}
    if ml is not None:
        spec["mlPolicy"] = ml
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": kind,
        "metadata": meta,
        "spec": spec,
    }


def trainjob(num_nodes: int | None = 4, **ref: str) -> Obj:
    spec: Obj = {"runtimeRef": {"name": "torch", **ref}}
    if num_nodes is not None:
        spec["trainer"] = {"numNodes": num_nodes}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "finetune",
            "namespace": "ml",
            "uid": "u-1",
            "labels": {"kueue.x-k8s.io/queue-name": "team"},
        },
        "spec": spec,
    }


def holding(*objects: Obj) -> Lookup:
    by_key = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects
    }
    return lambda kind, namespace, name: by_key.get((kind, namespace, name))


TORCH = {"numNodes": 2, "torch": {}}


# -- PodSets, as Kueue reads them from the runtime -------------------------------------------


def test_podsets_are_the_runtimes_replicated_jobs_in_order_with_numnodes() -> None:
    source = workload_from_object(trainjob(), lookup=holding(runtime(TORCH)))
    podsets = source.workload.spec.pod_sets
    assert [(p.name, p.count) for p in podsets] == [("dataset-initializer", 1), ("node", 4)]
    node = podsets[1]
    assert node.topology_request is not None and node.topology_request.required == RACK
    # The node's pods are whole child Jobs: ranked as a JobSet's.
    assert node.topology_request.sub_group_index_label == c.JOBSET_JOB_INDEX
    assert source.template_paths["node"] == (
        "ClusterTrainingRuntime torch: spec.template.spec.replicatedJobs[1].template.spec.template"
    )


def test_the_runtimes_numnodes_counts_when_the_trainjob_names_none() -> None:
    podsets = workload_from_object(
        trainjob(num_nodes=None), lookup=holding(runtime(TORCH))
    ).workload.spec.pod_sets
    assert [p.count for p in podsets] == [1, 2]
    # Without an mlPolicy the trainer's job runs its parallelism unless numNodes says more.
    plain = runtime(None, job_template("node", parallelism=3))
    assert [
        p.count
        for p in workload_from_object(trainjob(None), lookup=holding(plain)).workload.spec.pod_sets
    ] == [3]
    assert [
        p.count
        for p in workload_from_object(trainjob(5), lookup=holding(plain)).workload.spec.pod_sets
    ] == [5]


def test_the_trainjobs_numnodes_goes_to_the_first_trainer_job_the_runtimes_to_each() -> None:
    second = job_template("node")
    second["name"] = "node-b"
    jobs = (job_template("node"), second)
    podsets = workload_from_object(
        trainjob(4), lookup=holding(runtime(TORCH, *jobs))
    ).workload.spec.pod_sets
    assert [(p.name, p.count) for p in podsets] == [("node", 4), ("node-b", 2)]


def test_mpi_gives_numnodes_to_the_job_called_node_less_one_with_the_launcher_as_node() -> None:
    jobs = {"a": job_template("launcher"), "b": job_template("node")}
    mpi = {"numNodes": 1, "mpi": {"runLauncherAsNode": True}}
    counts = [
        p.count
        for p in workload_from_object(
            trainjob(4), lookup=holding(runtime(mpi, *jobs.values()))
        ).workload.spec.pod_sets
    ]
    assert counts == [1, 3]
    mpi["mpi"] = {}
    counts = [
        p.count
        for p in workload_from_object(
            trainjob(4), lookup=holding(runtime(mpi, *jobs.values()))
        ).workload.spec.pod_sets
    ]
    assert counts == [1, 4]


def test_replicas_multiply_and_resources_per_node_replace_the_node_containers() -> None:
    jobs = {"a": {**job_template("node", {REQUIRED: RACK}), "replicas": 2}}
    job = trainjob(3)
    job["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"cpu": "8"}}
    [node] = workload_from_object(
        job, lookup=holding(runtime(TORCH, *jobs.values()))
    ).workload.spec.pod_sets
    assert node.count == 6
    assert node.template["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "8"}}
    assert node.topology_request is not None and node.topology_request.sub_group_count == 2


def test_a_namespaced_trainingruntime_is_looked_up_in_the_trainjobs_namespace() -> None:
    job = trainjob(kind="TrainingRuntime")
    found = holding(runtime(TORCH, kind="TrainingRuntime"))
    assert len(workload_from_object(job, lookup=found).workload.spec.pod_sets) == 2
    # A ClusterTrainingRuntime of that name is another object.
    with pytest.raises(InputError) as missing:
        workload_from_object(job, lookup=holding(runtime(TORCH)))
    assert missing.value.field == "spec.runtimeRef"
    assert "TrainingRuntime 'torch' not found in namespace 'ml'" in missing.value.message


def test_a_missing_runtime_is_refused_naming_spec_runtimeref() -> None:
    with pytest.raises(InputError) as missing:
        workload_from_object(trainjob())
    assert missing.value.describe() == (
        "TrainJob ml/finetune: spec.runtimeRef: ClusterTrainingRuntime 'torch' not found: a "
        "TrainJob's PodSets are read from its runtime's JobSet template; create the runtime "
        "first"
    )
    job = trainjob(kind="Runtime")
    with pytest.raises(InputError) as unsupported:
        workload_from_object(job, lookup=holding(runtime(TORCH)))
    assert unsupported.value.field == "spec.runtimeRef.kind"


def test_the_users_runtime_patch_is_read_and_topogates_own_is_not() -> None:
    job = trainjob()
    patch = {"metadata": {"annotations": {REQUIRED: "topology.kubernetes.io/block"}}}
    job["spec"]["runtimePatches"] = [
        {
            "manager": "example.com/user",
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {"name": "node", "template": {"spec": {"template": patch}}}
                        ]
                    }
                }
            },
        },
        {
            "manager": MANAGER,
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {
                                    "spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}
                                },
                            }
                        ]
                    }
                }
            },
        },
    ]
    node = workload_from_object(job, lookup=holding(runtime(TORCH))).workload.spec.pod_sets[1]
    assert node.topology_request is not None
    assert node.topology_request.required == "topology.kubernetes.io/block"
    assert "nodeSelector" not in node.template["spec"]
    # The key warnings look into the TrainJob's own patches.
    patch["metadata"]["annotations"]["kueue.x-k8s.io/podset-typo"] = "x"
    assert any("podset-typo" in w for w in key_warnings(job))


def test_a_bad_runtime_field_names_the_runtime() -> None:
    bad = runtime(TORCH, {"name": "node", "template": {"spec": {"template": "x"}}})
    with pytest.raises(InputError) as refused:
        workload_from_object(trainjob(), lookup=holding(bad))
    assert refused.value.describe() == (
        "TrainJob ml/finetune: ClusterTrainingRuntime torch: "
        "spec.template.spec.replicatedJobs[0].template.spec.template: must be an object"
    )


# -- admission through topogate's runtime patch ----------------------------------------------


def test_started_writes_one_marked_entry_per_podset_and_restarts_afresh() -> None:
    queued = copy.deepcopy(trainjob())
    [op] = TRAINJOB.suspend_on_create(queued)
    assert op == {"op": "add", "path": "/spec/suspend", "value": True}
    queued["spec"]["suspend"] = True
    assert not TRAINJOB.is_marked(queued)
    info = PodSetsInfo(
        "w-1",
        node_selectors={"dataset-initializer": {}, "node": {"pool": "a"}},
        tolerations={"node": [{"key": "gpu", "operator": "Exists"}]},
    )
    started = TRAINJOB.started(queued, info)
    assert started["spec"]["suspend"] is False and TRAINJOB.is_marked(started)
    assert TRAINJOB.started(started, info) == started
    [ours] = started["spec"]["runtimePatches"]
    assert ours["manager"] == MANAGER
    entries = ours["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert [e["name"] for e in entries] == ["dataset-initializer", "node"]
    node = entries[1]["template"]["spec"]["template"]
    assert node["metadata"] == {
        "labels": {c.PODSET_LABEL: "node"},
        "annotations": {c.WORKLOAD_ANNOTATION: "w-1"},
    }
    assert node["spec"] == {
        "schedulingGates": [{"name": c.TOPOLOGY_GATE}],
        "nodeSelector": {"pool": "a"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
    }
    # Suspended after an eviction, then admitted on another flavor: no old label lingers.
    again = TRAINJOB.started(
        {**started, "spec": {**started["spec"], "suspend": True}},
        PodSetsInfo("w-1", node_selectors={"dataset-initializer": {}, "node": {"pool": "b"}}),
    )
    [ours] = again["spec"]["runtimePatches"]
    node = ours["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][1]
    assert node["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "b"}
    assert "tolerations" not in node["template"]["spec"]["template"]["spec"]


def test_finished_is_the_complete_or_failed_condition() -> None:
    job = trainjob()
    assert TRAINJOB.finished(job) is None
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert TRAINJOB.finished(job) == "Succeeded"
    job["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    assert TRAINJOB.finished(job) == "Failed"


def test_the_workload_takes_the_runtimes_priority_class() -> None:
    body = desired_workload(trainjob(), {"high": 100}.get, lookup=holding(runtime(TORCH)))
    assert body["spec"]["priority"] == 100
    assert [p["name"] for p in body["spec"]["podSets"]] == ["dataset-initializer", "node"]
    assert body["spec"]["podSets"][1]["topologyRequest"]["podIndexLabel"] == (
        c.JOB_COMPLETION_INDEX
    )


# -- the seam: the state, the webhook, plan --------------------------------------------------


def test_the_state_watches_runtimes_and_a_runtime_brings_back_the_trainjobs_naming_it() -> None:
    state = ControllerState()
    trainjobs = JOB_RESOURCES["TrainJob"]
    assert job_kind_by_plural("trainjobs") is TRAINJOB
    state.handler(trainjobs)(None, trainjob())
    other = trainjob()
    other["metadata"]["name"] = "other"
    other["spec"]["runtimeRef"]["name"] = "jax"
    state.handler(trainjobs)(None, other)
    state.signals.take_jobs()
    assert state.store.lookup("ClusterTrainingRuntime", None, "torch") is None
    state.handler(READ_RESOURCES["ClusterTrainingRuntime"])(None, runtime(TORCH))
    assert state.store.lookup("ClusterTrainingRuntime", None, "torch") == runtime(TORCH)
    assert state.signals.take_jobs() == {("TrainJob", "ml/finetune")}


def _catalog() -> Catalog:
    catalog, warnings = build_catalog(
        [
            {
                "metadata": {"name": "cq"},
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {"name": "tas", "resources": [{"name": "cpu", "nominalQuota": 8}]}
                            ],
                        }
                    ]
                },
            }
        ],
        [{"metadata": {"name": "team", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}}],
        [{"metadata": {"name": "tas"}, "spec": {"topologyName": "dc", "nodeLabels": {"p": "a"}}}],
        [{"metadata": {"name": "dc"}, "spec": {"levels": [{"nodeLabel": RACK}]}}],
        None,
    )
    assert warnings == []
    return catalog


class _View:
    def __init__(self, *objects: Obj) -> None:
        self.objects = objects

    def catalog_for(self, namespace: str, queue: str) -> Catalog | None:
        return _catalog()

    def hypernodes(self) -> None:
        return None

    def read_objects(self) -> Lookup:
        return holding(*self.objects)


def _validate(job: Obj, view: Any) -> Obj:
    review = Review.parse(review_for(job, "TrainJob", "trainer.kubeflow.org", namespace="ml"))
    answer: Obj = validate(review, view)["response"]
    return answer


def test_the_webhook_suspends_and_refuses_a_missing_runtime_or_an_unknown_level() -> None:
    review = Review.parse(
        review_for(trainjob(), "TrainJob", "trainer.kubeflow.org", namespace="ml")
    )
    answer = mutate(review)["response"]
    assert answer["allowed"] is True
    assert '"/spec/suspend"' in base64.b64decode(answer["patch"]).decode()

    assert _validate(trainjob(), _View(runtime(TORCH)))["allowed"] is True
    missing = _validate(trainjob(), _View())
    assert missing["allowed"] is False and missing["status"]["code"] == 422
    assert missing["status"]["message"].startswith(
        "TrainJob ml/finetune: spec.runtimeRef: ClusterTrainingRuntime 'torch' not found"
    )
    zone = runtime(TORCH, job_template("node", {REQUIRED: "topology.kubernetes.io/zone"}))
    unknown = _validate(trainjob(), _View(zone))
    assert unknown["allowed"] is False
    assert unknown["status"]["message"] == (
        "TrainJob ml/finetune: ClusterTrainingRuntime torch: "
        "spec.template.spec.replicatedJobs[0].template.spec.template.metadata.annotations"
        f"[{REQUIRED}]: 'topology.kubernetes.io/zone' is not a level of topology 'dc' used by "
        f"queue 'team' (levels: {RACK})"
    )

    class Unknowing:
        def catalog_for(self, namespace: str, queue: str) -> Catalog | None:
            return _catalog()

        def hypernodes(self) -> None:
            return None

    # A view that holds no runtimes (the standalone webhook) leaves it to the controller.
    assert _validate(trainjob(), Unknowing())["allowed"] is True


def _write(path: Path, *objects: Obj) -> Path:
    path.write_text("\n---\n".join(json.dumps(o) for o in objects))
    return path


def test_plan_reads_the_runtime_from_the_cluster_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"n{i}", "labels": {RACK: f"r{i // 4}", "pool": "a"}},
            "status": {
                "allocatable": {"cpu": "4", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for i in range(8)
    ]
    topology = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Topology",
        "metadata": {"name": "dc"},
        "spec": {"levels": [{"nodeLabel": RACK}]},
    }
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "tas"},
        "spec": {"topologyName": "dc", "nodeLabels": {"pool": "a"}},
    }
    cluster = _write(tmp_path / "cluster.yaml", *nodes, topology, flavor, runtime(TORCH))
    workload = _write(tmp_path / "trainjob.yaml", trainjob())
    assert main(["plan", "--cluster", str(cluster), "--workload", str(workload), "-o", "json"]) == 0
    placed = json.loads(capsys.readouterr().out)
    assert "node" in json.dumps(placed)

    bare = _write(tmp_path / "bare.yaml", *nodes, topology, flavor)
    assert main(["plan", "--cluster", str(bare), "--workload", str(workload)]) == 2
    err = capsys.readouterr().err
    assert "spec.runtimeRef: ClusterTrainingRuntime 'torch' not found" in err


async def test_serves_webhook_reads_a_runtime_the_watch_has_not_brought_yet() -> None:
    """A runtime and its TrainJob applied together: the review finds the runtime with a GET
    (the state has not seen it); an API server that cannot answer leaves the PodSets to the
    controller instead of refusing the runtime as missing."""
    kube = FakeKube()
    view_for = state_view(ControllerState(), kube)
    review = Review.parse(
        review_for(trainjob(), "TrainJob", "trainer.kubeflow.org", "CREATE", "ml")
    )
    missing = validate(review, await view_for(review))["response"]
    assert missing["allowed"] is False and "not found" in missing["status"]["message"]
    kube.seed(READ_RESOURCES["ClusterTrainingRuntime"], runtime(TORCH))
    assert validate(review, await view_for(review))["response"]["allowed"] is True
    down = FakeKube()
    down.fail_next("get", aiohttp.ClientConnectionError("reset"))
    answer = validate(review, await state_view(ControllerState(), down)(review))["response"]
    assert answer["allowed"] is True


async def test_the_job_sync_waits_for_the_runtime_then_makes_the_workload_and_starts_it() -> None:
    """Created before its runtime: no Workload, an InvalidWorkload Event naming
    spec.runtimeRef; the runtime's arrival brings the TrainJob back, its Workload is made,
    admitted, and the TrainJob started through topogate's runtime patch."""
    h = shells.Harness()
    resource = JOB_RESOURCES["TrainJob"]
    job = trainjob(num_nodes=2)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    h.kube.seed(resource, job)  # running without an admission (no webhook here)
    h.deliver()
    events = EventRecorder(h.kube, "test")
    sync = JobSync(h.kube, h.state, events)
    await sync.reconcile("TrainJob", "ml/finetune")
    stored = h.kube.stored(resource, "finetune", "ml")
    assert stored is not None and stored["spec"]["suspend"] is True
    assert h.kube.objects(WORKLOADS) == []
    h.deliver()
    await sync.reconcile("TrainJob", "ml/finetune")  # the suspended version: said once more
    await sync.reconcile("TrainJob", "ml/finetune")  # and not again
    await events.drain()
    said = [e for e in h.kube.objects(EVENTS) if e["reason"] == "InvalidWorkload"]
    assert len(said) == 2
    assert all(
        "spec.runtimeRef: ClusterTrainingRuntime 'torch' not found" in e["note"] for e in said
    )

    node = job_template("node")
    node["template"]["spec"]["template"] = shells.pod_template(4)
    h.state.signals.take_jobs()
    h.kube.seed(READ_RESOURCES["ClusterTrainingRuntime"], runtime(TORCH, node))
    h.deliver()
    assert h.state.signals.take_jobs() == {("TrainJob", "ml/finetune")}
    events = EventRecorder(h.kube, "test")
    sync.events = events
    await sync.reconcile("TrainJob", "ml/finetune")
    [created] = h.kube.objects(WORKLOADS)
    assert [(p["name"], p["count"]) for p in created["spec"]["podSets"]] == [("node", 2)]
    h.deliver()
    admitter, _ = h.admitter()
    await admitter.cycle()
    h.deliver()
    await sync.reconcile("TrainJob", "ml/finetune")
    started = h.kube.stored(resource, "finetune", "ml")
    assert started is not None and started["spec"]["suspend"] is False
    [(name, template)] = TRAINJOB.pod_templates(copy.deepcopy(started))
    assert name == "node"
    assert template["metadata"]["labels"][c.PODSET_LABEL] == "node"
    assert template["spec"]["schedulingGates"] == [{"name": c.TOPOLOGY_GATE}]
    assert template["spec"]["nodeSelector"] == {"pool": "gpu"}
    await events.drain()
