"""The package's layers, checked on the source: every module is placed in a layer, imports run
one way (between modules and between folders), the core stays pure (no I/O, clock, randomness
or event loop), one module talks to Kubernetes, no module imports another's private names, and
no function grows past a screen.

    core (pure)     api, cache, the admission/ungater/webhook decisions
    transport       topogate.kube (client, reflector, events, blocking), metrics, files, clock
    state           topogate.state (the owners of controller state), topogate.controllers.writes
    shells          topogate.controllers (admitter with pending and evictions, job sync, node
                    failures), ungater controller, webhook server
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
    "topogate.controllers.fairstatus": "admitter",
    "topogate.controllers.jobsync": "job sync",
    "topogate.controllers.nodefailures": "node failures",
    "topogate.controllers.gangfailures": "gang failures",
    "topogate.ungater.controller": "ungater",
    "topogate.webhooks.server": "webhook server",
    "topogate.webhooks.serving": "webhook server",
    "topogate.webhooks.catalog": "webhook server",
    "topogate.webhooks.stateview": "webhook server",
    "topogate.webhooks.certs": "webhook server",  # it writes certificate files
    "topogate.webhooks.sharedca": "webhook server",
}
CORE = (0, "core")
# Where every module sits, as (layer rank, group). A key ending in ".*" places a package whose
# modules are all of one layer, today's and tomorrow's; any other key places exactly one
# module. So a new module in a folder of two layers (ungater/, webhooks/, controllers/, the
# top of topogate/) fails test_every_module_has_a_layer until its layer is chosen here.
LAYERS: dict[str, tuple[int, str]] = {
    "topogate.api.*": CORE,
    "topogate.cache.*": CORE,
    "topogate.admission.*": CORE,
    "topogate.ungater": CORE,
    "topogate.ungater.ranks": CORE,
    "topogate.ungater.gpus": CORE,
    "topogate.webhooks": CORE,
    "topogate.webhooks.review": CORE,
    "topogate.webhooks.configuration": CORE,
    "topogate.webhooks.options": CORE,
    "topogate.kube.*": (1, "transport"),
    "topogate.metrics": (1, "transport"),
    "topogate.files": (1, "transport"),
    "topogate.clock": (1, "transport"),  # the clocks the core is handed
    "topogate.state.*": (2, "state"),
    # The Workload writes the admission shells share: below them, so sharing is no shell
    # importing another.
    "topogate.controllers.writes": (2, "writes"),
    "topogate.controllers": (3, "controllers"),
    **{shell: (3, group) for shell, group in SHELLS.items()},
    "topogate.runtime.*": (4, "runtime"),
    "topogate.commands.*": (4, "commands"),
    "topogate": (5, "cli"),  # the package's __init__: its version only
    "topogate.cli": (5, "cli"),
    "topogate.__main__": (5, "cli"),
    "topogate.testing.*": (6, "testing"),
}
# What the pure core may not import: I/O, clocks, randomness, event loops, the API client.
IMPURE = (
    *("asyncio", "aiohttp", "kubernetes", "socket", "subprocess", "threading"),
    *("os", "time", "random", "shutil", "tempfile", "pathlib", "sys"),
)
# Calls that read the world: files, and the wall clock through datetime.
IMPURE_CALLS = ("open", "now", "utcnow", "today", "fromtimestamp")
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


MODULE_NAMES = frozenset(m.name for m in modules())


def layer(name: str) -> tuple[int, str] | None:
    """The layer of a module, or of a name inside one (``topogate.x.y.Name``)."""
    matches = [
        key
        for key in LAYERS
        if name == key.removesuffix(".*") or name.startswith(key.removesuffix(".*") + ".")
    ]
    return LAYERS[max(matches, key=len)] if matches else None


def placed(name: str) -> bool:
    """Whether ``name`` is a module LAYERS places: by its own key, or inside a whole package."""
    return name in LAYERS or any(
        key.endswith(".*") and (name + ".").startswith(key[:-1]) for key in LAYERS
    )


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
    assert [m.name for m in found if not placed(m.name)] == []


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
        # `from topogate.x import y` may name a submodule y: then y is what is imported.
        submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULE_NAMES]
        for imported in submodules or [target]:
            other = layer(imported)
            if other is None or other == own:
                continue
            if other[0] > own[0] or (other[0] == own[0] and own[0] >= 3):
                found.append(f"{module.name}:{line} imports {imported} ({other[1]})")
                break
    return found


def test_imports_run_one_way() -> None:
    assert [v for module in modules() for v in violations(module)] == []


def impurities(module: Module) -> list[str]:
    """What in ``module`` reaches outside the process's inputs: an impure import, ``open()``,
    or a clock read through ``datetime``."""
    found = [
        f"{module.name}:{line} imports {target}"
        for target, _, line in imports(module)
        if target.split(".")[0] in IMPURE
    ]
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name in IMPURE_CALLS and (name == "open" or isinstance(func, ast.Attribute)):
            found.append(f"{module.name}:{node.lineno} calls {name}()")
    return found


def test_the_core_is_pure() -> None:
    assert [p for m in modules() if layer(m.name) == CORE for p in impurities(m)] == []


def test_folders_import_one_way() -> None:
    """Between folders every arrow points down: no folder imports one that imports it back
    (a folder of two layers, such as ungater/, is fine as long as nothing below imports it)."""

    def folder(name: str) -> str:  # a module at the top of topogate/ is a room of its own
        package = ".".join(name.split(".")[:2])
        return package if package in FOLDER_PACKAGES else name

    names = {m.name for m in modules()}
    edges: dict[str, set[str]] = {}
    for module in modules():
        for target, imported, _ in imports(module):
            for other in [target] + [f"{target}.{n}" for n in imported]:
                if other in names and folder(other) != folder(module.name):
                    edges.setdefault(folder(module.name), set()).add(folder(other))
    back = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if a in edges.get(b, ()))
    assert back == []
    assert {"topogate.admission", "topogate.state"} <= edges.keys()  # the walk saw imports


FOLDER_PACKAGES = {
    "topogate.api",
    "topogate.cache",
    "topogate.admission",
    "topogate.ungater",
    "topogate.webhooks",
    "topogate.kube",
    "topogate.state",
    "topogate.controllers",
    "topogate.runtime",
    "topogate.commands",
    "topogate.testing",
}


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
            "topogate.admission.placement:1 imports topogate.runtime.serve (runtime)",
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


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import time", "topogate.admission.x:1 imports time"),
        ("from os import environ", "topogate.admission.x:1 imports os"),
        ("import random", "topogate.admission.x:1 imports random"),
        ("data = open('f').read()", "topogate.admission.x:1 calls open()"),
        ("from datetime import datetime\nt = datetime.now()", "topogate.admission.x:2 calls now()"),
    ],
)
def test_the_purity_check_catches_a_clock_a_file_or_randomness(source: str, expected: str) -> None:
    module = Module("topogate.admission.x", ROOT / "x.py", ast.parse(source))
    assert impurities(module) == [expected]


def test_a_new_module_in_a_folder_of_two_layers_is_not_placed_by_its_folder() -> None:
    assert placed("topogate.admission.anything")  # admission/ is the core, whole
    assert not placed("topogate.webhooks.anything")  # shells and core side by side
    assert not placed("topogate.ungater.anything")
    assert not placed("topogate.controllers.anything")
    assert not placed("topogate.anything")
