"""The job kinds topogate admits, registered in one place: every module that needs a kind's
API version, resource, PodSets, pod templates or how it is suspended asks this registry (and
the kind it returns) instead of naming kinds itself.

A new kind is one module next to ``job.py`` implementing :class:`base.JobKind` (and the
capabilities it has: :class:`base.Suspendable`, :class:`base.PartialAdmission`), and one
entry in :data:`JOB_KINDS`. The reflectors watch each kind's resource, the webhooks serve it
and the job sync keeps it in step with its Workload without further changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import JobKind, PartialAdmission, PodSetsInfo, Suspendable, queue_name
from .job import JOB
from .jobset import JOBSET

__all__ = [
    "JOB",
    "JOBSET",
    "JOB_KINDS",
    "JobKind",
    "PartialAdmission",
    "PodSetsInfo",
    "Suspendable",
    "job_kind",
    "job_kind_by_plural",
    "job_kind_for",
    "pod_podset",
    "queue_name",
]

# Every registered kind, in the order the reflectors watch them and messages list them.
JOB_KINDS: tuple[JobKind, ...] = (JOB, JOBSET)


def job_kind(kind: object) -> JobKind | None:
    """The registered kind called ``kind`` (any version), or None: how owner references,
    AdmissionReviews (which name the kind) and the job sync (which keys its work by kind)
    find it."""
    return next((k for k in JOB_KINDS if k.kind == kind), None)


def job_kind_for(api_version: object, kind: object) -> JobKind | None:
    """The registered kind of an object's ``apiVersion`` and ``kind`` (both must match), or
    None: how a submitted object is read."""
    return next((k for k in JOB_KINDS if k.kind == kind and k.api_version == api_version), None)


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
