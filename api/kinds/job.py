"""batch/v1 Job: one PodSet ``main``, suspended through ``spec.suspend``, and Kueue's partial
admission (``job-min-parallelism``: it runs with the parallelism it is admitted with).
Kueue's equivalent is ``pkg/controller/jobs/job``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..constants import JOB_COMPLETION_INDEX, KUEUE_GROUP, MIN_PARALLELISM_KEYS
from ..errors import InputError
from ..models import PodSet
from .base import Obj, PartialAdmission, Suspendable, annotations_of, as_map
from .reading import count, inherit, mapping, object_topology, podset

# Kueue's Job annotation: completions follow parallelism when partial admission changes it.
COMPLETIONS_EQUAL_PARALLELISM = f"{KUEUE_GROUP}/job-completions-equal-parallelism"


def job_pod_count(spec: Mapping[str, Any], where: str, path: str) -> int:
    """The pods a Job's ``spec`` runs at once, as Kueue counts them: min(parallelism,
    completions). A JobSet's child Jobs are counted the same way."""
    pods = count(spec.get("parallelism"), where, f"{path}.parallelism")
    completions = spec.get("completions")
    if completions is not None:
        pods = min(pods, count(completions, where, f"{path}.completions"))
    return pods


def min_parallelism(
    obj: Mapping[str, Any], pods: int, where: str, check_range: bool = True
) -> int | None:
    """A Job's ``job-min-parallelism`` (Kueue's partial admission), None when not set.

    As Kueue's Job webhook: an integer above 0 and below the Job's pod count. Without
    ``check_range`` (an update that keeps the annotation, as Kueue checks it only when it
    changes) a value at or above the count means no partial admission: a Job admitted with
    exactly its minimum runs with that parallelism.
    """
    meta = mapping(obj.get("metadata"), where, "metadata")
    found_on = mapping(meta.get("annotations"), where, "metadata.annotations", False)
    found = [(k, found_on[k]) for k in MIN_PARALLELISM_KEYS if k in found_on]
    if not found:
        return None
    key, raw = found[0]
    path = f"metadata.annotations[{key}]"
    if len(found) > 1 and str(found[1][1]) != str(raw):
        raise InputError(
            f"Invalid value: {str(raw)!r}: metadata.annotations[{found[1][0]}] says "
            f"{str(found[1][1])!r}; set it in one place",
            where=where,
            field=path,
        )
    text = str(raw)
    # Kueue parses it with Go's strconv.Atoi: an optional sign and digits, no spaces.
    if re.fullmatch(r"[+-]?[0-9]+", text) is None:
        raise InputError(
            f"Invalid value: {text!r}: must be an integer (digits only, no spaces)",
            where=where,
            field=path,
        )
    if len(text.lstrip("+-").lstrip("0")) > 19:  # beyond int64, as Atoi says: out of range
        raise InputError(
            f"Invalid value: {text[:40]!r}...: value out of range", where=where, field=path
        )
    value = int(text)
    if check_range and not 0 < value < pods:
        raise InputError(
            f"Invalid value: {value}: should be between 0 and {pods - 1} (above 0, below the "
            f"Job's {pods} pods: min(parallelism, completions))",
            where=where,
            field=path,
        )
    if value <= 0:
        raise InputError(f"Invalid value: {value}: should be above 0", where=where, field=path)
    return value if value < pods else None


class BatchJobKind(Suspendable, PartialAdmission):
    kind = "Job"
    group = "batch"
    version = "v1"
    plural = "jobs"
    custom_resource = False
    template_pattern = "spec.template"
    pod_index_label = JOB_COMPLETION_INDEX

    def podsets(self, obj: Mapping[str, Any], where: str) -> list[tuple[PodSet, str]]:
        spec = mapping(obj.get("spec"), where, "spec")
        path = "spec.template"
        template = mapping(spec.get("template"), where, path)
        template = inherit(template, object_topology(obj, where), where, path)
        pods = job_pod_count(spec, where, "spec")
        return [(podset("main", pods, template, where, path), path)]

    def pod_templates(self, job: Obj) -> list[tuple[str, Obj]]:
        spec = job.setdefault("spec", {})
        return [("main", spec.setdefault("template", {}))]

    def template_fields(self, obj: Mapping[str, Any]) -> list[tuple[str, Any]]:
        return [("spec.template", as_map(obj.get("spec")).get("template"))]

    # --- partial admission ---------------------------------------------------------------

    def accepts_partial(self, job: Mapping[str, Any]) -> bool:
        """A batch/v1 Job with ``job-min-parallelism``: its parallelism follows the
        admission."""
        return self.matches(job) and any(k in annotations_of(job) for k in MIN_PARALLELISM_KEYS)

    def set_min_counts(
        self, obj: Mapping[str, Any], podsets: list[PodSet], where: str, check_range: bool
    ) -> None:
        for one in podsets:
            one.min_count = min_parallelism(obj, one.count, where, check_range)

    def min_count_changed(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        def value(obj: Mapping[str, Any]) -> tuple[Any, ...]:
            return tuple(annotations_of(obj).get(k) for k in MIN_PARALLELISM_KEYS)

        return value(old) != value(new)

    def check_running_update(
        self, old: Mapping[str, Any], new: Mapping[str, Any], where: str
    ) -> None:
        """Kueue's Job webhook: a running Job that accepts partial admission keeps the
        parallelism it was admitted with (it is changed only while suspended)."""
        before, after = as_map(old.get("spec")), as_map(new.get("spec"))
        if not self.accepts_partial(old) or before.get("suspend"):
            return
        if before.get("parallelism", 1) != after.get("parallelism", 1):
            raise InputError(
                "Forbidden: cannot change when partial admission is enabled and the job is not "
                "suspended",
                where=where,
                field="spec.parallelism",
            )

    def run_with_counts(self, job: Obj, counts: Mapping[str, int]) -> None:
        """A Job that accepts partial admission runs with the admitted count as its
        parallelism."""
        if self.accepts_partial(job) and counts and "main" in counts:
            self._set_parallelism(job["spec"], job, counts["main"])

    def restored_spec(
        self, job: Mapping[str, Any], workload: Mapping[str, Any] | None
    ) -> Obj | None:
        """The parallelism (and completions, when they follow it) of the Workload's PodSet.
        Kueue's Job ``Stop`` suspends first and restores in a second write, as its webhook
        forbids changing a running Job's parallelism."""
        pods = self._restored_parallelism(job, workload) if workload is not None else None
        if pods is None:
            return None
        spec: Obj = {}
        self._set_parallelism(spec, job, pods)
        return spec

    def _restored_parallelism(
        self, job: Mapping[str, Any], workload: Mapping[str, Any]
    ) -> int | None:
        """The Workload's PodSet count when it differs from the parallelism. Only a Job
        topogate started (its templates carry the marks) is touched: a queued Job keeps what
        it asks."""
        if not self.accepts_partial(job) or not self.is_marked(dict(job)):
            return None
        for one in (workload.get("spec") or {}).get("podSets") or []:
            pods = one.get("count")
            if isinstance(pods, int) and pods != (job.get("spec") or {}).get("parallelism"):
                return pods
        return None

    @staticmethod
    def _set_parallelism(spec: Obj, job: Mapping[str, Any], pods: int) -> None:
        """Kueue's Job ``RunWithPodSetsInfo``/``RestorePodSetsInfo``: parallelism is the
        count; completions follow it only with ``job-completions-equal-parallelism:
        "true"``."""
        spec["parallelism"] = pods
        if str(annotations_of(job).get(COMPLETIONS_EQUAL_PARALLELISM, "")).lower() == "true":
            spec["completions"] = pods


JOB = BatchJobKind()
