"""AdmissionReview handling, pure: a review in, a response out (no I/O, no server).

Mutating:
- a batch/v1 Job or JobSet created with a queue label is suspended, so nothing runs before
  topogate has placed the whole gang;
- a Pod of an admitted topology workload (it carries the ``topogate.dev/podset`` label the
  admitter puts on the pod template) gets the scheduling gate ``topogate.dev/topology`` and
  the workload/podset marks, so it waits for the ungater.

Validating: topology annotations on queued Jobs/JobSets (the same rules as ``topogate plan``,
levels checked against the queue's topology when the catalog knows it), and Topology,
ResourceFlavor and ClusterQueue objects. Every refusal names the object and the field.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel

from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.hypernodes import NODE, HyperNode, parse_hypernode
from topogate.api.jobs import workload_from_object
from topogate.api.models import ClusterQueue, ResourceFlavor, Topology
from topogate.api.validation import join, object_name, parse_model
from topogate.cache.hypernodes import build_forest, missing_member_problem
from topogate.cache.nodes import NodeInfo

QUEUE_LABELS = c.QUEUE_LABELS
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"


class Catalog(Protocol):
    """What validation may ask about the cluster: a queue's topology levels, if known."""

    def queue_levels(self, namespace: str, queue: str) -> tuple[str, list[str]] | None:
        """(topology name, levels) for the LocalQueue's flavor, or None when unknown."""

    def hypernodes(self) -> list[Mapping[str, Any]] | None:
        """The HyperNodes that exist now, or None when unknown."""


class NoCatalog:
    def queue_levels(self, namespace: str, queue: str) -> tuple[str, list[str]] | None:
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
        return cls(
            uid=request["uid"],
            kind=str(kind.get("kind", "")),
            group=str(kind.get("group", "")),
            operation=str(request.get("operation", "")),
            namespace=str(request.get("namespace") or ""),
            obj=obj,
            dry_run=bool(request.get("dryRun")),
        )


def response(
    uid: str,
    allowed: bool = True,
    message: str = "",
    patch: list[Any] | None = None,
    code: int = 403,
) -> dict[str, Any]:
    """An AdmissionReview v1 response (the uid echoed)."""
    answer: dict[str, Any] = {"uid": uid, "allowed": allowed}
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


def _pointer(*parts: str) -> str:
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def _queue(obj: Mapping[str, Any]) -> str | None:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for key in QUEUE_LABELS:
        if labels.get(key):
            return str(labels[key])
    return None


# --- mutation -------------------------------------------------------------------------------


def _suspend(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec")
    if not isinstance(spec, dict) or spec.get("suspend") is True:
        return []
    return [{"op": "add", "path": "/spec/suspend", "value": True}]


def _gate_pod(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    spec = obj.get("spec") or {}
    patch: list[dict[str, Any]] = []
    podset = labels.get(c.PODSET_LABEL) or labels.get(JOBSET_REPLICATED_JOB) or "main"
    if not labels:
        patch.append({"op": "add", "path": "/metadata/labels", "value": {c.PODSET_LABEL: podset}})
    elif c.PODSET_LABEL not in labels:
        patch.append(
            {"op": "add", "path": _pointer("metadata", "labels", c.PODSET_LABEL), "value": podset}
        )
    workload = annotations.get(c.WORKLOAD_ANNOTATION) or annotations.get(
        f"{c.KUEUE_GROUP}/workload"
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
    if spec.get("nodeName"):
        return patch  # already bound (a gate would be refused): nothing to hold back
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


def mutate(review: Review) -> dict[str, Any]:
    if review.operation != "CREATE":
        return response(review.uid)
    patch: list[dict[str, Any]] = []
    if review.kind in ("Job", "JobSet") and _queue(review.obj):
        patch = _suspend(review.obj)
    elif review.kind == "Pod" and review.group == "":
        patch = _gate_pod(review.obj)
    return response(review.uid, patch=patch)


# --- validation -----------------------------------------------------------------------------


def _check_model(model: type[BaseModel]) -> Callable[[Review, Catalog], None]:
    def check(review: Review, catalog: Catalog) -> None:
        parse_model(model, review.obj, object_name(review.obj))

    return check


def _check_job(review: Review, catalog: Catalog) -> None:
    queue = _queue(review.obj)
    if queue is None:
        return
    obj = dict(review.obj)
    obj.setdefault("apiVersion", "batch/v1" if review.kind == "Job" else "jobset.x-k8s.io/v1alpha2")
    obj.setdefault("kind", review.kind)
    source = workload_from_object(obj)
    known = catalog.queue_levels(review.namespace, queue)
    if known is None:
        return
    topology_name, levels = known
    for podset in source.workload.spec.pod_sets:
        request = podset.topology_request
        if request is None:
            continue
        wanted = [
            (c.REQUIRED_TOPOLOGY, request.required),
            (c.PREFERRED_TOPOLOGY, request.preferred),
            (c.SLICE_REQUIRED_TOPOLOGY, request.pod_set_slice_required_topology),
        ] + [
            (c.SLICE_CONSTRAINTS, layer.topology)
            for layer in request.podset_slice_required_topology_constraints or []
        ]
        for name, level in wanted:
            if level and level not in levels:
                annotations = (podset.template.get("metadata") or {}).get("annotations") or {}
                key = next(
                    (p + name for p in c.ANNOTATION_PREFIXES if p + name in annotations),
                    c.KUEUE_GROUP + "/" + name,
                )
                path = join(source.template_paths[podset.name], "metadata.annotations")
                raise InputError(
                    f"{level!r} is not a level of topology {topology_name!r} used by queue "
                    f"{queue!r} (levels: {', '.join(levels)})",
                    where=source.where,
                    field=f"{path}[{key}]",
                )


def _check_hypernode(review: Review, catalog: Catalog) -> None:
    """The object alone, then the tree it would join: no cycle, one parent, tiers in order.

    Structure is checked against the HyperNodes that exist (members by exact name); nodes
    picked by regex or labels can only be checked by the controller, which reports them.
    """
    hypernode = parse_hypernode(review.obj)
    where = f"HyperNode {hypernode.name}"
    existing = catalog.hypernodes()
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


_VALIDATORS: dict[tuple[str, str], Callable[[Review, Catalog], None]] = {
    ("topology.volcano.sh", "HyperNode"): _check_hypernode,
    ("batch", "Job"): _check_job,
    ("jobset.x-k8s.io", "JobSet"): _check_job,
    (c.GROUP, "Topology"): _check_model(Topology),
    (c.GROUP, "ResourceFlavor"): _check_model(ResourceFlavor),
    (c.GROUP, "ClusterQueue"): _check_model(ClusterQueue),
    (c.KUEUE_GROUP, "Topology"): _check_model(Topology),
    (c.KUEUE_GROUP, "ResourceFlavor"): _check_model(ResourceFlavor),
}


def validate(review: Review, catalog: Catalog | None = None) -> dict[str, Any]:
    if review.operation not in ("CREATE", "UPDATE"):
        return response(review.uid)
    check = _VALIDATORS.get((review.group, review.kind))
    if check is None:
        return response(review.uid)
    try:
        check(review, catalog or NoCatalog())
    except InputError as error:
        return response(review.uid, allowed=False, message=error.describe(), code=422)
    return response(review.uid)
