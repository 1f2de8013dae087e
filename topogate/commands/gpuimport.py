"""``topogate gpu import``: ``nvidia-smi topo -m`` output to a GPU bandwidth annotation.

``nvidia-smi topo -m`` prints, for every pair of GPUs, the kind of path between them. Each kind
becomes GB/s per direction (the figures and where they come from are in ``api/gpus.py``):

====== ============================================= =========================================
kind   path                                           GB/s (defaults)
====== ============================================= =========================================
NV<n>  n bonded NVLinks                               n x ``--nvlink-gbps`` (25: NVLink2-4)
PIX    at most one PCIe bridge (one switch)           1.00 x ``--pcie-gbps`` (25: Gen4 x16) = 25
PXB    several PCIe bridges, no host bridge           0.88 x = 22
PHB    a PCIe host bridge (the CPU)                   0.72 x = 18
NODE   between host bridges of one NUMA node          0.64 x = 16
SYS    across NUMA nodes (UPI, xGMI; old name SOC)    0.40 x = 10
====== ============================================= =========================================

NIC columns and rows, the CPU/NUMA affinity columns, the legends and terminal colours are
ignored. Any other cell is an error naming its row and column (exit 2).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from topogate.api.errors import InputError
from topogate.api.gpus import (
    BANDWIDTH_ANNOTATION,
    MAX_GPUS,
    NVLINK_GBPS_PER_LINK,
    PCIE_FACTORS,
    PCIE_GBPS,
    Matrix,
)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU = re.compile(r"^GPU(\d+)$")
_NVLINK = re.compile(r"^NV(\d+)$")
# Far above any part (NV18 on H100 and B200): a longer count is a garbled capture, and one of
# 400 digits would not even convert to a float.
MAX_NVLINKS = 1000
_ALIASES = {"SOC": "SYS"}  # drivers before 2018 called the socket interconnect SOC
_AFFINITY = {"CPU", "NUMA", "GPU"}  # first words of the columns after the device columns
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def parse_topo(text: str, source: str = "nvidia-smi topo -m") -> list[list[str]]:
    """The link kind between every two GPUs ("X" on the diagonal), GPU0 first."""
    header: list[str] | None = None
    rows: dict[int, tuple[int, list[str]]] = {}
    for number, raw in enumerate(_ANSI.sub("", text).splitlines(), start=1):
        tokens = raw.split()
        if not tokens:
            continue
        if tokens[0].rstrip(":").lower() in ("legend", "nic"):
            break  # the legends come after the matrix
        if header is None:
            if tokens[0] == "GPU0" and len(tokens) > 1 and tokens[1].startswith("GPU"):
                header = tokens
            elif tokens[0] == "GPU0" and len(tokens) > 1 and tokens[1] in _AFFINITY:
                header = tokens  # a single GPU: "GPU0  CPU Affinity ..."
            continue
        match = _GPU.match(tokens[0])
        if match is None:
            continue  # a NIC row
        index = int(match[1])
        if index in rows:
            raise InputError(f"GPU{index} has two rows", where=f"{source}: line {number}")
        rows[index] = (number, tokens[1:])
    if header is None:
        raise InputError(
            "no GPU matrix found (expected the output of `nvidia-smi topo -m`, whose header "
            "row starts with GPU0)",
            where=source,
        )
    devices: list[str] = []
    for token in header:
        if token in _AFFINITY:
            break
        devices.append(token)
    gpus = [int(m[1]) for m in (_GPU.match(d) for d in devices) if m is not None]
    if gpus != list(range(len(gpus))):
        raise InputError(
            f"the GPU columns are {', '.join(f'GPU{g}' for g in gpus)}; expected GPU0..GPU"
            f"{len(gpus) - 1} in order",
            where=source,
        )
    if len(gpus) > MAX_GPUS:  # the annotation topogate would then refuse to read
        raise InputError(f"has {len(gpus)} GPUs; at most {MAX_GPUS} are supported", where=source)
    columns = {f"GPU{g}": devices.index(f"GPU{g}") for g in gpus}
    missing = [f"GPU{g}" for g in gpus if g not in rows]
    if missing:
        raise InputError(f"no row for {', '.join(missing)}", where=source)
    extra = sorted(set(rows) - set(gpus))
    if extra:
        raise InputError(f"GPU{extra[0]} has a row but no column", where=source)
    kinds: list[list[str]] = []
    for g in gpus:
        number, cells = rows[g]
        if len(cells) < len(devices):
            raise InputError(
                f"GPU{g} has {len(cells)} cells, the header {len(devices)} device columns",
                where=f"{source}: line {number}",
            )
        row = []
        for h in gpus:
            cell = cells[columns[f"GPU{h}"]]
            kind = _ALIASES.get(cell, cell)
            where = f"{source}: line {number}"
            if (kind == "X") != (g == h):
                raise InputError(f"GPU{g}/GPU{h}: unexpected {cell!r}", where=where)
            if kind != "X" and kind not in PCIE_FACTORS and not _NVLINK.match(kind):
                known = "X, NV<n>, " + ", ".join(PCIE_FACTORS)
                raise InputError(
                    f"GPU{g}/GPU{h}: unknown link kind {cell!r} (known: {known})", where=where
                )
            links = _NVLINK.match(kind)
            if links is not None and int(links[1]) > MAX_NVLINKS:
                raise InputError(
                    f"GPU{g}/GPU{h}: {cell!r} is more than {MAX_NVLINKS} NVLinks", where=where
                )
            row.append(kind)
        kinds.append(row)
    return kinds


def symmetry_warning(kinds: list[list[str]], source: str) -> str | None:
    """What is odd when a pair's two directions differ (``nvidia-smi topo -m`` prints each
    link the same both ways, so the capture is likely garbled or hand-edited): the first such
    pair, how many more, and what the annotation then means."""
    pairs = [
        (i, j)
        for i in range(len(kinds))
        for j in range(i + 1, len(kinds))
        if kinds[i][j] != kinds[j][i]
    ]
    if not pairs:
        return None
    i, j = pairs[0]
    more = f" (and {len(pairs) - 1} more pair(s))" if len(pairs) > 1 else ""
    return (
        f"{source}: the matrix is not symmetric: GPU{i}/GPU{j} is {kinds[i][j]} but "
        f"GPU{j}/GPU{i} is {kinds[j][i]}{more}; each pair counts at its slower direction"
    )


def link_gbps(kind: str, nvlink_gbps: float, pcie_gbps: float) -> float:
    if kind == "X":
        return 0.0
    match = _NVLINK.match(kind)
    if match is not None:
        return int(match[1]) * nvlink_gbps
    return pcie_gbps * PCIE_FACTORS[kind]


def bandwidth_matrix(
    kinds: list[list[str]],
    nvlink_gbps: float = NVLINK_GBPS_PER_LINK,
    pcie_gbps: float = PCIE_GBPS,
) -> Matrix:
    return tuple(
        tuple(round(link_gbps(k, nvlink_gbps, pcie_gbps), 3) for k in row) for row in kinds
    )


def matrix_text(matrix: Matrix) -> str:
    """Compact JSON, whole numbers without ``.0``."""
    rows = [[int(v) if float(v).is_integer() else v for v in row] for row in matrix]
    return json.dumps(rows, separators=(",", ":"))


def render(matrix: Matrix, output: str, node: str | None) -> str:
    value = matrix_text(matrix)
    if output == "annotation":
        return value + "\n"
    if output == "json":  # a merge patch: kubectl patch node NAME --type merge -p "$(...)"
        return json.dumps({"metadata": {"annotations": {BANDWIDTH_ANNOTATION: value}}}) + "\n"
    assert node is not None
    return f"kubectl annotate node {node} --overwrite {BANDWIDTH_ANNOTATION}='{value}'\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="gpu_command", required=True)
    importer = commands.add_parser(
        "import",
        help="turn `nvidia-smi topo -m` output into the topogate.dev/gpu-bandwidth annotation",
        description="Read `nvidia-smi topo -m` output (a file, or - for stdin) and print the "
        "node's GPU bandwidth matrix in GB/s per direction: NV<n> = n x --nvlink-gbps; PIX, "
        "PXB, PHB, NODE, SYS = 1.0, 0.88, 0.72, 0.64, 0.4 x --pcie-gbps. Exit 0: printed; "
        "2: input that is not such a matrix (one line on stderr).",
    )
    importer.add_argument("file", nargs="?", default="-", metavar="FILE|-")
    importer.add_argument("--node", metavar="NAME", help="the node (needed by -o kubectl)")
    importer.add_argument(
        "--output", "-o", choices=("annotation", "json", "kubectl"), default="annotation"
    )
    importer.add_argument(
        "--nvlink-gbps",
        type=float,
        default=NVLINK_GBPS_PER_LINK,
        metavar="GBPS",
        help="GB/s per NVLink and direction: 25 for NVLink2-4 (V100, A100, H100), "
        "50 for NVLink5 (B200, GB200); default %(default)g",
    )
    importer.add_argument(
        "--pcie-gbps",
        type=float,
        default=PCIE_GBPS,
        metavar="GBPS",
        help="peer-to-peer GB/s through one PCIe switch: about 12 for Gen3 x16, 25 for Gen4, "
        "50 for Gen5; default %(default)g",
    )


def run(args: argparse.Namespace) -> int:
    # No "topogate gpu import" in these: the command line prints that prefix itself.
    for flag, value in (("--nvlink-gbps", args.nvlink_gbps), ("--pcie-gbps", args.pcie_gbps)):
        if not value > 0 or value == float("inf"):
            raise InputError("must be a positive number of GB/s", where=flag)
    if args.output == "kubectl" and not args.node:
        raise InputError("-o kubectl needs --node NAME")
    if args.node is not None and not _NODE_NAME.match(args.node):
        raise InputError(f"{args.node!r} is not a node name", where="--node")
    if args.file == "-":
        text, source = sys.stdin.read(), "<stdin>"
    else:
        try:
            text = Path(args.file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise InputError(f"cannot read: {error}", where=args.file) from None
        source = args.file
    kinds = parse_topo(text, source)
    warning = symmetry_warning(kinds, source)
    if warning is not None:
        print(f"topogate gpu import: warning: {warning}", file=sys.stderr)
    matrix = bandwidth_matrix(kinds, args.nvlink_gbps, args.pcie_gbps)
    sys.stdout.write(render(matrix, args.output, args.node))
    return 0
