"""GPU topology on the wire: the per-node bandwidth matrix, built-in profiles, and the
allocation annotations. Pure: strings and dicts in, plain values out, ``InputError`` naming the
object and the annotation on a mistake.

Node (one of the two):

- ``topogate.dev/gpu-bandwidth``: a JSON square matrix, GB/s from GPU ``i`` (row) to GPU
  ``j`` (column), as ``nvbandwidth`` or ``topogate gpu import`` give it. The diagonal is
  ignored; a pair counts with its slower direction. Its size must equal the node's
  allocatable ``nvidia.com/gpu``.
- ``topogate.dev/gpu-profile``: the name of a built-in matrix (:data:`PROFILES`).

Pod template: ``topogate.dev/gpu-min-bandwidth`` (GB/s): every pod's own GPU set must reach
it. Workload: ``topogate.dev/gpu-assignment`` (the admitter's choice, per PodSet and node, one
set per pod). Pod: ``topogate.dev/gpu-allocation`` (``{"allocatedGPUs": {"<container index>":
["4","5"]}, "visibleGPUs": ["4","5","6","7"]}``, the shape of Koordinator's proposal).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .constants import GROUP
from .errors import InputError, loads_json
from .quantity import QuantityError, to_units

GPU_RESOURCE = "nvidia.com/gpu"
BANDWIDTH_ANNOTATION = f"{GROUP}/gpu-bandwidth"
PROFILE_ANNOTATION = f"{GROUP}/gpu-profile"
MIN_BANDWIDTH_ANNOTATION = f"{GROUP}/gpu-min-bandwidth"
ASSIGNMENT_ANNOTATION = f"{GROUP}/gpu-assignment"
ALLOCATION_ANNOTATION = f"{GROUP}/gpu-allocation"

MAX_GPUS = 1024  # a guard against a runaway annotation, far above any node

Matrix = tuple[tuple[float, ...], ...]
GpuSets = tuple[tuple[int, ...], ...]  # one set per pod, each ascending
# PodSet -> node -> the sets of its pods there (the Workload annotation).
GpuAssignment = dict[str, dict[str, GpuSets]]

# --- link bandwidths (GB/s, one direction) --------------------------------------------------
#
# NVLink: every generation since NVLink2 (V100) carries 25 GB/s per link per direction
# (50 GB/s per link both ways): V100 6 links = 300 GB/s total, A100 12 = 600, H100 18 = 900
# (NVIDIA's figures are both directions together). NVLink5 (B200, GB200) doubles it to
# 50 GB/s per link per direction (18 links = 1.8 TB/s). ``nvidia-smi topo -m`` prints NV<n>,
# the number of bonded links between two GPUs (through NVSwitch: all of them, NV18 on H100).
NVLINK_GBPS_PER_LINK = 25.0
# PCIe paths, for PCIe Gen4 x16 (31.5 GB/s raw per direction, ~25 GB/s of peer-to-peer in
# practice). The further a path travels, the less a peer-to-peer copy gets: one switch
# (PIX) runs at link speed; several bridges (PXB) lose a little; through the CPU's host bridge
# (PHB) or between host bridges of one NUMA node (NODE) the root complex forwards it at
# roughly two thirds; across the socket interconnect (SYS: UPI/xGMI) peer-to-peer is often
# not supported and copies bounce through host memory, roughly 40%. These are the ratios
# ``p2pBandwidthLatencyTest`` / ``nvbandwidth`` typically show on such boards; only their order
# matters for choosing sets, and a measured matrix is always better.
PCIE_GBPS = 25.0
PCIE_FACTORS: dict[str, float] = {
    "PIX": 1.0,
    "PXB": 0.88,
    "PHB": 0.72,
    "NODE": 0.64,
    "SYS": 0.4,
}


def _nvswitch_8() -> Matrix:
    # DGX/HGX H100: 8 GPUs, 18 NVLink4 links each into 4 NVSwitches: 450 GB/s per direction
    # between any two (nvidia-smi: NV18 everywhere).
    return _uniform(8, 18 * NVLINK_GBPS_PER_LINK)


def _pcie_numa_8() -> Matrix:
    # A two-socket PCIe server: GPUs 0-3 on NUMA node 0, 4-7 on node 1, two per PCIe switch
    # ({0,1}, {2,3}, {4,5}, {6,7}): PIX inside a pair, NODE inside a socket, SYS across.
    def link(i: int, j: int) -> float:
        if i // 2 == j // 2:
            return PCIE_GBPS * PCIE_FACTORS["PIX"]
        if i // 4 == j // 4:
            return PCIE_GBPS * PCIE_FACTORS["NODE"]
        return PCIE_GBPS * PCIE_FACTORS["SYS"]

    return tuple(tuple(0.0 if i == j else link(i, j) for j in range(8)) for i in range(8))


def _nvlink_72() -> Matrix:
    # One NVLink domain of 72 GPUs (GB200 NVL72: 18 compute trays of 4 GPUs, 9 NVLink switch
    # trays). Every GPU's 18 NVLink5 links go to the switch trays, GPUs of one tray included
    # (they have no private link), so any two GPUs get the same 900 GB/s per direction: the
    # matrix is uniform, and trays are no bandwidth boundary. On a real NVL72 each compute
    # tray is its own Kubernetes node with 4 GPUs and the domain is a topology level above
    # the hostname; this profile is for a node (or a virtual node) that spans the domain.
    return _uniform(72, 18 * 2 * NVLINK_GBPS_PER_LINK)


def _uniform(n: int, value: float) -> Matrix:
    return tuple(tuple(0.0 if i == j else value for j in range(n)) for i in range(n))


PROFILES: dict[str, Callable[[], Matrix]] = {
    "nvswitch-8": _nvswitch_8,
    "pcie-numa-8": _pcie_numa_8,
    "nvlink-72": _nvlink_72,
}


@functools.cache
def profile(name: str) -> Matrix:
    """A built-in matrix; one shared object per name (nodes of one profile share it)."""
    return PROFILES[name]()


def _field(key: str) -> str:
    return f"metadata.annotations[{key}]"


def parse_matrix(text: str) -> Matrix:
    """A bandwidth matrix from JSON; ValueError says what is wrong."""
    try:
        raw = loads_json(text)
    except ValueError as exc:
        raise ValueError(f"is not valid JSON: {exc}") from None
    if not isinstance(raw, list) or not raw:
        raise ValueError("must be a non-empty JSON list of rows (a square matrix)")
    n = len(raw)
    if n > MAX_GPUS:
        raise ValueError(f"has {n} rows; at most {MAX_GPUS} GPUs are supported")
    rows = []
    for i, row in enumerate(raw):
        if not isinstance(row, list) or len(row) != n:
            raise ValueError(f"row {i} must be a list of {n} numbers (the matrix is square)")
        values = []
        for j, value in enumerate(row):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"[{i}][{j}] must be a number (GB/s), not {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"[{i}][{j}] must be a finite, non-negative number of GB/s")
            values.append(float(value))
        rows.append(tuple(values))
    return tuple(rows)


def node_gpu_matrix(
    node: str, annotations: Mapping[str, str], allocatable: Mapping[str, int]
) -> Matrix | None:
    """The node's bandwidth matrix from its annotations, or None when it has neither."""
    where = f"Node {node}"
    text = annotations.get(BANDWIDTH_ANNOTATION)
    name = annotations.get(PROFILE_ANNOTATION)
    if text is not None and name is not None:
        raise InputError(
            f"set only one of {BANDWIDTH_ANNOTATION} and {PROFILE_ANNOTATION}",
            where=where,
            field=_field(PROFILE_ANNOTATION),
        )
    if text is not None:
        key = BANDWIDTH_ANNOTATION
        try:
            matrix = parse_matrix(text)
        except ValueError as error:
            raise InputError(str(error), where=where, field=_field(key)) from None
    elif name is not None:
        key = PROFILE_ANNOTATION
        if name not in PROFILES:
            raise InputError(
                f"unknown GPU profile {name!r} (known: {', '.join(sorted(PROFILES))})",
                where=where,
                field=_field(key),
            )
        matrix = profile(name)
    else:
        return None
    gpus = allocatable.get(GPU_RESOURCE, 0)
    if len(matrix) != gpus:
        raise InputError(
            f"describes {len(matrix)} GPUs but the node has {gpus} allocatable {GPU_RESOURCE}",
            where=where,
            field=_field(key),
        )
    return matrix


def min_bandwidth(template: Mapping[str, Any], path: str, where: str) -> float | None:
    """The pod template's ``topogate.dev/gpu-min-bandwidth`` (GB/s), or None."""
    meta = template.get("metadata") or {}
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping) or MIN_BANDWIDTH_ANNOTATION not in annotations:
        return None
    raw = annotations[MIN_BANDWIDTH_ANNOTATION]
    prefix = f"{path}." if path else ""
    field = f"{prefix}metadata.annotations[{MIN_BANDWIDTH_ANNOTATION}]"
    try:
        value = float(str(raw).strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InputError(
            f'Invalid value: {raw!r}: must be a positive number of GB/s (e.g. "40")',
            where=where,
            field=field,
        )
    return value


def container_gpus(spec: Mapping[str, Any]) -> list[int]:
    """GPUs each regular container asks for (limit, else request), in container order."""
    out = []
    containers = spec.get("containers")
    for container in containers if isinstance(containers, list) else []:
        resources = container.get("resources") if isinstance(container, Mapping) else None
        amount = 0
        if isinstance(resources, Mapping):
            for kind in ("limits", "requests"):
                values = resources.get(kind)
                if isinstance(values, Mapping) and GPU_RESOURCE in values:
                    try:
                        amount = to_units(GPU_RESOURCE, values[GPU_RESOURCE])
                    except QuantityError:
                        amount = 0
                    break
        out.append(amount)
    return out


# --- the pod annotation ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Allocation:
    allocated: dict[int, tuple[int, ...]]  # container index -> GPU indices
    visible: tuple[int, ...]

    @property
    def gpus(self) -> frozenset[int]:
        return frozenset(g for gpus in self.allocated.values() for g in gpus)


def _index(value: Any, what: str) -> int:
    text = str(value)
    if isinstance(value, bool) or not text.isascii() or not text.isdigit():
        raise ValueError(f'{what} must be a GPU index such as "4", not {value!r}')
    return int(text)


def parse_allocation(text: str) -> Allocation:
    """The pod annotation; ValueError says what is wrong."""
    try:
        raw = loads_json(text)
    except ValueError as exc:
        raise ValueError(f"is not valid JSON: {exc}") from None
    if not isinstance(raw, Mapping):
        raise ValueError("must be a JSON object with allocatedGPUs and visibleGPUs")
    allocated_raw = raw.get("allocatedGPUs") or {}
    visible_raw = raw.get("visibleGPUs") or []
    if not isinstance(allocated_raw, Mapping) or not isinstance(visible_raw, list):
        raise ValueError("allocatedGPUs must be an object and visibleGPUs a list")
    allocated = {}
    for container, gpus in allocated_raw.items():
        if not isinstance(gpus, list):
            raise ValueError(f"allocatedGPUs[{container}] must be a list")
        index = _index(container, "a container index")
        allocated[index] = tuple(_index(g, "allocatedGPUs") for g in gpus)
    visible = tuple(_index(g, "visibleGPUs") for g in visible_raw)
    return Allocation(allocated, visible)


def allocation_text(allocation: Allocation) -> str:
    return json.dumps(
        {
            "allocatedGPUs": {
                str(c): [str(g) for g in gpus] for c, gpus in sorted(allocation.allocated.items())
            },
            "visibleGPUs": [str(g) for g in allocation.visible],
        },
        separators=(",", ":"),
    )


def split_by_container(
    gpus: Sequence[int], per_container: Sequence[int]
) -> dict[int, tuple[int, ...]]:
    """A pod's set, in order, over its containers by what each asks for. GPUs no container
    claims (an init container asked for more) go to the first container that asks for any,
    or to container 0."""
    out: dict[int, tuple[int, ...]] = {}
    left = list(gpus)
    for index, amount in enumerate(per_container):
        if amount > 0 and left:
            out[index], left = tuple(left[:amount]), left[amount:]
    if left:
        first = next((i for i, a in enumerate(per_container) if a > 0), 0)
        out[first] = out.get(first, ()) + tuple(left)
    return out


# --- the Workload annotation ----------------------------------------------------------------


def assignment_text(assignment: Mapping[str, Mapping[str, GpuSets]]) -> str:
    return json.dumps(
        {
            podset: {
                node: [[str(g) for g in gpus] for gpus in sets]
                for node, sets in sorted(per_node.items())
            }
            for podset, per_node in assignment.items()
        },
        separators=(",", ":"),
    )


def parse_assignment(text: str) -> GpuAssignment:
    """The Workload annotation; ValueError says what is wrong."""
    try:
        raw = loads_json(text)
    except ValueError as exc:
        raise ValueError(f"is not valid JSON: {exc}") from None
    if not isinstance(raw, Mapping):
        raise ValueError("must be a JSON object {podset: {node: [[gpu, ...], ...]}}")
    out: GpuAssignment = {}
    for podset, per_node in raw.items():
        if not isinstance(per_node, Mapping):
            raise ValueError(f"{podset}: must be an object {{node: [[gpu, ...], ...]}}")
        out[str(podset)] = {}
        for node, sets in per_node.items():
            if not isinstance(sets, list) or not all(isinstance(s, list) for s in sets):
                raise ValueError(f"{podset}.{node}: must be a list of lists of GPU indices")
            out[str(podset)][str(node)] = tuple(
                tuple(sorted(_index(g, "a GPU") for g in s)) for s in sets
            )
    return out
