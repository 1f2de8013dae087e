"""Slim records of Nodes and Pods: what capacity accounting needs, parsed from API objects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from topogate.api.errors import InputError
from topogate.api.gpus import ALLOCATION_ANNOTATION, Matrix, node_gpu_matrix, parse_allocation
from topogate.api.podspec import Taint, parse_taints, pod_requests
from topogate.api.quantity import QuantityError, to_units
from topogate.api.validation import object_name

PODS = "pods"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(slots=True)
class NodeInfo:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, int] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False
    # GPU i -> GPU j bandwidth in GB/s (api/gpus.py), or None; ``gpu_problem`` says why a
    # node's GPU annotation was not usable (the node itself still is).
    gpu_bandwidth: Matrix | None = None
    gpu_problem: str = ""


@dataclass(slots=True)
class PodUsage:
    """A bound, non-terminated pod: it holds its requests (plus one pod slot) on its node."""

    key: str
    node_name: str
    requests: dict[str, int]
    gpus: frozenset[int] = frozenset()  # GPU indices its topogate.dev/gpu-allocation holds


def _meta(obj: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise InputError("is required", where=where, field="metadata")
    return meta


def _string_map(value: Any, where: str, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError("must be an object", where=where, field=path)
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def node_from_kube(obj: Mapping[str, Any]) -> NodeInfo:
    """A v1 Node as a NodeInfo. Ready only when its Ready condition is True (as Kueue)."""
    where = object_name(obj)
    meta = _meta(obj, where)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InputError("is required", where=where, field="metadata.name")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not isinstance(spec, Mapping) or not isinstance(status, Mapping):
        raise InputError("spec and status must be objects", where=where)
    raw_allocatable = status.get("allocatable")
    path = "status.allocatable"
    if raw_allocatable is None:
        raw_allocatable, path = status.get("capacity"), "status.capacity"
    allocatable: dict[str, int] = {}
    for resource, quantity in _string_map(raw_allocatable, where, path).items():
        try:
            allocatable[resource] = to_units(resource, quantity)
        except QuantityError as exc:
            raise InputError(str(exc), where=where, field=f"{path}.{resource}") from None
    conditions = status.get("conditions") or []
    if not isinstance(conditions, list):
        raise InputError("must be a list", where=where, field="status.conditions")
    ready = any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )
    gpu_bandwidth, gpu_problem = None, ""
    try:
        annotations = _string_map(meta.get("annotations"), where, "metadata.annotations")
        gpu_bandwidth = node_gpu_matrix(name, annotations, allocatable)
    except InputError as error:
        gpu_problem = error.describe()
    return NodeInfo(
        name=name,
        labels=_string_map(meta.get("labels"), where, "metadata.labels"),
        allocatable=allocatable,
        taints=parse_taints(spec.get("taints"), where, "spec.taints"),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        gpu_bandwidth=gpu_bandwidth,
        gpu_problem=gpu_problem,
    )


def pod_usage_from_kube(obj: Mapping[str, Any]) -> PodUsage | None:
    """The usage of a v1 Pod, or None when it is not bound or has terminated."""
    where = object_name(obj)
    meta = _meta(obj, where)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise InputError("is required", where=where, field="spec")
    node_name = spec.get("nodeName")
    status = obj.get("status") or {}
    if not isinstance(status, Mapping):
        raise InputError("must be an object", where=where, field="status")
    phase = status.get("phase")
    if phase is not None and not isinstance(phase, str):
        raise InputError(f"{phase!r} must be a string", where=where, field="status.phase")
    if not node_name or phase in TERMINAL_PHASES:
        return None
    key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or meta.get('uid')}"
    return PodUsage(
        key=key,
        node_name=str(node_name),
        requests=pod_requests(spec, where),
        gpus=_allocated_gpus(meta.get("annotations")),
    )


def _allocated_gpus(annotations: Any) -> frozenset[int]:
    """The GPUs a pod's allocation annotation holds; none when it is absent or unreadable
    (its requests still count; only the indices are unknown)."""
    if not isinstance(annotations, Mapping) or ALLOCATION_ANNOTATION not in annotations:
        return frozenset()
    try:
        return parse_allocation(str(annotations[ALLOCATION_ANNOTATION])).gpus
    except ValueError:
        return frozenset()


# --- what `serve` keeps of watched Nodes and Pods ---------------------------------------------
#
# A watch delivers whole objects and the reflector keeps them; at 100,000 nodes that is most of
# serve's memory (a KWOK node is about 23 KB of Python objects, 13 KB of it managedFields). These
# transforms, applied before an object is stored or handed on (as client-go's informer
# transforms), keep what any reader in topogate looks at and drop the rest. Readers of nodes:
# ``node_from_kube`` (labels, annotations, spec, allocatable/capacity, the Ready condition), the
# node-failure watch (labels, the Ready condition) and HyperNode discovery (labels). Pods are
# read far more widely, so only what no reader looks at goes: managedFields and the per-
# container statuses and IP lists the kubelet (or KWOK) writes.

_POD_STATUS_DROPPED = frozenset(
    {
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
        "podIP",
        "podIPs",
        "hostIP",
        "hostIPs",
    }
)


def _slim_meta(meta: Any) -> Any:
    if not isinstance(meta, dict):
        return meta  # left as it is, so the parser names the bad field as before
    return {k: v for k, v in meta.items() if k != "managedFields"}


def slim_node(obj: dict[str, Any]) -> dict[str, Any]:
    """A watched Node with what topogate reads: metadata (less managedFields), spec, and of
    its status allocatable, capacity and the Ready condition. Malformed parts stay as they
    are, so parsing fails as it would have on the whole object."""
    out = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    if "metadata" in obj:
        out["metadata"] = _slim_meta(obj["metadata"])
    status = obj.get("status")
    if isinstance(status, dict):
        kept = {k: status[k] for k in ("allocatable", "capacity") if k in status}
        conditions = status.get("conditions")
        if isinstance(conditions, list):
            kept["conditions"] = [
                c for c in conditions if not isinstance(c, dict) or c.get("type") == "Ready"
            ]
        elif "conditions" in status:
            kept["conditions"] = conditions
        out["status"] = kept
    elif "status" in obj:
        out["status"] = status
    return out


def slim_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """A watched Pod less its managedFields and per-container statuses and IP lists."""
    out = dict(obj)
    if "metadata" in obj:
        out["metadata"] = _slim_meta(obj["metadata"])
    status = obj.get("status")
    if isinstance(status, dict) and not _POD_STATUS_DROPPED.isdisjoint(status):
        out["status"] = {k: v for k, v in status.items() if k not in _POD_STATUS_DROPPED}
    return out
