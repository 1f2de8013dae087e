"""The ``topogate`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import yaml

from topogate.api.errors import InputError
from topogate.api.jobs import workload_from_object
from topogate.webhooks.command import add_arguments as add_webhook_arguments
from topogate.webhooks.command import run as run_webhook

from . import __version__
from .gpuimport import add_arguments as add_gpu_arguments
from .gpuimport import run as run_gpu
from .loader import add_cluster_argument, load_cluster_reporting, load_single
from .planner import plan, render_table, workload_document
from .serve import add_arguments as add_serve_arguments
from .serve import run as run_serve
from .status import add_arguments as add_status_arguments
from .status import run as run_status
from .topologyview import add_arguments as add_topology_arguments
from .topologyview import run as run_topology

EXIT_FITS, EXIT_NO_FIT, EXIT_INVALID = 0, 1, 2


def _example_paths() -> tuple[Path, Path]:
    base = Path(str(resources.files("topogate") / "examples"))
    return base / "cluster.yaml", base / "training-job.yaml"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="topogate", description="Topology-aware admission for gang-scheduled training jobs."
    )
    parser.add_argument("--version", action="version", version=f"topogate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    planner = commands.add_parser(
        "plan",
        help="where would this workload land? (offline, from files)",
        description="Place a Job/JobSet/Pod/Workload on a cluster described by files. "
        "Exit 0: it fits; 1: it does not fit; 2: invalid input.",
    )
    add_cluster_argument(planner)
    planner.add_argument(
        "--workload",
        type=Path,
        metavar="PATH",
        help="one batch/v1 Job, JobSet, v1 Pod or topogate Workload",
    )
    planner.add_argument("--flavor", metavar="NAME", help="the ResourceFlavor to plan on")
    planner.add_argument("--output", "-o", choices=("json", "yaml", "table"), default="table")
    planner.add_argument(
        "--example",
        action="store_true",
        help="plan the built-in example (a block/rack/host GPU cluster)",
    )
    status = commands.add_parser(
        "status",
        help="admission state and pod placement of Workloads (also: kubectl topogate status)",
        description="Show Workloads' admission state and, per PodSet and assigned topology "
        "domain, how many pods are gated, ungated, bound, running or finished. "
        "Exit 0: shown; 1: not found or the API server failed; 2: invalid arguments.",
    )
    add_status_arguments(status)
    topology = commands.add_parser(
        "topology",
        help="a topology's domains and their capacity, used and free (offline, from files)",
        description="Show every domain of a topology (and a root over all its nodes) with its "
        "node count and capacity, used and free per resource, as a table, an ASCII tree, JSON "
        "or one self-contained HTML page with a picture. Exit 0: shown; 2: invalid input.",
    )
    add_topology_arguments(topology)
    serve = commands.add_parser(
        "serve",
        help="run the controller: admit queued jobs where the topology allows, release pods",
        description="Watch the cluster, create Workloads for queued Jobs/JobSets, admit whole "
        "gangs in queue order where quota and topology allow, and release their pods in rank "
        "order onto the assigned domains.",
    )
    add_serve_arguments(serve)
    webhook = commands.add_parser(
        "webhook", help="run the admission webhook server (HTTPS, AdmissionReview v1)"
    )
    add_webhook_arguments(webhook)
    gpu = commands.add_parser(
        "gpu",
        help="GPU topology tools: `gpu import` turns `nvidia-smi topo -m` into a node annotation",
        description="GPU topology tools (offline). Exit 0: done; 2: invalid input.",
    )
    add_gpu_arguments(gpu)
    return parser


def _plan(args: argparse.Namespace) -> int:
    if args.example:
        if args.cluster or args.workload:
            raise InputError(
                "--example cannot be combined with --cluster or --workload", where="topogate plan"
            )
        cluster_path, workload_path = _example_paths()
        args.cluster, args.workload = [cluster_path], workload_path
    if not args.cluster or args.workload is None:
        raise InputError(
            "needs --cluster PATH and --workload PATH (or --example)", where="topogate plan"
        )
    cluster = load_cluster_reporting(args.cluster, "plan")
    document = load_single(args.workload)
    source = workload_from_object(document.obj, document.source)
    result = plan(cluster, source, args.flavor)
    for warning in result.warnings:
        print(f"topogate plan: warning: {warning}", file=sys.stderr)
    if args.output == "json":
        sys.stdout.write(json.dumps(workload_document(result), indent=2) + "\n")
    elif args.output == "yaml":
        sys.stdout.write(yaml.safe_dump(dict(workload_document(result)), sort_keys=False))
    else:
        sys.stdout.write(render_table(result))
    return EXIT_FITS if result.fits else EXIT_NO_FIT


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "plan":
            return _plan(args)
        if args.command == "webhook":
            return run_webhook(args)
        if args.command == "serve":
            return run_serve(args)
        if args.command == "status":
            return run_status(args)
        if args.command == "topology":
            return run_topology(args)
        if args.command == "gpu":
            return run_gpu(args)
    except InputError as error:
        print(f"topogate {args.command}: error: {error.describe()}", file=sys.stderr)
        return EXIT_INVALID
    except BrokenPipeError:
        return EXIT_FITS
    return EXIT_INVALID
