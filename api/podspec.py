"""What the scheduler reads from a pod spec: resource requests and node constraints.

Requests follow Kubernetes' rules (``PodRequests``): regular containers are summed, sidecar
(restartable) init containers run beside them, each other init container runs alone, the
largest of those phases wins, pod overhead is added, and a missing request defaults to the
container's limit. Everything is returned as integer units (see ``quantity.to_units``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from .errors import InputError
from .quantity import QuantityError, parse_quantity, to_units

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """Requirements that must all hold; ``fields`` may only name metadata.name."""

    labels: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeConstraints:
    """A pod's hard constraints on nodes: tolerations, nodeSelector and required affinity."""

    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # None: no required node affinity. An empty tuple would match no node.
    affinity_terms: tuple[SelectorTerm, ...] | None = None


def _mapping(value: Any, where: str, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError("must be an object", where=where, field=path)
    return value


def _list(value: Any, where: str, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError("must be a list", where=where, field=path)
    return value


def _resources(values: Any, where: str, path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, raw in _mapping(values, where, path).items():
        try:
            out[str(name)] = to_units(str(name), raw)
        except QuantityError as exc:
            raise InputError(str(exc), where=where, field=f"{path}.{name}") from None
    return out


def _container_requests(container: Any, where: str, path: str) -> dict[str, int]:
    container = _mapping(container, where, path)
    resources = _mapping(container.get("resources"), where, f"{path}.resources")
    limits = _resources(resources.get("limits"), where, f"{path}.resources.limits")
    requests = _resources(resources.get("requests"), where, f"{path}.resources.requests")
    # The API server defaults a missing request to the limit.
    return {**limits, **requests}


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _max_into(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


def pod_requests(spec: Mapping[str, Any], where: str, path: str = "spec") -> dict[str, int]:
    """The effective requests of one pod, by Kubernetes' rules (without the implicit pod)."""
    total: dict[str, int] = {}
    for i, container in enumerate(_list(spec.get("containers"), where, f"{path}.containers")):
        _add(total, _container_requests(container, where, f"{path}.containers[{i}]"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    init_containers = _list(spec.get("initContainers"), where, f"{path}.initContainers")
    for i, container in enumerate(init_containers):
        requests = _container_requests(container, where, f"{path}.initContainers[{i}]")
        if isinstance(container, Mapping) and container.get("restartPolicy") == "Always":
            _add(sidecars, requests)
            _max_into(init_peak, sidecars)
        else:
            phase = dict(sidecars)
            _add(phase, requests)
            _max_into(init_peak, phase)
    _add(total, sidecars)
    _max_into(total, init_peak)
    pod_level = _mapping(spec.get("resources"), where, f"{path}.resources")
    # Pod-level resources (PodLevelResources) replace the container sum where given.
    total.update(_resources(pod_level.get("requests"), where, f"{path}.resources.requests"))
    _add(total, _resources(spec.get("overhead"), where, f"{path}.overhead"))
    return {name: amount for name, amount in total.items() if amount > 0}


def parse_taints(values: Any, where: str, path: str) -> tuple[Taint, ...]:
    taints = []
    for i, raw in enumerate(_list(values, where, path)):
        item = _mapping(raw, where, f"{path}[{i}]")
        key, effect = item.get("key"), item.get("effect")
        if not isinstance(key, str) or not key:
            raise InputError("is required", where=where, field=f"{path}[{i}].key")
        if effect not in _EFFECTS:
            raise InputError(
                f"{effect!r} must be one of {', '.join(_EFFECTS)}",
                where=where,
                field=f"{path}[{i}].effect",
            )
        taints.append(Taint(key, str(item.get("value") or ""), effect))
    return tuple(taints)


def parse_tolerations(values: Any, where: str, path: str) -> tuple[Toleration, ...]:
    tolerations = []
    for i, raw in enumerate(_list(values, where, path)):
        item = _mapping(raw, where, f"{path}[{i}]")
        operator = item.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise InputError(
                f"{operator!r} must be Equal or Exists", where=where, field=f"{path}[{i}].operator"
            )
        effect = item.get("effect") or ""
        if effect and effect not in _EFFECTS:
            raise InputError(
                f"{effect!r} must be one of {', '.join(_EFFECTS)}",
                where=where,
                field=f"{path}[{i}].effect",
            )
        tolerations.append(
            Toleration(str(item.get("key") or ""), operator, str(item.get("value") or ""), effect)
        )
    return tuple(tolerations)


def _requirements(values: Any, where: str, path: str) -> tuple[Requirement, ...]:
    out = []
    for i, raw in enumerate(_list(values, where, path)):
        item = _mapping(raw, where, f"{path}[{i}]")
        key, operator = item.get("key"), item.get("operator")
        if not isinstance(key, str) or not key:
            raise InputError("is required", where=where, field=f"{path}[{i}].key")
        if operator not in _OPERATORS:
            raise InputError(
                f"{operator!r} must be one of {', '.join(_OPERATORS)}",
                where=where,
                field=f"{path}[{i}].operator",
            )
        vals = tuple(str(v) for v in _list(item.get("values"), where, f"{path}[{i}].values"))
        if operator in ("In", "NotIn") and not vals:
            raise InputError(
                f"must not be empty for operator {operator}",
                where=where,
                field=f"{path}[{i}].values",
            )
        if operator in ("Gt", "Lt") and (len(vals) != 1 or not _is_int(vals[0])):
            raise InputError(
                f"operator {operator} takes exactly one integer value",
                where=where,
                field=f"{path}[{i}].values",
            )
        out.append(Requirement(key, operator, vals))
    return tuple(out)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def node_constraints(
    spec: Mapping[str, Any],
    where: str,
    path: str = "spec",
    extra_tolerations: Iterable[Toleration] = (),
) -> NodeConstraints:
    """Tolerations, nodeSelector and required node affinity of a pod spec."""
    selector = _mapping(spec.get("nodeSelector"), where, f"{path}.nodeSelector")
    affinity = _mapping(spec.get("affinity"), where, f"{path}.affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), where, f"{path}.affinity.nodeAffinity")
    required_path = f"{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms: tuple[SelectorTerm, ...] | None = None
    if required is not None:
        required = _mapping(required, where, required_path)
        raw_terms = _list(
            required.get("nodeSelectorTerms"), where, f"{required_path}.nodeSelectorTerms"
        )
        parsed = []
        for i, raw in enumerate(raw_terms):
            term_path = f"{required_path}.nodeSelectorTerms[{i}]"
            term = _mapping(raw, where, term_path)
            fields = _requirements(term.get("matchFields"), where, f"{term_path}.matchFields")
            for j, req in enumerate(fields):
                if req.key != "metadata.name":
                    raise InputError(
                        "only metadata.name is supported",
                        where=where,
                        field=f"{term_path}.matchFields[{j}].key",
                    )
            labels = _requirements(
                term.get("matchExpressions"), where, f"{term_path}.matchExpressions"
            )
            parsed.append(SelectorTerm(labels, fields))
        terms = tuple(parsed)
    tolerations = parse_tolerations(spec.get("tolerations"), where, f"{path}.tolerations")
    return NodeConstraints(
        tolerations=tolerations + tuple(extra_tolerations),
        node_selector={str(k): str(v) for k, v in selector.items()},
        affinity_terms=terms,
    )


# --- what the API server refuses in a pod spec ------------------------------------------------


def _native(resource: str) -> bool:
    """Kubernetes' IsNativeResource: no domain, or a kubernetes.io one."""
    return "/" not in resource or "kubernetes.io/" in resource


def _overcommit_allowed(resource: str) -> bool:
    """Requests below limits are allowed for native resources except huge pages; extended
    resources (``nvidia.com/gpu``) must request exactly their limit."""
    return _native(resource) and not resource.startswith("hugepages-")


def _quantity(value: Any) -> Fraction | None:
    try:
        return parse_quantity(value)
    except QuantityError:
        return None  # the readers refuse it, naming the field


def _limit_problems(container: Any, path: str) -> list[str]:
    """Requests against limits, as the API server's validateResourceRequirements words it."""
    resources = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(resources, Mapping):
        return []
    limits = resources.get("limits")
    requests = resources.get("requests")
    limits = limits if isinstance(limits, Mapping) else {}
    if not isinstance(requests, Mapping):
        return []
    problems: list[str] = []
    for name, raw in sorted((str(k), v) for k, v in requests.items()):
        request = _quantity(raw)
        if request is None:
            continue
        if name not in limits:
            if not _overcommit_allowed(name):
                problems.append(
                    f"{path}.resources.limits: Required value: "
                    "Limit must be set for non overcommitable resources"
                )
            continue
        limit = _quantity(limits[name])
        if limit is None:
            continue
        shown = f"{path}.resources.requests: Invalid value: {json.dumps(str(raw))}"
        if request != limit and not _overcommit_allowed(name):
            problems.append(f"{shown}: must be equal to {name} limit of {limits[name]}")
        elif request > limit:
            problems.append(
                f"{shown}: must be less than or equal to {name} limit of {limits[name]}"
            )
    return problems


def api_server_problems(spec: Any, path: str) -> list[str]:
    """What the API server would refuse in a pod spec, in its words (field path, then
    ``Required value`` or ``Invalid value: ...``), so `plan` does not plan a job that cannot
    be created: no containers, and requests that exceed (or, for extended resources, differ
    from) their limits. ``path`` is the spec's field path, e.g. ``spec.template.spec``."""
    spec = spec if isinstance(spec, Mapping) else {}
    problems: list[str] = []
    containers = spec.get("containers")
    if not containers:
        problems.append(f"{path}.containers: Required value")
    for kind in ("containers", "initContainers"):  # the API server's order
        items = spec.get(kind)
        for i, container in enumerate(items if isinstance(items, list) else []):
            problems.extend(_limit_problems(container, f"{path}.{kind}[{i}]"))
    return problems
