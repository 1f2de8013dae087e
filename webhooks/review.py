"""AdmissionReview handling, pure: a review in, a response out (no I/O, no server).

Mutating:
- a job of a registered kind (``api/kinds``: batch/v1 Job, JobSet) created with a queue
  label is suspended, so nothing runs before topogate has placed the whole gang; a kind with
  no suspend switch (LeaderWorkerSet) gets its pod templates marked instead;
- a queued Pod of a gated kind (a pod group's member, a LeaderWorkerSet's pod) gets the gate
  and its group's Workload and PodSet, so it waits until its group is admitted;
- a Pod of an admitted topology workload (it carries the ``topogate.dev/podset`` label the
  job sync puts on the pod templates when it starts an admitted job) gets the scheduling gate
  ``topogate.dev/topology`` and the workload/podset marks, so it waits for the ungater.

Validating: topology annotations on queued jobs (the same rules as ``topogate plan``; levels
checked against the topology the admitter would choose, when the view knows the queue),
HyperNodes, and Topology, ResourceFlavor and ClusterQueue objects. Every refusal names the
object and the field.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from topogate.admission.podsets import Catalog, annotation_field, queue_topology
from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.hypernodes import NODE, HyperNode, parse_hypernode
from topogate.api.jobs import workload_from_object
from topogate.api.keywarnings import key_warnings
from topogate.api.kinds import (
    JOB_KINDS,
    POD_GROUP,
    Gated,
    Lookup,
    PartialAdmission,
    PodMarks,
    Referring,
    Suspendable,
    gated_pod,
    job_kind,
    pod_podset,
    queue_name,
)
from topogate.api.kinds.podgroup import is_native_member
from topogate.api.models import ClusterQueue, PodSet, ResourceFlavor, Topology
from topogate.api.objects import annotations_of, as_mapping, labels_of
from topogate.api.podgroups import podgroup_name
from topogate.api.validation import object_name, parse_model
from topogate.cache.hypernodes import build_forest, missing_member_problem
from topogate.cache.nodes import NodeInfo
from topogate.cache.sources import TopologySource


class ClusterView(Protocol):
    """What validation may ask about the cluster. In `serve` the controller's state answers
    (no API call per review); the standalone webhook asks the API server."""

    def catalog_for(self, namespace: str, queue: str) -> Catalog | None:
        """Queues, flavors and topologies covering that LocalQueue, or None when unknown."""

    def hypernodes(self) -> list[Mapping[str, Any]] | None:
        """The HyperNodes that exist now, or None when unknown."""


@runtime_checkable
class ObjectView(Protocol):
    """A view that also holds the other objects jobs read (a TrainJob's runtime): `serve`'s
    state. A view without it knows none, and such a job's PodSets are left to the
    controller, which reports them."""

    def read_objects(self) -> Lookup:
        """The lookup of those objects (``api.kinds.Lookup``)."""


class NoView:
    def catalog_for(self, namespace: str, queue: str) -> Catalog | None:
        return None

    def hypernodes(self) -> list[Mapping[str, Any]] | None:
        return None


@dataclass(frozen=True, slots=True)
class Review:
    """The parts of an AdmissionReview request the handlers read."""

    uid: str
    kind: str
    group: str
    operation: str
    namespace: str
    obj: Mapping[str, Any]
    dry_run: bool
    old: Mapping[str, Any] | None = None  # the object before an UPDATE

    @classmethod
    def parse(cls, body: Any) -> Review:
        """Raise ValueError (a 400 for the server) when the body is not an AdmissionReview."""
        if not isinstance(body, dict) or body.get("kind") != "AdmissionReview":
            raise ValueError("body is not an AdmissionReview")
        if body.get("apiVersion") != "admission.k8s.io/v1":
            raise ValueError("only admission.k8s.io/v1 AdmissionReview is served")
        request = body.get("request")
        if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
            raise ValueError("request.uid is missing")
        kind = request.get("kind") or {}
        obj = request.get("object") or {}
        if not isinstance(kind, dict) or not isinstance(obj, dict):
            raise ValueError("request.kind and request.object must be objects")
        _check_metadata(obj.get("metadata"))
        old = request.get("oldObject")
        return cls(
            uid=request["uid"],
            kind=str(kind.get("kind", "")),
            group=str(kind.get("group", "")),
            operation=str(request.get("operation", "")),
            namespace=str(request.get("namespace") or ""),
            obj=obj,
            dry_run=bool(request.get("dryRun")),
            old=old if isinstance(old, dict) else None,
        )


def _check_metadata(metadata: Any) -> None:
    """ObjectMeta's shape, which every handler relies on: a loose CRD schema lets anything
    through the API server, and such a review is a 400 naming the field, never a crash."""
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise ValueError("request.object.metadata must be an object")
    for name in ("labels", "annotations"):
        value = metadata.get(name)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ValueError(f"request.object.metadata.{name} must map strings to strings")
    for name in ("name", "namespace", "generateName"):
        if metadata.get(name) is not None and not isinstance(metadata.get(name), str):
            raise ValueError(f"request.object.metadata.{name} must be a string")


def response(
    uid: str,
    allowed: bool = True,
    message: str = "",
    patch: list[Any] | None = None,
    code: int = 403,
    warnings: list[str] | None = None,
) -> dict[str, Any]:
    """An AdmissionReview v1 response (the uid echoed); ``warnings`` reach the client as
    ``Warning`` headers (kubectl prints them)."""
    answer: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if warnings:
        answer["warnings"] = within_limits(warnings)
    if not allowed:
        answer["status"] = {
            "code": code,
            "message": message,
            "reason": "Invalid" if code == 422 else "Forbidden",
        }
    if patch:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}


def allow_or_deny(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` with nothing beyond the verdict (and a mutation's patch, which only restates
    the request): no message, reason or warnings, which could name queues' topologies and
    levels to a client that has not authenticated."""
    given = answer["response"]
    kept = {k: given[k] for k in ("uid", "allowed", "patchType", "patch") if k in given}
    return {**answer, "response": kept}


# The API server truncates a warning beyond 256 characters and drops those past 4096 in all.
WARNING_LIMIT, WARNINGS_TOTAL = 256, 4096


def within_limits(warnings: list[str]) -> list[str]:
    """The warnings the API server will pass on whole; the rest are counted in a last one."""
    kept: list[str] = []
    total = 0
    for i, warning in enumerate(warnings):
        line = warning if len(warning) <= WARNING_LIMIT else warning[: WARNING_LIMIT - 3] + "..."
        rest = len(warnings) - i
        if total + len(line) + 80 > WARNINGS_TOTAL and rest > 1:
            kept.append(f"and {rest} more warning(s); `topogate plan` lists them all")
            break
        kept.append(line)
        total += len(line)
    return kept


def _pointer(*parts: str) -> str:
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


# --- mutation -------------------------------------------------------------------------------


def _gate_pod(
    obj: Mapping[str, Any], marks: PodMarks | None = None, native_gangs: bool = False
) -> list[dict[str, Any]]:
    """Gate a pod and mark it with its Workload and PodSet: from the marks of its gated kind
    (``marks``), else from what its job's template gave it. With ``native_gangs`` it also
    joins its Workload's PodGroup (:func:`podgroup_name`), written on admission."""
    labels = labels_of(obj)
    annotations = annotations_of(obj)
    spec = as_mapping(obj.get("spec"))
    patch: list[dict[str, Any]] = []
    podset = (
        labels.get(c.PODSET_LABEL)
        or (marks.podset if marks else None)
        or pod_podset(labels)
        or "main"
    )
    wanted = {c.PODSET_LABEL: podset, **(marks.labels if marks else {})}
    missing = {k: v for k, v in wanted.items() if k not in labels}
    if not labels:
        patch.append({"op": "add", "path": "/metadata/labels", "value": missing})
    else:
        patch.extend(
            {"op": "add", "path": _pointer("metadata", "labels", k), "value": v}
            for k, v in missing.items()
        )
    workload = (
        annotations.get(c.WORKLOAD_ANNOTATION)
        or (marks.workload if marks else None)
        or annotations.get(f"{c.KUEUE_GROUP}/workload")
    )
    if workload and c.WORKLOAD_ANNOTATION not in annotations:
        if not annotations:
            patch.append(
                {
                    "op": "add",
                    "path": "/metadata/annotations",
                    "value": {c.WORKLOAD_ANNOTATION: workload},
                }
            )
        else:
            patch.append(
                {
                    "op": "add",
                    "path": _pointer("metadata", "annotations", c.WORKLOAD_ANNOTATION),
                    "value": workload,
                }
            )
    gates = spec.get("schedulingGates") or []
    if not isinstance(gates, list):
        gates = []  # not a list: the API server refuses the pod itself
    if spec.get("nodeName"):
        return patch  # already bound (a gate would be refused): nothing to hold back
    if native_gangs and workload and "schedulingGroup" not in spec:
        # Only at creation (the field is immutable); a group the pod names itself is kept.
        group = {"podGroupName": podgroup_name(workload)}
        patch.append({"op": "add", "path": "/spec/schedulingGroup", "value": group})
    if not any(isinstance(g, dict) and g.get("name") == c.TOPOLOGY_GATE for g in gates):
        if gates:
            patch.append(
                {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": c.TOPOLOGY_GATE}}
            )
        else:
            patch.append(
                {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": c.TOPOLOGY_GATE}]}
            )
    return patch


def mutate(review: Review, native_gangs: bool = False) -> dict[str, Any]:
    """A queued job suspended (or its templates marked), a marked pod gated; with
    ``native_gangs`` the pod also joins its Workload's PodGroup, and a queued pod naming a
    PodGroup of its own is gated as a member of that group."""
    if review.operation != "CREATE":
        return response(review.uid)
    patch: list[dict[str, Any]] = []
    kind = job_kind(review.kind)
    if kind is not None and queue_name(review.obj):
        if isinstance(kind, Suspendable):
            patch = kind.suspend_on_create(review.obj)
        elif isinstance(kind, Gated):  # held back by the gate on its pods instead
            patch = kind.create_patch(review.obj)
    elif review.kind == "Pod" and review.group == "":
        member = gated_pod(review.obj)
        if member is not None and not native_gangs and is_native_member(review.obj):
            member = None  # a user's PodGroup is queued only with native gangs on
        if member is not None:
            patch = _gate_pod(review.obj, member[1], native_gangs)
        elif c.PODSET_LABEL in labels_of(review.obj):
            patch = _gate_pod(review.obj, native_gangs=native_gangs)
    return response(review.uid, patch=patch)


# --- validation -----------------------------------------------------------------------------


def _check_model(model: type[BaseModel]) -> Callable[[Review, ClusterView], None]:
    def check(review: Review, view: ClusterView) -> None:
        parse_model(model, review.obj, object_name(review.obj))

    return check


def _check_job(review: Review, view: ClusterView) -> None:
    """The job's own rules (as `plan` reads it), then its Kueue levels against the topology
    its queue gives it (:func:`queue_topology`, as the admitter decides)."""
    queue = queue_name(review.obj)
    kind = job_kind(review.kind)
    if queue is None or kind is None:
        return
    obj = dict(review.obj)
    obj.setdefault("apiVersion", kind.api_version)
    obj.setdefault("kind", kind.kind)
    if isinstance(kind, Referring):
        if not isinstance(view, ObjectView):
            return  # its runtime is unknown here: the job sync reports what is wrong
        source = workload_from_object(obj, lookup=view.read_objects())
    else:
        source = workload_from_object(obj, check_min_range=_min_parallelism_changed(review))
    _check_running_parallelism(review, source.where)
    if isinstance(kind, Gated) and review.operation == "UPDATE" and review.old is not None:
        kind.check_update(review.old, review.obj, source.where)
    catalog = view.catalog_for(review.namespace, queue)
    cluster_queue = catalog.cluster_queue(review.namespace, queue)[0] if catalog else None
    if catalog is None or cluster_queue is None:
        return  # unknown here: the admitter reports it as the workload's Pending message
    try:
        topology = queue_topology(source, catalog, cluster_queue).source
    except InputError:
        return  # KAI/Volcano words are checked by the admitter against the topology
    if topology is None:
        return
    for podset in source.workload.spec.pod_sets:
        path = source.template_paths[podset.name]
        _check_kueue_levels(podset, path, topology, queue, source.where)


def _check_group_pod(review: Review, view: ClusterView) -> None:
    """A queued pod group member's own count and topology keys, refused as a Job's are (its
    group is read whole when all its pods exist)."""
    if review.operation != "CREATE" or POD_GROUP.pod_marks(review.obj) is None:
        return
    POD_GROUP.check_pod(review.obj, object_name({**review.obj, "kind": "Pod"}))


def _min_parallelism_changed(review: Review) -> bool:
    """As Kueue's Job webhook: the range of ``job-min-parallelism`` is checked when a Job is
    created or the annotation changes, not when the job sync sets the admitted parallelism."""
    if review.operation != "UPDATE" or review.old is None:
        return True
    kind = job_kind(review.kind)
    return not isinstance(kind, PartialAdmission) or kind.min_count_changed(review.old, review.obj)


def _check_running_parallelism(review: Review, where: str) -> None:
    """Kueue's Job webhook: a running Job that accepts partial admission keeps the
    parallelism it was admitted with (it is changed only while suspended)."""
    kind = job_kind(review.kind)
    if review.operation != "UPDATE" or review.old is None or not isinstance(kind, PartialAdmission):
        return
    kind.check_running_update(review.old, review.obj, where)


def _check_kueue_levels(
    podset: PodSet, path: str, topology: TopologySource, queue: str, where: str
) -> None:
    """Kueue's level names only, in the webhook's own words (they name the queue): a wrong
    KAI or Volcano word, or a slice below its level, is left to the admitter to report."""
    request = podset.topology_request
    if request is None:
        return
    wanted = [
        (c.REQUIRED_TOPOLOGY, request.required),
        (c.PREFERRED_TOPOLOGY, request.preferred),
        (c.SLICE_REQUIRED_TOPOLOGY, request.pod_set_slice_required_topology),
    ] + [
        (c.SLICE_CONSTRAINTS, layer.topology)
        for layer in request.podset_slice_required_topology_constraints or []
    ]
    for name, level in wanted:
        if level and topology.level_index(level) is None:
            raise InputError(
                f"{level!r} is not a level of topology {topology.name!r} used by queue "
                f"{queue!r} (levels: {', '.join(topology.level_keys)})",
                where=where,
                field=annotation_field(podset.template, path, name),
            )


def _check_hypernode(review: Review, view: ClusterView) -> None:
    """The object alone, then the tree it would join: no cycle, one parent, tiers in order.

    Structure is checked against the HyperNodes that exist (members by exact name); nodes
    picked by regex or labels can only be checked by the controller, which reports them.
    """
    hypernode = parse_hypernode(review.obj)
    where = f"HyperNode {hypernode.name}"
    existing = view.hypernodes()
    if existing is None:
        return
    stored: list[HyperNode] = []  # as they are now, this object's stored version included
    for obj in existing:
        try:
            stored.append(parse_hypernode(obj))
        except InputError:
            continue  # an older bad object is not this request's fault
    after_change = [h for h in stored if h.name != hypernode.name] + [hypernode]
    exact_nodes = {
        member.exact
        for item in [*stored, hypernode]
        for member in item.members
        if member.type == NODE and member.exact
    }
    nodes = [NodeInfo(name) for name in sorted(exact_nodes)]
    before = build_forest(stored, nodes).problems
    forest = build_forest(after_change, nodes)
    # A member HyperNode that does not exist yet is pending, not wrong: `kubectl apply -f`
    # creates a directory's objects in name order, parents possibly first.
    pending = {
        (parent, missing_member_problem(member))
        for parent, members in forest.missing_members.items()
        for member in members
    }
    introduced = [
        f"{name}: {problem}" if name != hypernode.name else problem
        for name, problems in sorted(forest.problems.items())
        for problem in problems
        if problem not in before.get(name, []) and (name, problem) not in pending
    ]
    if introduced:
        raise InputError("; ".join(introduced), where=where)


_VALIDATORS: dict[tuple[str, str], Callable[[Review, ClusterView], None]] = {
    ("topology.volcano.sh", "HyperNode"): _check_hypernode,
    **{(kind.group, kind.kind): _check_job for kind in JOB_KINDS},
    ("", "Pod"): _check_group_pod,
    (c.GROUP, "Topology"): _check_model(Topology),
    (c.GROUP, "ResourceFlavor"): _check_model(ResourceFlavor),
    (c.GROUP, "ClusterQueue"): _check_model(ClusterQueue),
    (c.KUEUE_GROUP, "Topology"): _check_model(Topology),
    (c.KUEUE_GROUP, "ResourceFlavor"): _check_model(ResourceFlavor),
}


def validate(review: Review, view: ClusterView | None = None) -> dict[str, Any]:
    if review.operation not in ("CREATE", "UPDATE"):
        return response(review.uid)
    check = _VALIDATORS.get((review.group, review.kind))
    if check is None:
        return response(review.uid)
    # Keys topogate would ignore are said on every answer, a refusal included.
    kind = job_kind(review.kind)
    is_pod = review.kind == "Pod" and review.group == ""
    read = is_pod or (kind is not None and kind.group == review.group)
    warnings = key_warnings(review.obj) if read else []
    try:
        check(review, view or NoView())
    except InputError as error:
        return response(
            review.uid, allowed=False, message=error.describe(), code=422, warnings=warnings
        )
    except ValueError as error:  # a model refused a value the checks above let through
        where = object_name(review.obj)
        return response(
            review.uid, allowed=False, message=f"{where}: {error}", code=422, warnings=warnings
        )
    return response(review.uid, warnings=warnings)
