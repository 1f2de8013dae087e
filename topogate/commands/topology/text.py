"""The text renderers of a :class:`TopologyView`: a table, an indented tree, and the
document JSON and YAML write."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from topogate.api.quantity import format_units

from .view import ROOT_PATH_LABEL, DomainRow, TopologyView, resource_unit, resource_units


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
