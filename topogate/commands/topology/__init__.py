"""``topogate topology``: what a topology looks like, and how full each of its domains is.

The command: it loads the cluster files like ``plan`` does, picks the topology and flavor by
``plan``'s rule (``commands.choose``) and writes the view (``view``) as a table, a tree, JSON
or YAML (``text``) or one HTML page with an SVG picture (``page``); ``discover`` prints the
HyperNodes node labels describe.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from topogate.api.errors import InputError

from ..choose import choose_source
from ..loader import add_cluster_argument, hypernode_warnings, load_cluster_reporting, write_output
from .discover import discover
from .page import render_html
from .text import render_table, render_tree, view_document
from .view import TopologyView, build_view

EXIT_OK = 0

RENDERERS: dict[str, Callable[[TopologyView], str]] = {
    "table": render_table,
    "tree": render_tree,
    "json": lambda view: json.dumps(view_document(view), indent=2) + "\n",
    "yaml": lambda view: yaml.safe_dump(view_document(view), sort_keys=False),
    "html": render_html,
}


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
        discover(args, cluster)
        return EXIT_OK
    forest = cluster.build_forest()
    for warning in hypernode_warnings(forest):  # the same warnings as plan's
        print(f"topogate topology: warning: {warning}", file=sys.stderr)
    shown = choose_source(cluster, args.topology, args.flavor, forest)
    output = args.output or "table"
    snapshot = cluster.snapshot()
    tree = shown.source.tree(snapshot, shown.node_labels)
    view = build_view(shown.source.name, tree, snapshot, shown.flavor, shown.tolerations)
    write_output(RENDERERS[output](view), args.out)
    return EXIT_OK
