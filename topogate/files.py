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
from yaml import events
from yaml.constructor import SafeConstructor
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

from topogate.api.errors import InputError
from topogate.api.validation import object_name
from topogate.cache.hypernodes import DiscoveryType, discovery_config, missing_label_source

_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = Path("-")  # a path of "-" reads standard input (YAML or JSON), as kubectl's -f -
STDIN_NAME = "<stdin>"
# Deeper than any manifest nests, and below libyaml's own limit (1,000 flow or block levels
# in 0.2.6; none in 0.2.5, whose recursive composer overflowed the C stack near 30,000).
MAX_DEPTH = 500


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
            yield json.loads(text, object_pairs_hook=_unique_keys)
        else:
            yield from _yaml_documents(text, path_name)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (kubectl does; json keeps the last)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"key {key!r} is given twice in one object (kubectl refuses it)")
            seen.add(key)
    return out


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
    except _TooDeep as exc:
        raise InputError(str(exc), where=where, field=field) from None
    except yaml.MarkedYAMLError as exc:
        if exc.problem_mark is not None and "maximum nesting depth" in str(exc.problem):
            # libyaml's own limit (0.2.6), met while it scans ahead of the events
            deep = f"is nested too deeply ({_at(exc.problem_mark)})"
            raise InputError(deep, where=where, field=field) from None
        raise InputError(f"{problem}: {_marked(exc)}", where=where, field=field) from None
    except (yaml.YAMLError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
        message = f"{problem}: {exc}".replace("\n", " ")
        raise InputError(message, where=where, field=field) from None


def _at(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _marked(exc: yaml.MarkedYAMLError) -> str:
    """A parser error by line and column only: the file is named by the InputError (the
    parser's own text names a ``<unicode string>``)."""
    problem = exc.problem or exc.context or "cannot be parsed"
    text = f"{_at(exc.problem_mark)}: {problem}" if exc.problem_mark else problem
    if exc.context and exc.problem and exc.context_mark is not None:
        text += f" ({exc.context} at {_at(exc.context_mark)})"
    return text.replace("\n", " ")


if yaml.__with_libyaml__:  # libyaml: the C parser, ten times faster than PyYAML's
    from yaml.cyaml import CParser  # type: ignore[attr-defined]

    class _Events(CParser, SafeConstructor, Resolver):
        def __init__(self, text: str) -> None:
            CParser.__init__(self, text)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

else:  # pragma: no cover - PyYAML without libyaml

    class _Events(  # type: ignore[no-redef]
        yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, SafeConstructor, Resolver
    ):
        def __init__(self, text: str) -> None:
            yaml.reader.Reader.__init__(self, text)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)


_STR, _MAP, _SEQ = (f"tag:yaml.org,2002:{t}" for t in ("str", "map", "seq"))
_MERGE, _VALUE = "tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"


class _TooDeep(ValueError):
    pass


_NO_KEY: Any = object()  # a mapping waiting for its next key
_MERGE_KEY: Any = object()  # the key ``<<``: its value is merged in, as PyYAML does


class _Frame:
    """An open mapping or list, with the key whose value comes next."""

    __slots__ = ("is_map", "key", "merges", "value")

    def __init__(self, value: dict[Any, Any] | list[Any]) -> None:
        self.value: Any = value
        self.is_map = isinstance(value, dict)
        self.key: Any = _NO_KEY
        self.merges: list[Any] = []


class _Builder:
    """YAML documents built straight from the parser's events, as SafeLoader builds them
    (the same tags and scalars), but refusing what kubectl refuses and PyYAML accepts: a key
    given twice in one mapping (PyYAML keeps the last; two files pasted together without
    ``---`` read as one object that way). Without the composer's node tree it is five times
    faster, and depth is counted, so nesting cannot overflow a stack."""

    def __init__(self, text: str) -> None:
        self.events = _Events(text)
        self.resolvers = Resolver.yaml_implicit_resolvers
        self.constructors = SafeConstructor.yaml_constructors

    def documents(self) -> Iterator[Any]:
        get = self.events.get_event
        get()  # StreamStartEvent
        while not isinstance(get(), events.StreamEndEvent):  # a DocumentStartEvent
            yield self._document(get)

    def _scalar(self, event: events.ScalarEvent) -> Any:
        tag, value = event.tag, event.value
        if tag is None or tag == "!":
            tag = _STR
            if event.implicit[0]:  # plain: resolved by its text, as Resolver.resolve does
                for candidate, pattern in self.resolvers.get(value[:1], ()):
                    if pattern.match(value):
                        tag = candidate
                        break
        if tag in (_STR, _VALUE):
            return value
        if tag == _MERGE:
            return _MERGE_KEY
        construct = self.constructors.get(tag)
        if construct is None:
            raise ValueError(f"{_at(event.start_mark)}: the tag {tag} is not read")
        start: Any = event.start_mark  # libyaml's Mark or PyYAML's
        end: Any = event.end_mark
        node = ScalarNode(tag, value, start, end, event.style)
        try:
            return construct(self.events, node)
        except ValueError as exc:
            raise ValueError(f"{exc} ({_at(event.start_mark)})") from None

    def _document(self, get: Any) -> Any:
        anchors: dict[str, Any] = {}
        stack: list[_Frame] = []
        root: Any = None
        scalar_event, alias_event = events.ScalarEvent, events.AliasEvent
        map_start, seq_start = events.MappingStartEvent, events.SequenceStartEvent
        while True:
            event = get()
            kind = type(event)
            if kind is scalar_event:
                value = self._scalar(event)
                if event.anchor is not None:
                    anchors[event.anchor] = value
            elif kind is alias_event:
                if event.anchor not in anchors:
                    raise ValueError(f"{_at(event.start_mark)}: no anchor &{event.anchor}")
                value = anchors[event.anchor]
            elif kind is map_start or kind is seq_start:
                allowed = (None, "!", _MAP if kind is map_start else _SEQ)
                if event.tag not in allowed:
                    raise ValueError(
                        f"{_at(event.start_mark)}: the tag {event.tag} is not read "
                        "(write a plain mapping or list)"
                    )
                value = {} if kind is map_start else []
                if event.anchor is not None:
                    anchors[event.anchor] = value
                if len(stack) >= MAX_DEPTH:
                    raise _TooDeep(f"is nested too deeply ({_at(event.start_mark)})")
                if stack:
                    self._add(stack[-1], value, event)
                else:
                    root = value
                stack.append(_Frame(value))
                continue
            elif kind is events.MappingEndEvent or kind is events.SequenceEndEvent:
                frame = stack.pop()
                if frame.merges:
                    _merge(frame, event)
                continue
            else:  # DocumentEndEvent
                return root
            if stack:
                self._add(stack[-1], value, event)
            else:
                root = value

    @staticmethod
    def _add(frame: _Frame, value: Any, event: Any) -> None:
        if not frame.is_map:
            frame.value.append(value)
            return
        key = frame.key
        if key is _MERGE_KEY:
            frame.merges.append((value, event.start_mark))
            frame.key = _NO_KEY
        elif key is not _NO_KEY:
            frame.value[key] = value
            frame.key = _NO_KEY
        elif isinstance(value, (dict, list)):
            raise ValueError(f"{_at(event.start_mark)}: a key must be a string, not a collection")
        elif value in frame.value:
            raise ValueError(
                f"{_at(event.start_mark)}: key {value!r} is given twice in one mapping "
                "(kubectl refuses it; a missing --- between two documents reads that way)"
            )
        else:
            frame.key = value


def _merge(frame: _Frame, event: Any) -> None:
    """``<<: *anchor`` (or a list of them): the anchored mappings' keys first, the first
    mapping giving a key winning, then the mapping's own keys, as PyYAML merges them."""
    merged: dict[Any, Any] = {}
    for value, mark in frame.merges:
        sources = value if isinstance(value, list) else [value]
        if not all(isinstance(source, dict) for source in sources):
            raise ValueError(f"{_at(mark)}: << merges a mapping or a list of mappings")
        for source in sources:
            for key, item in source.items():
                merged.setdefault(key, item)
    own = dict(frame.value)
    frame.value.clear()
    frame.value.update(merged)
    frame.value.update(own)


def _yaml_documents(text: str, path_name: str) -> Iterator[Any]:
    """The YAML documents, refusing aliases that expand far beyond the text: PyYAML shares an
    aliased value, but every reader walks (and str() prints) it once per reference, so nine
    lines of nested ``*alias`` lists would cost minutes ("billion laughs")."""
    loaded = _Builder(text).documents()
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
                    yield Document(_name(file), _typed_item(raw, item))
            else:
                yield Document(_name(file), raw)


def _typed_item(listing: Mapping[str, Any], item: Mapping[str, Any]) -> Mapping[str, Any]:
    """An item of a typed list (a NodeList, as the API server returns it) carries no kind or
    apiVersion of its own: they are the list's, less ``List``."""
    kind = listing.get("kind")
    if "kind" in item or not isinstance(kind, str) or kind == "List":
        return item
    return {"kind": kind.removesuffix("List"), "apiVersion": listing.get("apiVersion"), **item}


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
