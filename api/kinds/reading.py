"""Reading pod templates into PodSets: the field checks every kind's :meth:`podsets` shares,
each raising InputError that names the bad field (as ``topogate plan`` and the validating
webhook report it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..annotations import AnnotationError, topology_request
from ..constants import MAX_INT32
from ..errors import InputError
from ..models import PodSet, PodSetTopologyRequest
from ..validation import join
from ..vocabularies import (
    KAI_PREFERRED,
    KAI_REQUIRED,
    KAI_TOPOLOGY,
    REPLICA_REQUIRED_TOPOLOGY,
    vocabulary_request,
)


def mapping(value: Any, where: str, path: str, required: bool = True) -> Mapping[str, Any]:
    """``value`` as an object; absent reads as empty unless ``required``."""
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(
            "is required" if value is None else "must be an object", where=where, field=path
        )
    return value


def count(value: Any, where: str, path: str, default: int = 1) -> int:
    """A pod or replica count: a non-negative int32, ``default`` when absent."""
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


@dataclass(frozen=True, slots=True)
class Replicas:
    """A PodSet made of whole units placed alike (a JobSet's child Jobs): how many, and the
    pod label that says which unit a pod belongs to (its rank is unit index x pods per unit
    + pod index, as Kueue ranks them)."""

    count: int
    index_label: str


def podset(
    name: str,
    pod_count: int,
    template: Mapping[str, Any],
    where: str,
    path: str,
    replicas: Replicas | None = None,
) -> PodSet:
    """One PodSet from its pod template at ``path``: the topology request from the
    template's annotations (Kueue's keys, topogate's, and KAI's or Volcano's words)."""
    meta = mapping(template.get("metadata"), where, join(path, "metadata"), required=False)
    annotations_path = join(path, "metadata.annotations")
    annotations = mapping(meta.get("annotations"), where, annotations_path, False)
    mapping(template.get("spec"), where, join(path, "spec"))
    strings = {str(k): str(v) for k, v in annotations.items()}
    try:
        request = topology_request(strings, annotations_path, pod_count)
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
        request = request or PodSetTopologyRequest()
        request.sub_group_index_label = replicas.index_label
        request.sub_group_count = replicas.count
    return PodSet(name=name, count=pod_count, template=dict(template), topology_request=request)


# KAI-Scheduler's users write these on the workload object itself (its docs put them on the
# Job); Kueue's keys are read from pod templates only, as in Kueue.
OBJECT_LEVEL_KEYS = (KAI_TOPOLOGY, KAI_REQUIRED, KAI_PREFERRED)


def object_topology(obj: Mapping[str, Any], where: str) -> dict[str, str]:
    """The KAI topology annotations on the object's own metadata."""
    meta = mapping(obj.get("metadata"), where, "metadata")
    annotations = mapping(meta.get("annotations"), where, "metadata.annotations", False)
    return {k: str(annotations[k]) for k in OBJECT_LEVEL_KEYS if k in annotations}


def inherit(
    template: Mapping[str, Any], inherited: Mapping[str, str], where: str, path: str
) -> Mapping[str, Any]:
    """The template with the object's KAI annotations added; a template that says otherwise
    is refused (which one was meant cannot be guessed)."""
    if not inherited:
        return template
    meta = mapping(template.get("metadata"), where, join(path, "metadata"), required=False)
    own = mapping(meta.get("annotations"), where, join(path, "metadata.annotations"), False)
    for key, value in inherited.items():
        if key in own and str(own[key]) != value:
            raise InputError(
                f"{join(path, 'metadata.annotations')}[{key}]: Invalid value: {own[key]!r}: "
                f"metadata.annotations[{key}] says {value!r}; set it in one place",
                where=where,
            )
    annotations = {**inherited, **own}
    return {**template, "metadata": {**meta, "annotations": annotations}}
