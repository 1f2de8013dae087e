"""Volcano's HyperNode (``topology.volcano.sh/v1alpha1``, cluster-scoped) and its own checks.

A HyperNode is one network performance domain: a set of nodes (``type: Node``) or of smaller
HyperNodes (``type: HyperNode``) at a numbered tier, tier 1 being the closest. This module
checks one object at a time and reports every problem at once, each naming its field the way
the API server does. Checks that need the other objects (cycles, two parents, tier order)
belong to the forest, ``topogate.cache.hypernodes``.

Stricter than Volcano on purpose, because Volcano accepts these and then misbehaves:

- regex patterns must compile under RE2 (linear time), so a hostile pattern cannot hang the
  controller; Go's regexp, which Volcano uses, is RE2 as well;
- a ``HyperNode`` member must use ``exactMatch`` (Volcano silently ignores the other
  selectors there, and label or regex membership between HyperNodes invites cycles);
- an empty ``labelMatch`` is refused (Volcano lets it match no node at all);
- a HyperNode listing itself as a member is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

import re2

from .errors import InputError
from .names import label_key_problem, label_value_problem

API_VERSION = "topology.volcano.sh/v1alpha1"
KIND = "HyperNode"
NODE = "Node"
HYPERNODE = "HyperNode"
MEMBER_TYPES = (NODE, HYPERNODE)
SELECTORS = ("exactMatch", "regexMatch", "labelMatch")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
MAX_NAME = 253
MAX_TIER_NAME = 253
MAX_PATTERN = 1024

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SHOWN_VALUE = 80  # longer values are cut in messages


class Requirement(NamedTuple):
    """One ``matchExpressions`` entry: ``(key, operator, values)``."""

    key: str
    operator: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: dict[str, str] = field(default_factory=dict, hash=False)
    match_expressions: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class Member:
    """One member; exactly one of ``exact``, ``regex`` and ``labels`` is set."""

    type: str  # NODE | HYPERNODE
    exact: str | None = None
    regex: str | None = None
    labels: LabelSelector | None = None


@dataclass(frozen=True, slots=True)
class HyperNode:
    name: str
    tier: int
    tier_name: str = ""  # "" when the object sets none
    members: tuple[Member, ...] = ()
    labels: dict[str, str] = field(default_factory=dict, hash=False)


# --- messages in the API server's style -----------------------------------------------------


def _shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= _SHOWN_VALUE else text[: _SHOWN_VALUE - 3] + "..."


def _required(path: str, hint: str) -> str:
    return f"{path}: Required value: {hint}"


def _invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {_shown(value)}: {detail}"


def _unsupported(path: str, value: Any, supported: tuple[str, ...]) -> str:
    choices = ", ".join(json.dumps(s) for s in supported)
    return f"{path}: Unsupported value: {_shown(value)}: supported values: {choices}"


def _forbidden(path: str, detail: str) -> str:
    return f"{path}: Forbidden: {detail}"


def dns_subdomain_problem(name: str) -> str | None:
    """Why ``name`` is not a DNS-1123 subdomain (an object name), or None."""
    if not name or len(name) > MAX_NAME or not _DNS_SUBDOMAIN.match(name):
        return (
            f"must be a DNS-1123 subdomain: 1-{MAX_NAME} lowercase letters, digits, '-' and "
            "'.', starting and ending with a letter or digit"
        )
    return None


# --- regular expressions ---------------------------------------------------------------------


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # the error reaches the user in a message, not on stderr
    return options


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, _options())


def regex_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not usable as a regexMatch pattern, or None."""
    if not pattern:
        return "must not be empty; use a pattern such as ^gpu-node-[0-9]+$"
    if len(pattern) > MAX_PATTERN:
        return f"must be at most {MAX_PATTERN} characters; split it over several members"
    try:
        _compiled(pattern)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid pattern"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        return (
            f"does not compile as an RE2 regular expression ({reason}); RE2, like Go's "
            "regexp, has no backreferences or lookaround"
        )
    return None


def regex_matches(pattern: str, node_name: str) -> bool:
    """Whether ``pattern`` occurs anywhere in ``node_name`` (unanchored, as Go's MatchString).

    RE2 runs in time linear in the name, whatever the pattern. A pattern that does not
    compile matches nothing.
    """
    try:
        return _compiled(pattern).search(node_name) is not None
    except re2.error:
        return False


# --- label selectors -------------------------------------------------------------------------


def _requirement_matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    if req.operator == "Exists":
        return present
    if req.operator == "DoesNotExist":
        return not present
    if req.operator == "In":
        return present and labels[req.key] in req.values
    if req.operator == "NotIn":
        return not present or labels[req.key] not in req.values
    return False


def matches_selector(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Whether a node with ``labels`` is selected.

    An empty selector selects nothing: that is Volcano's labelMatch behaviour (a Kubernetes
    LabelSelector would select everything, which is never what a HyperNode means).
    """
    if not selector.match_labels and not selector.match_expressions:
        return False
    if any(labels.get(k) != v for k, v in selector.match_labels.items()):
        return False
    return all(_requirement_matches(req, labels) for req in selector.match_expressions)


# --- per-object validation -------------------------------------------------------------------


def _name_problems(name: Any) -> list[str]:
    path = "metadata.name"
    if name is None or name == "":
        return [_required(path, "a HyperNode needs a name")]
    if not isinstance(name, str):
        return [_invalid(path, name, "must be a string")]
    problem = dns_subdomain_problem(name)
    return [_invalid(path, name, problem)] if problem else []


def _string_map_problems(value: Any, path: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [_invalid(path, value, "must be a map of strings to strings")]
    problems: list[str] = []
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            problems.append(_invalid(f"{path}[{key}]", item, "keys and values must be strings"))
            continue
        key_problem = label_key_problem(key)
        if key_problem:
            problems.append(_invalid(path, key, key_problem))
        value_problem = label_value_problem(item)
        if value_problem:
            problems.append(_invalid(f"{path}[{key}]", item, value_problem))
    return problems


def _tier_problems(spec: Mapping[str, Any]) -> list[str]:
    tier = spec.get("tier")
    if tier is None:
        return [_required("spec.tier", "set an integer tier; 1 is the closest network domain")]
    if isinstance(tier, bool) or not isinstance(tier, int):
        return [_invalid("spec.tier", tier, "must be an integer (write tier: 1, not tier: '1')")]
    if tier < 0:
        return [_invalid("spec.tier", tier, "must be greater than or equal to 0")]
    return []


def _tier_name_problems(spec: Mapping[str, Any]) -> list[str]:
    tier_name = spec.get("tierName")
    if tier_name is None:
        return []
    if not isinstance(tier_name, str):
        return [_invalid("spec.tierName", tier_name, "must be a string")]
    if len(tier_name) > MAX_TIER_NAME:
        return [_invalid("spec.tierName", tier_name, f"must be at most {MAX_TIER_NAME} characters")]
    return []


def _exact_problems(exact: Any, path: str) -> list[str]:
    if not isinstance(exact, Mapping):
        return [_invalid(path, exact, "must be an object such as {name: node-1}")]
    name = exact.get("name")
    if name is None or name == "":
        return [_required(f"{path}.name", "name the node or HyperNode")]
    if not isinstance(name, str):
        return [_invalid(f"{path}.name", name, "must be a string")]
    problem = dns_subdomain_problem(name)
    return [_invalid(f"{path}.name", name, problem)] if problem else []


def _regex_problems(regex: Any, path: str) -> list[str]:
    if not isinstance(regex, Mapping):
        return [_invalid(path, regex, "must be an object such as {pattern: ^node-[0-9]+$}")]
    pattern = regex.get("pattern")
    if pattern is None:
        return [_required(f"{path}.pattern", "give a regular expression over node names")]
    if not isinstance(pattern, str):
        return [_invalid(f"{path}.pattern", pattern, "must be a string")]
    problem = regex_problem(pattern)
    return [_invalid(f"{path}.pattern", pattern, problem)] if problem else []


def _expression_problems(expr: Any, path: str) -> list[str]:
    if not isinstance(expr, Mapping):
        return [_invalid(path, expr, "must be an object with key, operator and values")]
    problems: list[str] = []
    key = expr.get("key")
    if not isinstance(key, str) or not key:
        problems.append(_required(f"{path}.key", "name the node label"))
    elif problem := label_key_problem(key):
        problems.append(_invalid(f"{path}.key", key, problem))
    operator = expr.get("operator")
    if operator not in OPERATORS:
        problems.append(_unsupported(f"{path}.operator", operator, OPERATORS))
    values = expr.get("values")
    if values is not None and not isinstance(values, list):
        return [*problems, _invalid(f"{path}.values", values, "must be a list of strings")]
    values = values or []
    if operator in ("In", "NotIn") and not values:
        problems.append(
            _required(f"{path}.values", f"operator {operator} needs at least one value")
        )
    if operator in ("Exists", "DoesNotExist") and values:
        problems.append(
            _forbidden(f"{path}.values", f"operator {operator} takes no values; remove them")
        )
    for i, value in enumerate(values):
        if not isinstance(value, str):
            problems.append(_invalid(f"{path}.values[{i}]", value, "must be a string"))
        elif problem := label_value_problem(value):
            problems.append(_invalid(f"{path}.values[{i}]", value, problem))
    return problems


def _label_match_problems(selector: Any, path: str) -> list[str]:
    if not isinstance(selector, Mapping):
        return [_invalid(path, selector, "must be an object with matchLabels or matchExpressions")]
    labels = selector.get("matchLabels")
    expressions = selector.get("matchExpressions")
    if not labels and not expressions:
        return [
            _invalid(
                path,
                selector,
                "selects no node (Volcano matches nothing with an empty labelMatch); "
                "give matchLabels or matchExpressions",
            )
        ]
    problems = _string_map_problems(labels, f"{path}.matchLabels")
    if expressions is not None and not isinstance(expressions, list):
        return [*problems, _invalid(f"{path}.matchExpressions", expressions, "must be a list")]
    for i, expr in enumerate(expressions or []):
        problems += _expression_problems(expr, f"{path}.matchExpressions[{i}]")
    return problems


def _selector_problems(
    selector: Mapping[str, Any], member_type: Any, own_name: Any, path: str
) -> list[str]:
    chosen = [key for key in SELECTORS if selector.get(key) is not None]
    problems: list[str] = []
    if len(chosen) != 1:
        problems.append(
            _invalid(
                path, selector, "exactly one of exactMatch, regexMatch, labelMatch must be set"
            )
        )
    if "exactMatch" in chosen:
        problems += _exact_problems(selector["exactMatch"], f"{path}.exactMatch")
        name = (
            selector["exactMatch"].get("name")
            if isinstance(selector["exactMatch"], Mapping)
            else None
        )
        if member_type == HYPERNODE and own_name and name == own_name:
            problems.append(
                _invalid(f"{path}.exactMatch.name", name, "a HyperNode cannot be its own member")
            )
    if "regexMatch" in chosen:
        problems += _regex_problems(selector["regexMatch"], f"{path}.regexMatch")
    if "labelMatch" in chosen:
        problems += _label_match_problems(selector["labelMatch"], f"{path}.labelMatch")
    if member_type == HYPERNODE:
        for key in chosen:
            if key != "exactMatch":
                problems.append(
                    _forbidden(
                        f"{path}.{key}",
                        "a HyperNode member must be named with exactMatch (Volcano ignores "
                        f"{key} for HyperNode members, and it could form cycles); "
                        "use one exactMatch member per child HyperNode",
                    )
                )
    return problems


def _member_problems(member: Any, own_name: Any, path: str) -> list[str]:
    if not isinstance(member, Mapping):
        return [_invalid(path, member, "must be an object with type and selector")]
    problems: list[str] = []
    member_type = member.get("type")
    if member_type is None:
        problems.append(_required(f"{path}.type", "set type to Node or HyperNode"))
    elif member_type not in MEMBER_TYPES:
        problems.append(_unsupported(f"{path}.type", member_type, MEMBER_TYPES))
    selector = member.get("selector")
    if selector is None:
        problems.append(
            _required(f"{path}.selector", "set one of exactMatch, regexMatch, labelMatch")
        )
    elif not isinstance(selector, Mapping):
        problems.append(_invalid(f"{path}.selector", selector, "must be an object"))
    else:
        problems += _selector_problems(selector, member_type, own_name, f"{path}.selector")
    return problems


def _members_problems(spec: Mapping[str, Any], own_name: Any) -> list[str]:
    members = spec.get("members")
    if members is None or members == []:
        return [_required("spec.members", "a HyperNode needs at least one member")]
    if not isinstance(members, list):
        return [_invalid("spec.members", members, "must be a list")]
    problems: list[str] = []
    for i, member in enumerate(members):
        problems += _member_problems(member, own_name, f"spec.members[{i}]")
    return problems


def hypernode_problems(obj: Mapping[str, Any]) -> list[str]:
    """Every problem of one HyperNode object, each naming its field; [] when it is valid."""
    problems: list[str] = []
    if obj.get("apiVersion") != API_VERSION:
        problems.append(_unsupported("apiVersion", obj.get("apiVersion"), (API_VERSION,)))
    if obj.get("kind") != KIND:
        problems.append(_unsupported("kind", obj.get("kind"), (KIND,)))
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        problems.append(_required("metadata", "a HyperNode needs metadata.name"))
        meta = {}
    problems += _name_problems(meta.get("name"))
    problems += _string_map_problems(meta.get("labels"), "metadata.labels")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        problems.append(
            _required("spec", "set spec.tier and spec.members")
            if spec is None
            else _invalid("spec", spec, "must be an object")
        )
        return problems
    problems += _tier_problems(spec)
    problems += _tier_name_problems(spec)
    problems += _members_problems(spec, meta.get("name"))
    return problems


# --- parsing ---------------------------------------------------------------------------------


def _label_selector(raw: Mapping[str, Any]) -> LabelSelector:
    expressions = tuple(
        Requirement(str(e["key"]), str(e["operator"]), tuple(str(v) for v in e.get("values") or ()))
        for e in raw.get("matchExpressions") or ()
    )
    labels = {str(k): str(v) for k, v in (raw.get("matchLabels") or {}).items()}
    return LabelSelector(labels, expressions)


def _member(raw: Mapping[str, Any]) -> Member:
    selector = raw["selector"]
    if selector.get("exactMatch") is not None:
        return Member(raw["type"], exact=str(selector["exactMatch"]["name"]))
    if selector.get("regexMatch") is not None:
        return Member(raw["type"], regex=str(selector["regexMatch"]["pattern"]))
    return Member(raw["type"], labels=_label_selector(selector["labelMatch"]))


def parse_hypernode(obj: Mapping[str, Any]) -> HyperNode:
    """The HyperNode in ``obj``; InputError listing every problem when it is not valid."""
    problems = hypernode_problems(obj)
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if problems:
        shown = name if isinstance(name, str) and name else "<unnamed>"
        raise InputError("; ".join(problems), where=f"HyperNode {shown}")
    assert isinstance(meta, Mapping)  # checked above
    spec = obj["spec"]
    return HyperNode(
        name=str(name),
        tier=int(spec["tier"]),
        tier_name=str(spec.get("tierName") or ""),
        members=tuple(_member(m) for m in spec["members"]),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
    )
