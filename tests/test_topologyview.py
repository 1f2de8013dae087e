"""`topogate topology`: domains with capacity, used and free; table, tree, json, html; discover.

The HTML page is rendered by headless Chromium (Debian's package; hack/test.sh installs it):
its inline script counts the SVG boxes that really laid out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from topogate.cache.nodes import NodeInfo
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree
from topogate.cli import main
from topogate.topologyview import build_view, render_html, render_tree

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "topogate" / "examples" / "cluster.yaml"
BLOCK, RACK = "cloud.example.com/topology-block", "cloud.example.com/topology-rack"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["topology", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _example_counts() -> tuple[int, int, int]:
    """Nodes, GPU capacity and GPUs used by bound pods, counted from the file itself."""
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    nodes = [d for d in docs if d["kind"] == "Node"]
    capacity = sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes)
    used = 0
    for pod in (d for d in docs if d["kind"] == "Pod"):
        if pod["spec"].get("nodeName") and (pod.get("status") or {}).get("phase") not in (
            "Succeeded",
            "Failed",
        ):
            for container in pod["spec"]["containers"]:
                requests = (container.get("resources") or {}).get("requests") or {}
                limits = (container.get("resources") or {}).get("limits") or {}
                used += int(requests.get("nvidia.com/gpu", limits.get("nvidia.com/gpu", 0)))
    return len(nodes), capacity, used


def test_json_counts_match_the_example_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--cluster", str(EXAMPLE), "-o", "json")
    assert code == 0
    document = json.loads(out)
    nodes, capacity, used = _example_counts()
    root = document["domains"][0]
    assert root["nodes"] == nodes
    assert int(root["capacity"]["nvidia.com/gpu"]) == capacity
    assert int(root["used"]["nvidia.com/gpu"]) == used
    assert int(root["free"]["nvidia.com/gpu"]) == capacity - used
    blocks = [d for d in document["domains"] if d["level"] == BLOCK]
    assert sum(d["nodes"] for d in blocks) == nodes
    assert sum(int(d["used"]["nvidia.com/gpu"]) for d in blocks) == used


def test_table_and_tree(capsys: pytest.CaptureFixture[str]) -> None:
    code, table, _ = _run(capsys, "--cluster", str(EXAMPLE))
    assert code == 0 and "block-0/rack-1" in table
    code, tree, _ = _run(capsys, "--cluster", str(EXAMPLE), "-o", "tree")
    nodes, capacity, used = _example_counts()
    assert code == 0
    assert re.search(rf"datacenter\s+{nodes} nodes\s+{capacity - used}/{capacity}", tree), tree
    assert "├── block-0" in tree and "└── block-1" in tree


def test_uneven_hypernode_like_tree() -> None:
    nodes = [NodeInfo(f"n{i}", allocatable={"nvidia.com/gpu": 8, "pods": 110}) for i in range(3)]
    snapshot = ClusterSnapshot.build(nodes, [])
    # n0 and n1 under leaf s0 under s6; n2 directly under s6 (its tier-1 domain is itself).
    paths = {"n0": ("s6", "s0", "n0"), "n1": ("s6", "s0", "n1"), "n2": ("s6", "n2", "n2")}
    tree = DomainTree.from_paths(snapshot, ["tier-2", "tier-1", "kubernetes.io/hostname"], paths)
    view = build_view("hypernodes", tree, snapshot, None)
    text = render_tree(view)
    assert re.search(r"s6\s+3 nodes\s+24/24", text), text
    assert re.search(r"s0\s+2 nodes\s+16/16", text), text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--topology", "nope"), "nope"),
        (("--flavor", "nope"), "no ResourceFlavor 'nope'"),
    ],
)
def test_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    code, out, err = _run(capsys, "--cluster", str(EXAMPLE), *argv)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_discover_offline(capsys: pytest.CaptureFixture[str]) -> None:
    labels = f"dc={BLOCK},{RACK},kubernetes.io/hostname"
    code, out, _ = _run(capsys, "discover", "--cluster", str(EXAMPLE), "--labels", labels)
    assert code == 0
    found = [d for d in yaml.safe_load_all(out) if d]
    tiers = sorted((d["spec"]["tier"], d["status"]["nodeCount"]) for d in found)
    assert tiers == [(1, 4)] * 4 + [(2, 8)] * 2  # 2 blocks of 2 racks of 4 nodes
    again = _run(capsys, "discover", "--cluster", str(EXAMPLE), "--labels", labels)[1]
    assert again == out  # deterministic names
    code, _, err = _run(capsys, "discover", "--cluster", str(EXAMPLE), "--labels", "dc")
    assert code == 2 and "--labels" in err


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def _needs_chromium() -> None:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing; hack/test.sh installs Debian's chromium")
        pytest.skip("no Chromium here (hack/test.sh installs it)")


def _png_colours(path: Path) -> int:
    """Distinct raw bytes in the PNG's first image data chunk: 1-2 means one flat colour."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    start = data.index(b"IDAT") + 4
    return len(set(data[start : start + 4096]))


def test_html_page_renders_in_chromium(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _needs_chromium()
    page = tmp_path / "topology.html"
    code, _, _ = _run(capsys, "--cluster", str(EXAMPLE), "-o", "html", "--out", str(page))
    assert code == 0
    text = page.read_text()
    assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in text
    drawn = len(re.findall(r'<g class="domain"', text))
    nodes, _, _ = _example_counts()
    assert drawn == 1 + 2 + 4 + nodes  # root, blocks, racks, hosts
    dom = _chromium("--virtual-time-budget=3000", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = re.search(r'data-rendered="(\d+)"', dom.stdout)
    assert rendered is not None, dom.stdout[:2000]
    assert int(rendered.group(1)) == drawn
    shot = tmp_path / "topology.png"
    result = _chromium(f"--screenshot={shot}", "--window-size=1400,900", page.as_uri())
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    assert _png_colours(shot) > 16


def test_html_escapes_names() -> None:
    nodes = [NodeInfo('<b>"x"</b>', labels={"k": "<script>"}, allocatable={"pods": 10})]
    snapshot = ClusterSnapshot.build(nodes, [])
    tree = DomainTree.from_labels(snapshot, ["k"])
    page = render_html(build_view("<t>", tree, snapshot, None))
    assert "<b>" not in page and "&lt;b&gt;" in page
    assert page.count("<script") == 1 and "&lt;script&gt;" in page  # only our own script
