"""The job kinds topogate admits, named once: every module that needs a kind's API version,
its resource plural or its pod templates asks this registry instead of spelling them out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .constants import QUEUE_LABELS

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class JobKind:
    """One kind of job: ``JobKind("Job", "batch", "v1", "jobs")``."""

    kind: str
    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return obj.get("kind") == self.kind and obj.get("apiVersion") == self.api_version

    def templates(self, job: Obj) -> list[tuple[str, Obj]]:
        """(podset name, pod template) pairs: references into ``job``, created where absent,
        so callers may mutate them (the admitted job is written through them)."""
        spec = job.setdefault("spec", {})
        if self is JOB:
            return [("main", spec.setdefault("template", {}))]
        out = []
        for rjob in spec.get("replicatedJobs") or []:
            job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
            out.append((str(rjob.get("name")), job_spec.setdefault("template", {})))
        return out


JOB = JobKind("Job", "batch", "v1", "jobs")
JOBSET = JobKind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets")
JOB_KINDS: tuple[JobKind, ...] = (JOB, JOBSET)


def job_kind(kind: str) -> JobKind | None:
    """The registered kind called ``kind`` (any version), or None."""
    return next((k for k in JOB_KINDS if k.kind == kind), None)


def job_kind_of(obj: Mapping[str, Any]) -> JobKind | None:
    """The registered kind of an object (kind and apiVersion must both match), or None."""
    return next((k for k in JOB_KINDS if k.matches(obj)), None)


def queue_name(obj: Mapping[str, Any]) -> str | None:
    """The queue a job is submitted to (topogate's or Kueue's label), or None; tolerant of
    malformed metadata, since webhooks see objects before any schema does."""
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not isinstance(labels, Mapping):
        return None
    for key in QUEUE_LABELS:
        value = labels.get(key)
        if value:
            return str(value)
    return None
