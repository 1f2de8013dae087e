"""Workloads from the objects users submit: batch/v1 Job, JobSet, v1 Pod, or a Workload.

Each becomes a topogate Workload whose PodSets carry the pod template, the pod count and the
topology request read from the template's annotations (Kueue's keys or topogate's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .annotations import AnnotationError, check_groups
from .constants import KUEUE_GROUP, MIN_PARALLELISM_KEYS, QUEUE_LABELS
from .errors import InputError
from .kinds import JOB_KINDS, Lookup, PartialAdmission, Referring, job_kind_for, no_lookup, reading
from .models import (
    MAX_PODSETS,
    ObjectMeta,
    PodSet,
    PodSetTopologyRequest,
    Workload,
    WorkloadSpec,
)
from .validation import join, object_name, parse_model
from .vocabularies import KAI_PREFERRED, KAI_REQUIRED, KAI_TOPOLOGY, NETWORK_TOPOLOGY


@dataclass(frozen=True, slots=True)
class WorkloadSource:
    """A workload and, per PodSet, the field path of its pod template in the source object."""

    workload: Workload
    template_paths: dict[str, str]
    where: str  # the source object, for messages ("file: Kind namespace/name")


def _volcano_refusal(obj: Mapping[str, Any], where: str) -> InputError:
    """What to write instead of Volcano's own Job or PodGroup: the annotations that say what
    this one says (its networkTopology, its tasks' partitionPolicy or the PodGroup's
    subGroupPolicy), or that it needs none."""
    return InputError(
        f"{obj.get('kind')} {obj.get('apiVersion')} is Volcano's own kind, which topogate does "
        "not admit; write a batch/v1 Job (or a jobset.x-k8s.io/v1alpha2 JobSet) with the queue "
        f"label {QUEUE_LABELS[1]}{_volcano_topology_hint(obj)}{_min_available_hint(obj)}",
        where=where,
    )


def _kai_refusal(obj: Mapping[str, Any], where: str) -> InputError:
    """What to write instead of KAI-Scheduler's PodGroup (made by its podgrouper from the
    pods' owner): the owner, queued, with the PodGroup's topologyConstraint as KAI's keys."""
    spec = obj.get("spec")
    constraint = spec.get("topologyConstraint") if isinstance(spec, Mapping) else None
    keys = {"topology": KAI_TOPOLOGY, "requiredTopologyLevel": KAI_REQUIRED}
    keys["preferredTopologyLevel"] = KAI_PREFERRED
    written = [
        f"{key}: {constraint[field]}"
        for field, key in keys.items()
        if isinstance(constraint, Mapping) and constraint.get(field)
    ]
    topology = (
        f", with its topologyConstraint as the annotations {', '.join(written)} (on the Job or "
        "its pod template, as KAI's podgrouper reads them)"
        if written
        else ""
    )
    return InputError(
        f"PodGroup {obj.get('apiVersion')} is KAI-Scheduler's pod group, which topogate does not "
        "admit yet; submit the pods' owner instead: a batch/v1 Job (or a jobset.x-k8s.io/v1alpha2 "
        f"JobSet, a replicated job per subGroup) with the queue label {QUEUE_LABELS[1]}"
        f"{topology}. Pods with no such owner cannot be queued as one group yet; a single v1 "
        "Pod can be planned alone",
        where=where,
    )


def _network_topology(value: Any) -> str | None:
    """Volcano's networkTopology as the JSON of topogate.dev/network-topology, or None."""
    if not isinstance(value, Mapping):
        return None
    kept = {k: value[k] for k in ("mode", "highestTierAllowed", "highestTierName") if k in value}
    if "mode" not in kept and kept:
        kept = {"mode": "hard", **kept}  # Volcano's default mode
    return json.dumps(kept, separators=(",", ":")) if kept else None


def _tier(value: Any) -> Any:
    """The tier a networkTopology names (its number or its name), or None."""
    topology = value if isinstance(value, Mapping) else {}
    return topology.get("highestTierName", topology.get("highestTierAllowed"))


def _volcano_topology_hint(obj: Mapping[str, Any]) -> str:
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    parts = []
    whole = _network_topology(spec.get("networkTopology"))
    if whole is not None:
        parts.append(
            "put its network topology on the pod templates as the annotation "
            f"{NETWORK_TOPOLOGY}: '{whole}'"
        )
    groups: list[tuple[str, Any, Any]] = []  # (name, pods per group, its networkTopology)
    tasks = spec.get("tasks")
    for task in tasks if isinstance(tasks, list) else []:
        policy = task.get("partitionPolicy") if isinstance(task, Mapping) else None
        if isinstance(policy, Mapping):
            groups.append((f"task {task.get('name')}", policy.get("partitionSize"), policy))
    policies = spec.get("subGroupPolicy")
    for policy in policies if isinstance(policies, list) else []:
        if isinstance(policy, Mapping):
            groups.append((f"subGroup {policy.get('name')}", policy.get("subGroupSize", 1), policy))
    for name, size, policy in groups:
        tier = _tier(policy.get("networkTopology"))
        within, level = (
            (f" within tier {tier}", f"<the node label of tier {tier}>")
            if tier is not None
            else ("", "<the node label of the domain each group shares>")
        )
        parts.append(
            f"for the groups of {size} pods{within} of {name}, annotate its pod template with "
            f"{KUEUE_GROUP}/podset-slice-required-topology: {level} and "
            f'{KUEUE_GROUP}/podset-slice-size: "{size}"'
        )
    if not parts:
        return f"; it asks for no network topology, so it needs no {NETWORK_TOPOLOGY} annotation"
    return "; " + "; ".join(parts)


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
    labels = reading.mapping(value, where, "metadata.labels", required=False)
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
    meta = reading.mapping(obj.get("metadata"), where, "metadata")
    return ObjectMeta(
        name=str(meta.get("name") or meta.get("generateName") or ""),
        namespace=str(meta.get("namespace") or "default"),
        labels=_labels(meta.get("labels"), where),
    )


def workload_from_object(
    obj: Mapping[str, Any],
    source: str = "",
    check_min_range: bool = True,
    lookup: Lookup = no_lookup,
) -> WorkloadSource:
    """The Workload for a Job, JobSet, Pod or Workload; InputError names the bad field.

    ``check_min_range``: see :meth:`PartialAdmission.set_min_counts`. ``lookup``: the other
    objects a :class:`Referring` kind reads (a TrainJob's runtime); by default none exists."""
    where = f"{source}: {object_name(obj)}" if source else object_name(obj)
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    podsets: list[PodSet] = []
    paths: dict[str, str] = {}
    job_kind = job_kind_for(api_version, kind)
    if job_kind is not None:
        if isinstance(job_kind, Referring):
            found = job_kind.podsets_with(obj, where, lookup)
        else:
            found = job_kind.podsets(obj, where)
        for read, path in found:
            podsets.append(read)
            paths[read.name] = path
        if isinstance(job_kind, PartialAdmission):
            job_kind.set_min_counts(obj, podsets, where, check_min_range)
    elif kind == "Pod" and api_version == "v1":
        template = {"metadata": obj.get("metadata") or {}, "spec": obj.get("spec")}
        podsets.append(reading.podset("main", 1, template, where, ""))
        paths["main"] = ""
    elif kind == "Workload" and api_version == "topogate.dev/v1alpha1":
        workload = parse_model(Workload, obj, where)
        for i, podset in enumerate(workload.spec.pod_sets):
            path = f"spec.podSets[{i}].template"
            if podset.topology_request is None:
                filled = reading.podset(podset.name, podset.count, podset.template, where, path)
                podset.topology_request = filled.topology_request
            paths[podset.name] = path
        _check_groups(workload, paths, where)
        return WorkloadSource(workload, paths, where)
    elif str(api_version).startswith(("batch.volcano.sh/", "scheduling.volcano.sh/")):
        raise _volcano_refusal(obj, where)
    elif str(api_version).startswith("scheduling.run.ai/") and kind == "PodGroup":
        raise _kai_refusal(obj, where)
    else:
        raise InputError(
            f"kind {kind!r} with apiVersion {api_version!r} is not a workload; expected "
            f"{', '.join(f'{k.api_version} {k.kind}' for k in JOB_KINDS)}, v1 Pod (alone or in "
            "a group) or topogate.dev/v1alpha1 Workload",
            where=where,
        )
    if len(podsets) > MAX_PODSETS:
        # The model's own refusal is pydantic's dump of every PodSet, naming no field.
        raise InputError(
            f"Too many: {len(podsets)} PodSets ({', '.join(p.name for p in podsets)}): a "
            f"Workload holds at most {MAX_PODSETS}",
            where=where,
            field=_common_parent(list(paths.values())),
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


def _common_parent(paths: list[str]) -> str:
    """The field the PodSets' template paths share (``spec.replicatedJobs`` of
    ``spec.replicatedJobs[0].template...``), else ``spec``."""
    parts = [p.replace("[", ".[").split(".") for p in paths]
    shared: list[str] = []
    for step in zip(*parts, strict=False):
        if len(set(step)) != 1:
            break
        shared.append(step[0])
    return ".".join(shared).replace(".[", "[") or "spec"


def _check_groups(workload: Workload, paths: Mapping[str, str], where: str) -> None:
    entries: list[tuple[str, int, PodSetTopologyRequest | None, str]] = [
        (p.name, p.count, p.topology_request, join(paths[p.name], "metadata.annotations"))
        for p in workload.spec.pod_sets
    ]
    try:
        check_groups(entries)
    except AnnotationError as exc:
        raise InputError("; ".join(exc.problems), where=where) from None
