"""The ``topogate`` command line: one subcommand per module of ``topogate.commands``, plus
``serve`` from ``topogate.runtime``. Each module offers ``add_arguments`` and ``run``.

Only the module of the command given is imported (numpy, aiohttp and the kubernetes client
took ``topogate --version`` 1.1 s): the others appear in ``--help`` by name and summary."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from topogate.api.errors import InputError

from . import __version__

EXIT_OK, EXIT_INVALID = 0, 2

# name -> (module, help, description)
COMMANDS: tuple[tuple[str, str, str, str], ...] = (
    (
        "plan",
        "topogate.commands.plan",
        "where would this workload land? (offline, from files)",
        "Place a Job/JobSet/Pod/Workload on a cluster described by files. "
        "Exit 0: it fits; 1: it does not fit; 2: invalid input.",
    ),
    (
        "status",
        "topogate.commands.status",
        "admission state and pod placement of Workloads (also: kubectl topogate status)",
        "Show Workloads' admission state and, per PodSet and assigned topology "
        "domain, how many pods are gated, ungated, bound, running or finished. "
        "Exit 0: shown; 1: not found or the API server failed; 2: invalid arguments.",
    ),
    (
        "topology",
        "topogate.commands.topology",
        "a topology's domains and their capacity, used and free (offline, from files)",
        "Show every domain of a topology (and a root over all its nodes) with its "
        "node count, unavailable nodes (not ready, cordoned or tainted, as plan counts them) "
        "and capacity, used and free per resource, as a table, an ASCII tree, JSON, YAML "
        "or one self-contained HTML page with a picture. Exit 0: shown; 2: invalid input.",
    ),
    (
        "serve",
        "topogate.runtime.serve",
        "run the controller: admit queued jobs where the topology allows, release pods",
        "Watch the cluster, create Workloads for queued Jobs/JobSets, admit whole "
        "gangs in queue order where quota and topology allow, and release their pods in rank "
        "order onto the assigned domains.",
    ),
    (
        "webhook",
        "topogate.commands.webhook",
        "run the admission webhook server (HTTPS, AdmissionReview v1)",
        "Serve /mutate and /validate (AdmissionReview v1) over HTTPS.",
    ),
    (
        "gpu",
        "topogate.commands.gpuimport",
        "GPU topology tools: `gpu import` turns `nvidia-smi topo -m` into a node annotation",
        "GPU topology tools (offline). Exit 0: done; 2: invalid input.",
    ),
)


def _parser(
    argv: Sequence[str],
) -> tuple[argparse.ArgumentParser, dict[str, Callable[[argparse.Namespace], int]]]:
    """The parser, with the arguments of the command ``argv`` names (its first word: the
    top level has options but no values); the other commands are there by name only."""
    parser = argparse.ArgumentParser(
        prog="topogate", description="Topology-aware admission for gang-scheduled training jobs."
    )
    parser.add_argument("--version", action="version", version=f"topogate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    chosen = next((word for word in argv if not word.startswith("-")), None)
    runs: dict[str, Callable[[argparse.Namespace], int]] = {}
    for name, module_name, summary, description in COMMANDS:
        sub = commands.add_parser(name, help=summary, description=description)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(sub)
            runs[name] = module.run
    return parser, runs


def command_name(args: argparse.Namespace) -> str:
    """``topogate plan``, or with a second word (``topogate gpu import``): the one prefix of
    every error line; the errors themselves never repeat it."""
    words = ["topogate", args.command]
    if args.command == "gpu":
        words.append(args.gpu_command)
    return " ".join(words)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser, runs = _parser(words)
    args = parser.parse_args(words)
    try:
        return runs[args.command](args)
    except InputError as error:
        print(f"{command_name(args)}: error: {error.describe()}", file=sys.stderr)
        return EXIT_INVALID
    except BrokenPipeError:
        return EXIT_OK
