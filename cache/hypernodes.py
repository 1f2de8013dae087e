"""The HyperNode forest: Volcano's network topology as domain paths for the placement core.

``build_forest`` resolves every HyperNode's members against the nodes, checks the structure
across objects and turns what is sound into one path per node (one domain name per tier,
then the hostname), the same input a label topology gives ``DomainTree``. It never raises:
a HyperNode that breaks the structure gets its problem recorded under its name and loses
only the memberships at fault, so the rest of the forest keeps working. (In Volcano one bad
HyperNode marks the whole cache not ready and stalls every topology-constrained job.)

The second half is discovery from node labels (what Volcano's label discoverer does) with
two differences: a value is scoped by its parent (rack-1 under block-1 and rack-1 under
block-2 are two HyperNodes, not one with two parents), and names are derived from the path,
so the same labels always give the same names.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from topogate.api.constants import GROUP, HOSTNAME_LABEL
from topogate.api.errors import InputError
from topogate.api.hypernodes import (
    API_VERSION,
    HYPERNODE,
    KIND,
    NODE,
    HyperNode,
    Member,
    matches_selector,
    regex_matches,
)
from topogate.api.names import label_key_problem

from .nodes import NodeInfo

SOURCE_LABEL = f"{GROUP}/network-topology-source"
TYPE_LABEL = f"{GROUP}/network-topology-type"
LABEL_SOURCE = "label"
MAX_TYPE_NAME = 20
DEFAULT_INTERVAL_SECONDS = 3600.0  # Volcano's default discovery interval (1h)

_SHOWN_NAMES = 5  # longer lists of nodes are cut in messages
_RESERVED_LEVEL_NAME = re.compile(r"^(tier-)?[0-9]+$")


def _quoted(names: Iterable[str]) -> str:
    listed = sorted(names)
    shown = ", ".join(f'"{n}"' for n in listed[:_SHOWN_NAMES])
    more = len(listed) - _SHOWN_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


@dataclass(frozen=True, slots=True)
class HyperNodeForest:
    """The sound part of the HyperNode objects, and what was wrong with the rest.

    Only HyperNodes in the forest appear in ``hypernodes``, ``children``, ``nodes`` and
    ``node_count``; those left out (on a membership cycle) are in ``excluded``.
    ``problems`` holds, per HyperNode name, what a person should fix there.
    """

    hypernodes: dict[str, HyperNode] = field(default_factory=dict)
    parent: dict[str, str] = field(default_factory=dict)  # child HyperNode -> parent
    children: dict[str, tuple[str, ...]] = field(default_factory=dict)  # sorted
    nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # direct member nodes
    roots: tuple[str, ...] = ()
    # Nodes below each HyperNode, transitively. Volcano's status.nodeCount counts only the
    # direct members' matches, so a tier-2 HyperNode of two HyperNodes reports 2 there.
    node_count: dict[str, int] = field(default_factory=dict)
    node_hypernode: dict[str, str] = field(default_factory=dict)  # node -> lowest HyperNode
    # The tier of each level, highest first: the HyperNode tiers present, then 0 for the
    # hostname level, so that it lines up with level_keys (as TopologySource expects).
    tiers: tuple[int, ...] = ()
    level_keys: tuple[str, ...] = ()  # one per tier, then kubernetes.io/hostname
    level_aliases: dict[str, int] = field(default_factory=dict)  # tier-<n>, <n>, tierNames
    paths: dict[str, tuple[str, ...]] = field(default_factory=dict)  # node -> domain names
    problems: dict[str, list[str]] = field(default_factory=dict)
    # Per parent, the member HyperNodes it names that do not exist: also in ``problems``, and
    # here for callers that treat "not created yet" as pending rather than wrong.
    missing_members: dict[str, tuple[str, ...]] = field(default_factory=dict)
    excluded: frozenset[str] = frozenset()

    def tier_of(self, name: str) -> int | None:
        """The tier of a HyperNode in the forest, None for any other name."""
        hypernode = self.hypernodes.get(name)
        return hypernode.tier if hypernode else None

    def ancestors(self, name: str) -> tuple[str, ...]:
        """The HyperNodes above ``name``, its parent first, the root last."""
        chain: list[str] = []
        while name in self.parent:
            name = self.parent[name]
            chain.append(name)
        return tuple(chain)

    def level_of(self, name: str) -> int | None:
        """The level index at which a HyperNode of the forest appears in ``level_keys``."""
        tier = self.tier_of(name)
        return None if tier is None else self.tiers.index(tier)


# --- structure checks ------------------------------------------------------------------------


Problems = defaultdict[str, list[str]]


def _unique(hypernodes: Sequence[HyperNode], problems: Problems) -> dict[str, HyperNode]:
    """By name; a name given twice keeps its first definition (only files can do this)."""
    by_name: dict[str, HyperNode] = {}
    for hypernode in hypernodes:
        if hypernode.name in by_name:
            problems[hypernode.name].append(
                "is defined more than once; the first definition is used"
            )
            continue
        by_name[hypernode.name] = hypernode
    return by_name


def missing_member_problem(child: str) -> str:
    """The problem recorded on a parent whose member HyperNode ``child`` does not exist."""
    return f'member HyperNode "{child}" does not exist; it is ignored until it is created'


def _child_edges(
    by_name: Mapping[str, HyperNode], problems: Problems
) -> tuple[dict[str, set[str]], dict[str, tuple[str, ...]]]:
    """Each HyperNode's member HyperNodes that exist, and those that do not (yet).

    A member naming a HyperNode that does not exist is ignored with a problem on the parent:
    it may simply not have been created yet. Only exactMatch names HyperNode members (the
    per-object checks refuse the other selectors there; Volcano ignores them).
    """
    edges: dict[str, set[str]] = {}
    missing: dict[str, tuple[str, ...]] = {}
    for name in sorted(by_name):
        edges[name] = set()
        absent: set[str] = set()
        for member in by_name[name].members:
            if member.type != HYPERNODE:
                continue
            if member.exact is None:
                problems[name].append(
                    "a HyperNode member without exactMatch is ignored; name each child "
                    "HyperNode with exactMatch"
                )
            elif member.exact in by_name:
                edges[name].add(member.exact)
            elif member.exact not in absent:
                absent.add(member.exact)
                problems[name].append(missing_member_problem(member.exact))
        if absent:
            missing[name] = tuple(sorted(absent))
    return edges, missing


def _strongly_connected(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """Tarjan's components, iteratively (a long chain of HyperNodes must not hit recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        # Successors are kept in reverse order so that pop() visits them by name.
        work: list[tuple[str, list[str]]] = [(start, sorted(edges[start], reverse=True))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            vertex, pending = work[-1]
            if pending:
                successor = pending.pop()
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, sorted(edges[successor], reverse=True)))
                elif successor in on_stack:
                    low[vertex] = min(low[vertex], index[successor])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[vertex])
            if low[vertex] == index[vertex]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == vertex:
                        break
                components.append(sorted(component))
    return components


def _shortest_cycle(start: str, edges: Mapping[str, set[str]], within: set[str]) -> list[str]:
    """The shortest membership cycle from ``start`` back to it, inside one component."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for vertex in frontier:
            for successor in sorted(edges[vertex] & within):
                if successor == start:
                    path = [vertex]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if successor not in previous:
                    previous[successor] = vertex
                    following.append(successor)
        frontier = following
    return [start, start]  # not reached: every vertex of a cyclic component is on a cycle


def _cyclic(edges: Mapping[str, set[str]], problems: Problems) -> set[str]:
    """Every HyperNode on a membership cycle; each gets a problem naming a cycle through it.

    All of them are left out: no member of a cycle can be placed in a tree, and picking one
    edge to break would be a guess about which membership the person meant.
    """
    cyclic: set[str] = set()
    for component in _strongly_connected(edges):
        within = set(component)
        if len(component) == 1 and component[0] not in edges[component[0]]:
            continue
        for name in component:
            cycle = " -> ".join(_shortest_cycle(name, edges, within))
            problems[name].append(
                f"is left out of the topology: it is on a membership cycle {cycle}; remove "
                "one of these memberships"
            )
        cyclic |= within
    return cyclic


def _drop_cyclic(
    edges: Mapping[str, set[str]], cyclic: set[str], problems: Problems
) -> dict[str, set[str]]:
    """The edges between HyperNodes that stay; a parent of a left-out HyperNode is told."""
    kept: dict[str, set[str]] = {}
    for parent in sorted(edges):
        if parent in cyclic:
            continue
        kept[parent] = set()
        for child in sorted(edges[parent]):
            if child in cyclic:
                problems[parent].append(
                    f'member HyperNode "{child}" is left out of the topology (it is on a '
                    "membership cycle); this membership is ignored"
                )
            else:
                kept[parent].add(child)
    return kept


def _tier_ordered(
    edges: Mapping[str, set[str]], by_name: Mapping[str, HyperNode], problems: Problems
) -> dict[str, set[str]]:
    """Only the edges whose parent's tier is strictly above its child's.

    The problem goes to the parent: it is the parent's member list that is wrong. This
    check runs before the one-parent check, so a child claimed by a wrong-tier parent and a
    right one stays with the right one.
    """
    ordered: dict[str, set[str]] = {}
    for parent in sorted(edges):
        ordered[parent] = set()
        parent_tier = by_name[parent].tier
        for child in sorted(edges[parent]):
            child_tier = by_name[child].tier
            if parent_tier > child_tier:
                ordered[parent].add(child)
                continue
            problems[parent].append(
                f'member HyperNode "{child}" has tier {child_tier}, which is not below this '
                f"HyperNode's tier {parent_tier}; a parent's tier must be higher than its "
                "members' tiers, so this membership is ignored"
            )
    return ordered


def _single_parent(edges: Mapping[str, set[str]], problems: Problems) -> dict[str, str]:
    """Child -> parent; a child claimed twice stays with the parent whose name sorts first.

    The other claimants lose the edge and get the problem, naming both: the rule is
    arbitrary but deterministic, and it does not depend on the order objects arrived in.
    """
    claims: dict[str, list[str]] = defaultdict(list)
    for parent in sorted(edges):
        for child in edges[parent]:
            claims[child].append(parent)
    parent_of: dict[str, str] = {}
    for child in sorted(claims):
        keeper, *others = claims[child]
        parent_of[child] = keeper
        for other in others:
            problems[other].append(
                f'member HyperNode "{child}" already belongs to "{keeper}"; a HyperNode has '
                "one parent (the one whose name sorts first keeps it), so this membership "
                "is ignored"
            )
    return parent_of


def _member_nodes(member: Member, nodes: Sequence[NodeInfo], names: set[str]) -> set[str]:
    """The node names one Node member selects (unknown exact names select nothing)."""
    if member.exact is not None:
        return {member.exact} & names
    if member.regex is not None:
        return {n.name for n in nodes if regex_matches(member.regex, n.name)}
    if member.labels is not None:
        return {n.name for n in nodes if matches_selector(member.labels, n.labels)}
    return set()


def _node_owners(
    by_name: Mapping[str, HyperNode], nodes: Sequence[NodeInfo], problems: Problems
) -> dict[str, str]:
    """Node -> its HyperNode; a node claimed twice stays with the name that sorts first.

    The other claimants get one problem per keeper, listing the nodes they lose.
    """
    names = {n.name for n in nodes}
    claims: dict[str, list[str]] = defaultdict(list)
    for name in sorted(by_name):
        selected: set[str] = set()
        for member in by_name[name].members:
            if member.type == NODE:
                selected |= _member_nodes(member, nodes, names)
        for node_name in selected:
            claims[node_name].append(name)
    owner: dict[str, str] = {}
    lost: dict[tuple[str, str], list[str]] = defaultdict(list)
    for node_name in sorted(claims):
        keeper, *others = claims[node_name]
        owner[node_name] = keeper
        for other in others:
            lost[(other, keeper)].append(node_name)
    for (other, keeper), node_names in sorted(lost.items()):
        noun = "node" if len(node_names) == 1 else f"{len(node_names)} nodes"
        problems[other].append(
            f"{noun} {_quoted(node_names)} also belong{'s' if len(node_names) == 1 else ''} "
            f'to "{keeper}", which keeps {"it" if len(node_names) == 1 else "them"}; a node '
            "belongs to one HyperNode (the one whose name sorts first), so here "
            f"{'it is' if len(node_names) == 1 else 'they are'} ignored"
        )
    return owner


# --- levels --------------------------------------------------------------------------------


def _tier_names(
    tiers: Sequence[int], by_name: Mapping[str, HyperNode]
) -> dict[int, dict[str, list[str]]]:
    """Per tier, each tierName seen and the HyperNodes that set it."""
    seen: dict[int, dict[str, list[str]]] = {tier: defaultdict(list) for tier in tiers}
    for name in sorted(by_name):
        hypernode = by_name[name]
        if hypernode.tier_name:
            seen[hypernode.tier][hypernode.tier_name].append(name)
    return seen


def _levels(
    tiers: Sequence[int], by_name: Mapping[str, HyperNode], problems: Problems
) -> tuple[tuple[str, ...], dict[str, int]]:
    """Level keys (one per tier, then the hostname) and every other name of each level.

    A tier is named by its tierName when the HyperNodes of that tier that set one agree;
    otherwise (disagreement, a name another tier uses too, or a name that looks like
    another tier's alias) it is ``tier-<n>``, and the HyperNodes concerned are told.
    """
    seen = _tier_names(tiers, by_name)
    tiers_using: dict[str, set[int]] = defaultdict(set)
    for tier, names in seen.items():
        for tier_name in names:
            tiers_using[tier_name].add(tier)
    keys: list[str] = []
    aliases: dict[str, int] = {}
    for level, tier in enumerate(tiers):
        default = f"tier-{tier}"
        aliases[default] = aliases[str(tier)] = level
        usable: dict[str, list[str]] = {}
        for tier_name, setters in seen[tier].items():
            reason = _tier_name_conflict(tier_name, tier, tiers_using[tier_name])
            if reason:
                for setter in setters:
                    problems[setter].append(f'tierName "{tier_name}" {reason}; it is not used')
            else:
                usable[tier_name] = setters
                aliases[tier_name] = level
        if len(usable) > 1:
            listed = ", ".join(f'"{n}"' for n in sorted(usable))
            for setters in usable.values():
                for setter in setters:
                    problems[setter].append(
                        f"HyperNodes of tier {tier} disagree on its tierName ({listed}); the "
                        f"level is called {default} until they agree"
                    )
        keys.append(next(iter(usable)) if len(usable) == 1 else default)
    keys.append(HOSTNAME_LABEL)
    return tuple(keys), aliases


def _tier_name_conflict(tier_name: str, tier: int, used_by: set[int]) -> str | None:
    if tier_name == HOSTNAME_LABEL:
        return "is the node level's name"
    if _RESERVED_LEVEL_NAME.match(tier_name) and tier_name not in (f"tier-{tier}", str(tier)):
        return "looks like another tier's number"
    if len(used_by) > 1:
        listed = ", ".join(str(t) for t in sorted(used_by))
        return f"is used by several tiers ({listed}); give each tier its own name"
    return None


# --- paths -----------------------------------------------------------------------------------


def _chain(hypernode: str, parent: Mapping[str, str]) -> list[str]:
    chain = [hypernode]
    while chain[-1] in parent:
        chain.append(parent[chain[-1]])
    return chain


def _domain_names(
    chain: Sequence[str], tiers: Sequence[int], by_name: Mapping[str, HyperNode]
) -> list[str | None]:
    """One name per tier level: the HyperNode of the chain with the highest tier <= it.

    That one rule gives the three fillings: a tier a HyperNode sits at is that HyperNode; a
    tier skipped between a parent and its child is the child (a pass-through domain holding
    just it); a tier above the root is the root. None: below the node's lowest HyperNode,
    filled with the node's own name by the caller.
    """
    names: list[str | None] = []
    for tier in tiers:
        below = [h for h in chain if by_name[h].tier <= tier]
        names.append(max(below, key=lambda h: by_name[h].tier) if below else None)
    return names


def _paths(
    owner: Mapping[str, str],
    parent: Mapping[str, str],
    tiers: Sequence[int],
    by_name: Mapping[str, HyperNode],
    nodes: Mapping[str, NodeInfo],
    problems: Problems,
) -> dict[str, tuple[str, ...]]:
    raw: dict[str, list[str | None]] = {
        node_name: _domain_names(_chain(hypernode, parent), tiers, by_name)
        for node_name, hypernode in owner.items()
    }
    taken = {
        tuple(names[: level + 1])
        for names in raw.values()
        for level, name in enumerate(names)
        if name is not None
    }
    paths: dict[str, tuple[str, ...]] = {}
    for node_name in sorted(raw):
        names = raw[node_name]
        fill = node_name
        if None in names:
            first = names.index(None)
            if (*names[:first], node_name) in taken:
                # A member HyperNode with the node's name sits at the same place: keep the
                # node its own domain instead of merging it into that HyperNode's.
                fill = f"{node_name} (node)"
                problems[owner[node_name]].append(
                    f'node "{node_name}" has the name of a HyperNode below this one; its '
                    f'domains are called "{fill}"'
                )
        hostname = nodes[node_name].labels.get(HOSTNAME_LABEL) or node_name
        paths[node_name] = (*(fill if n is None else n for n in names), hostname)
    return paths


def _node_counts(
    by_name: Mapping[str, HyperNode],
    children: Mapping[str, tuple[str, ...]],
    direct: Mapping[str, tuple[str, ...]],
) -> dict[str, int]:
    counts: dict[str, int] = {}
    # Tiers strictly decrease downwards, so ascending tier order visits children first.
    for name in sorted(by_name, key=lambda n: (by_name[n].tier, n)):
        counts[name] = len(direct[name]) + sum(counts[c] for c in children[name])
    return counts


def build_forest(hypernodes: Sequence[HyperNode], nodes: Sequence[NodeInfo]) -> HyperNodeForest:
    """The forest of ``hypernodes`` over ``nodes``; problems are recorded, never raised.

    Checks run in this order, each on what the previous ones kept:

    1. a HyperNode member naming no existing HyperNode is ignored (problem on the parent);
    2. every HyperNode on a membership cycle is left out (problem on each, naming a cycle);
    3. a parent whose tier is not strictly above its child's loses that membership
       (problem on the parent);
    4. a HyperNode claimed by two parents stays with the parent whose name sorts first
       (problem on the other parent, naming both);
    5. a node claimed by two HyperNodes stays with the one whose name sorts first (problem
       on the other, naming both).

    Nodes in no HyperNode are not part of the forest: they get no path.
    """
    problems: Problems = defaultdict(list)
    defined = _unique(hypernodes, problems)
    edges, missing = _child_edges(defined, problems)
    cyclic = _cyclic(edges, problems)
    by_name = {name: h for name, h in defined.items() if name not in cyclic}
    edges = _tier_ordered(_drop_cyclic(edges, cyclic, problems), by_name, problems)
    parent = _single_parent(edges, problems)
    owner = _node_owners(by_name, nodes, problems)
    children = {
        name: tuple(sorted(c for c in edges[name] if parent[c] == name)) for name in by_name
    }
    direct: dict[str, list[str]] = {name: [] for name in by_name}
    for node_name in sorted(owner):
        direct[owner[node_name]].append(node_name)
    direct_nodes = {name: tuple(names) for name, names in direct.items()}
    tiers = sorted({h.tier for h in by_name.values()}, reverse=True)
    level_keys: tuple[str, ...] = ()
    aliases: dict[str, int] = {}
    if tiers:
        level_keys, aliases = _levels(tiers, by_name, problems)
    # Paths last: they may add a problem, and everything they read is settled.
    paths = _paths(owner, parent, tiers, by_name, {n.name: n for n in nodes}, problems)
    return HyperNodeForest(
        hypernodes=by_name,
        parent=parent,
        children=children,
        nodes=direct_nodes,
        roots=tuple(sorted(name for name in by_name if name not in parent)),
        node_count=_node_counts(by_name, children, direct_nodes),
        node_hypernode=owner,
        tiers=(*tiers, 0) if tiers else (),
        level_keys=level_keys,
        level_aliases=aliases,
        paths=paths,
        problems={name: list(found) for name, found in sorted(problems.items())},
        missing_members=missing,
        excluded=frozenset(cyclic),
    )


# --- discovery from node labels --------------------------------------------------------------

_GO_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_TYPE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_READABLE_VALUE = 40  # characters of the label value kept in a discovered name
_HASH_CHARS = 10


@dataclass(frozen=True, slots=True)
class DiscoveryType:
    """One network topology type of an enabled label source."""

    name: str
    labels: tuple[str, ...]  # node label keys, top to bottom, as configured
    interval_seconds: float = DEFAULT_INTERVAL_SECONDS


def _go_duration_seconds(text: str) -> float | None:
    """A Go duration ("10m", "1h30m", "90s") in seconds; None when malformed."""
    if text == "0":
        return 0.0
    position, total = 0, 0.0
    for match in _GO_DURATION_PART.finditer(text):
        if match.start() != position:
            return None
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    return total if text and position == len(text) else None


def type_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a topology type (it goes into HyperNode names and a label)."""
    if not name or len(name) > MAX_TYPE_NAME or not _TYPE_NAME.match(name):
        return (
            f"a topology type name must be 1-{MAX_TYPE_NAME} lowercase letters, digits or "
            "'-', starting and ending with a letter or digit"
        )
    return None


def _type_labels(raw: Any, path: str) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    if not isinstance(raw, list) or not raw:
        return (), [(path, "must be a non-empty list of {nodeLabel: <key>}, top tier first")]
    problems: list[tuple[str, str]] = []
    labels: list[str] = []
    for i, entry in enumerate(raw):
        at = f"{path}[{i}].nodeLabel"
        label = entry.get("nodeLabel") if isinstance(entry, Mapping) else None
        if not isinstance(label, str) or not label:
            problems.append((at, "is required"))
        elif key_problem := label_key_problem(label):
            problems.append((at, key_problem))
        elif label in labels:
            problems.append((at, f"{label!r} is listed twice; each label is one tier"))
        elif label == HOSTNAME_LABEL and i != len(raw) - 1:
            problems.append((at, f"{HOSTNAME_LABEL} can only be the last (node) level"))
        else:
            labels.append(label)
    if not problems and all(label == HOSTNAME_LABEL for label in labels):
        problems.append((path, f"needs at least one label above {HOSTNAME_LABEL}"))
    return tuple(labels), problems


def _label_source_types(
    source: Mapping[str, Any], path: str, interval: float
) -> tuple[list[DiscoveryType], list[tuple[str, str]]]:
    config = source.get("config")
    types_path = f"{path}.config.networkTopologyTypes"
    raw_types = config.get("networkTopologyTypes") if isinstance(config, Mapping) else None
    if not isinstance(raw_types, Mapping) or not raw_types:
        return [], [(types_path, "must map each topology type to its node labels")]
    found: list[DiscoveryType] = []
    problems: list[tuple[str, str]] = []
    for written, raw_labels in raw_types.items():
        # Volcano lower-cases type names (its docs' example writes topologyA2).
        name = str(written).lower()
        name_problem = type_name_problem(name)
        if name_problem:
            problems.append((f"{types_path}.{written}", name_problem))
            continue
        labels, label_problems = _type_labels(raw_labels, f"{types_path}.{written}")
        problems += label_problems
        if not label_problems:
            found.append(DiscoveryType(name, labels, interval))
    return found, problems


def _interval(source: Mapping[str, Any], path: str) -> tuple[float, list[tuple[str, str]]]:
    raw = source.get("interval")
    if raw is None or raw == "":
        return DEFAULT_INTERVAL_SECONDS, []
    seconds = _go_duration_seconds(raw) if isinstance(raw, str) else None
    if seconds is None or seconds <= 0:
        return DEFAULT_INTERVAL_SECONDS, [
            (f"{path}.interval", f"{raw!r} must be a positive duration such as 10m or 1h")
        ]
    return seconds, []


def discovery_config(
    obj: Mapping[str, Any], where: str = "network topology discovery"
) -> list[DiscoveryType]:
    """The topology types of every enabled ``label`` source in Volcano's config payload.

    Sources of other kinds, and disabled ones, are skipped unread. A type named by two
    label sources is refused (both would own the same HyperNodes).
    """
    raw_sources = obj.get("networkTopologyDiscovery")
    if raw_sources is None:
        return []
    if not isinstance(raw_sources, list):
        raise InputError("must be a list", where=where, field="networkTopologyDiscovery")
    found: list[DiscoveryType] = []
    problems: list[tuple[str, str]] = []
    for i, source in enumerate(raw_sources):
        path = f"networkTopologyDiscovery[{i}]"
        if not isinstance(source, Mapping):
            problems.append((path, "must be an object with source, enabled and config"))
            continue
        if source.get("source") != LABEL_SOURCE or source.get("enabled") is not True:
            continue
        interval, interval_problems = _interval(source, path)
        types, type_problems = _label_source_types(source, path, interval)
        problems += interval_problems + type_problems
        for discovered in types:
            if any(d.name == discovered.name for d in found):
                problems.append(
                    (
                        f"{path}.config.networkTopologyTypes.{discovered.name}",
                        "is already configured by an earlier label source",
                    )
                )
            else:
                found.append(discovered)
    if len(problems) == 1:
        (field, message) = problems[0]
        raise InputError(message, where=where, field=field)
    if problems:  # every one, each with its field: one round of fixes, not one per run
        raise InputError("; ".join(f"{f}: {m}" for f, m in problems), where=where)
    return found


LABEL_SOURCE_SHAPE = (
    "networkTopologyDiscovery: [{source: label, enabled: true, config: {networkTopologyTypes: "
    "{TYPE: [{nodeLabel: LABEL}, ...]}}}]"
)


def missing_label_source(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(field, message): what a config that yields no label topology types lacks, for a
    person to fix (``discovery_config`` returned nothing for it)."""
    raw = obj.get("networkTopologyDiscovery")
    needs = f"discover needs an enabled label source: {LABEL_SOURCE_SHAPE}"
    if raw is None:
        keys = ", ".join(sorted(map(str, obj))) or "none"
        return "", f"has no networkTopologyDiscovery (its top-level keys: {keys}); {needs}"
    if not raw:
        return "networkTopologyDiscovery", f"is empty; {needs}"
    found = []
    for i, source in enumerate(raw):
        kind = source.get("source") if isinstance(source, Mapping) else None
        if kind != LABEL_SOURCE:
            found.append(f"[{i}] is source {kind!r}, which discover does not read")
        else:
            found.append(f"[{i}] is a label source with enabled: {source.get('enabled')!r}")
    return "networkTopologyDiscovery", f"{'; '.join(found)}; {needs}"


def _dns_safe(value: str, limit: int) -> str:
    return _NOT_DNS.sub("-", value.lower())[:limit].strip("-")


def discovered_name(type_name: str, tier: int, path: Sequence[tuple[str, str]]) -> str:
    """A HyperNode's name from its type, tier and (label, value) path from the top down.

    Readable (type, tier, value) and unique (a hash of the whole path): rack-1 in two
    blocks gets two names, and a name never changes while its path does not. At most
    20 + 5 + 40 + 10 characters and separators: well inside the 253 of an object name.
    """
    digest = hashlib.sha256(
        json.dumps([type_name, [list(step) for step in path]]).encode()
    ).hexdigest()[:_HASH_CHARS]
    readable = _dns_safe(path[-1][1], _READABLE_VALUE)
    return "-".join(part for part in (type_name, f"t{tier}", readable, digest) if part)


def _member(member_type: str, name: str) -> dict[str, Any]:
    return {"type": member_type, "selector": {"exactMatch": {"name": name}}}


def _tier_labels(labels: Sequence[str]) -> list[str]:
    """The tier labels, tier 1 first: a trailing hostname is the node level, not a tier."""
    top_down = list(labels)
    if top_down and top_down[-1] == HOSTNAME_LABEL:
        top_down.pop()
    return list(reversed(top_down))


def _node_chain(node: NodeInfo, bottom_up: Sequence[str]) -> list[tuple[str, str]]:
    """The node's (label, value) from tier 1 upward, up to the first label it lacks."""
    chain: list[tuple[str, str]] = []
    for label in bottom_up:
        if label not in node.labels:
            break
        chain.append((label, node.labels[label]))
    return chain


def discover(
    nodes: Sequence[NodeInfo], type_name: str, labels: Sequence[str]
) -> list[dict[str, Any]]:
    """The HyperNodes that ``labels`` (top to bottom) describe over ``nodes``, as API objects.

    Tier 1 is the label just above the node level; each node is walked from tier 1 upward
    and stops at the first label it lacks (a node without the tier-1 label is in no
    HyperNode). A HyperNode is its whole path from the top, so equal values under
    different parents are different HyperNodes. Sorted by tier, then name.
    """
    if problem := type_name_problem(type_name):
        raise InputError(problem, where=f"topology type {type_name!r}")
    bottom_up = _tier_labels(labels)
    members: dict[tuple[tuple[str, str], ...], set[tuple[str, str]]] = defaultdict(set)
    counts: dict[tuple[tuple[str, str], ...], int] = defaultdict(int)
    names: dict[tuple[tuple[str, str], ...], str] = {}
    tiers: dict[tuple[tuple[str, str], ...], int] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        top_down = list(reversed(_node_chain(node, bottom_up)))
        below: tuple[str, str] = (NODE, node.name)
        for end in range(len(top_down), 0, -1):  # tier 1 first
            path = tuple(top_down[:end])
            tier = len(top_down) - end + 1
            if path not in names:
                names[path] = discovered_name(type_name, tier, path)
                tiers[path] = tier
            members[path].add(below)
            counts[path] += 1
            below = (HYPERNODE, names[path])
    objects = [
        _hypernode_object(type_name, names[p], tiers[p], p[-1][0], members[p], counts[p])
        for p in names
    ]
    return sorted(objects, key=lambda o: (o["spec"]["tier"], o["metadata"]["name"]))


def _hypernode_object(
    type_name: str,
    name: str,
    tier: int,
    tier_label: str,
    members: Iterable[tuple[str, str]],
    node_count: int,
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "labels": {SOURCE_LABEL: LABEL_SOURCE, TYPE_LABEL: type_name},
        },
        "spec": {
            "tier": tier,
            "tierName": tier_label,
            "members": [_member(kind, member) for kind, member in sorted(members)],
        },
        "status": {"nodeCount": node_count},
    }


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do to make the discovered HyperNodes of one type exist as computed.

    ``update`` objects carry the existing object's metadata (resourceVersion, annotations,
    extra labels) with our labels on top, ready for a replace. ``conflicts`` names desired
    HyperNodes whose name a HyperNode we do not own already holds: it is left alone.
    """

    create: tuple[dict[str, Any], ...] = ()
    update: tuple[dict[str, Any], ...] = ()
    delete: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()


def _labels_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _name_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, Mapping) else ""


def _order(obj: Mapping[str, Any]) -> tuple[int, str]:
    spec = obj.get("spec")
    tier = spec.get("tier") if isinstance(spec, Mapping) else None
    return (tier if isinstance(tier, int) and not isinstance(tier, bool) else 0, _name_of(obj))


def owned(obj: Mapping[str, Any], type_name: str) -> bool:
    """Whether label discovery of ``type_name`` made ``obj`` (and may change or delete it)."""
    labels = _labels_of(obj)
    return labels.get(SOURCE_LABEL) == LABEL_SOURCE and labels.get(TYPE_LABEL) == type_name


def _differs(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    spec = current.get("spec") if isinstance(current.get("spec"), Mapping) else {}
    status = current.get("status") if isinstance(current.get("status"), Mapping) else {}
    assert isinstance(spec, Mapping) and isinstance(status, Mapping)
    wanted_spec = desired["spec"]
    if any(spec.get(key) != value for key, value in wanted_spec.items()):
        return True
    labels = _labels_of(current)
    if any(labels.get(key) != value for key, value in _labels_of(desired).items()):
        return True
    return bool(status.get("nodeCount") != desired["status"]["nodeCount"])


def _updated(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in current.get("metadata", {}).items() if k != "managedFields"}
    meta["labels"] = {**_labels_of(current), **_labels_of(desired)}
    return {**desired, "metadata": meta}


def reconcile(
    existing: Sequence[Mapping[str, Any]], desired: Sequence[Mapping[str, Any]], type_name: str
) -> Plan:
    """Create the missing, update the changed and delete the stale HyperNodes of one type.

    Only objects labelled as made by label discovery of ``type_name`` are ever updated or
    deleted: hand-made HyperNodes and other types are never touched. Each list is sorted by
    tier, then name.
    """
    current = {_name_of(obj): obj for obj in existing}
    wanted = {_name_of(obj) for obj in desired}
    create: list[dict[str, Any]] = []
    update: list[dict[str, Any]] = []
    conflicts: list[str] = []
    for obj in sorted(desired, key=_order):
        name = _name_of(obj)
        found = current.get(name)
        if found is None:
            create.append(dict(obj))
        elif not owned(found, type_name):
            conflicts.append(name)
        elif _differs(found, obj):
            update.append(_updated(found, obj))
    stale = [obj for obj in existing if owned(obj, type_name) and _name_of(obj) not in wanted]
    return Plan(
        create=tuple(create),
        update=tuple(update),
        delete=tuple(_name_of(obj) for obj in sorted(stale, key=_order)),
        conflicts=tuple(conflicts),
    )


def discover_offline(
    nodes: Sequence[NodeInfo], types: Sequence[DiscoveryType]
) -> list[dict[str, Any]]:
    """What discovery in `serve` would create for these nodes (children before parents)."""
    out: list[dict[str, Any]] = []
    for kind in types:
        out.extend(discover(nodes, kind.name, kind.labels))
    return out
