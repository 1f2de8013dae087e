"""Reading Kubernetes manifests from files: YAML (multi-document) or JSON, a file or a
directory of them, v1 Lists expanded. Used by the commands and by `serve`'s configuration."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from topogate.api.errors import InputError
from topogate.api.validation import object_name
from topogate.cache.hypernodes import DiscoveryType, discovery_config, missing_label_source

_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = Path("-")  # a path of "-" reads standard input (YAML or JSON), as kubectl's -f -
STDIN_NAME = "<stdin>"
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class Document:
    source: str
    obj: Mapping[str, Any]

    @property
    def where(self) -> str:
        return f"{self.source}: {object_name(self.obj)}"


def _files(path: Path) -> list[Path]:
    if path == STDIN:
        return [path]
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _SUFFIXES)
    if path.is_file():
        return [path]
    raise InputError("no such file or directory", where=str(path))


def _read(path: Path) -> str:
    try:
        if path == STDIN:
            return sys.stdin.read()
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", where=_name(path)) from None


def _name(path: Path) -> str:
    return STDIN_NAME if path == STDIN else str(path)


def _parse(path: Path) -> Iterator[Any]:
    text = _read(path)
    path_name = _name(path)
    # stdin is read as YAML, and JSON is YAML
    with _refusing("invalid JSON" if path.suffix == ".json" else "invalid YAML", path_name):
        if path.suffix == ".json":
            yield json.loads(text)
        else:
            yield from _yaml_documents(text, path_name)


@contextlib.contextmanager
def _refusing(problem: str, where: str, field: str = "") -> Iterator[None]:
    """Text that does not parse as an InputError naming where it came from: a syntax error,
    nesting thousands deep (no manifest nests like that), or a scalar that does not convert
    (2001-13-45, 5,000 digits)."""
    try:
        yield
    except InputError:
        raise
    except RecursionError:
        raise InputError("is nested too deeply", where=where, field=field) from None
    except (yaml.YAMLError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
        message = f"{problem}: {exc}".replace("\n", " ")
        raise InputError(message, where=where, field=field) from None


def _yaml_documents(text: str, path_name: str) -> Iterator[Any]:
    """The YAML documents, refusing aliases that expand far beyond the text: PyYAML shares an
    aliased value, but every reader walks (and str() prints) it once per reference, so nine
    lines of nested ``*alias`` lists would cost minutes ("billion laughs")."""
    loaded = yaml.load_all(text, Loader=_Loader)
    if "*" not in text:  # no alias: every value is written out once
        yield from loaded
        return
    budget = 100 * len(text) + 100_000
    for i, document in enumerate(loaded):
        size = _expanded_size(document)
        if size is None:
            raise InputError(
                f"document {i + 1} uses an alias (*name) inside its own anchor (&name): "
                "a value that contains itself",
                where=path_name,
            )
        if size > budget:
            raise InputError(
                f"document {i + 1} uses aliases (*name) that expand to {size} values, more "
                f"than the {budget} this text may hold; write the repeated values out",
                where=path_name,
            )
        yield document


def _expanded_size(root: Any) -> int | None:
    """How many values the document has with every alias written out; None when a value
    contains itself. Each shared value is counted once and multiplied, never walked again."""
    if not isinstance(root, (dict, list)):
        return 1
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        children = list(node.values()) if isinstance(node, dict) else node
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes.get(id(c), 1) for c in children)
        elif key in open_nodes:
            return None  # reached again from inside itself
        elif key not in sizes:
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in children if isinstance(c, (dict, list)))
    return sizes.get(id(root), 1)


def documents(path: Path) -> Iterator[Document]:
    """Every object in a file, a directory's *.yaml/*.yml/*.json, or stdin (``-``), v1
    Lists expanded."""
    for file in _files(path):
        for i, raw in enumerate(_parse(file)):
            if raw is None:
                continue  # an empty YAML document (e.g. a trailing ---)
            where = f"{_name(file)} (document {i + 1})"
            if not isinstance(raw, Mapping):
                raise InputError("is not an object", where=where)
            if raw.get("kind") == "List" or str(raw.get("kind", "")).endswith("List"):
                items = raw.get("items")
                if not isinstance(items, list):
                    raise InputError("must be a list", where=where, field="items")
                for j, item in enumerate(items):
                    if not isinstance(item, Mapping):
                        raise InputError("is not an object", where=where, field=f"items[{j}]")
                    yield Document(_name(file), item)
            else:
                yield Document(_name(file), raw)


def load_single(path: Path) -> Document:
    """Exactly one object (the workload manifest)."""
    docs = list(documents(path))
    if len(docs) != 1:
        raise InputError(f"must hold exactly one object, found {len(docs)}", where=_name(path))
    return docs[0]


def load_discovery_config(path: Path) -> list[DiscoveryType]:
    """Volcano's ``volcano-controller.conf`` payload (YAML), or a ConfigMap that holds it.
    One that yields no label source is refused with what it lacks (``serve`` and
    ``topology discover`` would otherwise run without the discovery asked for)."""
    payload = _discovery_payload(path)
    types = discovery_config(payload, where=str(path))
    if not types:
        field, message = missing_label_source(payload)
        raise InputError(message, where=str(path), field=field)
    return types


def _discovery_payload(path: Path) -> Mapping[str, Any]:
    """The ``volcano-controller.conf`` mapping in ``path`` (itself, or a ConfigMap's)."""
    docs = list(documents(path))
    if len(docs) != 1:
        raise InputError(f"must hold exactly one document, found {len(docs)}", where=str(path))
    obj: Any = docs[0].obj
    if isinstance(obj, dict) and obj.get("kind") == "ConfigMap":
        obj = _config_map_payload(obj.get("data"), f"{path}: ConfigMap")
    if not isinstance(obj, dict):
        raise InputError("must be a mapping", where=str(path))
    return obj


def _config_map_payload(data: Any, where: str) -> Any:
    """The YAML in a ConfigMap's data[volcano-controller.conf], read as files are (aliases
    bounded, depth refused)."""
    if not isinstance(data, Mapping):
        raise InputError("must be an object", where=where, field="data")
    key = "volcano-controller.conf"
    text = data.get(key)
    if text is None:
        raise InputError(f"has no data[{key}]", where=where, field="data")
    if not isinstance(text, str):
        raise InputError("must be a string (the file's text)", where=where, field=f"data[{key}]")
    with _refusing("is not YAML", where, f"data[{key}]"):
        loaded = list(_yaml_documents(text, where))
    return loaded[0] if len(loaded) == 1 else None
