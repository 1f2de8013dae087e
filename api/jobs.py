"""Workloads from the objects users submit: batch/v1 Job, JobSet, v1 Pod, or a Workload.

Each becomes a topogate Workload whose PodSets carry the pod template, the pod count and the
topology request read from the template's annotations (Kueue's keys or topogate's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .annotations import AnnotationError, check_groups, topology_request
from .constants import JOBSET_JOB_INDEX, MAX_INT32, MIN_PARALLELISM_KEYS
from .errors import InputError
from .kinds import JOB, JOB_KINDS, JOBSET
from .models import ObjectMeta, PodSet, PodSetTopologyRequest, Workload, WorkloadSpec
from .validation import join, object_name, parse_model
from .vocabularies import (
    KAI_PREFERRED,
    KAI_REQUIRED,
    KAI_TOPOLOGY,
    REPLICA_REQUIRED_TOPOLOGY,
    vocabulary_request,
)


@dataclass(frozen=True, slots=True)
class WorkloadSource:
    """A workload and, per PodSet, the field path of its pod template in the source object."""

    workload: Workload
    template_paths: dict[str, str]
    where: str  # the source object, for messages ("file: Kind namespace/name")


def _mapping(value: Any, where: str, path: str, required: bool = True) -> Mapping[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(
            "is required" if value is None else "must be an object", where=where, field=path
        )
    return value


def _count(value: Any, where: str, path: str, default: int = 1) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{value!r} must be a non-negative integer", where=where, field=path)
    if value > MAX_INT32:  # parallelism, completions and replicas are int32: the API server
        raise InputError(  # refuses a larger number before any webhook sees it
            f"Invalid value: {value}: must be at most {MAX_INT32} (an int32)",
            where=where,
            field=path,
        )
    return value


def _job_pod_count(spec: Mapping[str, Any], where: str, path: str) -> int:
    # As Kueue: a Job runs min(parallelism, completions) pods at once.
    count = _count(spec.get("parallelism"), where, f"{path}.parallelism")
    completions = spec.get("completions")
    if completions is not None:
        count = min(count, _count(completions, where, f"{path}.completions"))
    return count


def _podset(
    name: str,
    count: int,
    template: Mapping[str, Any],
    where: str,
    path: str,
    replicas: int | None = None,
) -> PodSet:
    """One PodSet; ``replicas`` is the number of child Jobs of a JobSet's replicated job."""
    meta = _mapping(template.get("metadata"), where, join(path, "metadata"), required=False)
    annotations_path = join(path, "metadata.annotations")
    annotations = _mapping(meta.get("annotations"), where, annotations_path, False)
    _mapping(template.get("spec"), where, join(path, "spec"))
    strings = {str(k): str(v) for k, v in annotations.items()}
    try:
        request = topology_request(strings, annotations_path, count)
        vocabulary = vocabulary_request(strings, annotations_path)
    except AnnotationError as exc:
        raise InputError("; ".join(exc.problems), where=where) from None
    if vocabulary is not None and vocabulary.replica_level is not None:
        key = f"{annotations_path}[{REPLICA_REQUIRED_TOPOLOGY}]"
        if replicas is None:
            raise InputError(
                f"{key}: Forbidden: only a JobSet's replicated job has replicas to place "
                "one per domain",
                where=where,
            )
        if request is not None and (
            request.pod_set_slice_required_topology
            or request.podset_slice_required_topology_constraints
        ):
            raise InputError(
                f"{key}: Forbidden: may not be set together with slice annotations",
                where=where,
            )
    if replicas is not None and (request is not None or vocabulary is not None):
        # As Kueue does for JobSets: ranks are job-index x pods-per-job + pod index.
        request = request or PodSetTopologyRequest()
        request.sub_group_index_label = JOBSET_JOB_INDEX
        request.sub_group_count = replicas
    return PodSet(name=name, count=count, template=dict(template), topology_request=request)


# KAI-Scheduler's users write these on the workload object itself (its docs put them on the
# Job); Kueue's keys are read from pod templates only, as in Kueue.
OBJECT_LEVEL_KEYS = (KAI_TOPOLOGY, KAI_REQUIRED, KAI_PREFERRED)


def _from_object(obj: Mapping[str, Any], where: str) -> dict[str, str]:
    """The KAI topology annotations on the object's own metadata."""
    meta = _mapping(obj.get("metadata"), where, "metadata")
    annotations = _mapping(meta.get("annotations"), where, "metadata.annotations", False)
    return {k: str(annotations[k]) for k in OBJECT_LEVEL_KEYS if k in annotations}


def _inherit(
    template: Mapping[str, Any], inherited: Mapping[str, str], where: str, path: str
) -> Mapping[str, Any]:
    """The template with the object's KAI annotations added; a template that says otherwise
    is refused (which one was meant cannot be guessed)."""
    if not inherited:
        return template
    meta = _mapping(template.get("metadata"), where, join(path, "metadata"), required=False)
    own = _mapping(meta.get("annotations"), where, join(path, "metadata.annotations"), False)
    for key, value in inherited.items():
        if key in own and str(own[key]) != value:
            raise InputError(
                f"{join(path, 'metadata.annotations')}[{key}]: Invalid value: {own[key]!r}: "
                f"metadata.annotations[{key}] says {value!r}; set it in one place",
                where=where,
            )
    annotations = {**inherited, **own}
    return {**template, "metadata": {**meta, "annotations": annotations}}


def min_parallelism(
    obj: Mapping[str, Any], count: int, where: str, check_range: bool = True
) -> int | None:
    """A Job's ``job-min-parallelism`` (Kueue's partial admission), None when not set.

    As Kueue's Job webhook: an integer above 0 and below the Job's pod count. Without
    ``check_range`` (an update that keeps the annotation, as Kueue checks it only when it
    changes) a value at or above the count means no partial admission: a Job admitted with
    exactly its minimum runs with that parallelism.
    """
    meta = _mapping(obj.get("metadata"), where, "metadata")
    annotations = _mapping(meta.get("annotations"), where, "metadata.annotations", False)
    found = [(k, annotations[k]) for k in MIN_PARALLELISM_KEYS if k in annotations]
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
    if check_range and not 0 < value < count:
        raise InputError(
            f"Invalid value: {value}: should be between 0 and {count - 1} (above 0, below the "
            f"Job's {count} pods: min(parallelism, completions))",
            where=where,
            field=path,
        )
    if value <= 0:
        raise InputError(f"Invalid value: {value}: should be above 0", where=where, field=path)
    return value if value < count else None


def _volcano_refusal(obj: Mapping[str, Any], where: str) -> InputError:
    """What to write instead of Volcano's own Job or PodGroup."""
    return InputError(
        f"{obj.get('kind')} {obj.get('apiVersion')} is Volcano's own kind, which topogate does "
        "not admit; write a batch/v1 Job (or a jobset.x-k8s.io/v1alpha2 JobSet) with the queue "
        "label kueue.x-k8s.io/queue-name, and put the network topology on its pod template as "
        "the annotation topogate.dev/network-topology, e.g. "
        '{"mode": "hard", "highestTierAllowed": 1}' + _min_available_hint(obj),
        where=where,
    )


def _min_available_hint(obj: Mapping[str, Any]) -> str:
    """For a Volcano Job or PodGroup whose minAvailable is below its pod count: how to keep
    that partial gang (Kueue's partial admission of a Job)."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return ""
    minimum = spec.get("minAvailable", spec.get("minMember"))
    tasks = spec.get("tasks")
    if isinstance(tasks, list):
        total = sum(
            t.get("replicas", 0)
            for t in tasks
            if isinstance(t, Mapping) and isinstance(t.get("replicas"), int)
        )
    else:
        total = None  # a PodGroup does not say how many pods its job has
    if not isinstance(minimum, int) or isinstance(minimum, bool) or minimum < 1:
        return ""
    if total is not None and minimum >= total:
        return ""
    return (
        f"; for its minAvailable {minimum} (start with fewer pods when all do not fit), "
        f'annotate the Job with {MIN_PARALLELISM_KEYS[0]}: "{minimum}" and set its '
        "parallelism to the full pod count"
    )


def _labels(value: Any, where: str) -> dict[str, str]:
    """Label values are strings (the API server refuses a YAML ``5`` or ``true`` unquoted,
    and reads a null as ""); a number read as its text would name a queue nobody meant."""
    labels = _mapping(value, where, "metadata.labels", required=False)
    labels = {k: "" if v is None else v for k, v in labels.items()}
    for key, text in labels.items():
        if not isinstance(text, str):
            raise InputError(
                f"Invalid value: {text!r}: must be a string (quote it in YAML)",
                where=where,
                field=f"metadata.labels[{key}]",
            )
    return {str(k): v for k, v in labels.items()}


def _meta(obj: Mapping[str, Any], where: str) -> ObjectMeta:
    meta = _mapping(obj.get("metadata"), where, "metadata")
    return ObjectMeta(
        name=str(meta.get("name") or meta.get("generateName") or ""),
        namespace=str(meta.get("namespace") or "default"),
        labels=_labels(meta.get("labels"), where),
    )


def workload_from_object(
    obj: Mapping[str, Any], source: str = "", check_min_range: bool = True
) -> WorkloadSource:
    """The Workload for a Job, JobSet, Pod or Workload; InputError names the bad field.

    ``check_min_range``: see :func:`min_parallelism`."""
    where = f"{source}: {object_name(obj)}" if source else object_name(obj)
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    podsets: list[PodSet] = []
    paths: dict[str, str] = {}
    if JOB.matches(obj):
        spec = _mapping(obj.get("spec"), where, "spec")
        path = "spec.template"
        template = _mapping(spec.get("template"), where, path)
        template = _inherit(template, _from_object(obj, where), where, path)
        count = _job_pod_count(spec, where, "spec")
        podset = _podset("main", count, template, where, path)
        podset.min_count = min_parallelism(obj, count, where, check_min_range)
        podsets.append(podset)
        paths["main"] = path
    elif JOBSET.matches(obj):
        spec = _mapping(obj.get("spec"), where, "spec")
        replicated = spec.get("replicatedJobs")
        if not isinstance(replicated, list) or not replicated:
            raise InputError("must be a non-empty list", where=where, field="spec.replicatedJobs")
        for i, raw in enumerate(replicated):
            base = f"spec.replicatedJobs[{i}]"
            rjob = _mapping(raw, where, base)
            name = rjob.get("name")
            if not isinstance(name, str) or not name:
                raise InputError("is required", where=where, field=f"{base}.name")
            job_spec = _mapping(
                _mapping(rjob.get("template"), where, f"{base}.template").get("spec"),
                where,
                f"{base}.template.spec",
            )
            path = f"{base}.template.spec.template"
            template = _mapping(job_spec.get("template"), where, path)
            template = _inherit(template, _from_object(obj, where), where, path)
            replicas = _count(rjob.get("replicas"), where, f"{base}.replicas")
            count = replicas * _job_pod_count(job_spec, where, f"{base}.template.spec")
            podsets.append(_podset(name, count, template, where, path, replicas))
            paths[name] = path
    elif kind == "Pod" and api_version == "v1":
        template = {"metadata": obj.get("metadata") or {}, "spec": obj.get("spec")}
        podsets.append(_podset("main", 1, template, where, ""))
        paths["main"] = ""
    elif kind == "Workload" and api_version == "topogate.dev/v1alpha1":
        workload = parse_model(Workload, obj, where)
        for i, podset in enumerate(workload.spec.pod_sets):
            path = f"spec.podSets[{i}].template"
            if podset.topology_request is None:
                filled = _podset(podset.name, podset.count, podset.template, where, path)
                podset.topology_request = filled.topology_request
            paths[podset.name] = path
        _check_groups(workload, paths, where)
        return WorkloadSource(workload, paths, where)
    elif str(api_version).startswith(("batch.volcano.sh/", "scheduling.volcano.sh/")):
        raise _volcano_refusal(obj, where)
    else:
        raise InputError(
            f"kind {kind!r} with apiVersion {api_version!r} is not a workload; expected "
            f"{', '.join(f'{k.api_version} {k.kind}' for k in JOB_KINDS)}, v1 Pod or "
            "topogate.dev/v1alpha1 Workload",
            where=where,
        )
    metadata = _meta(obj, where)
    try:
        workload = Workload(metadata=metadata, spec=WorkloadSpec(pod_sets=podsets))
    except ValueError as exc:
        raise InputError(
            str(exc).splitlines()[-2].strip() if "\n" in str(exc) else str(exc),
            where=where,
            field="spec",
        ) from None
    _check_groups(workload, paths, where)
    return WorkloadSource(workload, paths, where)


def _check_groups(workload: Workload, paths: Mapping[str, str], where: str) -> None:
    entries: list[tuple[str, int, PodSetTopologyRequest | None, str]] = [
        (p.name, p.count, p.topology_request, join(paths[p.name], "metadata.annotations"))
        for p in workload.spec.pod_sets
    ]
    try:
        check_groups(entries)
    except AnnotationError as exc:
        raise InputError("; ".join(exc.problems), where=where) from None
