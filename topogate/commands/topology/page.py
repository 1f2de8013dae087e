"""The HTML page of a :class:`TopologyView`: one self-contained file (inline CSS and script, no
link out) with an SVG picture of the domain tree (:func:`layout_picture` places the boxes)
and a table of the drawn domains."""

from __future__ import annotations

import html
from dataclasses import dataclass

from .view import ROOT_PATH_LABEL, TopologyView, resource_unit, resource_units

# Above this many boxes in one row the picture stops being readable: such rows are not drawn
# and the lowest drawn boxes show their node counts instead.
MAX_BOXES_PER_ROW = 64

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
