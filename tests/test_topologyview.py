"""`topogate topology`: domains with capacity, used and free; table, tree, json, html; discover.

The numbers are checked against counts taken from the example file itself. The HTML page is
rendered by headless Chromium (Debian's package; hack/test.sh installs it): its inline script
counts the SVG boxes that really laid out, and the screenshot is decoded (stdlib zlib/struct
and numpy) to prove something was painted.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import struct
import subprocess
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from topogate.cache.nodes import NodeInfo, PodUsage
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree
from topogate.cli import main
from topogate.commands.topology.page import (
    BOX_WIDTH,
    MAX_BOXES_PER_ROW,
    layout_picture,
    render_html,
)
from topogate.commands.topology.text import render_table, render_tree, view_document
from topogate.commands.topology.view import NODE_LEVEL, TopologyView, build_view

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "topogate" / "examples" / "cluster.yaml"
HYPERNODES = ROOT / "topogate" / "examples" / "hypernodes-cluster.yaml"
BLOCK, RACK = "cloud.example.com/topology-block", "cloud.example.com/topology-rack"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
CHROMIUM = "/usr/bin/chromium"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["topology", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _example_by_block() -> dict[str, tuple[int, int, int, int, int]]:
    """Per block of the example file: nodes, GPU capacity, GPUs held by bound pods, nodes no
    pod can use (cordoned or not Ready; the flavor tolerates the GPU taint) and the free GPUs
    of the others."""
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    node_docs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Node"}
    block_of = {name: d["metadata"]["labels"][BLOCK] for name, d in node_docs.items()}
    per_node_used: Counter[str] = Counter()
    for pod in (d for d in docs if d["kind"] == "Pod"):
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for container in pod["spec"]["containers"]:
            resources = container.get("resources") or {}
            amount = (resources.get("requests") or resources.get("limits") or {}).get(GPU, 0)
            per_node_used[pod["spec"]["nodeName"]] += int(amount)
    out: dict[str, list[int]] = {}
    for name, d in node_docs.items():
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in d["status"]["conditions"]
        )
        usable = ready and not d["spec"].get("unschedulable")
        capacity = int(d["status"]["allocatable"][GPU])
        sums = out.setdefault(block_of[name], [0, 0, 0, 0, 0])
        sums[0] += 1
        sums[1] += capacity
        sums[2] += per_node_used[name]
        sums[3] += 0 if usable else 1
        sums[4] += capacity - per_node_used[name] if usable else 0
    return {block: (a, b, c, d, e) for block, (a, b, c, d, e) in sorted(out.items())}


def test_example_hand_count() -> None:
    # What the file says, counted by eye: 2 blocks x 2 racks x 4 hosts of 8 GPUs; pods hold
    # 4 + 8 + 2 GPUs in block-0 and 1 in block-1; gpu-b0-r0-h0 is cordoned, gpu-b1-r1-h3
    # not ready, and their 8 + 8 GPUs are not free for anyone.
    assert _example_by_block() == {
        "block-0": (8, 64, 14, 1, 64 - 14 - 8),
        "block-1": (8, 64, 1, 1, 64 - 1 - 8),
    }


def test_json_counts_match_the_example_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--cluster", str(EXAMPLE), "-o", "json")
    assert code == 0
    document = json.loads(out)
    assert set(document) == {
        "topology",
        "flavor",
        "levels",
        "resources",
        "domains",
        "unavailableNodes",
    }
    # Without --flavor, the flavor plan would take: the only topology flavor.
    assert document["topology"] == "datacenter" and document["flavor"] == "h100"
    assert document["unavailableNodes"] == [
        {"name": "gpu-b0-r0-h0", "reason": "cordoned"},
        {"name": "gpu-b1-r1-h3", "reason": "not ready"},
    ]
    assert document["levels"] == [BLOCK, RACK, HOSTNAME]
    assert document["resources"] == ["cpu", "memory", GPU, "pods"]
    root = document["domains"][0]
    assert root["level"] is None and root["path"] == []
    assert (
        root["nodes"],
        root["unavailable"],
        root["capacity"][GPU],
        root["used"][GPU],
        root["free"][GPU],
    ) == (16, 2, "128", "15", "97")
    assert root["capacity"]["memory"] == "16Ti" and root["capacity"]["cpu"] == "1536"
    for block, (nodes, capacity, used, unavailable, free) in _example_by_block().items():
        (domain,) = (d for d in document["domains"] if d["path"] == [block])
        assert domain["level"] == BLOCK
        assert (domain["nodes"], domain["unavailable"]) == (nodes, unavailable)
        assert (domain["capacity"][GPU], domain["used"][GPU], domain["free"][GPU]) == (
            str(capacity),
            str(used),
            str(free),
        )
    # Every domain once, parents before children: 1 root + 2 blocks + 4 racks + 16 hosts.
    paths = [tuple(d["path"]) for d in document["domains"]]
    assert len(paths) == 23 and paths == sorted(paths)
    levels = Counter(d["level"] for d in document["domains"])
    assert levels == {None: 1, BLOCK: 2, RACK: 4, HOSTNAME: 16}


def test_table_rows_per_domain(capsys: pytest.CaptureFixture[str]) -> None:
    code, table, _ = _run(capsys, "--cluster", str(EXAMPLE))
    assert code == 0
    lines = table.splitlines()
    assert lines[0].startswith("topology 'datacenter' (flavor 'h100'): ")
    assert lines[2].split() == ["cpu", "memory", "(Gi)", GPU, "pods"]  # the group header
    assert lines[3].split()[:5] == ["LEVEL", "PATH", "NODES", "UNAVAILABLE", "CAPACITY"]
    rows = {cells[1]: cells for cells in (line.split() for line in lines[4 : 4 + 23])}
    assert len(rows) == 23
    # LEVEL PATH NODES UNAVAILABLE, then capacity/used/free per resource; GPU is third
    gpu = 4 + 3 * 2
    assert rows["(all)"][2:4] == ["16", "2"] and rows["(all)"][gpu : gpu + 3] == ["128", "15", "97"]
    assert rows["block-0"][:4] == [BLOCK, "block-0", "8", "1"]
    assert rows["block-0"][gpu : gpu + 3] == ["64", "14", "42"]
    assert rows["block-0/rack-1"][gpu : gpu + 3] == ["32", "10", "22"]
    assert rows["block-0/rack-1/gpu-b0-r1-h0"][gpu : gpu + 3] == ["8", "8", "0"]
    assert rows["block-0/rack-0/gpu-b0-r0-h1"][4:10] == ["96", "8", "88", "1024", "64", "960"]
    # The cordoned node: its capacity counts, nothing of it is free.
    cordoned = ["1", "96", "0", "0", "1024", "0", "0", "8", "0", "0", "110", "0", "0"]
    assert rows["block-0/rack-0/gpu-b0-r0-h0"][3:] == cordoned
    # Aligned: every data row is as wide as the header (the last column is right-aligned).
    assert len({len(line) for line in lines[3 : 4 + 23]}) == 1
    assert lines[4 + 23 :] == [
        "",
        "2 unavailable node(s), not counted as free (plan places no pod there):",
        "  gpu-b0-r0-h0: cordoned",
        "  gpu-b1-r1-h3: not ready",
    ]


def test_tree_shows_counts_and_free_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    code, tree, _ = _run(capsys, "--cluster", str(EXAMPLE), "-o", "tree")
    assert code == 0
    lines = tree.splitlines()
    assert lines[1] == "(nodes, free/capacity of nvidia.com/gpu, unavailable nodes)"
    assert re.fullmatch(r"datacenter\s+16 nodes\s+97/128  2 unavailable", lines[2])
    assert re.fullmatch(r"├── block-0\s+8 nodes\s+42/64  1 unavailable", lines[3])
    assert re.fullmatch(r"│   ├── rack-0\s+4 nodes\s+20/32  1 unavailable", lines[4])
    assert re.fullmatch(r"│   │   ├── gpu-b0-r0-h0\s+1 node\s+0/8  cordoned", lines[5])
    assert re.fullmatch(r"│   │   ├── gpu-b0-r0-h1\s+1 node\s+4/8", lines[6])
    assert re.fullmatch(r"└── block-1\s+8 nodes\s+55/64  1 unavailable", lines[14])
    assert re.fullmatch(r"        └── gpu-b1-r1-h3\s+1 node\s+0/8  not ready", lines[-1])
    assert len(lines) == 2 + 23


def test_flavor_picks_its_topology_and_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--cluster", str(EXAMPLE), "--flavor", "h100", "-o", "json")
    assert code == 0
    document = json.loads(out)
    assert document["topology"] == "datacenter" and document["flavor"] == "h100"
    assert document["domains"][0]["nodes"] == 16


def test_hypernode_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, tree, _ = _run(capsys, "--cluster", str(HYPERNODES), "-o", "tree")
    assert code == 0
    assert tree.splitlines()[0].startswith("topology 'hypernodes': ")
    assert re.search(r"└── s6\s+8 nodes\s+56/64", tree), tree
    assert re.search(r"│   ├── s0\s+2 nodes\s+8/16", tree), tree


def _uneven_view() -> TopologyView:
    """A HyperNode-like tree: uneven fan-out, one branch filled up with its own name (the way
    a source fills the levels a branch lacks), a node without GPUs, an extended resource."""
    nodes = [
        NodeInfo(f"n{i}", allocatable={GPU: 8, "pods": 110, "example.com/ib": 4}) for i in range(5)
    ]
    nodes.append(NodeInfo("cpu-only", allocatable={"cpu": 64000, "pods": 110}))
    snapshot = ClusterSnapshot.build(nodes, [])
    paths = {
        "n0": ("s6", "s0"),
        "n1": ("s6", "s0"),
        "n2": ("s6", "s0"),
        "n3": ("s6", "s1"),
        "n4": ("s7", "s7"),  # s7 has no leaf switch: filled with its own name
        "cpu-only": ("s7", "s7"),
    }
    tree = DomainTree.from_paths(snapshot, ["tier-2", "tier-1"], paths)
    return build_view("hypernodes", tree, snapshot)


def test_uneven_hypernode_like_tree() -> None:
    view = _uneven_view()
    assert view.levels == ("tier-2", "tier-1", NODE_LEVEL)
    assert view.resources == ("cpu", GPU, "pods", "example.com/ib")  # standard first, fixed order
    text = render_tree(view)
    assert re.search(r"^hypernodes\s+6 nodes\s+40/40$", text, re.M), text
    assert re.search(r"^├── s6\s+4 nodes\s+32/32$", text, re.M), text
    assert re.search(r"^│   ├── s0\s+3 nodes\s+24/24$", text, re.M), text
    assert re.search(r"^│   └── s1\s+1 node\s+8/8$", text, re.M), text
    assert re.search(r"^└── s7\s+2 nodes\s+8/8$", text, re.M), text
    assert re.search(r"^        └── n4\s+1 node\s+8/8$", text, re.M), text
    document = view_document(view)
    by_path = {tuple(d["path"]): d for d in document["domains"]}
    assert by_path[("s7",)]["capacity"] == {
        "cpu": "64",
        GPU: "8",
        "pods": "220",
        "example.com/ib": "4",
    }
    assert by_path[("s7", "s7", "cpu-only")]["level"] == NODE_LEVEL
    assert "s6/s0/n2" in render_table(view)


def test_picture_centres_parents_and_never_overlaps() -> None:
    view = _uneven_view()
    picture = layout_picture(view)
    children = view.children()
    left = {box.row: box.x for box in picture.boxes}
    for box in picture.boxes:
        kids = children[box.row]
        if kids:
            assert box.x == pytest.approx((left[kids[0]] + left[kids[-1]]) / 2)
    for depth in {box.y for box in picture.boxes}:
        xs = sorted(box.x for box in picture.boxes if box.y == depth)
        assert all(b - a >= BOX_WIDTH for a, b in itertools.pairwise(xs))
    assert len(picture.boxes) == len(view.rows) and picture.hidden_levels == ()


def _labelled_cluster(blocks: int, racks: int, hosts: int) -> TopologyView:
    nodes = [
        NodeInfo(
            f"h-{b}-{r}-{h}",
            labels={"block": f"b{b}", "rack": f"r{r}", HOSTNAME: f"h-{b}-{r}-{h}"},
            allocatable={GPU: 8, "pods": 110},
        )
        for b in range(blocks)
        for r in range(racks)
        for h in range(hosts)
    ]
    snapshot = ClusterSnapshot.build(nodes, [])
    return build_view(
        "big", DomainTree.from_labels(snapshot, ["block", "rack", HOSTNAME]), snapshot
    )


def test_many_nodes_collapse_into_counts() -> None:
    view = _labelled_cluster(4, 8, 16)  # 512 nodes in 32 racks
    picture = layout_picture(view)
    assert picture.hidden_levels == (HOSTNAME,)
    assert len(picture.boxes) == 1 + 4 + 32
    page = render_html(view)
    assert page.count('<g class="domain"') == 1 + 4 + 32
    assert f"Not drawn, to stay readable: level(s) {HOSTNAME}" in page
    assert ">16 nodes<" in page  # each rack box counts its nodes
    # Racks too are left out when they would be more than a row can hold.
    assert layout_picture(_labelled_cluster(2, MAX_BOXES_PER_ROW, 2)).hidden_levels == (
        "rack",
        HOSTNAME,
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("--topology", "nope"),
            "topogate topology: error: --topology: no topology 'nope' in the cluster input "
            "(found: datacenter)",
        ),
        (
            ("--flavor", "nope"),
            "topogate topology: error: --flavor: no ResourceFlavor 'nope' in the cluster input "
            "(found: h100)",
        ),
        (
            ("--flavor", "h100", "--topology", "other"),
            "topogate topology: error: --topology: 'other' is not the topology of "
            "ResourceFlavor 'h100' ('datacenter')",
        ),
    ],
)
def test_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    code, out, err = _run(capsys, "--cluster", str(EXAMPLE), *argv)
    assert code == 2 and out == ""
    assert err == message + "\n"


def test_several_topology_flavors_need_a_flavor_as_in_plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """plan's rule: with two topology flavors neither is guessed (their node labels and
    tolerations differ), with or without --topology; --flavor picks one."""
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    (flavor,) = (d for d in docs if d["kind"] == "ResourceFlavor")
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**flavor, "metadata": {"name": "h100-spare"}}))
    refused = (
        "topogate topology: error: --cluster: several topology ResourceFlavors (h100, "
        "h100-spare); pick one with --flavor\n"
    )
    for argv in ((), ("--topology", "datacenter")):
        code, out, err = _run(capsys, "--cluster", str(EXAMPLE), "--cluster", str(other), *argv)
        assert (code, out, err) == (2, "", refused)
    code, out, _ = _run(
        capsys, "--cluster", str(EXAMPLE), "--cluster", str(other), "--flavor", "h100-spare"
    )
    assert code == 0 and out.startswith("topology 'datacenter' (flavor 'h100-spare')")


def test_missing_cluster_and_bad_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert _run(capsys, "-o", "tree")[2] == (
        "topogate topology: error: --cluster: is required (a file or directory of cluster objects)\n"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: topogate.dev/v1alpha1\nkind: Topology\nmetadata: {name: t}\n")
    code, out, err = _run(capsys, "--cluster", str(bad))
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "Topology t" in err


def test_discover_offline(capsys: pytest.CaptureFixture[str]) -> None:
    labels = f"dc={BLOCK},{RACK},{HOSTNAME}"
    code, out, _ = _run(capsys, "discover", "--cluster", str(EXAMPLE), "--labels", labels)
    assert code == 0
    found = [d for d in yaml.safe_load_all(out) if d]
    tiers = sorted((d["spec"]["tier"], d["status"]["nodeCount"]) for d in found)
    assert tiers == [(1, 4)] * 4 + [(2, 8)] * 2  # 2 blocks of 2 racks of 4 nodes
    again = _run(capsys, "discover", "--cluster", str(EXAMPLE), "--labels", labels)[1]
    assert again == out  # deterministic names
    code, _, err = _run(capsys, "discover", "--cluster", str(EXAMPLE), "--labels", "dc")
    assert code == 2 and "--labels" in err


def test_html_escapes_names() -> None:
    nodes = [NodeInfo('<b>"x"</b>', labels={"k": "<script>"}, allocatable={"pods": 10})]
    snapshot = ClusterSnapshot.build(nodes, [])
    tree = DomainTree.from_labels(snapshot, ["k"])
    page = render_html(build_view("<t>", tree, snapshot, None))
    assert "<b>" not in page and "&lt;b&gt;" in page
    assert page.count("<script") == 1 and "&lt;script&gt;" in page  # only our own script


# --- the page in a real browser ---------------------------------------------------------


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _needs_chromium() -> None:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing; hack/test.sh installs Debian's chromium")
        pytest.skip("no Chromium here (hack/test.sh installs it)")


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def _png_pixels(path: Path) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """An 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes) as a height x width x 3|4
    array: chunks by struct, pixels by zlib, the five scanline filters undone by hand."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, idat, header = 8, bytearray(), b""
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position : position + 8])
        body = data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        position += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    channels = 3 if colour == 2 else 4
    stride = width * channels
    raw = zlib.decompress(bytes(idat))
    out = np.zeros((height, stride), dtype=np.uint8)
    previous = np.zeros(stride, dtype=np.int64)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], np.frombuffer(raw, np.uint8, stride, start + 1).astype(np.int64)
        if kind == 1:  # Sub: a running sum per channel
            line = line.reshape(-1, channels).cumsum(axis=0).reshape(-1) % 256
        elif kind == 2:  # Up
            line = (line + previous) % 256
        elif kind in (3, 4):  # Average, Paeth: each byte needs the one just decoded
            values, above = line.tolist(), previous.tolist()
            for i in range(stride):
                left = values[i - channels] if i >= channels else 0
                if kind == 3:
                    values[i] = (values[i] + (left + above[i]) // 2) % 256
                else:
                    corner = above[i - channels] if i >= channels else 0
                    values[i] = (values[i] + _paeth(left, above[i], corner)) % 256
            line = np.array(values, dtype=np.int64)
        out[y] = line
        previous = line
    return out.reshape(height, width, channels)


def test_html_page_renders_in_chromium(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _needs_chromium()
    page = tmp_path / "topology.html"
    code, _, _ = _run(capsys, "--cluster", str(EXAMPLE), "-o", "html", "--out", str(page))
    assert code == 0
    text = page.read_text()
    # Self-contained: nothing the browser would fetch.
    assert not re.search(r"https?://|<link|\bsrc=|url\(|@import|@font-face", text)
    drawn = text.count('<g class="domain')
    assert drawn == 1 + 2 + 4 + 16  # root, blocks, racks, hosts (16 nodes: nothing collapsed)
    dom = _chromium("--virtual-time-budget=2000", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert f'data-rendered="{drawn}"' in dom.stdout, dom.stdout[:2000]
    shot = tmp_path / "topology.png"
    result = _chromium(f"--screenshot={shot}", "--window-size=1400,900", page.as_uri())
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    pixels = _png_pixels(shot)
    assert pixels.shape[:2] == (900, 1400)
    colours = Counter(map(tuple, pixels[..., :3].reshape(-1, 3).tolist()))
    background, share = colours.most_common(1)[0]
    assert background == (255, 255, 255) and share < 0.97 * 900 * 1400
    assert len(colours) > 16
    # The bars were painted: the full node (8/8 GPUs) in red, the light ones in green.
    assert colours[(0xDC, 0x26, 0x26)] > 50 and colours[(0x16, 0xA3, 0x4A)] > 50


# --- topology and plan agree on which nodes count -----------------------------------------


def _agreement_cluster(tmp_path: Path) -> Path:
    """One rack of five 8-GPU nodes: two usable (one through the flavor's toleration), one
    not ready, one cordoned, one with a taint nothing tolerates."""

    def node(name: str, ready: bool = True, **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {RACK: "r0", HOSTNAME: name, "pool": "gpu"}},
            "spec": spec,
            "status": {
                "allocatable": {"cpu": "8", GPU: "8", "pods": "10"},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }

    gpu_taint = {"key": GPU, "value": "present", "effect": "NoSchedule"}
    objects = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Topology",
            "metadata": {"name": "t"},
            "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": HOSTNAME}]},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "gpus"},
            "spec": {
                "topologyName": "t",
                "nodeLabels": {"pool": "gpu"},
                "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
        node("a-ok"),
        node("b-tolerated", taints=[gpu_taint]),
        node("c-not-ready", ready=False),
        node("d-cordoned", unschedulable=True),
        node("e-tainted", taints=[{"key": "dedicated", "value": "infer", "effect": "NoExecute"}]),
    ]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return path


def _gpu_job(tmp_path: Path, pods: int) -> Path:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {
            "parallelism": pods,
            "template": {
                "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": RACK}},
                "spec": {
                    "containers": [{"name": "c", "resources": {"limits": {GPU: 8}}}],
                },
            },
        },
    }
    path = tmp_path / f"job-{pods}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_unavailable_nodes_are_the_ones_plan_excludes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _agreement_cluster(tmp_path)
    code, out, err = _run(capsys, "--cluster", str(cluster), "-o", "json")
    assert code == 0 and err == ""
    document = json.loads(out)
    assert document["flavor"] == "gpus"  # the flavor plan takes, with its toleration
    assert document["unavailableNodes"] == [
        {"name": "c-not-ready", "reason": "not ready"},
        {"name": "d-cordoned", "reason": "cordoned"},
        {"name": "e-tainted", "reason": "taint dedicated=infer:NoExecute not tolerated"},
    ]
    root = document["domains"][0]
    assert (root["nodes"], root["unavailable"], root["capacity"][GPU], root["free"][GPU]) == (
        5,
        3,
        "40",
        "16",
    )
    # plan: the 16 free GPUs hold two 8-GPU pods, not three; the same three nodes excluded.
    assert main(["plan", "--cluster", str(cluster), "--workload", str(_gpu_job(tmp_path, 2))]) == 0
    fits = capsys.readouterr().out
    assert "r0/a-ok" in fits and "r0/b-tolerated" in fits
    assert main(["plan", "--cluster", str(cluster), "--workload", str(_gpu_job(tmp_path, 3))]) == 1
    assert capsys.readouterr().out.splitlines()[1] == (
        'DOES NOT FIT: main: topology "t" allows to fit only 2 out of 3 pod(s). Total nodes: 5; '
        'excluded: notReady: 1, taint "dedicated=infer:NoExecute": 1, unschedulable: 1'
    )


def test_a_flavor_without_the_toleration_makes_the_tainted_node_unavailable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _agreement_cluster(tmp_path)
    bare = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "bare"},
        "spec": {"topologyName": "t", "nodeLabels": {"pool": "gpu"}},
    }
    cluster.write_text(cluster.read_text() + "---\n" + yaml.safe_dump(bare))
    code, out, _ = _run(capsys, "--cluster", str(cluster), "--flavor", "bare", "-o", "tree")
    assert code == 0
    assert re.search(r"b-tolerated\s+1 node\s+0/8  taint nvidia.com/gpu=present:NoSchedule", out)
    code, out, _ = _run(capsys, "--cluster", str(cluster), "--flavor", "gpus", "-o", "tree")
    assert re.search(r"b-tolerated\s+1 node\s+8/8$", out, re.MULTILINE)


def test_html_greys_out_unavailable_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _agreement_cluster(tmp_path)
    code, page, _ = _run(capsys, "--cluster", str(cluster), "-o", "html")
    assert code == 0
    assert page.count('<g class="domain off"') == 3
    assert (
        '<g class="domain off" data-path="r0/d-cordoned"><title>r0/d-cordoned: 1 node(s); ' in page
    )
    assert "; unavailable: cordoned</title>" in page
    assert '>r0</text><text class="small"' in page and ">5 nodes, 3 off</text>" in page
    assert (
        "<p>3 unavailable node(s), grey and dashed, not counted as free (plan places no pod "
        "there): <b>c-not-ready</b> (not ready), <b>d-cordoned</b> (cordoned), <b>e-tainted</b> "
        "(taint dedicated=infer:NoExecute not tolerated)</p>"
    ) in page
    assert '<th rowspan="2">unavailable</th>' in page


HYPERNODE_CONFLICT = """
apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: s0}
spec:
  tier: 1
  members:
  - {type: Node, selector: {exactMatch: {name: n0}}}
---
apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: s1}
spec:
  tier: 1
  members:
  - {type: Node, selector: {exactMatch: {name: n0}}}
  - {type: Node, selector: {exactMatch: {name: n1}}}
"""


def test_topology_warns_about_the_hypernode_conflicts_plan_warns_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "status": {
                "allocatable": {"cpu": "4", "pods": "10"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for name in ("n0", "n1")
    ]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(nodes) + "---" + HYPERNODE_CONFLICT)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }
    workload = tmp_path / "pod.yaml"
    workload.write_text(yaml.safe_dump(pod))
    assert main(["plan", "--cluster", str(cluster), "--workload", str(workload)]) == 0
    plan_warnings = capsys.readouterr().err.splitlines()
    expected = (
        'HyperNode s1: node "n0" also belongs to "s0", which keeps it; a node belongs to one '
        "HyperNode (the one whose name sorts first), so here it is ignored"
    )
    assert plan_warnings == [f"topogate plan: warning: {expected}"]
    code, _, err = _run(capsys, "--cluster", str(cluster), "-o", "tree")
    assert code == 0
    assert err.splitlines() == [f"topogate topology: warning: {expected}"]


LABEL_SOURCE_NEEDED = (
    "discover needs an enabled label source: networkTopologyDiscovery: [{source: label, "
    "enabled: true, config: {networkTopologyTypes: {TYPE: [{nodeLabel: LABEL}, ...]}}}]"
)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"networkTopologyDiscoveries": []},
            "has no networkTopologyDiscovery (its top-level keys: networkTopologyDiscoveries); "
            + LABEL_SOURCE_NEEDED,
        ),
        (
            {"networkTopologyDiscovery": []},
            "networkTopologyDiscovery: is empty; " + LABEL_SOURCE_NEEDED,
        ),
        (
            {
                "networkTopologyDiscovery": [
                    {"source": "ufm", "enabled": True},
                    {"source": "label", "config": {"networkTopologyTypes": {"t": []}}},
                ]
            },
            "networkTopologyDiscovery: [0] is source 'ufm', which discover does not read; "
            "[1] is a label source with enabled: None; " + LABEL_SOURCE_NEEDED,
        ),
    ],
)
def test_discovery_config_says_what_the_file_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict[str, Any], message: str
) -> None:
    path = tmp_path / "volcano-controller.conf"
    path.write_text(yaml.safe_dump(config))
    code, out, err = _run(
        capsys, "discover", "--cluster", str(EXAMPLE), "--discovery-config", str(path)
    )
    assert (code, out) == (2, "")
    assert err == f"topogate topology: error: {path}: {message}\n"


def test_yaml_output_for_show_and_discover(capsys: pytest.CaptureFixture[str]) -> None:
    labels = f"dc={BLOCK},{RACK},{HOSTNAME}"
    discover = ("discover", "--cluster", str(EXAMPLE), "--labels", labels)
    code, default, _ = _run(capsys, *discover)
    assert code == 0
    assert _run(capsys, *discover, "-o", "yaml") == (0, default, "")
    code, as_json, _ = _run(capsys, *discover, "-o", "json")
    assert code == 0 and json.loads(as_json) == [d for d in yaml.safe_load_all(default) if d]
    assert _run(capsys, *discover, "-o", "tree") == (
        2,
        "",
        "topogate topology: error: --output: discover writes yaml or json, not tree\n",
    )
    code, shown, _ = _run(capsys, "--cluster", str(EXAMPLE), "-o", "yaml")
    assert code == 0
    assert yaml.safe_load(shown) == json.loads(
        _run(capsys, "--cluster", str(EXAMPLE), "-o", "json")[1]
    )


def test_one_unit_per_resource(tmp_path: Path) -> None:
    """Memory in Gi everywhere (never 1Ti next to 960Gi or a Ki count), CPU in cores (never
    1500m next to 4): in the table, the HTML headline, its table and the boxes."""
    nodes = [
        NodeInfo("a", labels={RACK: "r"}, allocatable={"cpu": 4000, "memory": 2**40}),
        NodeInfo("b", labels={RACK: "r"}, allocatable={"cpu": 4000, "memory": 1056462384 * 1024}),
    ]
    pods = [
        PodUsage("ns/p", "a", {"cpu": 1500, "memory": 100 * 2**20}),
        PodUsage("ns/q", "b", {"cpu": 250, "memory": 64 * 2**30}),
    ]
    snapshot = ClusterSnapshot.build(nodes, pods)
    view = build_view("t", DomainTree.from_labels(snapshot, [RACK]), snapshot)
    table = render_table(view).splitlines()
    assert table[2].split() == ["cpu", "memory", "(Gi)"]
    rows = {line.split()[1]: line.split()[4:] for line in table[4:]}
    # cpu: capacity, used, free; memory (Gi) the same.
    assert rows["(all)"] == ["8", "1.75", "6.25", "2031.5", "64.1", "1967.4"]
    assert rows["r/a"] == ["4", "1.5", "2.5", "1024", "0.1", "1023.9"]
    page = render_html(view)
    assert "cpu: 1.75 used of 8, 6.25 free" in page
    assert "Used/capacity: cpu 1.75/8 · memory 64.1/2031.5Gi</p>" in page
    assert '<th colspan="3">memory (Gi)</th>' in page
    assert ">1.5/4 cpu</text>" in page and "<td>1023.9</td>" in page
