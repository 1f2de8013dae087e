"""Which of its node's GPU sets a released pod gets: pure, like :mod:`.ranks`.

The admitter chose one GPU set per pod and node (the Workload's ``topogate.dev/gpu-assignment``,
held in the capacity cache). The ungater hands them out as it releases pods: each pod sent to a
node takes the first set there that no live sibling of its PodSet holds yet (siblings already
released carry theirs in ``topogate.dev/gpu-allocation``), split over its containers by what
each asks for, in container order. ``visibleGPUs`` lists every GPU the workload holds on the
node, so the job's pods there can reach each other (NVLink/P2P between containers needs the
peer device to be visible).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from topogate.api.constants import HOSTNAME_LABEL, TOPOLOGY_GATE
from topogate.api.gpus import (
    ALLOCATION_ANNOTATION,
    Allocation,
    GpuAssignment,
    GpuSets,
    allocation_text,
    container_gpus,
    parse_allocation,
    split_by_container,
)

from .ranks import TERMINATED_PHASES, Ungate


def visible_gpus(assignment: GpuAssignment) -> dict[str, tuple[int, ...]]:
    """Per node, every GPU the workload holds there (over all its PodSets)."""
    out: dict[str, set[int]] = {}
    for per_node in assignment.values():
        for node, sets in per_node.items():
            out.setdefault(node, set()).update(g for one in sets for g in one)
    return {node: tuple(sorted(gpus)) for node, gpus in out.items()}


def _held(pod: Mapping[str, Any]) -> frozenset[int] | None:
    """The GPUs a released, live pod holds by its annotation, or None."""
    spec = pod.get("spec") or {}
    gates = spec.get("schedulingGates") or []
    if any(isinstance(g, Mapping) and g.get("name") == TOPOLOGY_GATE for g in gates):
        return None  # still gated: whatever it carries, the ungater has not given it yet
    if (pod.get("status") or {}).get("phase") in TERMINATED_PHASES:
        return None  # finished: its GPUs are free again
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ALLOCATION_ANNOTATION)
    if not text:
        return None
    try:
        return parse_allocation(str(text)).gpus
    except ValueError:
        return None


def _node_of(pod: Mapping[str, Any]) -> str | None:
    spec = pod.get("spec") or {}
    node = (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL) or spec.get("nodeName")
    return str(node) if node else None


def gpu_allocations(
    sets: Mapping[str, GpuSets],
    visible: Mapping[str, tuple[int, ...]],
    pods: Sequence[Mapping[str, Any]],
    ungates: Sequence[Ungate],
) -> dict[str, str]:
    """Pod UID -> its ``topogate.dev/gpu-allocation`` value, for the ``ungates`` (in order)
    that go to a node with sets. ``pods`` are the PodSet's pods, ``sets`` its sets per node."""
    used: dict[str, set[tuple[int, ...]]] = {}
    for pod in pods:
        held, node = _held(pod), _node_of(pod)
        if held is None or node is None:
            continue
        for one in sets.get(node, ()):
            if frozenset(one) == held:
                used.setdefault(node, set()).add(one)
                break
    by_uid = {str((p.get("metadata") or {}).get("uid")): p for p in pods}
    out: dict[str, str] = {}
    for ungate in ungates:
        node = ungate.node_selector.get(HOSTNAME_LABEL)
        if node is None or node not in sets:
            continue
        taken = used.setdefault(node, set())
        free = [one for one in sets[node] if one not in taken]
        if not free:
            continue  # more pods than sets: cannot happen for an admitted count; give none
        chosen = free[0]
        taken.add(chosen)
        spec = (by_uid.get(ungate.uid) or {}).get("spec") or {}
        allocation = Allocation(
            split_by_container(chosen, container_gpus(spec)), tuple(visible.get(node, chosen))
        )
        out[ungate.uid] = allocation_text(allocation)
    return out
