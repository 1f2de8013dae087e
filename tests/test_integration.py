"""admission/integration.py: the job integration's pure decisions, on plain dicts."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from topogate.admission.integration import (
    JOB_UID_LABEL,
    PRIORITY_CLASS_LABEL,
    admitted_job,
    desired_workload,
    finished,
    is_marked,
    is_suspended,
    workload_name,
)
from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.kinds import queue_name

Obj = dict[str, Any]

RACK = "topology.kubernetes.io/rack"
BLOCK = "topology.kubernetes.io/block"
KUEUE_REQUIRED = f"{c.KUEUE_GROUP}/{c.REQUIRED_TOPOLOGY}"
TOPOGATE_REQUIRED = f"{c.GROUP}/{c.REQUIRED_TOPOLOGY}"
TOPOGATE_PREFERRED = f"{c.GROUP}/{c.PREFERRED_TOPOLOGY}"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
PRIORITIES = {"high": 1000, "low": 10, "urgent": 5000}


def no_priorities(name: str) -> int | None:
    return None


def template(annotations: dict[str, str] | None = None, **spec: Any) -> Obj:
    out: Obj = {"spec": {"containers": [{"name": "main", "image": "trainer:1"}], **spec}}
    if annotations is not None:
        out["metadata"] = {"annotations": dict(annotations)}
    return out


def indexed_job(
    name: str = "train",
    uid: str = "uid-1",
    parallelism: int = 4,
    completions: int = 6,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **template_spec: Any,
) -> Obj:
    metadata: Obj = {"name": name, "namespace": "ml", "uid": uid}
    if labels is not None:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "suspend": True,
            "completionMode": "Indexed",
            "parallelism": parallelism,
            "completions": completions,
            "template": template(
                {KUEUE_REQUIRED: RACK} if annotations is None else annotations,
                **template_spec,
            ),
        },
    }


def replicated_job(
    name: str, replicas: int, parallelism: int, annotations: dict[str, str] | None = None
) -> Obj:
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "completionMode": "Indexed",
                "parallelism": parallelism,
                "completions": parallelism,
                "template": template(annotations),
            }
        },
    }


def jobset(uid: str = "uid-js", labels: dict[str, str] | None = None) -> Obj:
    metadata: Obj = {"name": "pretrain", "namespace": "ml", "uid": uid}
    if labels is not None:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                replicated_job("workers", 3, 2, {TOPOGATE_REQUIRED: RACK}),
                replicated_job("driver", 1, 1, {TOPOGATE_PREFERRED: BLOCK}),
            ],
        },
    }


def job_templates(job: Obj) -> list[Obj]:
    if job["kind"] == "Job":
        return [job["spec"]["template"]]
    return [r["template"]["spec"]["template"] for r in job["spec"]["replicatedJobs"]]


# -- queue_name, workload_name -----------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({f"{c.GROUP}/queue-name": "ours", f"{c.KUEUE_GROUP}/queue-name": "kueues"}, "ours"),
        ({f"{c.KUEUE_GROUP}/queue-name": "kueues"}, "kueues"),
        ({f"{c.GROUP}/queue-name": "ours"}, "ours"),
        ({f"{c.GROUP}/queue-name": "", f"{c.KUEUE_GROUP}/queue-name": "kueues"}, "kueues"),
        ({"app": "x"}, None),
        (None, None),
    ],
    ids=["both", "kueue-only", "topogate-only", "empty-topogate", "other-labels", "no-labels"],
)
def test_queue_name(labels: dict[str, str] | None, expected: str | None) -> None:
    assert queue_name(indexed_job(labels=labels)) == expected


def test_queue_name_without_metadata() -> None:
    assert queue_name({"kind": "Job"}) is None


def test_workload_name_is_deterministic_and_per_uid() -> None:
    name = workload_name("Job", "train", "uid-1")
    assert name == workload_name("Job", "train", "uid-1")
    assert name.startswith("job-train-")
    assert "job" in name and "train" in name
    assert DNS_SUBDOMAIN.match(name)
    # A re-created job (same name, new uid) gets a new Workload; kinds do not collide.
    assert workload_name("Job", "train", "uid-2") != name
    assert workload_name("JobSet", "train", "uid-1") != name
    assert workload_name("JobSet", "train", "uid-1").startswith("jobset-train-")


def test_workload_name_of_a_long_job_name_stays_a_valid_name() -> None:
    long = "a" * 250
    name = workload_name("JobSet", long, "uid-1")
    assert len(name) <= 253
    assert name.startswith("jobset-aaaa")
    assert DNS_SUBDOMAIN.match(name)
    # Truncation keeps the per-uid part.
    assert name != workload_name("JobSet", long, "uid-2")
    assert len(workload_name("JobSet", long, "uid-2")) <= 253


# -- desired_workload --------------------------------------------------------------------


def test_desired_workload_for_an_indexed_job() -> None:
    job = indexed_job(labels={f"{c.KUEUE_GROUP}/queue-name": "research"})
    before = copy.deepcopy(job)
    body = desired_workload(job, no_priorities)

    assert job == before
    assert body["apiVersion"] == c.API_VERSION and body["kind"] == "Workload"
    assert "status" not in body
    meta = body["metadata"]
    assert meta["name"] == workload_name("Job", "train", "uid-1")
    assert meta["namespace"] == "ml"
    assert meta["labels"] == {JOB_UID_LABEL: "uid-1"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    spec = body["spec"]
    assert spec["queueName"] == "research"
    assert spec["priority"] == 0
    (podset,) = spec["podSets"]
    assert podset["name"] == "main"
    assert podset["count"] == 4
    assert podset["topologyRequest"] == {
        "required": RACK,
        "podIndexLabel": c.JOB_COMPLETION_INDEX,
    }
    assert podset["template"]["spec"]["containers"][0]["image"] == "trainer:1"


@pytest.mark.parametrize(("parallelism", "completions", "count"), [(4, 6, 4), (8, 3, 3), (5, 5, 5)])
def test_job_pod_count_is_min_of_parallelism_and_completions(
    parallelism: int, completions: int, count: int
) -> None:
    job = indexed_job(parallelism=parallelism, completions=completions)
    assert desired_workload(job, no_priorities)["spec"]["podSets"][0]["count"] == count


def test_desired_workload_without_a_queue_or_topology() -> None:
    body = desired_workload(indexed_job(annotations={}), no_priorities)
    assert "queueName" not in body["spec"]
    assert "topologyRequest" not in body["spec"]["podSets"][0]


def test_desired_workload_defaults_the_namespace() -> None:
    job = indexed_job()
    del job["metadata"]["namespace"]
    assert desired_workload(job, no_priorities)["metadata"]["namespace"] == "default"


@pytest.mark.parametrize(
    ("labels", "template_class", "priority"),
    [
        (None, "high", 1000),
        ({PRIORITY_CLASS_LABEL: "urgent"}, None, 5000),
        ({PRIORITY_CLASS_LABEL: "urgent"}, "low", 5000),  # the label wins, as in Kueue
        (None, "unknown", 0),
        ({PRIORITY_CLASS_LABEL: "unknown"}, None, 0),
        (None, None, 0),
    ],
    ids=["template", "label", "label-over-template", "unknown-class", "unknown-label", "none"],
)
def test_priority_from_priority_classes(
    labels: dict[str, str] | None, template_class: str | None, priority: int
) -> None:
    extra: dict[str, Any] = {} if template_class is None else {"priorityClassName": template_class}
    job = indexed_job(labels=labels, **extra)
    assert desired_workload(job, PRIORITIES.get)["spec"]["priority"] == priority


def test_priority_of_a_jobset_template() -> None:
    js = jobset()
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["priorityClassName"] = (
        "high"
    )
    assert desired_workload(js, PRIORITIES.get)["spec"]["priority"] == 1000


def test_desired_workload_for_a_jobset() -> None:
    js = jobset(labels={f"{c.GROUP}/queue-name": "team-a"})
    before = copy.deepcopy(js)
    body = desired_workload(js, no_priorities)

    assert js == before
    assert "status" not in body
    assert body["metadata"]["name"] == workload_name("JobSet", "pretrain", "uid-js")
    assert body["metadata"]["labels"] == {JOB_UID_LABEL: "uid-js"}
    (owner,) = body["metadata"]["ownerReferences"]
    assert owner["kind"] == "JobSet" and owner["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert owner["uid"] == "uid-js" and owner["controller"] is True
    assert body["spec"]["queueName"] == "team-a"

    workers, driver = body["spec"]["podSets"]
    assert (workers["name"], workers["count"]) == ("workers", 6)
    assert workers["topologyRequest"] == {
        "required": RACK,
        "podIndexLabel": c.JOB_COMPLETION_INDEX,
        "subGroupIndexLabel": c.JOBSET_JOB_INDEX,
        "subGroupCount": 3,
    }
    assert (driver["name"], driver["count"]) == ("driver", 1)
    assert driver["topologyRequest"] == {
        "preferred": BLOCK,
        "podIndexLabel": c.JOB_COMPLETION_INDEX,
        "subGroupIndexLabel": c.JOBSET_JOB_INDEX,
        "subGroupCount": 1,
    }


@pytest.mark.parametrize(
    "annotations",
    [
        {TOPOGATE_REQUIRED: RACK, TOPOGATE_PREFERRED: BLOCK},  # two modes at once
        {KUEUE_REQUIRED: "Not A Label Key!"},
        {TOPOGATE_REQUIRED: RACK, KUEUE_REQUIRED: BLOCK},  # both prefixes disagree
        {f"{c.GROUP}/{c.UNCONSTRAINED_TOPOLOGY}": "maybe"},
    ],
    ids=["two-modes", "bad-level", "conflicting-prefixes", "bad-boolean"],
)
def test_a_bad_annotation_is_an_input_error(annotations: dict[str, str]) -> None:
    with pytest.raises(InputError) as caught:
        desired_workload(indexed_job(annotations=annotations), no_priorities)
    assert "Job ml/train" in str(caught.value)
    assert "spec.template.metadata.annotations" in str(caught.value)


def test_a_bad_annotation_in_a_jobset_is_an_input_error() -> None:
    js = jobset()
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"][
        KUEUE_REQUIRED
    ] = BLOCK  # conflicts with the topogate key's rack
    with pytest.raises(InputError):
        desired_workload(js, no_priorities)


# -- finished, is_suspended --------------------------------------------------------------


def with_status(obj: Obj, status: Obj) -> Obj:
    return {**obj, "status": status}


def condition(kind: str, status: str = "True") -> Obj:
    return {"type": kind, "status": status}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"conditions": [condition("Complete")]}, "Succeeded"),
        ({"conditions": [condition("Failed")]}, "Failed"),
        ({"conditions": [condition("SuccessCriteriaMet"), condition("Complete")]}, "Succeeded"),
        ({"conditions": [condition("FailureTarget"), condition("Failed")]}, "Failed"),
        ({"conditions": [condition("Complete", "False")]}, None),
        ({"conditions": [condition("Failed", "False")]}, None),
        ({"conditions": [condition("Suspended")]}, None),
        ({"active": 4}, None),
        ({}, None),
    ],
)
def test_finished_job(status: Obj, expected: str | None) -> None:
    assert finished(with_status(indexed_job(), status)) == expected


def test_finished_job_without_status() -> None:
    assert finished(indexed_job()) is None


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"terminalState": "Completed"}, "Succeeded"),
        ({"terminalState": "Failed"}, "Failed"),
        ({"conditions": [condition("Completed")]}, "Succeeded"),
        ({"conditions": [condition("Failed")]}, "Failed"),
        ({"conditions": [condition("Completed", "False")]}, None),
        ({"conditions": [condition("StartupPolicyCompleted")]}, None),
        ({"terminalState": ""}, None),
    ],
)
def test_finished_jobset(status: Obj, expected: str | None) -> None:
    assert finished(with_status(jobset(), status)) == expected


def test_is_suspended() -> None:
    job = indexed_job()
    assert is_suspended(job)
    job["spec"]["suspend"] = False
    assert not is_suspended(job)
    del job["spec"]["suspend"]
    assert not is_suspended(job)
    assert not is_suspended({"kind": "Job"})


# -- admitted_job, is_marked -------------------------------------------------------------

FLAVOR = {"cloud.example.com/accelerator": "h100", "topology.kubernetes.io/zone": "z1"}
GPU_TOLERATION: Obj = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SPOT_TOLERATION: Obj = {"key": "spot", "operator": "Equal", "value": "true"}


def test_admitted_job_unsuspends_marks_and_gates() -> None:
    job = indexed_job(nodeSelector={"disk": "ssd"}, tolerations=[dict(GPU_TOLERATION)])
    job["spec"]["template"]["metadata"]["labels"] = {"app": "train"}
    before = copy.deepcopy(job)

    out = admitted_job(
        job, "job-train-abcde", {"main": FLAVOR}, {"main": [GPU_TOLERATION, SPOT_TOLERATION]}
    )

    assert job == before  # the input is not touched
    assert out["spec"]["suspend"] is False
    tpl = out["spec"]["template"]
    assert tpl["metadata"]["labels"] == {"app": "train", c.PODSET_LABEL: "main"}
    assert tpl["metadata"]["annotations"] == {
        KUEUE_REQUIRED: RACK,
        c.WORKLOAD_ANNOTATION: "job-train-abcde",
    }
    assert tpl["spec"]["schedulingGates"] == [{"name": c.TOPOLOGY_GATE}]
    assert tpl["spec"]["nodeSelector"] == {"disk": "ssd", **FLAVOR}
    assert tpl["spec"]["tolerations"] == [GPU_TOLERATION, SPOT_TOLERATION]
    # Nothing else changed.
    assert out["metadata"] == before["metadata"]
    assert out["spec"]["parallelism"] == 4 and out["spec"]["completions"] == 6


def test_admitted_job_is_idempotent() -> None:
    job = indexed_job()
    once = admitted_job(job, "w", {"main": FLAVOR}, {"main": [GPU_TOLERATION]})
    twice = admitted_job(once, "w", {"main": FLAVOR}, {"main": [GPU_TOLERATION]})
    assert twice == once
    spec = twice["spec"]["template"]["spec"]
    assert spec["schedulingGates"] == [{"name": c.TOPOLOGY_GATE}]
    assert spec["tolerations"] == [GPU_TOLERATION]


def test_admitted_job_keeps_other_scheduling_gates() -> None:
    job = indexed_job(schedulingGates=[{"name": "example.com/other"}])
    out = admitted_job(job, "w", {})
    assert out["spec"]["template"]["spec"]["schedulingGates"] == [
        {"name": "example.com/other"},
        {"name": c.TOPOLOGY_GATE},
    ]
    assert job["spec"]["template"]["spec"]["schedulingGates"] == [{"name": "example.com/other"}]


def test_admitted_job_without_a_flavor_adds_no_selector_or_tolerations() -> None:
    out = admitted_job(indexed_job(), "w", {})
    spec = out["spec"]["template"]["spec"]
    assert "nodeSelector" not in spec
    assert "tolerations" not in spec
    assert spec["schedulingGates"] == [{"name": c.TOPOLOGY_GATE}]


def test_admitted_job_marks_a_template_without_metadata() -> None:
    job = indexed_job()
    del job["spec"]["template"]["metadata"]
    out = admitted_job(job, "w", {"main": FLAVOR})
    meta = out["spec"]["template"]["metadata"]
    assert meta == {"labels": {c.PODSET_LABEL: "main"}, "annotations": {c.WORKLOAD_ANNOTATION: "w"}}
    assert out["spec"]["template"]["spec"]["nodeSelector"] == FLAVOR
    assert "metadata" not in job["spec"]["template"]


def test_admitted_jobset_marks_every_replicated_job() -> None:
    js = jobset()
    before = copy.deepcopy(js)
    out = admitted_job(
        js,
        "jobset-pretrain-abcde",
        {"workers": FLAVOR, "driver": {"pool": "cpu"}},
        {"workers": [GPU_TOLERATION]},
    )

    assert js == before
    assert out["spec"]["suspend"] is False
    workers, driver = job_templates(out)
    for name, tpl in (("workers", workers), ("driver", driver)):
        assert tpl["metadata"]["labels"][c.PODSET_LABEL] == name
        assert tpl["metadata"]["annotations"][c.WORKLOAD_ANNOTATION] == "jobset-pretrain-abcde"
        assert tpl["spec"]["schedulingGates"] == [{"name": c.TOPOLOGY_GATE}]
    assert workers["spec"]["nodeSelector"] == FLAVOR
    assert workers["spec"]["tolerations"] == [GPU_TOLERATION]
    assert driver["spec"]["nodeSelector"] == {"pool": "cpu"}
    assert "tolerations" not in driver["spec"]
    assert is_marked(out)
    assert admitted_job(out, "jobset-pretrain-abcde", {"workers": FLAVOR}) == out


def test_is_marked_only_when_every_template_is_marked() -> None:
    job = indexed_job()
    assert not is_marked(job)
    assert is_marked(admitted_job(job, "w", {}))

    js = jobset()
    assert not is_marked(js)
    marked = admitted_job(js, "w", {})
    assert is_marked(marked)
    partly = copy.deepcopy(marked)
    del partly["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["metadata"]["labels"][
        c.PODSET_LABEL
    ]
    assert not is_marked(partly)
    # is_marked reads; it does not add the templates it looks for.
    bare: Obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}}
    assert not is_marked(bare)
    assert bare == {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}}
