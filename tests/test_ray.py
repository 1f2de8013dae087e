"""Ray (ray.io/v1): RayCluster and RayJob PodSets, refusals, skips and finished detection, as
Kueue's raycluster and rayjob integrations; the webhook's answers to both kinds."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.jobs import workload_from_object
from topogate.api.keywarnings import key_warnings
from topogate.api.kinds import RAYCLUSTER, RAYJOB, PodSetsInfo, queue_name
from topogate.api.objects import condition
from topogate.webhooks.review import Review, mutate, validate

Obj = dict[str, Any]
RACK = "topology.kubernetes.io/rack"
REQUIRED = f"{c.KUEUE_GROUP}/{c.REQUIRED_TOPOLOGY}"


def template(image: str = "rayproject/ray:2.9", rack: bool = True) -> Obj:
    return {
        "metadata": {"annotations": {REQUIRED: RACK} if rack else {}},
        "spec": {"containers": [{"name": "ray", "image": image}]},
    }


def cluster_spec(*groups: Obj) -> Obj:
    return {"headGroupSpec": {"template": template()}, "workerGroupSpecs": list(groups)}


def raycluster(*groups: Obj, **spec: Any) -> Obj:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": "rc",
            "namespace": "ml",
            "uid": "u1",
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
        },
        "spec": {**cluster_spec(*groups), **spec},
    }


def rayjob(*groups: Obj, **spec: Any) -> Obj:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": "rj",
            "namespace": "ml",
            "uid": "u2",
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
        },
        "spec": {"shutdownAfterJobFinishes": True, "rayClusterSpec": cluster_spec(*groups), **spec},
    }


def group(name: str, replicas: int | None = None, hosts: int | None = None) -> Obj:
    out: Obj = {"groupName": name, "template": template(), "minReplicas": 0, "maxReplicas": 9}
    if replicas is not None:
        out["replicas"] = replicas
    if hosts is not None:
        out["numOfHosts"] = hosts
    return out


def counts(obj: Obj) -> list[tuple[str, int]]:
    kind = RAYCLUSTER if obj["kind"] == "RayCluster" else RAYJOB
    return [(p.name, p.count) for p, _ in kind.podsets(obj, "test")]


def refusal(obj: Obj) -> str:
    with pytest.raises(InputError) as refused:
        workload_from_object(obj)
    return refused.value.describe()


# -- PodSets ---------------------------------------------------------------------------------


def test_a_raycluster_is_its_head_then_each_worker_group_in_order() -> None:
    obj = raycluster(group("GPU-Workers", 2, 4), group("cpu"), group("tpu", 3, 1))
    # Kueue: head 1 pod; a group's pods are replicas (default 1) x numOfHosts; the PodSet is
    # the group name lower-cased.
    assert counts(obj) == [("head", 1), ("gpu-workers", 8), ("cpu", 1), ("tpu", 3)]
    source = workload_from_object(obj)
    assert [p.name for p in source.workload.spec.pod_sets] == ["head", "gpu-workers", "cpu", "tpu"]
    assert all(
        p.topology_request is not None and p.topology_request.required == RACK
        for p in source.workload.spec.pod_sets
    )
    assert source.template_paths["cpu"] == "spec.workerGroupSpecs[1].template"
    assert [n for n, _ in RAYCLUSTER.pod_templates(copy.deepcopy(obj))] == [
        "head",
        "gpu-workers",
        "cpu",
        "tpu",
    ]


def test_a_rayjob_adds_the_submitter_in_k8s_job_mode_the_default() -> None:
    obj = rayjob(group("workers", 2))
    assert counts(obj) == [("head", 1), ("workers", 2), ("submitter", 1)]
    submitter = RAYJOB.podsets(obj, "test")[-1][0]
    # KubeRay's default submitter: the head's image, its default resources.
    [container] = submitter.template["spec"]["containers"]
    assert container["image"] == "rayproject/ray:2.9"
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "200Mi"}
    assert submitter.topology_request is None
    # Its own template, with its own topology, when the RayJob gives one.
    own = rayjob(group("workers"), submitterPodTemplate=template("submit:1"))
    mine = RAYJOB.podsets(own, "test")[-1]
    assert mine[1] == "spec.submitterPodTemplate"
    assert mine[0].topology_request is not None and mine[0].topology_request.required == RACK


@pytest.mark.parametrize(
    ("where", "requests", "expected"),
    [
        ("annotation", None, {"cpu": "200m", "memory": "256Mi"}),
        ("options", {"cpu": "2", "memory": "100Mi"}, {"cpu": "2", "memory": "256Mi"}),
        ("annotation", {"cpu": "100m", "memory": "1Gi"}, {"cpu": "200m", "memory": "1Gi"}),
    ],
)
def test_gcs_fault_tolerance_counts_the_redis_cleanup_on_the_head(
    where: str, requests: Obj | None, expected: Obj
) -> None:
    obj = raycluster(group("w"))
    head = obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    if requests is not None:
        head["resources"] = {"requests": requests}
    if where == "annotation":
        obj["metadata"]["annotations"] = {"ray.io/ft-enabled": "True"}
    else:
        obj["spec"]["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379"}
    [(podset, _), (worker, _)] = RAYCLUSTER.podsets(obj, "test")
    assert podset.template["spec"]["containers"][0]["resources"]["requests"] == expected
    assert "resources" not in worker.template["spec"]["containers"][0]
    assert head.get("resources", {}).get("requests") == requests  # the object is not changed
    obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"] = []
    assert "spec.headGroupSpec.template.spec.containers: Required value" in refusal(obj)


@pytest.mark.parametrize("mode", ["HTTPMode", "InteractiveMode", "SidecarMode"])
def test_other_submission_modes_have_no_submitter_podset(mode: str) -> None:
    obj = rayjob(group("workers"), submissionMode=mode)
    assert counts(obj) == [("head", 1), ("workers", 1)]
    head = RAYJOB.podsets(obj, "test")[0][0]
    names = [ctr["name"] for ctr in head.template["spec"]["containers"]]
    # In SidecarMode KubeRay runs the submitter inside the head pod: Kueue counts it there.
    assert names == (["ray", "ray-job-submitter"] if mode == "SidecarMode" else ["ray"])
    assert obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"] == [
        {"name": "ray", "image": "rayproject/ray:2.9"}
    ]  # the object itself is not changed


def test_starting_a_rayjob_writes_the_marked_default_submitter() -> None:
    obj = rayjob(group("workers"))
    obj["spec"]["suspend"] = True
    started = RAYJOB.started(obj, PodSetsInfo("wl", node_selectors={"submitter": {"p": "a"}}))
    submitter = started["spec"]["submitterPodTemplate"]
    assert submitter["metadata"]["labels"][c.PODSET_LABEL] == "submitter"
    assert submitter["spec"]["nodeSelector"] == {"p": "a"}
    assert submitter["spec"]["containers"][0]["image"] == "rayproject/ray:2.9"
    assert started["spec"]["suspend"] is False
    assert "submitterPodTemplate" not in obj["spec"]


# -- refusals, as Kueue's webhooks --------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "words"),
    [
        (
            raycluster(group("w"), enableInTreeAutoscaling=True),
            "spec.enableInTreeAutoscaling: Invalid value: true: a queued Ray cluster runs",
        ),
        (
            rayjob(group("w"))
            | {
                "spec": {
                    **rayjob()["spec"],
                    "rayClusterSpec": {**cluster_spec(), "enableInTreeAutoscaling": True},
                }
            },
            "spec.rayClusterSpec.enableInTreeAutoscaling: Invalid value: true",
        ),
        (
            raycluster(group("head")),
            'spec.workerGroupSpecs[0].groupName: Forbidden: "head" is reserved for the head group',
        ),
        (
            raycluster(group("a"), group("A")),
            "spec.workerGroupSpecs[1].groupName: Duplicate value: 'A'",
        ),
        (raycluster(group("a_b")), "spec.workerGroupSpecs[0].groupName: Invalid value: 'a_b'"),
        (raycluster({"template": template()}), "spec.workerGroupSpecs[0].groupName: is required"),
        (
            # 18, Kueue's jobframework figure, let 9 to 18 through to the Workload's own limit
            # of 8, whose refusal was pydantic's dump of every PodSet.
            raycluster(*(group(f"g{i}") for i in range(8))),
            "spec.workerGroupSpecs: Too many: 9: must have at most 8 items",
        ),
        (raycluster(group("w", -1)), "spec.workerGroupSpecs[0].replicas: -1 must be"),
        (
            raycluster(group("w", 0) | {"minReplicas": 2}),
            "spec.workerGroupSpecs[0].replicas: Invalid value: 0: must be within minReplicas 2 "
            "and maxReplicas 9, or KubeRay runs 2 where the Workload counts 0",
        ),
        (
            raycluster(group("w", 12)),
            "spec.workerGroupSpecs[0].replicas: Invalid value: 12: must be within minReplicas 0 "
            "and maxReplicas 9, or KubeRay runs 9",
        ),
        (raycluster(group("w", 1, "2")), "spec.workerGroupSpecs[0].numOfHosts: '2' must be"),  # type: ignore[arg-type]
        (
            rayjob(group("w"), clusterSelector={"ray.io/cluster": "shared"}),
            "spec.clusterSelector: Invalid value: a queued RayJob brings its own cluster",
        ),
        (rayjob() | {"spec": {"shutdownAfterJobFinishes": True}}, "spec.rayClusterSpec: Required"),
        (
            rayjob(group("w"), shutdownAfterJobFinishes=False),
            "spec.shutdownAfterJobFinishes: Invalid value: false: a queued RayJob must delete "
            "its cluster when it finishes",
        ),
        (
            rayjob(group("w"), submitterPodTemplate=[]),
            "spec.submitterPodTemplate: must be an object",
        ),
    ],
)
def test_refused_naming_the_object_and_field(obj: Obj, words: str) -> None:
    message = refusal(obj)
    assert message.startswith(f"{obj['kind']} ml/{obj['metadata']['name']}: ")
    assert words in message


def test_a_shutdown_left_unset_is_refused_as_false() -> None:
    obj = rayjob(group("w"))
    del obj["spec"]["shutdownAfterJobFinishes"]
    assert "spec.shutdownAfterJobFinishes: Invalid value: false" in refusal(obj)


# -- what is not queued ---------------------------------------------------------------------


def test_a_rayjob_on_an_existing_cluster_is_not_queued() -> None:
    obj = rayjob(clusterSelector={"ray.io/cluster": "shared"})
    del obj["spec"]["rayClusterSpec"]
    assert queue_name(obj) is None  # Kueue's Skip: the cluster it runs on was admitted
    assert mutate(_review(obj))["response"].get("patch") is None
    assert validate(_review(obj))["response"]["allowed"] is True
    assert queue_name(rayjob(group("w"))) == "q"


def test_the_raycluster_a_rayjob_made_is_its_rayjobs() -> None:
    child = raycluster(group("w"))
    child["metadata"]["ownerReferences"] = [
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj", "uid": "u2", "controller": True}
    ]
    # KubeRay copies the RayJob's labels, the queue label with them: the RayJob's admission
    # covers the cluster, which is neither suspended nor given a Workload of its own.
    assert queue_name(child) is None
    assert mutate(_review(child))["response"].get("patch") is None
    # Owned, but not controlled, by a RayJob; or controlled by a kind topogate does not admit.
    child["metadata"]["ownerReferences"][0]["controller"] = False
    assert queue_name(child) == "q"
    child["metadata"]["ownerReferences"][0] |= {"controller": True, "apiVersion": "x.io/v1"}
    assert queue_name(child) == "q"


# -- finished --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deployment", "job", "expected"),
    [
        ("Complete", "SUCCEEDED", "Succeeded"),
        ("Complete", "FAILED", "Failed"),
        ("Failed", "FAILED", "Failed"),
        ("Failed", "", "Failed"),
        ("Running", "RUNNING", None),
        ("Suspended", "", None),
        ("Initializing", "SUCCEEDED", None),
        (None, None, None),
    ],
)
def test_a_rayjob_is_finished_by_its_deployment_status(
    deployment: str | None, job: str | None, expected: str | None
) -> None:
    obj = rayjob(group("w"))
    obj["status"] = {"jobDeploymentStatus": deployment, "jobStatus": job}
    assert RAYJOB.finished(obj) == expected


@pytest.mark.parametrize("state", ["ready", "failed", "suspended", None])
def test_a_raycluster_never_finishes(state: str | None) -> None:
    obj = raycluster(group("w"))
    obj["status"] = {
        "state": state,
        "conditions": [
            {"type": "Failed", "status": "True"},
            {"type": "Complete", "status": "True"},
        ],
    }
    assert RAYCLUSTER.finished(obj) is None  # as Kueue's: it serves until deleted


# -- the webhooks ------------------------------------------------------------------------------


def _review(obj: Obj, operation: str = "CREATE") -> Review:
    return Review(
        uid="r",
        kind=obj["kind"],
        group="ray.io",
        operation=operation,
        namespace="ml",
        obj=obj,
        dry_run=False,
    )


@pytest.mark.parametrize("make", [raycluster, rayjob])
def test_the_webhook_suspends_a_queued_ray_object_and_refuses_a_bad_one(make: Any) -> None:
    obj = make(group("w"))
    answer = mutate(_review(obj))["response"]
    assert answer["patchType"] == "JSONPatch"
    import base64
    import json

    assert json.loads(base64.b64decode(answer["patch"])) == [
        {"op": "add", "path": "/spec/suspend", "value": True}
    ]
    assert validate(_review(obj))["response"]["allowed"] is True
    bad = make(group("head"))
    refused = validate(_review(bad))["response"]
    assert refused["allowed"] is False and refused["status"]["code"] == 422
    assert "workerGroupSpecs[0].groupName: Forbidden" in refused["status"]["message"]


def test_a_kueue_key_on_the_ray_objects_metadata_is_warned_with_where_to_move_it() -> None:
    obj = raycluster(group("w"))
    obj["metadata"]["annotations"] = {REQUIRED: RACK}
    [warning] = key_warnings(obj)
    assert "spec.{headGroupSpec,workerGroupSpecs[*]}.template.metadata.annotations" in warning
    job = rayjob(group("w"))
    job["metadata"]["annotations"] = {REQUIRED: RACK}
    [warning] = key_warnings(job)
    assert "submitterPodTemplate" in warning and "rayClusterSpec.headGroupSpec" in warning


# -- the job sync, against FakeKube ----------------------------------------------------------


async def test_the_job_sync_queues_a_rayjob_starts_it_and_finishes_it_not_its_raycluster() -> None:
    """A RayJob gets one Workload and is started with every template marked; the RayCluster KubeRay makes from it, queue label included, gets
    none and is left running; the RayJob's deployment status finishes the Workload."""
    from tests.test_shells import Harness, pod_template
    from topogate.controllers.jobsync import JobSync
    from topogate.kube.events import EventRecorder
    from topogate.kube.resources import JOB_RESOURCES, WORKLOADS

    h = Harness()
    jobs, clusters = JOB_RESOURCES["RayJob"], JOB_RESOURCES["RayCluster"]
    obj = rayjob({"groupName": "w", "replicas": 1, "template": pod_template(4)})
    obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"] = pod_template(4)
    obj["spec"]["suspend"] = True
    # KubeRay's default submitter asks for memory, which the test queue does not cover.
    obj["spec"]["submitterPodTemplate"] = pod_template(0)
    h.kube.seed(jobs, obj)
    child = raycluster({"groupName": "w", "replicas": 1, "template": pod_template(4)})
    child["metadata"] |= {
        "name": "rj-abcde",
        "ownerReferences": [
            {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj", "uid": "u2"}
            | {"controller": True}
        ],
    }
    h.kube.seed(clusters, child)
    h.deliver()
    events = EventRecorder(h.kube, "test")
    sync = JobSync(h.kube, h.state, events)
    await sync.reconcile("RayCluster", "ml/rj-abcde")
    assert h.kube.objects(WORKLOADS) == []  # the RayJob's cluster is the RayJob's
    await sync.reconcile("RayJob", "ml/rj")
    [made] = h.kube.objects(WORKLOADS)
    assert [(p["name"], p["count"]) for p in made["spec"]["podSets"]] == [
        ("head", 1),
        ("w", 1),
        ("submitter", 1),
    ]
    h.deliver()
    admitter, _ = h.admitter()
    await admitter.cycle()
    h.deliver()
    await sync.reconcile("RayJob", "ml/rj")
    started = h.kube.stored(jobs, "rj", "ml")
    assert started is not None and started["spec"]["suspend"] is False
    for tpl in (
        started["spec"]["rayClusterSpec"]["headGroupSpec"]["template"],
        started["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"],
        started["spec"]["submitterPodTemplate"],
    ):
        assert tpl["spec"]["schedulingGates"] == [{"name": c.TOPOLOGY_GATE}]
        assert tpl["metadata"]["annotations"][c.WORKLOAD_ANNOTATION] == made["metadata"]["name"]
    await sync.reconcile("RayCluster", "ml/rj-abcde")
    stored_child = h.kube.stored(clusters, "rj-abcde", "ml")
    assert stored_child is not None and "suspend" not in stored_child["spec"]
    h.kube.seed(
        jobs,
        {**started, "status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}},
    )
    h.deliver()
    await sync.reconcile("RayJob", "ml/rj")
    await events.drain()
    finished = condition(h.kube.stored(WORKLOADS, made["metadata"]["name"], "ml"), "Finished")
    assert finished is not None and finished["reason"] == "Succeeded"


def test_a_rayjobs_last_pod_gone_brings_the_rayjob_back_to_the_job_sync() -> None:
    """Its pods belong to the RayCluster KubeRay made, and the RayJob's own status says
    Suspended before they are gone: their deletion is what lets an evicted RayJob's
    admission be taken back."""
    from topogate.kube.resources import PODS, WORKLOADS
    from topogate.state import ControllerState

    state = ControllerState()
    workload = {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {
            "name": "rayjob-rj-1",
            "namespace": "ml",
            "ownerReferences": [
                {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj", "controller": True}
            ],
        },
        "spec": {"queueName": "q", "podSets": []},
    }
    state.handler(WORKLOADS)(None, workload)
    pod = {
        "metadata": {
            "name": "rj-abcde-head",
            "namespace": "ml",
            "labels": {c.PODSET_LABEL: "head", "ray.io/cluster": "rj-abcde"},
            "annotations": {c.WORKLOAD_ANNOTATION: "rayjob-rj-1"},
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "ray"}]},
    }
    state.handler(PODS)(None, pod)
    state.signals.take_jobs()
    state.handler(PODS)(pod, {**pod, "status": {"phase": "Running"}})
    assert state.signals.take_jobs() == set()  # a running pod's change is not the job's
    state.handler(PODS)(pod, None)
    assert state.signals.take_jobs() == {("RayJob", "ml/rj")}


@pytest.mark.parametrize("containers", [5, True, 1.5, "ray"])
def test_a_sidecar_head_whose_containers_are_no_list_is_refused_not_a_crash(
    containers: Any,
) -> None:
    # Adding the submitter to the head was list(5): a TypeError out of the webhook and plan.
    obj = rayjob(group("w"), submissionMode="SidecarMode")
    obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"] = containers
    assert refusal(obj).endswith(
        "spec.rayClusterSpec.headGroupSpec.template.spec.containers: must be a list"
    )
    answer = validate(_review(obj))["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 422
