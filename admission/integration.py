"""The job integration's decisions, pure: which Workload a queued Job or JobSet needs, when it
finished, and how its object changes when it is admitted or must wait.

The controller's shell reads jobs from its watches, calls these functions and sends what they
return. Kueue's equivalents live in ``pkg/controller/jobframework`` (the reconciler) and
``pkg/controller/jobs/{job,jobset}``.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from topogate.api import constants as c
from topogate.api.jobs import workload_from_object
from topogate.api.kinds import JOB, job_kind, queue_name
from topogate.api.objects import annotations_of

Obj = dict[str, Any]

JOB_UID_LABEL = f"{c.GROUP}/job-uid"
# Kueue's label for a WorkloadPriorityClass; a PriorityClass of that name gives the value.
PRIORITY_CLASS_LABEL = f"{c.KUEUE_GROUP}/priority-class"
# Kueue's Job annotation: completions follow parallelism when partial admission changes it.
COMPLETIONS_EQUAL_PARALLELISM = f"{c.KUEUE_GROUP}/job-completions-equal-parallelism"


def workload_name(kind: str, name: str, uid: str) -> str:
    """Deterministic and unique per job object: a re-created job gets a new Workload."""
    digest = hashlib.sha256(uid.encode()).hexdigest()[:5]
    return f"{kind.lower()}-{name}"[:240].rstrip(".-") + f"-{digest}"


def _templates(job: Obj) -> list[tuple[str, Obj]]:
    """(podset name, the pod template dict inside ``job``): mutable references."""
    kind = job_kind(str(job.get("kind")))
    return kind.templates(job) if kind is not None else []


def desired_workload(job: Obj, priority_of: Callable[[str], int | None]) -> Obj:
    """The Workload for a queued job; InputError (from workload_from_object) when it is bad.

    ``priority_of`` maps a PriorityClass name to its value (None when unknown).
    """
    source = workload_from_object(job)
    workload = source.workload
    meta = job["metadata"]
    kind = str(job["kind"])
    workload.metadata.name = workload_name(kind, meta["name"], meta["uid"])
    workload.metadata.namespace = meta.get("namespace") or "default"
    workload.metadata.labels = {JOB_UID_LABEL: meta["uid"]}
    workload.spec.queue_name = queue_name(job)
    workload.spec.priority = _priority(job, priority_of)
    for podset in workload.spec.pod_sets:
        # How the ungater finds a pod's rank (Kueue's PodIndexLabel); a JobSet's
        # SubGroupIndexLabel and count are set by workload_from_object.
        if podset.topology_request is not None:
            podset.topology_request.pod_index_label = c.JOB_COMPLETION_INDEX
    body = workload.to_wire()
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": job["apiVersion"],
            "kind": kind,
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    body.pop("status", None)
    return body


def _priority(job: Mapping[str, Any], priority_of: Callable[[str], int | None]) -> int:
    labels = (job.get("metadata") or {}).get("labels") or {}
    names = [labels.get(PRIORITY_CLASS_LABEL)]
    for _, template in _templates(copy.deepcopy(dict(job))):
        names.append((template.get("spec") or {}).get("priorityClassName"))
    for name in names:
        if name:
            value = priority_of(str(name))
            if value is not None:
                return value
    return 0


def is_suspended(job: Mapping[str, Any]) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def finished(job: Mapping[str, Any]) -> str | None:
    """ "Succeeded" or "Failed" once the job is done, else None."""
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") in ("Complete", "Completed"):
            return "Succeeded"
        if condition.get("type") == "Failed":
            return "Failed"
    terminal = status.get("terminalState")
    if terminal in ("Completed", "Failed"):
        return "Succeeded" if terminal == "Completed" else "Failed"
    return None


def accepts_partial(job: Mapping[str, Any]) -> bool:
    """A batch/v1 Job with ``job-min-parallelism``: its parallelism follows the admission."""
    return JOB.matches(job) and any(k in annotations_of(job) for k in c.MIN_PARALLELISM_KEYS)


def _set_parallelism(spec: Obj, job: Mapping[str, Any], count: int) -> None:
    """Kueue's Job ``RunWithPodSetsInfo``/``RestorePodSetsInfo``: parallelism is the count;
    completions follow it only with ``job-completions-equal-parallelism: "true"``."""
    spec["parallelism"] = count
    if str(annotations_of(job).get(COMPLETIONS_EQUAL_PARALLELISM, "")).lower() == "true":
        spec["completions"] = count


def restored_parallelism(job: Mapping[str, Any], workload: Mapping[str, Any]) -> int | None:
    """The parallelism a partially admitted Job gets back when it is suspended (its
    Workload's PodSet count), or None when nothing is to restore. Only a Job topogate
    started (its templates carry the marks) is touched: a queued Job keeps what it asks."""
    if not accepts_partial(job) or not is_marked(dict(job)):
        return None
    for podset in (workload.get("spec") or {}).get("podSets") or []:
        count = podset.get("count")
        if isinstance(count, int) and count != (job.get("spec") or {}).get("parallelism"):
            return count
    return None


def restored_spec(job: Mapping[str, Any], workload: Mapping[str, Any] | None) -> Obj | None:
    """The spec merge patch that gives a suspended, partially admitted Job back the
    parallelism its Workload asks for (and completions, when they follow it); None when
    nothing is to restore. Kueue's Job ``Stop`` suspends first and restores in a second
    write, as its webhook forbids changing a running Job's parallelism."""
    count = restored_parallelism(job, workload) if workload is not None else None
    if count is None:
        return None
    spec: Obj = {}
    _set_parallelism(spec, job, count)
    return spec


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
    and its tolerations the template's (as Kueue does when it starts a job). A Job that
    accepts partial admission runs with the admitted count (``counts``: podset -> pods) as
    its parallelism."""
    out = copy.deepcopy(job)
    out["spec"]["suspend"] = False
    if accepts_partial(out) and counts and "main" in counts:
        _set_parallelism(out["spec"], out, counts["main"])
    for podset, template in _templates(out):
        meta = template.setdefault("metadata", {})
        meta.setdefault("labels", {})[c.PODSET_LABEL] = podset
        meta.setdefault("annotations", {})[c.WORKLOAD_ANNOTATION] = workload
        spec = template.setdefault("spec", {})
        gates = spec.setdefault("schedulingGates", [])
        if not any(g.get("name") == c.TOPOLOGY_GATE for g in gates):
            gates.append({"name": c.TOPOLOGY_GATE})
        selector = node_selectors.get(podset)
        if selector:
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **selector}
        merged = list(spec.get("tolerations") or [])
        for toleration in (tolerations or {}).get(podset, []):
            if toleration not in merged:
                merged.append(toleration)
        if merged:
            spec["tolerations"] = merged
    return out


def is_marked(job: Obj) -> bool:
    """Every template already carries the marks (the job was unsuspended by us)."""
    for _, template in _templates(copy.deepcopy(job)):
        labels = (template.get("metadata") or {}).get("labels") or {}
        if c.PODSET_LABEL not in labels:
            return False
    return True
