"""The package's layers, checked on the source: imports run one way, the core stays pure, no
module imports another's private names, and no function grows past a screen.

    core (pure)     api, cache, the admission/ungater/webhook decisions
    transport       topogate.kube (client, reflector, events), metrics, files
    state           topogate.state (the owners of controller state), topogate.controllers.writes
    shells          topogate.controllers (admitter, job sync, node failures), ungater
                    controller, webhook server
    top             topogate.runtime (serve), topogate.commands
    cli             topogate.cli
    (tooling)       topogate.testing: may use anything, used by nothing above
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Top-level folders and the import name each installs as (pyproject's package-dir).
FOLDERS = {
    "api": "topogate.api",
    "cache": "topogate.cache",
    "admission": "topogate.admission",
    "ungater": "topogate.ungater",
    "webhooks": "topogate.webhooks",
    "topogate": "topogate",
}
# Each shell is its own group: it may not import another shell.
SHELLS = {
    "topogate.controllers.admitter": "admitter",
    "topogate.controllers.pending": "admitter",
    "topogate.controllers.evictions": "admitter",
    "topogate.controllers.jobsync": "job sync",
    "topogate.controllers.nodefailures": "node failures",
    "topogate.ungater.controller": "ungater",
    "topogate.webhooks.server": "webhook server",
    "topogate.webhooks.serving": "webhook server",
    "topogate.webhooks.catalog": "webhook server",
    "topogate.webhooks.stateview": "webhook server",
    "topogate.webhooks.certs": "webhook server",  # it writes certificate files
    "topogate.webhooks.sharedca": "webhook server",
}
# (layer rank, group) by module prefix; the longest matching prefix wins.
LAYERS: dict[str, tuple[int, str]] = {
    "topogate.api": (0, "core"),
    "topogate.cache": (0, "core"),
    "topogate.admission": (0, "core"),
    "topogate.ungater": (0, "core"),
    "topogate.webhooks": (0, "core"),
    "topogate.kube": (1, "transport"),
    "topogate.metrics": (1, "transport"),
    "topogate.files": (1, "transport"),
    "topogate.clock": (1, "transport"),  # the clocks the core is handed
    "topogate.state": (2, "state"),
    # The Workload writes the admission shells share: below them, so sharing is no shell
    # importing another.
    "topogate.controllers.writes": (2, "writes"),
    "topogate.controllers": (3, "controllers"),
    **{shell: (3, group) for shell, group in SHELLS.items()},
    "topogate.runtime": (4, "runtime"),
    "topogate.commands": (4, "commands"),
    "topogate.cli": (5, "cli"),
    "topogate.__main__": (5, "cli"),
    "topogate.testing": (6, "testing"),
}
# Modules the pure core may not import (I/O, event loops, the API client).
IMPURE = ("asyncio", "aiohttp", "kubernetes", "socket", "subprocess", "threading")
MAX_FUNCTION_LINES = 80


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module


def modules() -> Iterator[Module]:
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT / folder)
            if any((ROOT / folder / p).is_symlink() for p in relative.parents if str(p) != "."):
                continue  # topogate/<component> symlinks: the component is walked itself
            parts = [package, *relative.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            yield Module(".".join(parts), path, ast.parse(path.read_text(), str(path)))


def layer(name: str) -> tuple[int, str] | None:
    matches = [p for p in LAYERS if name == p or name.startswith(p + ".")]
    return LAYERS[max(matches, key=len)] if matches else None


def imports(module: Module) -> Iterator[tuple[str, list[str], int]]:
    """(imported module, imported names, line) with relative imports resolved."""
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target, [a.name for a in node.names], node.lineno


def test_every_module_has_a_layer() -> None:
    found = list(modules())
    assert len(found) > 70
    assert [m.name for m in found if layer(m.name) is None and m.name != "topogate"] == []


def violations(module: Module) -> list[str]:
    """Imports of ``module`` that break the layering: a higher layer, or a sibling of its
    layer from the shells up (a shell reaches another only through the state; commands and
    runtime do not share code)."""
    own = layer(module.name)
    if own is None:
        return []
    found = []
    for target, names, line in imports(module):
        if not target.startswith("topogate"):
            continue
        # `from topogate.x import y` may name a submodule y.
        for imported in [target] + [f"{target}.{n}" for n in names]:
            other = layer(imported)
            if other is None or other == own:
                continue
            if other[0] > own[0] or (other[0] == own[0] and own[0] >= 3):
                found.append(f"{module.name}:{line} imports {imported} ({other[1]})")
                break
    return found


def test_imports_run_one_way() -> None:
    assert [v for module in modules() for v in violations(module)] == []


def test_the_core_is_pure() -> None:
    problems = []
    for module in modules():
        if layer(module.name) != (0, "core"):
            continue
        for target, _, line in imports(module):
            if target.split(".")[0] in IMPURE:
                problems.append(f"{module.name}:{line} imports {target}")
    assert problems == []


def test_one_kubernetes_client() -> None:
    """The package reaches the API server through the ``KubeApi`` seam alone, so FakeKube can
    stand in everywhere: only ``topogate.kube.client`` imports the official package (its async
    REST layer and kubeconfig loading); the tooling may use anything."""
    problems = [
        f"{module.name}:{line} imports {target}"
        for module in modules()
        if module.name != "topogate.kube.client" and layer(module.name) != (6, "testing")
        for target, _, line in imports(module)
        if target.split(".")[0] == "kubernetes"
    ]
    assert problems == []


def test_no_module_imports_another_modules_private_names() -> None:
    problems = [
        f"{module.name}:{line} imports {target}.{name}"
        for module in modules()
        for target, names, line in imports(module)
        if target.startswith("topogate")
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert problems == []


def test_no_function_is_longer_than_a_screen() -> None:
    long = [
        f"{module.name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for module in modules()
        for node in ast.walk(module.tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []


@pytest.mark.parametrize(
    ("name", "source", "expected"),
    [
        (
            "topogate.admission.placement",
            "from topogate.state import ControllerState",
            "topogate.admission.placement:1 imports topogate.state (state)",
        ),
        (
            "topogate.admission.placement",
            "from topogate.runtime import serve",
            "topogate.admission.placement:1 imports topogate.runtime (runtime)",
        ),
        (
            "topogate.ungater.controller",
            "from topogate.controllers.admitter import Admitter",
            "topogate.ungater.controller:1 imports topogate.controllers.admitter (admitter)",
        ),
        (
            "topogate.commands.plan",
            "from ..runtime.serve import Controller",
            "topogate.commands.plan:1 imports topogate.runtime.serve (runtime)",
        ),
    ],
)
def test_the_check_catches_a_wrong_import(name: str, source: str, expected: str) -> None:
    """The real check, on made-up modules: upward, shell to shell, commands to runtime."""
    module = Module(name, ROOT / "x.py", ast.parse(source))
    assert violations(module) == [expected]
