"""The job kinds topogate admits, registered in one place: every module that needs a kind's
API version, resource, PodSets, pod templates or how it is suspended asks this registry (and
the kind it returns) instead of naming kinds itself.

A new kind is one module next to ``job.py`` implementing :class:`base.JobKind` (and the
capabilities it has: :class:`base.Suspendable` or :class:`base.Gated`,
:class:`base.PartialAdmission`), and one entry in :data:`JOB_KINDS` (a kind served as an API
resource) or :data:`COMPOSED_KINDS` (a group the state composes from pods). The reflectors
watch each kind's resource, the webhooks serve it and the job sync keeps it in step with its
Workload(s) without further changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import (
    Gated,
    JobKind,
    Lookup,
    PartialAdmission,
    PodMarks,
    PodSetsInfo,
    ReadKind,
    Referring,
    Suspendable,
    no_lookup,
)
from .base import queue_name as labelled_queue
from .job import JOB
from .jobset import JOBSET
from .kubeflow import MPIJOB, PYTORCHJOB
from .lws import LEADERWORKERSET
from .podgroup import POD_GROUP
from .ray import RAYCLUSTER, RAYJOB
from .trainer import TRAINJOB

__all__ = [
    "ALL_KINDS",
    "COMPOSED_KINDS",
    "GATED_KINDS",
    "JOB",
    "JOBSET",
    "JOB_KINDS",
    "LEADERWORKERSET",
    "MPIJOB",
    "POD_GROUP",
    "PYTORCHJOB",
    "RAYCLUSTER",
    "RAYJOB",
    "READ_KINDS",
    "TRAINJOB",
    "Gated",
    "JobKind",
    "Lookup",
    "PartialAdmission",
    "PodMarks",
    "PodSetsInfo",
    "ReadKind",
    "Referring",
    "Suspendable",
    "gated_pod",
    "job_kind",
    "job_kind_by_plural",
    "job_kind_for",
    "no_lookup",
    "pod_podset",
    "queue_name",
]

# Every kind served as an API resource, in the order the reflectors watch them and messages
# list them.
JOB_KINDS: tuple[JobKind, ...] = (
    JOB,
    JOBSET,
    LEADERWORKERSET,
    PYTORCHJOB,
    MPIJOB,
    RAYCLUSTER,
    RAYJOB,
    TRAINJOB,
)
# Kinds with no object of their own: the state composes one from their pods.
COMPOSED_KINDS: tuple[Gated, ...] = (POD_GROUP,)
ALL_KINDS: tuple[JobKind, ...] = (*JOB_KINDS, *COMPOSED_KINDS)
# The kinds held back by the gate on their pods, in the order a pod is matched against them.
GATED_KINDS: tuple[Gated, ...] = tuple(k for k in ALL_KINDS if isinstance(k, Gated))
# The other kinds the registered kinds read (a TrainJob's runtimes), each once.
READ_KINDS: tuple[ReadKind, ...] = tuple(
    dict.fromkeys(r for k in ALL_KINDS if isinstance(k, Referring) for r in k.reads)
)


def job_kind(kind: object) -> JobKind | None:
    """The registered kind called ``kind`` (any version), or None: how owner references,
    AdmissionReviews (which name the kind) and the job sync (which keys its work by kind)
    find it."""
    return next((k for k in ALL_KINDS if k.kind == kind), None)


def job_kind_for(api_version: object, kind: object) -> JobKind | None:
    """The registered kind of an object's ``apiVersion`` and ``kind`` (both must match), or
    None: how a submitted object is read."""
    return next((k for k in ALL_KINDS if k.kind == kind and k.api_version == api_version), None)


def job_kind_by_plural(plural: str) -> JobKind | None:
    """The registered kind served as the resource ``plural``, or None."""
    return next((k for k in JOB_KINDS if k.plural == plural), None)


def pod_podset(labels: Mapping[str, Any]) -> str | None:
    """The PodSet a pod belongs to by the label its kind's controller put on it (a pod that
    lacks topogate's own PodSet label), or None."""
    for kind in JOB_KINDS:
        if kind.pod_podset_label is not None and labels.get(kind.pod_podset_label):
            return str(labels[kind.pod_podset_label])
    return None


def queue_name(obj: Mapping[str, Any]) -> str | None:
    """The queue a job is submitted to, or None when it is not queued: no queue label, a kind
    that skips this object (:meth:`JobKind.skipped`), or a controller that is itself a kind
    topogate admits (a RayJob's RayCluster runs under its RayJob's admission, as Kueue leaves
    a job whose parent it manages alone)."""
    queue = labelled_queue(obj)
    if queue is None:
        return None
    kind = job_kind_for(obj.get("apiVersion"), obj.get("kind"))
    if kind is not None and kind.skipped(obj):
        return None
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in refs if isinstance(refs, list) else []:
        if (
            isinstance(ref, Mapping)
            and ref.get("controller")
            and job_kind_for(ref.get("apiVersion"), ref.get("kind")) in JOB_KINDS
        ):
            return None
    return queue


def gated_pod(pod: Mapping[str, Any]) -> tuple[Gated, PodMarks] | None:
    """The gated kind a pod belongs to and its marks, or None (a pod of no gated kind)."""
    for kind in GATED_KINDS:
        marks = kind.pod_marks(pod)
        if marks is not None:
            return kind, marks
    return None
