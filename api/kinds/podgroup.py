"""Plain pod groups: pods of any controller (or none) admitted as one gang, written with
Kueue's labels (``pkg/controller/jobs/pod``): ``kueue.x-k8s.io/pod-group-name`` (a label)
names the group, ``kueue.x-k8s.io/pod-group-total-count`` (an annotation) says how many pods
it has, and every pod carries the queue label.

There is no object for the group: the controller's state composes one from the group's
pods (:func:`compose`) with the shape ``{"kind": "PodGroup", "metadata": ..., "pods": [...]}``,
and ``topogate plan`` does the same with the pods of a file. The Workload is named after the
group (as Kueue's) and owned by every pod. PodSets are the pods' roles, as Kueue's: pods
whose specs ask the same (requests, node selector, affinity, tolerations...) share a role
named by the first 8 hex digits of a SHA-256 of that shape (or by the pod's
``kueue.x-k8s.io/role-hash`` annotation), PodSets sorted by name. Topology annotations are
read from the pods' own metadata. A pod's rank is ``kueue.x-k8s.io/pod-group-pod-index``,
which the webhook copies from the label the pod's ``pod-group-pod-index-label`` names.

A queued pod in no group and with no controller is a group of one (Kueue admits a single
plain pod the same way): its Workload is ``pod-<name>-<hash>``.

The group is finished when ``total-count`` pods succeeded, or when none runs any more and a
pod says ``kueue.x-k8s.io/retriable-in-group: "false"`` (then "Failed" when one failed).

Kubernetes' own groups (`serve --native-gangs`): queued pods with no Kueue group that name a
``scheduling.k8s.io`` PodGroup (``spec.schedulingGroup.podGroupName``) are that group's
members, and its Workload is named after it. The PodGroup itself (watched by ``serve``) is
composed in as ``podGroup``: its ``spec.schedulingPolicy.gang.minCount`` is the group's size
(the total count), and its ``spec.schedulingConstraints.topology[0].key`` the required level of
every PodSet (several PodSets share one domain, as the group must). Until it exists the group
is not ready.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..constants import (
    GROUP,
    GROUP_NAME,
    IS_GROUP_WORKLOAD,
    KUEUE_GROUP,
    NATIVE_MEMBER_LABEL,
    POD_GROUP_NAME,
    POD_GROUP_POD_INDEX,
    POD_GROUP_POD_INDEX_LABEL,
    POD_GROUP_RETRIABLE,
    POD_GROUP_ROLE_HASH,
    POD_GROUP_TOTAL_COUNT,
    PODSET_LABEL,
    QUEUE_LABELS,
    REQUIRED_TOPOLOGY,
    REQUIRED_TOPOLOGY_FROM,
    WORKLOAD_ANNOTATION,
)
from ..errors import InputError
from ..models import PodSet
from .base import Gated, Obj, PodMarks, annotations_of, as_map, queue_name
from .reading import podset

KIND = "PodGroup"


def kueue_group_name(pod: Mapping[str, Any]) -> str | None:
    """The Kueue group a pod says it belongs to (the label, or Kueue's annotation form)."""
    meta = as_map(pod.get("metadata"))
    for where in ("labels", "annotations"):
        value = as_map(meta.get(where)).get(POD_GROUP_NAME)
        if isinstance(value, str) and value:
            return value
    return None


def native_group_name(pod: Mapping[str, Any]) -> str | None:
    """The ``scheduling.k8s.io`` PodGroup a queued pod of no Kueue group names itself
    (``spec.schedulingGroup.podGroupName``); once marked, only a pod the webhook marked as
    such a member (not a started job's pod, which joins the group topogate writes)."""
    name = as_map(as_map(pod.get("spec")).get("schedulingGroup")).get("podGroupName")
    if not isinstance(name, str) or not name or queue_name(pod) is None:
        return None
    if kueue_group_name(pod) is not None:
        return None
    marked = annotations_of(pod).get(WORKLOAD_ANNOTATION)
    if marked is None:
        return name  # not marked yet: the webhook is looking at it
    labels = as_map(as_map(pod.get("metadata")).get("labels"))
    return name if marked == name and labels.get(NATIVE_MEMBER_LABEL) == "true" else None


def is_native_member(pod: Mapping[str, Any]) -> bool:
    """A queued pod that belongs to the PodGroup it names (no Kueue group)."""
    return native_group_name(pod) is not None


def group_name(pod: Mapping[str, Any]) -> str | None:
    """The group a pod belongs to: Kueue's, else the native PodGroup it names."""
    return kueue_group_name(pod) or native_group_name(pod)


def single_pod_workload(name: str) -> str:
    """The Workload of a queued pod in no group (Kueue's ``pod-<name>-<hash>``; the hash is of
    the name, as the webhook that names it knows no uid)."""
    digest = hashlib.sha256(f"Pod\n{name}".encode()).hexdigest()[:5]
    return f"pod-{name}"[:57].rstrip(".-") + f"-{digest}"


def single(pod: Mapping[str, Any]) -> bool:
    """A queued pod of no group and no controller (Kueue admits it as a gang of one); one
    whose controller is a Job, StatefulSet... is that controller's business."""
    meta = as_map(pod.get("metadata"))
    refs = meta.get("ownerReferences")
    controlled = any(isinstance(r, Mapping) and r.get("controller") for r in refs or [])
    return group_name(pod) is None and not controlled and queue_name(pod) is not None


def workload_of_member(pod: Mapping[str, Any]) -> str | None:
    """The Workload a queued pod belongs to as a plain pod: its group's, or its own when it
    is a single pod with a name (a generated name is not known when the webhook sees it)."""
    name = group_name(pod)
    if name is not None:
        return name
    own = as_map(pod.get("metadata")).get("name")
    return single_pod_workload(own) if single(pod) and isinstance(own, str) and own else None


def role_hash(pod: Mapping[str, Any]) -> str:
    """The pod's role: Kueue's role-hash annotation, else a hash of what admission reads of
    its spec (Kueue's ``SpecShape``; the digits are not Kueue's byte for byte, its JSON
    encoder differs)."""
    given = annotations_of(pod).get(POD_GROUP_ROLE_HASH)
    if isinstance(given, str) and given:
        return given
    spec = as_map(pod.get("spec"))

    def containers(key: str) -> list[Any]:
        items = spec.get(key)
        out = []
        for container in items if isinstance(items, list) else []:
            resources = as_map(as_map(container).get("resources"))
            # Requests as the API server defaults them (from limits), so that a file read by
            # `plan` has the roles the created pods will have.
            requests = {**as_map(resources.get("limits")), **as_map(resources.get("requests"))}
            out.append({"requests": requests})
        return out

    shape = {
        "initContainers": containers("initContainers"),
        "containers": containers("containers"),
        **{
            k: spec.get(k)
            for k in (
                "nodeSelector",
                "affinity",
                "tolerations",
                "runtimeClassName",
                "priority",
                "topologySpreadConstraints",
                "overhead",
                "resourceClaims",
            )
        },
    }
    if spec.get("resources") is not None:
        shape["resources"] = as_map(spec.get("resources")).get("requests")
    text = json.dumps({"spec": shape}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def role(pod: Mapping[str, Any]) -> str:
    """The PodSet of a group's pod: the one the webhook marked it with, else its role hash."""
    value = as_map(as_map(pod.get("metadata")).get("labels")).get(PODSET_LABEL)
    return value if isinstance(value, str) and value else role_hash(pod)


def runnable(pod: Mapping[str, Any]) -> bool:
    """Kueue's isPodRunnableOrSucceeded: not failed, and not deleted before it was bound."""
    meta, spec = as_map(pod.get("metadata")), as_map(pod.get("spec"))
    if meta.get("deletionTimestamp") and not spec.get("nodeName"):
        return False
    return as_map(pod.get("status")).get("phase") != "Failed"


def compose(
    namespace: str,
    name: str,
    pods: Sequence[Mapping[str, Any]],
    native: Mapping[str, Any] | None = None,
) -> Obj:
    """The group object of ``pods`` (those marked with the group's Workload), sorted by name;
    its labels and annotations are the first pod's queue label and total count. ``native``:
    the ``scheduling.k8s.io`` PodGroup of that name, when its pods name one (``podGroup``)."""
    ordered = sorted(pods, key=lambda p: str(as_map(p.get("metadata")).get("name")))
    first = as_map(ordered[0].get("metadata")) if ordered else {}
    labels = {k: v for k, v in as_map(first.get("labels")).items() if k in QUEUE_LABELS}
    annotations = {
        k: v
        for k, v in as_map(first.get("annotations")).items()
        if k in (POD_GROUP_TOTAL_COUNT, POD_GROUP_RETRIABLE)
    }
    versions = ",".join(str(as_map(p.get("metadata")).get("resourceVersion")) for p in ordered)
    if native is not None:
        versions += f";{as_map(native.get('metadata')).get('resourceVersion')}"
    out: Obj = {
        "apiVersion": "v1",
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": name,
            "labels": labels,
            "annotations": annotations,
            # Changes whenever a pod does: a group refused once is read again then.
            "resourceVersion": hashlib.sha256(versions.encode()).hexdigest()[:16],
        },
        "pods": [dict(p) for p in ordered],
    }
    if native is not None:
        out["podGroup"] = dict(native)
    return out


def is_native(group: Mapping[str, Any]) -> bool:
    """The group is a ``scheduling.k8s.io`` PodGroup's: its pods name it."""
    pods = group.get("pods")
    members = [p for p in (pods if isinstance(pods, list) else []) if isinstance(p, Mapping)]
    name = as_map(group.get("metadata")).get("name")
    return bool(members and name) and native_group_name(members[0]) == name


NATIVE_MIN_COUNT = "spec.schedulingPolicy.gang.minCount"
NATIVE_TOPOLOGY = "spec.schedulingConstraints.topology[0].key"


def _native_where(group: Mapping[str, Any]) -> str:
    m = as_map(group.get("metadata"))
    return f"PodGroup {m.get('namespace') or 'default'}/{m.get('name')} (scheduling.k8s.io)"


def native_gang(group: Mapping[str, Any]) -> tuple[int, str | None]:
    """(minCount, topology key or None) of a native group's PodGroup; InputError names the
    PodGroup and the field when it is no gang topogate can queue."""
    where = _native_where(group)
    if group.get("podGroup") is None:
        raise InputError("Not found: its pods name this PodGroup, which is not known", where=where)
    native = as_map(group.get("podGroup"))
    spec = as_map(native.get("spec"))
    policy = as_map(spec.get("schedulingPolicy"))
    gang = policy.get("gang")
    if not isinstance(gang, Mapping):
        raise InputError(
            "Required value: topogate queues a PodGroup as one gang; set "
            f"{NATIVE_MIN_COUNT} (its policy is {sorted(policy) or 'empty'})",
            where=where,
            field="spec.schedulingPolicy.gang",
        )
    count = gang.get("minCount")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise InputError(
            f"Invalid value: {count!r}: must be an integer above 0",
            where=where,
            field=NATIVE_MIN_COUNT,
        )
    constraints = as_map(spec.get("schedulingConstraints")).get("topology")
    keys = [as_map(t).get("key") for t in constraints] if isinstance(constraints, list) else []
    if len(keys) > 1:
        raise InputError(
            f"Invalid value: {len(keys)} constraints; one topology key is read",
            where=where,
            field="spec.schedulingConstraints.topology",
        )
    key = keys[0] if keys else None
    if key is not None and (not isinstance(key, str) or not key):
        raise InputError(
            f"Invalid value: {key!r}: must be a node-label key", where=where, field=NATIVE_TOPOLOGY
        )
    return count, key


def _where_pod(pod: Mapping[str, Any]) -> str:
    return f"pods[{as_map(pod.get('metadata')).get('name')}]"


def total_count(group: Mapping[str, Any], where: str) -> int:
    """The group's ``pod-group-total-count``: the same positive integer on every pod (a native
    group's: its PodGroup's ``minCount``)."""
    if is_native(group):
        return native_gang(group)[0]
    pods = group.get("pods")
    members = [p for p in (pods if isinstance(pods, list) else []) if isinstance(p, Mapping)]
    if len(members) == 1 and single(members[0]):
        return 1  # a single pod: a group of one
    values = {str(annotations_of(p).get(POD_GROUP_TOTAL_COUNT)) for p in members}
    first = next(iter(sorted(values)), "None")
    field = f"metadata.annotations[{POD_GROUP_TOTAL_COUNT}]"
    if len(values) > 1:
        raise InputError(
            f"Invalid value: the group's pods say {', '.join(sorted(values))}; every pod must "
            "say the same",
            where=where,
            field=field,
        )
    if first == "None":
        raise InputError("Required value: how many pods the group has", where=where, field=field)
    if not first.isascii() or not first.isdigit() or int(first) < 1:
        raise InputError(
            f"Invalid value: {first!r}: must be an integer above 0", where=where, field=field
        )
    return int(first)


def _native_annotations(
    group: Mapping[str, Any], key: str | None, meta: Mapping[str, Any], roles: int, path: str
) -> dict[str, Any]:
    """A native group's pod annotations with its PodGroup's topology key as the required
    level (Kueue's annotation, its field named as the PodGroup's in messages) and, for several
    roles, one PodSet group: the scheduler wants the whole PodGroup in one domain."""
    annotations = dict(as_map(meta.get("annotations")))
    if key is None:
        return annotations
    field = f"{_native_where(group)} {NATIVE_TOPOLOGY}"
    for prefix in (f"{GROUP}/", f"{KUEUE_GROUP}/"):
        said = annotations.get(prefix + REQUIRED_TOPOLOGY)
        if said is not None and said != key:
            raise InputError(
                f"Invalid value: {said!r}: the pods' PodGroup says {key!r} ({NATIVE_TOPOLOGY}); "
                "set it in one place",
                where=_native_where(group),
                field=f"{path}.metadata.annotations[{prefix + REQUIRED_TOPOLOGY}]",
            )
    annotations[f"{KUEUE_GROUP}/{REQUIRED_TOPOLOGY}"] = key
    annotations[REQUIRED_TOPOLOGY_FROM] = field
    if roles > 1:
        annotations.setdefault(
            f"{KUEUE_GROUP}/{GROUP_NAME}", str(as_map(group.get("metadata")).get("name"))
        )
    return annotations


class PodGroupKind(Gated):
    kind = KIND
    group = ""
    version = "v1"
    plural = "pods"
    custom_resource = False
    composed = True
    template_pattern = "pods[*]"
    pod_index_label = POD_GROUP_POD_INDEX

    @property
    def template_annotations_hint(self) -> str:
        return "each pod's metadata.annotations"

    def _members(self, group: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        pods = group.get("pods")
        return [p for p in (pods if isinstance(pods, list) else []) if isinstance(p, Mapping)]

    def not_ready(self, job: Mapping[str, Any]) -> str | None:
        where = f"PodGroup {as_map(job.get('metadata')).get('name')}"
        if is_native(job) and job.get("podGroup") is None:
            return f"its pods name {_native_where(job)}, which does not exist yet"
        active = [p for p in self._members(job) if runnable(p)]
        try:
            total = total_count(job, where)
        except InputError:
            return None  # podsets() names the problem
        if len(active) < total:
            return f"{len(active)} of its {total} pods exist"
        return None

    def podsets(self, obj: Mapping[str, Any], where: str) -> list[tuple[PodSet, str]]:
        members = self._members(obj)
        if not members:
            raise InputError("has no pods", where=where)
        total = total_count(obj, where)
        # As Kueue: the runnable pods, the excess beyond the total left out (newest last).
        active = [p for p in members if runnable(p)][:total]
        if len(active) < total:
            raise InputError(
                f"has {len(active)} runnable pod(s) of the {total} its "
                f"{POD_GROUP_TOTAL_COUNT} says; a group is admitted with all its pods",
                where=where,
            )
        roles: dict[str, list[Mapping[str, Any]]] = {}
        for pod in active:
            roles.setdefault(role(pod), []).append(pod)
        native = native_gang(obj) if is_native(obj) else None
        out = []
        for name in sorted(roles):
            pod = roles[name][0]
            path = _where_pod(pod)
            meta = as_map(pod.get("metadata"))
            kept = {k: meta[k] for k in ("labels", "annotations") if k in meta}
            if native is not None:
                kept["annotations"] = _native_annotations(obj, native[1], kept, len(roles), path)
            template = {"metadata": kept, "spec": pod.get("spec")}
            out.append((podset(name, len(roles[name]), template, where, path), path))
        return out

    def pod_templates(self, job: Obj) -> list[tuple[str, Obj]]:
        return [(role(p), p) for p in job.get("pods") or []]

    def template_fields(self, obj: Mapping[str, Any]) -> list[tuple[str, Any]]:
        return [(_where_pod(p), p) for p in self._members(obj)]

    # --- gated -------------------------------------------------------------------------------

    def groups(self, job: Mapping[str, Any]) -> list[str]:
        return [str(as_map(job.get("metadata")).get("name"))]

    def pod_marks(self, pod: Mapping[str, Any]) -> PodMarks | None:
        name = workload_of_member(pod)
        if name is None or queue_name(pod) is None:
            return None
        labels = as_map(as_map(pod.get("metadata")).get("labels"))
        extra: dict[str, str] = {}
        index_label = annotations_of(pod).get(POD_GROUP_POD_INDEX_LABEL)
        if isinstance(index_label, str) and isinstance(labels.get(index_label), str):
            extra[POD_GROUP_POD_INDEX] = labels[index_label]
        if is_native_member(pod):
            extra[NATIVE_MEMBER_LABEL] = "true"
        # A single pod's one PodSet is Kueue's default name, as for a single Pod in `plan`.
        return PodMarks(name, "main" if single(pod) else role_hash(pod), extra)

    def pod_owner(self, pod: Mapping[str, Any]) -> str | None:
        meta = as_map(pod.get("metadata"))
        name = workload_of_member(pod)
        if name is None or as_map(meta.get("annotations")).get(WORKLOAD_ANNOTATION) != name:
            return None
        return f"{meta.get('namespace') or 'default'}/{name}"

    def owner_references(self, job: Mapping[str, Any]) -> list[Obj]:
        """Every pod owns the Workload (none as its controller), as Kueue's: it goes when
        the last pod does."""
        return [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": as_map(p.get("metadata")).get("name"),
                "uid": as_map(p.get("metadata")).get("uid"),
            }
            for p in self._members(job)
        ]

    def event_target(self, job: Obj) -> Obj:
        """A group has no object of its own: its first pod (``kubectl describe`` shows it)."""
        members = self._members(job)
        return dict(members[0]) if members else job

    def check_pod(self, pod: Mapping[str, Any], where: str) -> None:
        """One member's own fields, as the validating webhook sees it being created (the
        group is checked whole when its Workload is made): its total count, and the topology
        keys on its metadata (InputError names the field)."""
        # A native group's size is its PodGroup's, read when the group is composed.
        total = 1 if is_native_member(pod) else total_count({"pods": [pod]}, where)
        meta = as_map(pod.get("metadata"))
        template = {"metadata": {"annotations": meta.get("annotations") or {}}, "spec": {}}
        podset(role(pod), total, template, where, "")

    def group_finished(self, job: Mapping[str, Any], pods: list[Obj]) -> str | None:
        members = self._members(job) or pods
        if len(members) == 1 and single(members[0]):  # Kueue: a single pod ends with its phase
            phase = as_map(members[0].get("status")).get("phase")
            return str(phase) if phase in ("Succeeded", "Failed") else None
        try:
            total = total_count(job, "")
        except InputError:
            return None
        phases = [as_map(p.get("status")).get("phase") for p in members]
        if phases.count("Succeeded") >= total:
            return "Succeeded"
        ended = all(ph in ("Succeeded", "Failed") for ph in phases)
        unretriable = any(annotations_of(p).get(POD_GROUP_RETRIABLE) == "false" for p in members)
        if members and ended and unretriable:
            return "Failed" if "Failed" in phases else "Succeeded"
        return None


POD_GROUP = PodGroupKind()

__all__ = [
    "IS_GROUP_WORKLOAD",
    "KIND",
    "POD_GROUP",
    "compose",
    "group_name",
    "is_native",
    "is_native_member",
    "native_group_name",
    "role_hash",
]
