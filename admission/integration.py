"""The job integration's decisions, pure: which Workload a queued job needs, when it
finished, and how its object changes when it is admitted or must wait.

The controller's shell reads jobs from its watches, calls these functions and sends what they
return. Each asks the job's registered kind (``api/kinds``) what is particular to it; Kueue's
equivalents live in ``pkg/controller/jobframework`` (the reconciler) and
``pkg/controller/jobs/<kind>``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from topogate.api import constants as c
from topogate.api.jobs import workload_from_object
from topogate.api.kinds import (
    Gated,
    JobKind,
    Lookup,
    PartialAdmission,
    PodSetsInfo,
    Suspendable,
    job_kind,
    no_lookup,
    queue_name,
)

Obj = dict[str, Any]

JOB_UID_LABEL = f"{c.GROUP}/job-uid"
IS_GROUP_WORKLOAD = c.IS_GROUP_WORKLOAD
# Kueue's label for a WorkloadPriorityClass; a PriorityClass of that name gives the value.
PRIORITY_CLASS_LABEL = f"{c.KUEUE_GROUP}/priority-class"


def workload_name(kind: str, name: str, uid: str) -> str:
    """Deterministic and unique per job object: a re-created job gets a new Workload."""
    digest = hashlib.sha256(uid.encode()).hexdigest()[:5]
    return f"{kind.lower()}-{name}"[:240].rstrip(".-") + f"-{digest}"


def _kind(job: Mapping[str, Any]) -> JobKind | None:
    return job_kind(job.get("kind"))


def _registered(job: Mapping[str, Any]) -> JobKind:
    kind = _kind(job)
    if kind is None:
        raise ValueError(f"kind {job.get('kind')!r} is not a registered job kind")
    return kind


def _suspendable(job: Mapping[str, Any]) -> Suspendable:
    kind = _registered(job)
    if not isinstance(kind, Suspendable):
        raise ValueError(f"kind {job.get('kind')!r} is not suspended through its spec")
    return kind


def _templates(job: Obj) -> list[tuple[str, Obj]]:
    """(podset name, the pod template dict inside ``job``): mutable references."""
    kind = _kind(job)
    return kind.pod_templates(job) if kind is not None else []


def desired_workload(
    job: Obj,
    priority_of: Callable[[str], int | None],
    group: str | None = None,
    lookup: Lookup = no_lookup,
) -> Obj:
    """The Workload for a queued job, or for its group ``group`` (a :class:`Gated` kind runs
    as one Workload per group, named by the kind); InputError (from workload_from_object)
    when it is bad.

    ``priority_of`` maps a PriorityClass name to its value (None when unknown); ``lookup``
    finds the other objects a kind reads (a TrainJob's runtime).
    """
    kind = _registered(job)
    gated = kind if isinstance(kind, Gated) else None
    source = workload_from_object(
        dict(gated.group_source(job, group)) if gated and group else job, lookup=lookup
    )
    workload = source.workload
    meta = job["metadata"]
    if gated is not None and group is not None:
        workload.metadata.name = group
    else:
        workload.metadata.name = workload_name(str(job["kind"]), meta["name"], meta["uid"])
    workload.metadata.namespace = meta.get("namespace") or "default"
    workload.metadata.labels = {JOB_UID_LABEL: str(meta["uid"])}
    workload.spec.queue_name = queue_name(job)
    # The PodSets' templates name the priority class where the object has none of its own
    # (a TrainJob's are its runtime's, as Kueue reads them).
    read_names = [
        str((p.template.get("spec") or {}).get("priorityClassName") or "")
        for p in workload.spec.pod_sets
    ]
    workload.spec.priority = _priority(job, priority_of, read_names)
    for podset in workload.spec.pod_sets:
        # How the ungater finds a pod's rank (Kueue's PodIndexLabel); a JobSet's
        # SubGroupIndexLabel and count are set by workload_from_object.
        if podset.topology_request is not None:
            podset.topology_request.pod_index_label = kind.pod_index_label
    body = workload.to_wire()
    if gated is not None:
        body["metadata"]["ownerReferences"] = gated.owner_references(job)
        if gated.composed:
            body["metadata"]["annotations"] = {IS_GROUP_WORKLOAD: "true"}
    else:
        body["metadata"]["ownerReferences"] = [
            {
                "apiVersion": job["apiVersion"],
                "kind": str(job["kind"]),
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    body.pop("status", None)
    return body


def _priority(
    job: Mapping[str, Any], priority_of: Callable[[str], int | None], read: list[str]
) -> int:
    labels = (job.get("metadata") or {}).get("labels") or {}
    kind = _kind(job)
    names = [labels.get(PRIORITY_CLASS_LABEL)]
    if kind is not None:
        names.extend(kind.priority_class_names(dict(job)))
    names.extend(read)
    for name in names:
        if name:
            value = priority_of(str(name))
            if value is not None:
                return value
    return 0


def gated(job: Mapping[str, Any]) -> Gated | None:
    """The job's kind when it is held back by the gate on its pods (no suspend switch)."""
    kind = _kind(job)
    return kind if isinstance(kind, Gated) else None


def is_suspended(job: Mapping[str, Any]) -> bool:
    kind = _kind(job)
    return isinstance(kind, Suspendable) and kind.is_suspended(job)


def suspend_patch(job: Mapping[str, Any]) -> Obj:
    """The merge patch that suspends a job of a :class:`Suspendable` kind."""
    return _suspendable(job).suspend_patch(job)


def finished(job: Mapping[str, Any]) -> str | None:
    """ "Succeeded" or "Failed" once the job is done, else None."""
    kind = _kind(job)
    return kind.finished(job) if kind is not None else None


def accepts_partial(job: Mapping[str, Any]) -> bool:
    """A job whose size follows its admission (a batch/v1 Job with
    ``job-min-parallelism``)."""
    kind = _kind(job)
    return isinstance(kind, PartialAdmission) and kind.accepts_partial(job)


def restored_spec(job: Mapping[str, Any], workload: Mapping[str, Any] | None) -> Obj | None:
    """The spec merge patch that gives a suspended, partially admitted job back the size
    its Workload asks for; None when nothing is to restore."""
    kind = _kind(job)
    return kind.restored_spec(job, workload) if isinstance(kind, PartialAdmission) else None


def admitted_job(
    job: Obj,
    workload: str,
    node_selectors: Mapping[str, Mapping[str, str]],
    tolerations: Mapping[str, list[Obj]] | None = None,
    counts: Mapping[str, int] | None = None,
) -> Obj:
    """The job as it must be written when its workload is admitted: running, and every pod
    template marked (podset label, workload annotation) and gated, so no pod schedules before
    the ungater gives it a domain. Per podset, the flavor's node labels join the nodeSelector
    and its tolerations the template's (as Kueue does when it starts a job). A job that
    accepts partial admission runs with the admitted count (``counts``: podset -> pods)."""
    info = PodSetsInfo(workload, node_selectors, tolerations or {}, counts or {})
    return _suspendable(job).started(job, info)


def is_marked(job: Obj) -> bool:
    """Every template already carries the marks (the job was unsuspended by us)."""
    kind = _kind(job)
    return kind is None or kind.is_marked(job)
