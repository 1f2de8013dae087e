"""Reading watched objects as the API server sends them (plain dicts), pure and tolerant:
a field of the wrong shape reads as absent, never as an exception."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from . import constants as c
from .gpus import ASSIGNMENT_ANNOTATION, GpuAssignment, parse_assignment
from .kinds import POD_GROUP, job_kind

Obj = dict[str, Any]

log = logging.getLogger("topogate.objects")


def meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def key_of(obj: Mapping[str, Any]) -> str:
    """namespace/name, or name for cluster-scoped objects."""
    m = meta(obj)
    namespace = m.get("namespace")
    return f"{namespace}/{m.get('name')}" if namespace else str(m.get("name"))


def as_mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one."""
    # A dict first: what JSON decodes to, and the ABC's isinstance costs several times more
    # (this runs a few times per watch event and per condition read).
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(meta(obj).get("labels"))


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(meta(obj).get("annotations"))


def labels_changed(old: Obj | None, new: Obj | None) -> bool:
    """An object appeared, went away, or changed its labels (status updates do not count)."""
    return old is None or new is None or meta(old).get("labels") != meta(new).get("labels")


def _found(obj: Mapping[str, Any] | None, kind: str) -> dict[str, Any] | None:
    """The object's own condition of ``kind`` (not a copy: for reading only)."""
    conditions = as_mapping((obj or {}).get("status")).get("conditions")
    for cond in conditions if isinstance(conditions, list) else []:
        if isinstance(cond, dict) and cond.get("type") == kind:
            return cond
    return None


def condition(obj: Mapping[str, Any] | None, kind: str) -> dict[str, Any] | None:
    cond = _found(obj, kind)
    return None if cond is None else dict(cond)


def is_true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    # Read in place: this runs several times per watch event (finished? evicted?).
    cond = _found(obj, kind)
    return cond is not None and cond.get("status") == "True"


def admission_of(workload: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A Workload's ``status.admission``, or None when it is not admitted."""
    admission = as_mapping((workload or {}).get("status")).get("admission")
    return dict(admission) if admission and isinstance(admission, Mapping) else None


# What changes on every write whatever was written.
_EVERY_WRITE = frozenset({"resourceVersion", "managedFields"})


def _same_but(a: Mapping[str, Any], b: Mapping[str, Any], skip: frozenset[str]) -> bool:
    """``a`` and ``b`` equal but for the keys in ``skip`` (a key present in one only differs),
    compared in place: this runs on every Workload event, and copying both less ``skip`` first
    was most of its time."""
    for k, v in a.items():
        if k not in skip and (k not in b or b[k] != v):
            return False
    return all(k in a or k in skip for k in b)


def _is_waiting_words(c: Any) -> bool:
    return (
        (type(c) is dict or isinstance(c, Mapping))
        and c.get("type") == "QuotaReserved"
        and c.get("status") == "False"
    )


def _not_waiting_words(status: Mapping[str, Any]) -> list[Any]:
    """The conditions less a QuotaReserved=False one (why a Workload waits)."""
    return [c for c in status.get("conditions") or [] if not _is_waiting_words(c)]


_TOP = frozenset({"metadata", "status"})
_CONDITIONS = frozenset({"conditions"})


def only_waiting_words_changed(old: Obj | None, new: Obj | None) -> bool:
    """The new version of a Workload differs from the old one only in why it waits (a
    QuotaReserved=False condition, as the admitter's pending messages write it) and in what
    every write changes: nothing an admission decision reads."""
    if old is None or new is None:
        return False
    # The status first: most events that are more than words (an admission written, a
    # finish, an eviction) differ there, and the spec's comparison is the costly one.
    before, after = as_mapping(old.get("status")), as_mapping(new.get("status"))
    if not _same_but(before, after, _CONDITIONS):
        return False
    if _not_waiting_words(before) != _not_waiting_words(after):
        return False
    if not _same_but(meta(old), meta(new), _EVERY_WRITE):
        return False
    # Above metadata and status, a field absent and a field null are the same.
    for k, v in old.items():
        if k not in _TOP and new.get(k) != v:
            return False
    return all(k in _TOP or k in old or v is None for k, v in new.items())


def is_admitted(workload: Mapping[str, Any] | None) -> bool:
    # As admission_of(...) is not None, without its copy (a few times per watch event).
    admission = as_mapping((workload or {}).get("status")).get("admission")
    return bool(admission) and isinstance(admission, Mapping)


def is_finished(workload: Mapping[str, Any] | None) -> bool:
    return is_true(workload, "Finished")


def is_evicted(workload: Mapping[str, Any] | None) -> bool:
    """Evicted (preempted): its pods are going and its admission is taken back after them."""
    return is_true(workload, "Evicted")


def workload_of_pod(pod: Mapping[str, Any]) -> str | None:
    """namespace/name of the Workload a marked pod belongs to."""
    name = annotations_of(pod).get(c.WORKLOAD_ANNOTATION)
    if not name or c.PODSET_LABEL not in labels_of(pod):
        return None
    return f"{meta(pod).get('namespace') or 'default'}/{name}"


def owner_job(workload: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, namespace/name) of the registered job kind that owns a Workload (a pod
    group's Workload, owned by its pods, is keyed by its own name)."""
    m = meta(workload)
    if annotations_of(workload).get(c.IS_GROUP_WORKLOAD) == "true":
        return POD_GROUP.kind, f"{m.get('namespace') or 'default'}/{m.get('name')}"
    refs = m.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") and job_kind(str(ref.get("kind"))):
            return str(ref["kind"]), f"{m.get('namespace')}/{ref.get('name')}"
    return None


def gpu_assignment_of(workload: Mapping[str, Any], key: str) -> GpuAssignment:
    """The GPU sets an admitted Workload holds, from its annotation (a bad one is logged)."""
    text = annotations_of(workload).get(ASSIGNMENT_ANNOTATION)
    if not text:
        return {}
    try:
        return parse_assignment(str(text))
    except ValueError as error:
        log.warning("Workload %s: ignoring %s: %s", key, ASSIGNMENT_ANNOTATION, error)
        return {}
