"""Topology requests from pod-template annotations, checked by Kueue's rules.

Both ``kueue.x-k8s.io/<name>`` and ``topogate.dev/<name>`` are read; giving one name under both
prefixes with different values is an error. Problems are reported all at once, each naming
the annotation by its path, in the shape Kubernetes uses (``...annotations[key]: ...``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import constants as c
from .errors import loads_json
from .models import PodSetTopologyRequest, SliceConstraint
from .names import label_key_problem

_BOOLS = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}


class AnnotationError(ValueError):
    """One or more invalid topology annotations; ``problems`` holds one line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True, slots=True)
class _Found:
    key: str
    value: str


def _collect(annotations: Mapping[str, str], path: str, problems: list[str]) -> dict[str, _Found]:
    found: dict[str, _Found] = {}
    for name in c.TOPOLOGY_ANNOTATIONS:
        for prefix in c.ANNOTATION_PREFIXES:
            key = prefix + name
            if key not in annotations:
                continue
            value = str(annotations[key])
            earlier = found.get(name)
            if earlier is None:
                found[name] = _Found(key, value)
            elif earlier.value != value:
                problems.append(
                    f"{path}[{key}]: Invalid value: {value!r}: conflicts with "
                    f"{earlier.key}={earlier.value!r}"
                )
    return found


def _parse_int32(text: str) -> int | None:
    body = text[1:] if text[:1] in "+-" else text
    if not body.isascii() or not body.isdigit() or len(body.lstrip("0")) > 10:
        return None  # more than 10 digits is out of int32's range (and int() has a limit)
    number = int(text)
    return number if -(2**31) <= number <= c.MAX_INT32 else None


def _label_check(path: str, found: _Found | None, problems: list[str]) -> None:
    if found is not None:
        problem = label_key_problem(found.value)
        if problem:
            problems.append(f"{path}[{found.key}]: Invalid value: {found.value!r}: {problem}")


def _constraint_layer(
    where: str, i: int, item: Mapping[str, Any], seen: dict[str, int], problems: list[str]
) -> tuple[str, int]:
    """Entry ``i`` of the constraints array as (topology, size); a bad field reads as "" or 0."""
    lowered = {str(k).lower(): v for k, v in item.items()}
    topology = lowered.get("topology", "")
    size = lowered.get("size", 0)
    if not isinstance(topology, str):
        problems.append(f"{where}[{i}].topology: Invalid value: {topology!r}: must be a string")
        topology = ""
    else:
        problem = label_key_problem(topology)
        if problem:
            problems.append(f"{where}[{i}].topology: Invalid value: {topology!r}: {problem}")
    if isinstance(size, bool) or not isinstance(size, int) or not -(2**31) <= size <= c.MAX_INT32:
        problems.append(f"{where}[{i}].size: Invalid value: {size!r}: must be an integer")
        size = 0
    elif size < 1:
        problems.append(
            f"{where}[{i}].size: Invalid value: {size}: must be greater than or equal to 1"
        )
    if topology in seen:
        problems.append(
            f"{where}[{i}].topology: Duplicate value: {topology!r} (also at index {seen[topology]})"
        )
    else:
        seen[topology] = i
    return topology, size


def _check_nesting(where: str, layers: Sequence[tuple[str, int]], problems: list[str]) -> None:
    """Each layer's size must divide its parent's, so the slices nest without remainder."""
    for i in range(len(layers) - 1):
        outer, inner = layers[i][1], layers[i + 1][1]
        if inner > 0 and outer % inner != 0:
            problems.append(
                f"{where}[{i + 1}].size: Invalid value: {inner}: "
                f"must evenly divide the parent layer size {outer}"
            )


def _constraints(path: str, found: _Found, problems: list[str]) -> list[SliceConstraint] | None:
    where = f"{path}[{found.key}]"
    try:
        raw = loads_json(found.value)
    except ValueError as exc:
        problems.append(
            f"{where}: Invalid value: {found.value!r}: must be a valid JSON array: {exc}"
        )
        return None
    if raw is None:
        raw = []
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        problems.append(
            f"{where}: Invalid value: {found.value!r}: must be a valid JSON array: "
            'expected [{"topology": "<level>", "size": <n>}, ...]'
        )
        return None
    if not 1 <= len(raw) <= 3:
        problems.append(
            f"{where}: Invalid value: {found.value!r}: "
            "topology constraints must contain between 1 and 3 entries"
        )
        return None
    before = len(problems)
    seen: dict[str, int] = {}
    layers = [_constraint_layer(where, i, item, seen, problems) for i, item in enumerate(raw)]
    _check_nesting(where, layers, problems)
    if len(problems) > before:
        return None
    return [SliceConstraint(topology=t, size=s) for t, s in layers]


@dataclass(frozen=True, slots=True)
class _Annotations:
    """The topology annotations one pod template sets; None where it sets none."""

    required: _Found | None
    preferred: _Found | None
    unconstrained: _Found | None
    slice_topology: _Found | None
    slice_size: _Found | None
    layers: _Found | None
    group: _Found | None

    @classmethod
    def of(cls, found: Mapping[str, _Found]) -> _Annotations:
        return cls(
            required=found.get(c.REQUIRED_TOPOLOGY),
            preferred=found.get(c.PREFERRED_TOPOLOGY),
            unconstrained=found.get(c.UNCONSTRAINED_TOPOLOGY),
            slice_topology=found.get(c.SLICE_REQUIRED_TOPOLOGY),
            slice_size=found.get(c.SLICE_SIZE),
            layers=found.get(c.SLICE_CONSTRAINTS),
            group=found.get(c.GROUP_NAME),
        )

    @property
    def modes(self) -> list[_Found]:
        """The required, preferred and unconstrained annotations that are set."""
        return [f for f in (self.required, self.preferred, self.unconstrained) if f is not None]


def _check_single_mode(path: str, found: _Annotations, problems: list[str]) -> None:
    modes = found.modes
    if len(modes) > 1:
        keys = ", ".join(f.key for f in modes)
        problems.append(
            f"{path}: Invalid value: must not contain more than one topology annotation "
            f"(required, preferred, unconstrained); found {keys}"
        )


def _check_group(path: str, found: _Annotations, problems: list[str]) -> None:
    """A group pairs PodSets by a required or preferred level, and only without slices."""
    group = found.group
    if group is None:
        return
    where = f"{path}[{group.key}]"
    if group.value.isascii() and group.value.isdigit():
        problems.append(f"{where}: Invalid value: {group.value!r}: must not be a number")
    if found.slice_size is not None:
        problems.append(
            f"{where}: Forbidden: may not be set when '{found.slice_size.key}' is specified"
        )
    if found.slice_topology is not None:
        problems.append(
            f"{where}: Forbidden: may not be set when '{found.slice_topology.key}' is specified"
        )
    if found.required is None and found.preferred is None:
        problems.append(
            f"{where}: Forbidden: may not be set when neither a required nor a preferred "
            "topology annotation is specified"
        )


def _parse_unconstrained(path: str, found: _Found | None, problems: list[str]) -> bool | None:
    if found is None:
        return None
    value = _BOOLS.get(found.value)
    if value is None:
        problems.append(
            f"{path}[{found.key}]: Invalid value: {found.value!r}: must be a boolean value"
        )
    return value


def _parse_slice_size(
    path: str, found: _Found | None, count: int | None, problems: list[str]
) -> int | None:
    """The slice size as a number (None if absent or not one), checked against ``count``."""
    if found is None:
        return None
    where = f"{path}[{found.key}]"
    size = _parse_int32(found.value)
    if size is None:
        problems.append(f"{where}: Invalid value: {found.value!r}: must be a numeric value")
    elif size < 1:
        problems.append(
            f"{where}: Invalid value: {found.value!r}: must be greater than or equal to 1"
        )
    elif count is not None and size > count:
        problems.append(
            f"{where}: Invalid value: {found.value!r}: "
            f"must not be greater than pod set count {count}"
        )
    elif count is not None and count % size:
        # Kueue would silently leave the remainder unplaced; we refuse instead.
        problems.append(
            f"{where}: Invalid value: {found.value!r}: must evenly divide the pod set count {count}"
        )
    return size


def _check_slice_pair(path: str, found: _Annotations, problems: list[str]) -> None:
    """The slice topology and the slice size only make sense together."""
    if found.slice_topology is not None and found.slice_size is None:
        problems.append(
            f"{path}[{c.KUEUE_GROUP}/{c.SLICE_SIZE}]: Required value: must be set when "
            f"'{found.slice_topology.key}' is specified"
        )
    if found.slice_size is not None and found.slice_topology is None:
        problems.append(
            f"{path}[{found.slice_size.key}]: Forbidden: may not be set when "
            f"'{c.KUEUE_GROUP}/{c.SLICE_REQUIRED_TOPOLOGY}' is not specified"
        )


def _parse_layers(
    path: str, found: _Annotations, count: int | None, problems: list[str]
) -> list[SliceConstraint] | None:
    """The multi-layer slice constraints, or None if absent or invalid.

    They exclude the single-layer slice annotations and a group; the outermost layer must fit
    ``count``.
    """
    layers_raw = found.layers
    if layers_raw is None:
        return None
    where = f"{path}[{layers_raw.key}]"
    for other in (found.slice_topology, found.slice_size):
        if other is not None:
            problems.append(f"{where}: Forbidden: may not be set when '{other.key}' is specified")
    if found.group is not None:
        problems.append(
            f"{path}[{found.group.key}]: Forbidden: may not be set when "
            f"'{layers_raw.key}' is specified"
        )
    layers = _constraints(path, layers_raw, problems)
    if layers and count is not None and layers[0].size > count:
        problems.append(
            f"{where}: Invalid value: {layers[0].size}: "
            f"must not be greater than pod set count {count}"
        )
    elif layers and count is not None and count % layers[0].size:
        problems.append(
            f"{where}: Invalid value: {layers[0].size}: "
            f"must evenly divide the pod set count {count}"
        )
    return layers


def _request(
    found: _Annotations,
    unconstrained: bool | None,
    slice_size: int | None,
    layers: list[SliceConstraint] | None,
) -> PodSetTopologyRequest | None:
    """The request from annotations already checked; None if they ask for no topology."""
    has_mode = bool(found.modes)
    single_layer = found.slice_topology is not None and found.slice_size is not None
    has_slices = single_layer or layers is not None
    if not has_mode and not has_slices:
        return None
    required, preferred = found.required, found.preferred
    request = PodSetTopologyRequest(
        required=required.value if required else None,
        preferred=preferred.value if preferred else None,
        unconstrained=unconstrained,
    )
    if layers is not None:
        request.podset_slice_required_topology_constraints = layers
    elif found.slice_topology is not None and slice_size is not None:
        request.pod_set_slice_required_topology = found.slice_topology.value
        request.pod_set_slice_size = slice_size
    if found.group is not None and (required or preferred):
        request.pod_set_group_name = found.group.value
    return request


def topology_request(
    annotations: Mapping[str, str], path: str, count: int | None = None
) -> PodSetTopologyRequest | None:
    """The PodSet's topology request from its pod-template annotations, or None if it has none.

    ``path`` is the annotations' field path (e.g. ``spec.template.metadata.annotations``);
    ``count`` (the PodSet's pod count), when known, bounds the slice size.
    Raises AnnotationError listing every problem.
    """
    problems: list[str] = []
    found = _Annotations.of(_collect(annotations, path, problems))
    # The checks run in this order so that problems are reported in a stable order.
    _check_single_mode(path, found, problems)
    for item in (found.required, found.preferred, found.slice_topology):
        _label_check(path, item, problems)
    _check_group(path, found, problems)
    unconstrained = _parse_unconstrained(path, found.unconstrained, problems)
    slice_size = _parse_slice_size(path, found.slice_size, count, problems)
    _check_slice_pair(path, found, problems)
    layers = _parse_layers(path, found, count, problems)
    if problems:
        raise AnnotationError(problems)
    return _request(found, unconstrained, slice_size, layers)


def check_groups(podsets: Sequence[tuple[str, int, PodSetTopologyRequest | None, str]]) -> None:
    """Kueue's podset-group rules over a workload's (name, count, request, annotations path).

    A group has exactly two PodSets, at least one with a single pod, and both ask for the same
    required (or the same preferred) level.
    """
    groups: dict[str, list[tuple[str, int, PodSetTopologyRequest, str]]] = {}
    for name, count, request, path in podsets:
        if request is not None and request.pod_set_group_name:
            groups.setdefault(request.pod_set_group_name, []).append((name, count, request, path))
    problems: list[str] = []
    key = f"{c.KUEUE_GROUP}/{c.GROUP_NAME}"
    for group, members in groups.items():
        if len(members) != 2:
            problems.extend(
                f"{path}[{key}]: Invalid value: {group!r}: can only define groups of exactly "
                f"2 pod sets, got: {len(members)} pod set(s)"
                for _, _, _, path in members
            )
            continue
        (_, count1, req1, path1), (_, count2, req2, path2) = members
        if count1 != 1 and count2 != 1:
            problems.extend(
                f"{path}[{key}]: Invalid value: {group!r}: can only define groups where at least "
                f"one pod set has only 1 replica, got: {count1} replica(s) and {count2} "
                "replica(s) in the group"
                for path in (path1, path2)
            )
        same = (req1.required, req1.preferred) == (req2.required, req2.preferred)
        if not same:
            for mine, theirs in ((path1, path2), (path2, path1)):
                problems.append(
                    f"{mine}: Invalid value: must specify a required or preferred topology "
                    f"consistent with '{theirs}' in group {group!r}"
                )
    if problems:
        raise AnnotationError(problems)
