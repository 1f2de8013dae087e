"""api/kinds: the registry, and the interface every registered kind implements.

A new kind needs a sample object in SAMPLES; the tests then check it the way they check
Job and JobSet: found by the registry, its three views of its pod templates agreeing, and
(when it is Suspendable) suspend, start and suspend again round-tripping.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import pytest

from topogate.admission import integration
from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.jobs import workload_from_object
from topogate.api.keywarnings import key_warnings
from topogate.api.kinds import (
    JOB,
    JOB_KINDS,
    JOBSET,
    LEADERWORKERSET,
    MPIJOB,
    PYTORCHJOB,
    JobKind,
    PartialAdmission,
    PodSetsInfo,
    Referring,
    Suspendable,
    job_kind,
    job_kind_by_plural,
    job_kind_for,
    pod_podset,
    reading,
)
from topogate.api.models import PodSet
from topogate.kube.resources import JOB_CRD_RESOURCES, JOB_RESOURCES
from topogate.webhooks.review import Review, mutate

Obj = dict[str, Any]

RACK = "topology.kubernetes.io/rack"
QUEUE = {"kueue.x-k8s.io/queue-name": "team"}


def template(annotations: Mapping[str, str] | None = None) -> Obj:
    if annotations is None:
        annotations = {f"{c.KUEUE_GROUP}/{c.REQUIRED_TOPOLOGY}": RACK}
    return {
        "metadata": {"annotations": dict(annotations)},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
            "tolerations": [{"key": "own", "operator": "Exists"}],
        },
    }


def meta(name: str) -> Obj:
    return {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": dict(QUEUE)}


SAMPLES: dict[str, Obj] = {
    "Job": {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta("train"),
        "spec": {"parallelism": 4, "completions": 4, "template": template()},
    },
    "JobSet": {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta("pretrain"),
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {"spec": {"parallelism": 2, "template": template()}},
                },
                {"name": "driver", "template": {"spec": {"template": template({})}}},
            ]
        },
    },
    "LeaderWorkerSet": {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": meta("serve"),
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 4,
                "leaderTemplate": template(),
                "workerTemplate": template(),
            },
        },
    },
    "PyTorchJob": {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": meta("finetune"),
        "spec": {
            "pytorchReplicaSpecs": {
                # The map's order is not Kueue's: Master comes first all the same.
                "Worker": {"replicas": 3, "template": template()},
                "Master": {"replicas": 1, "template": template()},
            }
        },
    },
    "MPIJob": {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": meta("allreduce"),
        "spec": {
            "mpiReplicaSpecs": {
                "Worker": {"replicas": 4, "template": template()},
                "Launcher": {"replicas": 1, "template": template({})},
            }
        },
    },
    "RayCluster": {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": meta("ray"),
        "spec": {
            "headGroupSpec": {"template": template()},
            "workerGroupSpecs": [
                {"groupName": "gpu", "replicas": 2, "numOfHosts": 2, "template": template()},
                {"groupName": "cpu", "template": template({})},
            ],
        },
    },
    "RayJob": {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": meta("rayjob"),
        "spec": {
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "headGroupSpec": {"template": template()},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 3, "template": template()}],
            },
            "submitterPodTemplate": template({}),
        },
    },
    # Its PodSets are read from its runtime (tests/test_trainjob.py); its own templates are
    # the pod templates of its runtime patches.
    "TrainJob": {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": meta("finetune"),
        "spec": {
            "runtimeRef": {"name": "torch"},
            "runtimePatches": [
                {
                    "manager": "example.com/user",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {"name": "node", "template": {"spec": {"template": template()}}}
                                ]
                            }
                        }
                    },
                }
            ],
        },
    },
}


def sample(kind: JobKind) -> Obj:
    return copy.deepcopy(SAMPLES[kind.kind])


# -- the registry ---------------------------------------------------------------------------


def test_every_registered_kind_has_a_sample_here() -> None:
    assert sorted(k.kind for k in JOB_KINDS) == sorted(SAMPLES)


def test_kinds_are_registered_once_by_name_resource_and_group_kind() -> None:
    assert len({k.kind for k in JOB_KINDS}) == len(JOB_KINDS)
    assert len({k.plural for k in JOB_KINDS}) == len(JOB_KINDS)
    assert [k.api_version for k in JOB_KINDS] == [
        "batch/v1",
        "jobset.x-k8s.io/v1alpha2",
        "leaderworkerset.x-k8s.io/v1",
        "kubeflow.org/v1",
        "kubeflow.org/v2beta1",
        "ray.io/v1",
        "ray.io/v1",
        "trainer.kubeflow.org/v1alpha1",
    ]


@pytest.mark.parametrize("kind", JOB_KINDS, ids=lambda k: k.kind)
def test_the_registry_finds_a_kind_by_name_by_api_version_and_kind_and_by_resource(
    kind: JobKind,
) -> None:
    obj = sample(kind)
    assert kind.matches(obj)
    assert job_kind(kind.kind) is kind
    assert job_kind_for(obj["apiVersion"], obj["kind"]) is kind
    assert job_kind_by_plural(kind.plural) is kind
    # Another version of the same kind is not read as this one; the name alone still finds it
    # (owner references and AdmissionReviews name the kind).
    assert job_kind_for(f"{kind.group}/v0", kind.kind) is None
    assert job_kind(kind.kind) is kind


@pytest.mark.parametrize("name", ["Pod", "Workload", "job", "", None, ["Job"]])
def test_the_registry_knows_no_other_kind(name: Any) -> None:
    assert job_kind(name) is None
    assert job_kind_for("batch/v1", name) is None
    assert job_kind_by_plural(str(name)) is None


def test_the_reflectors_watch_every_kind_and_wait_for_custom_resources() -> None:
    assert [JOB_RESOURCES[k.kind].plural for k in JOB_KINDS] == [k.plural for k in JOB_KINDS]
    # batch/v1 is always served
    assert [r.plural for r in JOB_CRD_RESOURCES] == [
        "jobsets",
        "leaderworkersets",
        "pytorchjobs",
        "mpijobs",
        "rayclusters",
        "rayjobs",
        "trainjobs",
    ]


def test_an_unknown_kind_is_refused_as_before() -> None:
    obj: Obj = {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}}
    with pytest.raises(InputError) as refused:
        workload_from_object(obj)
    assert str(refused.value.describe()).endswith(
        "kind 'Thing' with apiVersion 'example.com/v1' is not a workload; expected batch/v1 "
        "Job, jobset.x-k8s.io/v1alpha2 JobSet, leaderworkerset.x-k8s.io/v1 LeaderWorkerSet, "
        "kubeflow.org/v1 PyTorchJob, kubeflow.org/v2beta1 MPIJob, ray.io/v1 RayCluster, "
        "ray.io/v1 RayJob, trainer.kubeflow.org/v1alpha1 TrainJob, v1 Pod (alone or in a "
        "group) or topogate.dev/v1alpha1 Workload"
    )
    # A registered kind under a version topogate does not read is refused the same way.
    job = {**sample(JOB), "apiVersion": "batch/v2"}
    with pytest.raises(InputError, match="kind 'Job' with apiVersion 'batch/v2' is not a"):
        workload_from_object(job)


def test_a_pod_names_its_podset_by_its_kinds_label() -> None:
    assert pod_podset({"jobset.sigs.k8s.io/replicatedjob-name": "workers"}) == "workers"
    assert pod_podset({"jobset.sigs.k8s.io/replicatedjob-name": ""}) is None
    assert pod_podset({"batch.kubernetes.io/job-name": "train"}) is None


# -- the interface, on every registered kind ------------------------------------------------


# A TrainJob's PodSets are its runtime's, its marks go into its own runtime patch
# (tests/test_trainjob.py checks how they meet).
SELF_CONTAINED = [k for k in JOB_KINDS if not isinstance(k, Referring)]


@pytest.mark.parametrize("kind", SELF_CONTAINED, ids=lambda k: k.kind)
def test_the_podsets_templates_and_template_fields_agree(kind: JobKind) -> None:
    """The PodSets the Workload gets, the templates started jobs are marked through and the
    places the key warnings look in are the same templates, named and ordered alike."""
    obj = sample(kind)
    read = kind.podsets(obj, "test")
    templates = kind.pod_templates(copy.deepcopy(obj))
    fields = kind.template_fields(obj)
    assert [p.name for p, _ in read] == [name for name, _ in templates]
    assert [path for _, path in read] == [path for path, _ in fields]
    assert [p.template for p, _ in read] == [t for _, t in templates] == [t for _, t in fields]
    # [*]: a list index, or a map key (Kubeflow's replica types).
    pattern = re.escape(kind.template_pattern).replace(r"\[\*\]", r"\[(\d+|[A-Z][a-z]+)\]")
    # {a,b}: one of these (a LeaderWorkerSet's leader and worker templates).
    pattern = re.sub(r"\\\{(.*?)\\\}", lambda m: "(" + m[1].replace(",", "|") + ")", pattern)
    assert all(re.fullmatch(pattern, path) for path, _ in fields)
    assert all(p.count > 0 for p, _ in read)


@pytest.mark.parametrize("kind", JOB_KINDS, ids=lambda k: k.kind)
def test_template_fields_read_a_malformed_object_without_failing(kind: JobKind) -> None:
    malformed: list[Any] = [None, [], "x", {"replicatedJobs": "x"}, {"replicatedJobs": [None, 3]}]
    for spec in malformed:
        fields = kind.template_fields(
            {"apiVersion": kind.api_version, "kind": kind.kind, "spec": spec}
        )
        assert all(isinstance(path, str) for path, _ in fields)


@pytest.mark.parametrize(
    ("kind", "hint"),
    [
        (JOB, "spec.template.metadata.annotations"),
        (JOBSET, "spec.replicatedJobs[*].template.spec.template.metadata.annotations"),
        (
            LEADERWORKERSET,
            "spec.leaderWorkerTemplate.{leaderTemplate,workerTemplate}.metadata.annotations",
        ),
        (PYTORCHJOB, "spec.pytorchReplicaSpecs[*].template.metadata.annotations"),
        (MPIJOB, "spec.mpiReplicaSpecs[*].template.metadata.annotations"),
    ],
    ids=["Job", "JobSet", "LeaderWorkerSet", "PyTorchJob", "MPIJob"],
)
def test_a_misplaced_template_key_points_at_the_kinds_templates(kind: JobKind, hint: str) -> None:
    obj = sample(kind)
    obj["metadata"]["annotations"] = {f"{c.KUEUE_GROUP}/{c.REQUIRED_TOPOLOGY}": RACK}
    assert key_warnings(obj) == [
        f"metadata.annotations[{c.KUEUE_GROUP}/{c.REQUIRED_TOPOLOGY}]: "
        f"not read on the {kind.kind}; move it to {hint}"
    ]


SUSPENDABLE = [k for k in SELF_CONTAINED if isinstance(k, Suspendable)]
# Kubeflow's v1 kinds keep their switch under spec.runPolicy (absent from the samples).
SUSPEND_OPS = {
    "Job": {"op": "add", "path": "/spec/suspend", "value": True},
    "JobSet": {"op": "add", "path": "/spec/suspend", "value": True},
    "PyTorchJob": {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}},
    "MPIJob": {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}},
    "RayCluster": {"op": "add", "path": "/spec/suspend", "value": True},
    "RayJob": {"op": "add", "path": "/spec/suspend", "value": True},
}


def apply_adds(obj: Obj, ops: list[Obj]) -> Obj:
    """``obj`` with JSON patch "add" operations applied (what the webhook answers with)."""
    out = copy.deepcopy(obj)
    for op in ops:
        assert op["op"] == "add"
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        target = out
        for part in parents:
            target = target[part]
        target[last] = copy.deepcopy(op["value"])
    return out


def merge_patch(obj: Obj, patch: Mapping[str, Any]) -> Obj:
    """``obj`` with a JSON merge patch applied (RFC 7386, without deletions)."""
    out = copy.deepcopy(obj)
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge_patch(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@pytest.mark.parametrize("kind", SUSPENDABLE, ids=lambda k: k.kind)
def test_suspend_start_and_suspend_again_round_trip(kind: Suspendable) -> None:
    created = sample(kind)
    assert not kind.is_suspended(created)

    # The webhook's answer to the creation suspends it, where the kind's switch is.
    [op] = kind.suspend_on_create(created)
    assert op == SUSPEND_OPS[kind.kind]
    queued = apply_adds(created, [op])
    assert kind.is_suspended(queued)
    assert kind.suspend_on_create(queued) == []
    assert not kind.is_marked(queued)

    # Admitted: started with the admission's marks, and again changes nothing.
    names = [name for name, _ in kind.pod_templates(copy.deepcopy(queued))]
    info = PodSetsInfo(
        "w-1",
        node_selectors={name: {"pool": name} for name in names},
        tolerations={names[0]: [{"key": "gpu", "operator": "Exists"}]},
    )
    started = kind.started(queued, info)
    assert not kind.is_suspended(started)
    assert kind.is_marked(started)
    assert kind.started(started, info) == started
    assert kind.is_suspended(queued) and not kind.is_marked(queued)  # not changed
    for name, tpl in kind.pod_templates(copy.deepcopy(started)):
        assert tpl["metadata"]["labels"][c.PODSET_LABEL] == name
        assert tpl["metadata"]["annotations"][c.WORKLOAD_ANNOTATION] == "w-1"
        assert tpl["spec"]["schedulingGates"] == [{"name": c.TOPOLOGY_GATE}]
        assert tpl["spec"]["nodeSelector"] == {"pool": name}
        expected = [{"key": "own", "operator": "Exists"}]
        if name == names[0]:
            expected.append({"key": "gpu", "operator": "Exists"})
        assert tpl["spec"]["tolerations"] == expected

    # Run without an admission: the suspend patch stops it and keeps the marks.
    patch = kind.suspend_patch(started)
    assert "metadata" not in patch  # the shell adds its resourceVersion guard
    stopped = merge_patch(started, patch)
    assert kind.is_suspended(stopped) and kind.is_marked(stopped)


@pytest.mark.parametrize("kind", JOB_KINDS, ids=lambda k: k.kind)
def test_the_job_integration_asks_the_kind(kind: JobKind) -> None:
    """admission.integration's functions answer as the kind does."""
    obj = sample(kind)
    if isinstance(kind, Suspendable):
        obj = apply_adds(obj, kind.suspend_on_create(obj))
    else:
        obj["spec"]["suspend"] = True
    assert integration.is_suspended(obj) == (
        isinstance(kind, Suspendable) and kind.is_suspended(obj)
    )
    assert integration.is_marked(obj) == kind.is_marked(obj)
    assert integration.finished(obj) == kind.finished(obj) is None
    if isinstance(kind, Suspendable):
        assert integration.suspend_patch(obj) == kind.suspend_patch(obj)
        assert integration.admitted_job(obj, "w", {}) == kind.started(obj, PodSetsInfo("w"))
    assert integration.accepts_partial(obj) == (
        isinstance(kind, PartialAdmission) and kind.accepts_partial(obj)
    )


def test_only_the_batch_job_accepts_partial_admission() -> None:
    assert [k.kind for k in JOB_KINDS if isinstance(k, PartialAdmission)] == ["Job"]
    job = sample(JOB)
    job["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "2"}
    assert JOB.accepts_partial(job)
    # A Job under another version is not one the Job kind sizes.
    assert not JOB.accepts_partial({**job, "apiVersion": "batch/v2"})
    assert not isinstance(JOBSET, PartialAdmission)


# -- a kind without spec.suspend fits the interface ------------------------------------------


class _GatedPods(JobKind):
    """A made-up kind with no spec.suspend that implements only the mandatory part (no
    capability, not even Gated): the webhook leaves it alone."""

    kind = "PodGang"
    group = "example.com"
    version = "v1"
    plural = "podgangs"
    template_pattern = "spec.template"

    def podsets(self, obj: Mapping[str, Any], where: str) -> list[tuple[PodSet, str]]:
        spec = reading.mapping(obj.get("spec"), where, "spec")
        pod_template = reading.mapping(spec.get("template"), where, "spec.template")
        return [(reading.podset("main", 1, pod_template, where, "spec.template"), "spec.template")]

    def pod_templates(self, job: Obj) -> list[tuple[str, Obj]]:
        return [("main", job.setdefault("spec", {}).setdefault("template", {}))]

    def template_fields(self, obj: Mapping[str, Any]) -> list[tuple[str, Any]]:
        return [("spec.template", (obj.get("spec") or {}).get("template"))]


def test_the_mandatory_part_is_the_three_template_methods() -> None:
    class Incomplete(JobKind):
        kind = "X"

    with pytest.raises(TypeError, match="podsets"):
        Incomplete()  # type: ignore[abstract]


def test_a_kind_without_spec_suspend_is_not_suspended_by_the_webhook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gated = _GatedPods()
    monkeypatch.setattr("topogate.api.kinds.ALL_KINDS", (*JOB_KINDS, gated))
    obj: Obj = {
        "apiVersion": gated.api_version,
        "kind": gated.kind,
        "metadata": meta("gang"),
        "spec": {"template": template()},
    }
    assert job_kind_for(obj["apiVersion"], obj["kind"]) is gated
    review = Review.parse(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": gated.group, "version": gated.version, "kind": gated.kind},
                "operation": "CREATE",
                "namespace": "ml",
                "object": obj,
            },
        }
    )
    assert "patch" not in mutate(review)["response"]
    assert not integration.is_suspended(obj)
    with pytest.raises(ValueError, match="not suspended through its spec"):
        integration.suspend_patch(obj)
    # Its Workload is read through the registry like any other kind's.
    [podset] = workload_from_object(obj).workload.spec.pod_sets
    assert podset.topology_request is not None and podset.topology_request.required == RACK
