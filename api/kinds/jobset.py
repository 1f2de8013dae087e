"""JobSet (jobset.x-k8s.io/v1alpha2): one PodSet per replicated job, in spec order, each of
``replicas`` child Jobs placed alike; suspended through ``spec.suspend``. Kueue's equivalent
is ``pkg/controller/jobs/jobset``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..constants import JOB_COMPLETION_INDEX, JOBSET_JOB_INDEX
from ..errors import InputError
from ..models import PodSet
from .base import Obj, Suspendable, as_map
from .job import job_pod_count
from .reading import Replicas, count, inherit, mapping, object_topology, podset


class JobSetKind(Suspendable):
    kind = "JobSet"
    group = "jobset.x-k8s.io"
    version = "v1alpha2"
    plural = "jobsets"
    template_pattern = "spec.replicatedJobs[*].template.spec.template"
    pod_index_label = JOB_COMPLETION_INDEX  # each child Job is Indexed
    # JobSet's controller labels each pod with its replicated job's name: the PodSet's.
    pod_podset_label = "jobset.sigs.k8s.io/replicatedjob-name"

    def podsets(self, obj: Mapping[str, Any], where: str) -> list[tuple[PodSet, str]]:
        spec = mapping(obj.get("spec"), where, "spec")
        replicated = spec.get("replicatedJobs")
        if not isinstance(replicated, list) or not replicated:
            raise InputError("must be a non-empty list", where=where, field="spec.replicatedJobs")
        out = []
        for i, raw in enumerate(replicated):
            base = f"spec.replicatedJobs[{i}]"
            rjob = mapping(raw, where, base)
            name = rjob.get("name")
            if not isinstance(name, str) or not name:
                raise InputError("is required", where=where, field=f"{base}.name")
            job_spec = mapping(
                mapping(rjob.get("template"), where, f"{base}.template").get("spec"),
                where,
                f"{base}.template.spec",
            )
            path = f"{base}.template.spec.template"
            template = mapping(job_spec.get("template"), where, path)
            template = inherit(template, object_topology(obj, where), where, path)
            replicas = count(rjob.get("replicas"), where, f"{base}.replicas")
            pods = replicas * job_pod_count(job_spec, where, f"{base}.template.spec")
            # Ranks as Kueue gives them for JobSets: job index x pods per job + pod index.
            units = Replicas(replicas, JOBSET_JOB_INDEX)
            out.append((podset(name, pods, template, where, path, units), path))
        return out

    def pod_templates(self, job: Obj) -> list[tuple[str, Obj]]:
        spec = job.setdefault("spec", {})
        out = []
        for rjob in spec.get("replicatedJobs") or []:
            job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
            out.append((str(rjob.get("name")), job_spec.setdefault("template", {})))
        return out

    def template_fields(self, obj: Mapping[str, Any]) -> list[tuple[str, Any]]:
        replicated = as_map(obj.get("spec")).get("replicatedJobs")
        out = []
        for i, rjob in enumerate(replicated if isinstance(replicated, list) else []):
            job_spec = as_map(as_map(as_map(rjob).get("template")).get("spec"))
            out.append(
                (f"spec.replicatedJobs[{i}].template.spec.template", job_spec.get("template"))
            )
        return out

    between_name = "a Job template"

    def between_templates(self, obj: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
        replicated = as_map(obj.get("spec")).get("replicatedJobs")
        return [
            (f"spec.replicatedJobs[{i}].template", as_map(rjob).get("template"), path)
            for i, rjob in enumerate(replicated if isinstance(replicated, list) else [])
            for path in [f"spec.replicatedJobs[{i}].template.spec.template"]
        ]


JOBSET = JobSetKind()
