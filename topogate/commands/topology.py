"""``topogate topology``: what a topology looks like, and how full each of its domains is.

Two layers. The pure part turns a ``DomainTree`` over a ``ClusterSnapshot`` into one
``DomainRow`` per domain (:func:`domain_rows`, :func:`build_view`) and renders a
``TopologyView`` as a table, an ASCII tree, JSON or one self-contained HTML page with an SVG
picture (:func:`layout_picture` places the boxes). :func:`run` is the shell: it loads the
cluster files like ``plan`` does, picks the topology and writes the chosen output.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from topogate.api.errors import InputError
from topogate.api.podspec import Toleration
from topogate.api.quantity import MILLI_RESOURCES, format_units
from topogate.cache.hypernodes import DiscoveryType, discover_offline, discovery_config
from topogate.cache.selectors import NodeStates, node_states
from topogate.cache.snapshot import ClusterSnapshot, IntArray
from topogate.cache.topology import DomainTree
from topogate.files import load_discovery_config

from .choose import choose_source
from .loader import (
    ClusterInput,
    add_cluster_argument,
    hypernode_warnings,
    load_cluster_reporting,
    write_output,
)

# The level DomainTree appends below a topology whose lowest level is not the hostname.
NODE_LEVEL = "node"
GPU = "nvidia.com/gpu"
# Shown first and in this order when any node has them; extended resources follow, sorted.
STANDARD_RESOURCES = ("cpu", "memory", GPU, "pods")
# Above this many boxes in one row the picture stops being readable: such rows are not drawn
# and the lowest drawn boxes show their node counts instead.
MAX_BOXES_PER_ROW = 64
ROOT_PATH_LABEL = "(all)"

EXIT_OK = 0


# --- the model --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DomainRow:
    """One domain: its level key (``None`` for the synthetic root), path and sums per resource.

    ``free`` sums the free capacity (never below zero) of the domain's *available* nodes: a
    node that is not ready, cordoned or carries a taint the flavor does not tolerate holds
    nothing ``plan`` could use (the rule is ``plan``'s own, ``cache.selectors.node_states``).
    So it is capacity minus used except where a node is over-committed or unavailable.
    """

    depth: int  # 0 for the root, tree level + 1 below it
    level: str | None
    path: tuple[str, ...]
    nodes: int
    capacity: dict[str, int]
    used: dict[str, int]
    free: dict[str, int]
    parent: int | None  # index of the parent's row; rows come parents first (sorted by path)
    unavailable: int = 0  # nodes plan would not place on
    reason: str = ""  # a single node's: why it is unavailable ("" when it is available)

    @property
    def name(self) -> str:
        return self.path[-1] if self.path else ROOT_PATH_LABEL


@dataclass(frozen=True, slots=True)
class TopologyView:
    topology: str
    flavor: str | None
    levels: tuple[str, ...]  # the tree's levels, highest first (NODE_LEVEL when appended)
    resources: tuple[str, ...]
    rows: tuple[DomainRow, ...]  # sorted by path: the root, then each domain before its children
    unavailable: tuple[tuple[str, str], ...] = ()  # (node, reason), by node name

    @property
    def main_resource(self) -> str:
        """The resource the tree and the picture show: GPUs when there are any, else CPU."""
        return GPU if GPU in self.resources else "cpu"

    @property
    def root(self) -> DomainRow:
        return self.rows[0]

    def children(self) -> list[list[int]]:
        """Row indices of each row's children, in row (path) order."""
        out: list[list[int]] = [[] for _ in self.rows]
        for index, row in enumerate(self.rows):
            if row.parent is not None:
                out[row.parent].append(index)
        return out


def _is_extended(resource: str) -> bool:
    # Kubernetes' rule: a domain-prefixed name outside kubernetes.io (e.g. example.com/fpga).
    return "/" in resource and not resource.startswith(("kubernetes.io/", "requests."))


def shown_resources(tree: DomainTree, snapshot: ClusterSnapshot) -> tuple[str, ...]:
    """The standard resources any node of the tree has, then its extended resources, sorted."""
    present = np.asarray(snapshot.allocatable[tree.nodes] > 0).any(axis=0).astype(bool).tolist()
    has = {name for name, column in snapshot.resource_index.items() if present[column]}
    extended = sorted(name for name in has if _is_extended(name) and name not in STANDARD_RESOURCES)
    return tuple(name for name in STANDARD_RESOURCES if name in has) + tuple(extended)


def tree_levels(tree: DomainTree) -> tuple[str, ...]:
    appended = tree.depth > tree.topology_depth
    return tuple(tree.level_keys) + ((NODE_LEVEL,) if appended else ())


def domain_rows(
    tree: DomainTree,
    snapshot: ClusterSnapshot,
    resources: Sequence[str] | None = None,
    states: NodeStates | None = None,
) -> list[DomainRow]:
    """Every domain of every level plus a root over all the tree's nodes, sorted by path.

    ``states`` (default: no tolerations) says which nodes are available; the others count
    as nodes and capacity, never as free.
    """
    shown = tuple(resources) if resources is not None else shown_resources(tree, snapshot)
    states = states if states is not None else node_states(snapshot, tree.nodes, ())
    columns = [snapshot.resource_index[name] for name in shown]
    width = len(columns)
    unavailable = ~states.available
    free = snapshot.free[tree.nodes][:, columns] * states.available[:, None]
    # One matrix per node: capacity | used | free | unavailable side by side, summed per
    # domain in one pass.
    per_node: IntArray = np.concatenate(
        [
            snapshot.allocatable[tree.nodes][:, columns],
            snapshot.used[tree.nodes][:, columns],
            free,
            unavailable[:, None].astype(np.int64),
        ],
        axis=1,
    )
    levels = tree_levels(tree)

    def sums(totals: Sequence[int]) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        parts = [
            {name: int(totals[part * width + i]) for i, name in enumerate(shown)}
            for part in range(3)
        ]
        return parts[0], parts[1], parts[2]

    unsorted: list[tuple[tuple[str, ...], int, str | None, int, Sequence[int], str]] = [
        ((), 0, None, len(tree.nodes), per_node.sum(axis=0).tolist(), "")
    ]
    for level in range(tree.depth):
        size = tree.size(level)
        totals: IntArray = np.zeros((size, per_node.shape[1]), dtype=np.int64)
        np.add.at(totals, tree.member_domain[level], per_node)
        counts = np.bincount(tree.member_domain[level], minlength=size).tolist()
        last = level == tree.depth - 1  # one node per domain: domain i is tree.nodes[i]
        for domain, domain_totals in enumerate(totals.tolist()):
            path = tree.path(level, domain)
            reason = states.reason(domain) if last else ""
            unsorted.append((path, level + 1, levels[level], counts[domain], domain_totals, reason))
    unsorted.sort(key=lambda item: item[0])  # a path sorts right before its extensions
    index = {item[0]: i for i, item in enumerate(unsorted)}
    rows = []
    for path, depth, level_key, nodes, totals_list, reason in unsorted:
        capacity, used, free_sums = sums(totals_list)
        parent = index[path[:-1]] if path else None
        rows.append(
            DomainRow(
                depth,
                level_key,
                path,
                nodes,
                capacity,
                used,
                free_sums,
                parent,
                int(totals_list[3 * width]),
                reason,
            )
        )
    return rows


def build_view(
    topology: str,
    tree: DomainTree,
    snapshot: ClusterSnapshot,
    flavor: str | None = None,
    tolerations: Sequence[Toleration] = (),
) -> TopologyView:
    """The view of ``tree``; ``tolerations`` are the flavor's (a taint they cover does not
    make a node unavailable), as ``plan`` adds them to every pod's own."""
    resources = shown_resources(tree, snapshot)
    states = node_states(snapshot, tree.nodes, tolerations)
    rows = domain_rows(tree, snapshot, resources, states)
    unavailable = sorted(
        (snapshot.node_names[int(row)], states.reason(position))
        for position, row in enumerate(tree.nodes.tolist())
        if not states.available[position]
    )
    return TopologyView(
        topology, flavor, tree_levels(tree), resources, tuple(rows), tuple(unavailable)
    )


# --- units ------------------------------------------------------------------------------

_BINARY_UNITS = (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


@dataclass(frozen=True, slots=True)
class Unit:
    """How one resource is written in every cell of a view, so a column compares at a glance
    (never 16Ti next to 14080Gi). JSON and YAML keep exact quantities."""

    suffix: str  # "Gi" ...; "" for counts and CPU cores
    divisor: int  # cache units per shown unit
    decimals: int

    def number(self, units: int) -> str:
        if units % self.divisor == 0:
            return str(units // self.divisor)
        text = f"{units / self.divisor:.{self.decimals}f}".rstrip("0").rstrip(".")
        return text if text not in ("0", "-0") else f"<{10**-self.decimals:g}"

    def quantity(self, units: int) -> str:
        return self.number(units) + self.suffix

    def header(self, resource: str) -> str:
        return f"{resource} ({self.suffix})" if self.suffix else resource


def resource_unit(view: TopologyView, resource: str) -> Unit:
    """Memory and storage in Gi (Mi or Ki when everything is smaller), CPU in cores, others
    as counts: one unit per resource over the whole view."""
    if resource in MILLI_RESOURCES:
        return Unit("", 1000, 3)
    if "memory" in resource or "storage" in resource:
        largest = max((row.capacity.get(resource, 0) for row in view.rows), default=0)
        for suffix, size in _BINARY_UNITS:
            if largest >= size:
                return Unit(suffix, size, 1)
    return Unit("", 1, 0)


def resource_units(view: TopologyView) -> dict[str, Unit]:
    return {resource: resource_unit(view, resource) for resource in view.resources}


# --- text renderers ---------------------------------------------------------------------


def _title(view: TopologyView) -> str:
    flavor = f" (flavor {view.flavor!r})" if view.flavor else ""
    return f"topology {view.topology!r}{flavor}: {' > '.join(view.levels)}"


def _fraction(view: TopologyView, row: DomainRow, measure: Mapping[str, int]) -> str:
    resource = view.main_resource
    unit = resource_unit(view, resource)
    return f"{unit.number(measure.get(resource, 0))}/{unit.quantity(row.capacity.get(resource, 0))}"


def render_table(view: TopologyView) -> str:
    """One row per domain; per resource its capacity, used and free, under a group header."""
    measures = ("CAPACITY", "USED", "FREE")
    units = resource_units(view)
    header = [
        "LEVEL",
        "PATH",
        "NODES",
        "UNAVAILABLE",
        *(m for _ in view.resources for m in measures),
    ]
    body = [
        [
            row.level or "-",
            "/".join(row.path) or ROOT_PATH_LABEL,
            str(row.nodes),
            str(row.unavailable),
            *(
                units[resource].number(amounts[resource])
                for resource in view.resources
                for amounts in (row.capacity, row.used, row.free)
            ),
        ]
        for row in view.rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        left = [f"{cells[i]:<{widths[i]}}" for i in range(2)]
        right = [f"{cell:>{width}}" for cell, width in zip(cells[2:], widths[2:], strict=True)]
        return "  ".join(left + right).rstrip()

    # The group header names each resource over its three columns.
    fixed = 4  # level, path, nodes, unavailable
    group = " " * (sum(widths[:fixed]) + 2 * fixed)
    for i, resource in enumerate(view.resources):
        span = sum(widths[fixed + 3 * i : fixed + 3 + 3 * i]) + 2 * 2
        group += f"{units[resource].header(resource):<{span}}  "
    lines = [_title(view), "", group.rstrip(), line(header), *(line(cells) for cells in body)]
    return "\n".join(lines + _unavailable_lines(view)) + "\n"


def _unavailable_lines(view: TopologyView) -> list[str]:
    """The nodes no job can use, each with its reason (FREE leaves them out)."""
    if not view.unavailable:
        return []
    return [
        "",
        f"{len(view.unavailable)} unavailable node(s), not counted as free "
        "(plan places no pod there):",
        *(f"  {name}: {reason}" for name, reason in view.unavailable),
    ]


def render_tree(view: TopologyView) -> str:
    """An indented tree with node counts and free/capacity of the main resource."""
    children = view.children()
    labels: list[tuple[str, DomainRow]] = []

    def walk(index: int, prefix: str, last: bool, top: bool) -> None:
        row = view.rows[index]
        name = view.topology if top else row.name
        labels.append((name if top else f"{prefix}{'└── ' if last else '├── '}{name}", row))
        inner = "" if top else prefix + ("    " if last else "│   ")
        kids = children[index]
        for position, child in enumerate(kids):
            walk(child, inner, position == len(kids) - 1, False)

    walk(0, "", True, True)
    name_width = max(len(label) for label, _ in labels)
    node_width = max(len(str(row.nodes)) for _, row in labels)
    free_width = max(len(_fraction(view, row, row.free)) for _, row in labels)
    caption = f"(nodes, free/capacity of {view.main_resource}"
    caption += ", unavailable nodes)" if view.unavailable else ")"
    lines = [_title(view), caption]
    for label, row in labels:
        nodes = f"{row.nodes:>{node_width}} node{'s' if row.nodes != 1 else ' '}"
        free = _fraction(view, row, row.free)
        note = row.reason or (f"{row.unavailable} unavailable" if row.unavailable else "")
        lines.append(f"{label:<{name_width}}  {nodes}  {free:>{free_width}}  {note}".rstrip())
    return "\n".join(lines) + "\n"


def view_document(view: TopologyView) -> dict[str, Any]:
    """The JSON schema: quantities as Kubernetes quantity strings; the root has level null."""

    def quantities(amounts: Mapping[str, int]) -> dict[str, str]:
        return {name: format_units(name, amounts[name]) for name in view.resources}

    return {
        "topology": view.topology,
        "flavor": view.flavor,
        "levels": list(view.levels),
        "resources": list(view.resources),
        "domains": [
            {
                "level": row.level,
                "path": list(row.path),
                "nodes": row.nodes,
                "unavailable": row.unavailable,
                "capacity": quantities(row.capacity),
                "used": quantities(row.used),
                "free": quantities(row.free),
            }
            for row in view.rows
        ],
        "unavailableNodes": [{"name": name, "reason": reason} for name, reason in view.unavailable],
    }


# --- the picture ------------------------------------------------------------------------

BOX_WIDTH, BOX_GAP = 96.0, 6.0
DOMAIN_BOX_HEIGHT, NODE_BOX_HEIGHT = 62.0, 48.0  # a single node needs no node count line
ROW_GAP, MARGIN, TOP = 40.0, 12.0, 30.0
SCALABLE_WIDTH = 1800.0
CHAR_WIDTH = 6.6  # an 11px bold sans-serif character, roughly; longer names are shortened


@dataclass(frozen=True, slots=True)
class PlacedBox:
    row: int  # index into view.rows
    x: float  # left edge
    y: float  # top edge
    height: float


@dataclass(frozen=True, slots=True)
class Picture:
    boxes: tuple[PlacedBox, ...]  # in row order
    drawn_depth: int  # the deepest drawn depth (0: the root only)
    hidden_levels: tuple[str, ...]  # the levels below it, not drawn
    row_tops: tuple[float, ...]  # the top of each drawn depth's boxes
    width: float
    height: float


def drawn_depth(view: TopologyView, max_boxes: int = MAX_BOXES_PER_ROW) -> int:
    """The deepest depth to draw: depths with more than ``max_boxes`` domains are left out
    (the highest topology level is always drawn)."""
    per_depth: dict[int, int] = {}
    for row in view.rows:
        per_depth[row.depth] = per_depth.get(row.depth, 0) + 1
    depth = max(per_depth)
    while depth > 1 and per_depth[depth] > max_boxes:
        depth -= 1
    return depth


def _box_height(view: TopologyView, depth: int) -> float:
    return NODE_BOX_HEIGHT if depth == len(view.levels) else DOMAIN_BOX_HEIGHT


def layout_picture(view: TopologyView, max_boxes: int = MAX_BOXES_PER_ROW) -> Picture:
    """Boxes in rows by depth; the lowest drawn boxes side by side in path order and every
    parent centred over its children, so no two edges cross."""
    depth_limit = drawn_depth(view, max_boxes)
    children = view.children()
    drawn = [i for i, row in enumerate(view.rows) if row.depth <= depth_limit]
    left: dict[int, float] = {}
    slot = 0
    for index in drawn:
        if view.rows[index].depth == depth_limit or not children[index]:
            left[index] = MARGIN + slot * (BOX_WIDTH + BOX_GAP)
            slot += 1
    for index in reversed(drawn):  # children come after their parent: they are placed first
        if index not in left:
            kids = children[index]
            left[index] = (left[kids[0]] + left[kids[-1]]) / 2
    tops = [TOP]
    for depth in range(depth_limit):
        tops.append(tops[-1] + _box_height(view, depth) + ROW_GAP)
    boxes = tuple(
        PlacedBox(i, left[i], tops[view.rows[i].depth], _box_height(view, view.rows[i].depth))
        for i in drawn
    )
    width = max(MARGIN * 2 + slot * (BOX_WIDTH + BOX_GAP) - BOX_GAP, 320.0)
    height = tops[-1] + _box_height(view, depth_limit) + MARGIN
    return Picture(boxes, depth_limit, view.levels[depth_limit:], tuple(tops), width, height)


def _shorten(text: str, width: float) -> str:
    fits = max(int(width / CHAR_WIDTH), 4)
    return text if len(text) <= fits else text[: fits - 1] + "…"


def _bar_colour(fraction: float) -> str:
    if fraction >= 0.85:
        return "#dc2626"
    if fraction >= 0.5:
        return "#d97706"
    return "#16a34a"


def _short_resource(resource: str) -> str:
    return resource.rpartition("/")[2]


def _box(view: TopologyView, box: PlacedBox) -> str:
    esc = html.escape
    main = view.main_resource
    row = view.rows[box.row]
    name = view.topology if row.parent is None else row.name
    capacity, used = row.capacity.get(main, 0), row.used.get(main, 0)
    fraction = min(used / capacity, 1.0) if capacity else 0.0  # over-commit: a full bar
    unit = resource_unit(view, main)
    usage = f"{unit.number(used)}/{unit.quantity(capacity)} {_short_resource(main)}"
    tooltip = (
        f"{'/'.join(row.path) or view.topology}: {row.nodes} node(s); {main}: "
        f"{unit.quantity(used)} used of {unit.quantity(capacity)}, "
        f"{unit.quantity(row.free.get(main, 0))} free"
    )
    if row.reason:
        tooltip += f"; unavailable: {row.reason}"
        usage = "tainted" if row.reason.startswith("taint") else row.reason
    elif row.unavailable:
        tooltip += f"; {row.unavailable} unavailable node(s), not counted as free"
    x, y, inner = box.x, box.y, BOX_WIDTH - 12
    lines = [
        f'<text class="name" x="{x + 6:.1f}" y="{y + 16:.1f}">{esc(_shorten(name, inner))}</text>'
    ]
    baseline = y + 30
    if box.height == DOMAIN_BOX_HEIGHT:
        count = f"{row.nodes} node{'' if row.nodes == 1 else 's'}"
        count += f", {row.unavailable} off" if row.unavailable else ""
        lines.append(f'<text class="small" x="{x + 6:.1f}" y="{baseline:.1f}">{esc(count)}</text>')
        baseline += 14
    lines.append(f'<text class="small" x="{x + 6:.1f}" y="{baseline:.1f}">{esc(usage)}</text>')
    bar_y = baseline + 5
    # An unavailable node is greyed out: its use shows in grey, it has nothing free.
    colour = "#9ca3af" if row.reason else _bar_colour(fraction)
    state = " off" if row.reason else ""
    return (
        f'<g class="domain{state}" data-path="{esc("/".join(row.path))}">'
        f"<title>{esc(tooltip)}</title>"
        f'<rect class="box" x="{x:.1f}" y="{y:.1f}" width="{BOX_WIDTH:.0f}" '
        f'height="{box.height:.0f}" rx="5"/>'
        + "".join(lines)
        + f'<rect class="track" x="{x + 6:.1f}" y="{bar_y:.1f}" width="{inner:.0f}" '
        f'height="7" rx="2"/>'
        f'<rect x="{x + 6:.1f}" y="{bar_y:.1f}" width="{inner * fraction:.1f}" height="7" '
        f'rx="2" fill="{colour}"/>'
        "</g>"
    )


def _svg(view: TopologyView, picture: Picture) -> str:
    esc = html.escape
    position = {box.row: box for box in picture.boxes}
    edges: list[str] = []
    for box in picture.boxes:
        parent = view.rows[box.row].parent
        if parent is None or parent not in position:
            continue
        above = position[parent]
        px, py = above.x + BOX_WIDTH / 2, above.y + above.height
        cx, cy = box.x + BOX_WIDTH / 2, box.y
        middle = (py + cy) / 2
        edges.append(f'<path class="edge" d="M{px:.1f} {py:.1f}V{middle:.1f}H{cx:.1f}V{cy:.1f}"/>')
    # Level captions over each row, drawn after the edges with a halo so both stay readable.
    captions = [
        f'<text class="level" x="{MARGIN}" y="{top - 8:.1f}">{esc(caption)}</text>'
        for top, caption in zip(
            picture.row_tops, ["topology", *view.levels[: picture.drawn_depth]], strict=True
        )
    ]
    boxes = [_box(view, box) for box in picture.boxes]
    width, height = picture.width, picture.height
    # A picture that nearly fits is scaled down to the page (text keeps 75% of its size or
    # more); a wider one would still not fit, so it keeps full size and scrolls sideways.
    smallest = width * 0.75 if width <= SCALABLE_WIDTH else width
    return (
        f'<svg role="img" aria-label="{esc(f"domain tree of topology {view.topology}")}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
        f'style="width:100%;max-width:{width:.0f}px;min-width:{smallest:.0f}px;height:auto">'
        + "".join(edges + captions + boxes)
        + "</svg>"
    )


_STYLE = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2937;
       margin: 24px; background: #ffffff; }
h1 { font-size: 20px; margin: 0 0 4px; }
p { margin: 4px 0; }
.note { color: #6b7280; }
.picture { overflow-x: auto; border: 1px solid #e5e7eb; border-radius: 6px; margin: 12px 0;
           padding: 4px; }
svg text { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; }
svg .level { font-size: 11px; fill: #6b7280; paint-order: stroke; stroke: #ffffff;
             stroke-width: 4px; }
svg .edge { fill: none; stroke: #94a3b8; stroke-width: 1.2; }
svg .box { fill: #f8fafc; stroke: #64748b; stroke-width: 1; }
svg .name { font-size: 11px; font-weight: 600; fill: #111827; }
svg .small { font-size: 10px; fill: #374151; }
svg .track { fill: #e5e7eb; }
svg .off .box { fill: #f3f4f6; stroke: #9ca3af; stroke-dasharray: 4 3; }
svg .off .name, svg .off .small { fill: #6b7280; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e5e7eb; text-align: right;
         white-space: nowrap; }
th { background: #f3f4f6; }
td.text, th.text { text-align: left; }
td { font-variant-numeric: tabular-nums; }
"""

# Counts the domain boxes the browser really laid out (a test reads data-rendered).
_SCRIPT = """
window.addEventListener("load", function () {
  var drawn = 0;
  document.querySelectorAll("g.domain").forEach(function (group) {
    var box = group.getBBox();
    if (box.width > 0 && box.height > 0) { drawn += 1; }
  });
  document.body.dataset.rendered = String(drawn);
});
"""


def _summary_table(view: TopologyView, picture: Picture) -> str:
    esc = html.escape
    units = resource_units(view)
    groups = "".join(
        f'<th colspan="3">{esc(units[resource].header(resource))}</th>'
        for resource in view.resources
    )
    measures = "<th>capacity</th><th>used</th><th>free</th>" * len(view.resources)
    body = []
    for box in picture.boxes:
        row = view.rows[box.row]
        cells = "".join(
            f"<td>{esc(units[resource].number(amounts[resource]))}</td>"
            for resource in view.resources
            for amounts in (row.capacity, row.used, row.free)
        )
        body.append(
            f'<tr><td class="text">{esc(row.level or "-")}</td>'
            f'<td class="text">{esc("/".join(row.path) or ROOT_PATH_LABEL)}</td>'
            f"<td>{row.nodes}</td><td>{row.unavailable}</td>{cells}</tr>"
        )
    return (
        '<table><thead><tr><th class="text" rowspan="2">level</th>'
        f'<th class="text" rowspan="2">domain</th><th rowspan="2">nodes</th>'
        f'<th rowspan="2">unavailable</th>{groups}</tr>'
        f"<tr>{measures}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _unavailable_html(view: TopologyView, shown: int = 20) -> str:
    esc = html.escape
    if not view.unavailable:
        return ""
    items = ", ".join(
        f"<b>{esc(name)}</b> ({esc(reason)})" for name, reason in view.unavailable[:shown]
    )
    more = len(view.unavailable) - shown
    if more > 0:
        items += f" and {more} more (<code>topogate topology -o table</code> lists them all)"
    return (
        f"<p>{len(view.unavailable)} unavailable node(s), grey and dashed, not counted as "
        f"free (plan places no pod there): {items}</p>"
    )


def render_html(view: TopologyView, max_boxes: int = MAX_BOXES_PER_ROW) -> str:
    """One self-contained page: a headline, the SVG tree and a table of the drawn domains."""
    esc = html.escape
    picture = layout_picture(view, max_boxes)
    main = view.main_resource
    root = view.root
    units = resource_units(view)
    unit = resource_unit(view, main)  # main may be absent (cpu on nodes without it)
    flavor = f" on flavor {esc(view.flavor)}" if view.flavor else ""
    # Every resource once, each in its one unit (the table's), used of capacity.
    every = " · ".join(
        f"{esc(resource)} {esc(units[resource].number(root.used.get(resource, 0)))}/"
        f"{esc(units[resource].quantity(root.capacity.get(resource, 0)))}"
        for resource in view.resources
    )
    totals = (
        f"{root.nodes} nodes · {esc(main)}: {esc(unit.quantity(root.used.get(main, 0)))} "
        f"used of {esc(unit.quantity(root.capacity.get(main, 0)))}, "
        f"{esc(unit.quantity(root.free.get(main, 0)))} free"
        + (f" · {len(view.unavailable)} unavailable" if view.unavailable else "")
    )
    if picture.hidden_levels:
        hidden = ", ".join(picture.hidden_levels)
        lowest = view.levels[picture.drawn_depth - 1] if picture.drawn_depth else "topology"
        collapsed = (
            f"<p class=note>Not drawn, to stay readable: level(s) {esc(hidden)} (more than "
            f"{max_boxes} boxes in a row). Each {esc(lowest)} box shows its node count; "
            f"<code>topogate topology -o table</code> lists every domain.</p>"
        )
    else:
        collapsed = ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f"<title>topology {esc(view.topology)}</title><style>{_STYLE}</style></head>"
        f"<body><h1>Topology {esc(view.topology)}{flavor}</h1>"
        f"<p>Levels: {esc(' > '.join(view.levels))}</p><p>{totals}</p>"
        f"<p class=note>Used/capacity: {every}</p>"
        f"<p class=note>Each box: its name, node count and {esc(main)} used/capacity, with "
        "a bar that is green below 50% used, amber below 85%, red above; “N off” counts "
        "the nodes no pod can use. Hover a box for its full path.</p>"
        f"{collapsed}{_unavailable_html(view)}"
        f'<div class="picture">{_svg(view, picture)}</div>'
        f"{_summary_table(view, picture)}"
        f"<script>{_SCRIPT}</script></body></html>\n"
    )


RENDERERS: dict[str, Callable[[TopologyView], str]] = {
    "table": render_table,
    "tree": render_tree,
    "json": lambda view: json.dumps(view_document(view), indent=2) + "\n",
    "yaml": lambda view: yaml.safe_dump(view_document(view), sort_keys=False),
    "html": render_html,
}


# --- the shell --------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        nargs="?",
        choices=("show", "discover"),
        default="show",
        help="show (default): the domains; discover: the HyperNodes node labels describe, as "
        "`serve --hypernode-discovery` would make them (YAML, or JSON with -o json)",
    )
    parser.add_argument(
        "--labels",
        action="append",
        default=[],
        metavar="TYPE=LABEL,...",
        help="discover: a topology type and its node labels, top level first",
    )
    parser.add_argument(
        "--discovery-config",
        type=Path,
        metavar="FILE",
        help="discover: Volcano's volcano-controller.conf (or a ConfigMap holding it)",
    )
    add_cluster_argument(parser)
    parser.add_argument("--topology", metavar="NAME", help="the topology to show")
    parser.add_argument(
        "--flavor", metavar="NAME", help="show the topology of this ResourceFlavor, on its nodes"
    )
    parser.add_argument(
        "--output",
        "-o",
        choices=tuple(RENDERERS),
        help="show: table (default), tree, json, yaml or html; discover: yaml (default) or json",
    )
    parser.add_argument("--out", type=Path, metavar="FILE", help="write here, not to stdout")


def run(args: argparse.Namespace) -> int:
    if not args.cluster:
        raise InputError("is required (a file or directory of cluster objects)", where="--cluster")
    cluster = load_cluster_reporting(args.cluster, "topology")
    if args.action == "discover":
        return _discover(args, cluster)
    forest = cluster.build_forest()
    for warning in hypernode_warnings(forest):  # the same warnings as plan's
        print(f"topogate topology: warning: {warning}", file=sys.stderr)
    shown = choose_source(cluster, args.topology, args.flavor, forest)
    output = args.output or "table"
    snapshot = ClusterSnapshot.build(cluster.nodes, cluster.pods)
    tree = shown.source.tree(snapshot, shown.node_labels)
    view = build_view(shown.source.name, tree, snapshot, shown.flavor, shown.tolerations)
    write_output(RENDERERS[output](view), args.out)
    return EXIT_OK


def _discover(args: argparse.Namespace, cluster: ClusterInput) -> int:
    if args.output not in (None, "yaml", "json"):
        raise InputError(f"discover writes yaml or json, not {args.output}", where="--output")
    types = types_from_flag(args.labels)
    if args.discovery_config is not None:
        types += load_discovery_config(args.discovery_config)
    if not types:
        raise InputError(
            "discover needs --labels TYPE=LABEL,... or --discovery-config FILE",
        )
    found = discover_offline(cluster.nodes, types)
    if args.output == "json":
        text = json.dumps(found, indent=2) + "\n"
    else:
        text = yaml.safe_dump_all(found, sort_keys=False)
    write_output(text, args.out)
    return EXIT_OK


def types_from_flag(values: Sequence[str]) -> list[DiscoveryType]:
    """``--labels TYPE=top,...,kubernetes.io/hostname`` flags as discovery types."""
    config = []
    for value in values:
        name, sep, labels = value.partition("=")
        if not sep or not labels:
            raise InputError(
                f"{value!r} is not TYPE=LABEL,LABEL,... (top level first)", where="--labels"
            )
        config.append(
            {
                "source": "label",
                "enabled": True,
                "config": {
                    "networkTopologyTypes": {
                        name: [{"nodeLabel": label} for label in labels.split(",")]
                    }
                },
            }
        )
    return discovery_config({"networkTopologyDiscovery": config}, where="--labels")
