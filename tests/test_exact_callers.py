"""Every caller outside the core says which exact second pass it wants.

The core's placement entry points default to no second pass (``exact=None``), and before
#21 they defaulted to a 50 ms one: a caller that leaves the argument out gets the greedy pass
alone, silently. So `serve`, `plan` and the benchmarks in hack/ each name it, as
``exact_budget()`` (the default budget), ``exact_budget(0)``/``None`` (greedy on purpose), or
a budget of their own; this test reads their source and fails on a call that does not.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Entry point -> how many positional arguments reach ``exact`` (None: keyword only).
ENTRY_POINTS: dict[str, int | None] = {
    "place": None,
    "joint_fit": None,
    "build_placer": 4,
    "SnapshotPlacer": 4,
}
CORE_MODULES = (
    "topogate.admission.placement",
    "topogate.admission.podsets",
    "topogate.admission.cycle",
)


def _callers() -> list[Path]:
    """The shells, commands and benchmarks (the core passes ``exact`` along itself)."""
    listed = subprocess.run(
        ["git", "ls-files", "topogate", "webhooks", "ungater", "hack"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / p for p in listed if p.endswith(".py") and (ROOT / p).is_file()]


def calls_without_exact(source: str) -> list[str]:
    """``name:line`` of each call of a core entry point, imported from the core, that does not
    pass ``exact``."""
    tree = ast.parse(source)
    imported = {
        alias.asname or alias.name: alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in CORE_MODULES
        for alias in node.names
        if alias.name in ENTRY_POINTS
    }
    missing = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name is None or name not in imported:
            continue
        name = imported[name]
        positional = ENTRY_POINTS[name]
        by_keyword = any(k.arg in ("exact", None) for k in node.keywords)  # None: **kwargs
        by_position = positional is not None and len(node.args) >= positional
        if not (by_keyword or by_position):
            missing.append(f"{name}:{node.lineno}")
    return missing


def test_every_caller_outside_the_core_names_its_exact_pass() -> None:
    missing = [
        f"{path.relative_to(ROOT)}:{call}"
        for path in _callers()
        for call in calls_without_exact(path.read_text())
    ]
    assert missing == [], "pass exact=exact_budget() (or None, on purpose): " + ", ".join(missing)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from topogate.admission.placement import place\nplace(t, s, r, topology_name='x')\n", 1),
        ("from topogate.admission.placement import place\nplace(t, s, r, exact=None)\n", 0),
        ("from topogate.admission.podsets import build_placer\nbuild_placer(s, c, n)\n", 1),
        ("from topogate.admission.podsets import build_placer\nbuild_placer(s, c, n, e)\n", 0),
        ("from topogate.admission.cycle import SnapshotPlacer\nSnapshotPlacer(s, {})\n", 1),
        ("def place(one, held): ...\nplace(one, held)\n", 0),  # a local function of that name
    ],
)
def test_the_check_catches_a_call_without_exact(source: str, expected: int) -> None:
    assert len(calls_without_exact(source)) == expected
