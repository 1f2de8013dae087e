"""Volcano HyperNodes: per-object checks, the forest and its paths, discovery from labels."""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from tests.kit import HOST, hypernode_object, node
from topogate.admission.placement import place
from topogate.admission.request import Mode, PlacementDecision, PlacementRequest, PodSetRequest
from topogate.api.errors import InputError
from topogate.api.hypernodes import (
    HyperNode,
    LabelSelector,
    Member,
    Requirement,
    hypernode_problems,
    matches_selector,
    parse_hypernode,
    regex_matches,
)
from topogate.cache.hypernodes import (
    LABEL_SOURCE,
    SOURCE_LABEL,
    TYPE_LABEL,
    DiscoveryType,
    HyperNodeForest,
    build_forest,
    discover,
    discovery_config,
    reconcile,
)
from topogate.cache.nodes import NodeInfo
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.sources import TopologySource, topology_sources
from topogate.cache.topology import DomainTree

Obj = dict[str, Any]

# --- builders --------------------------------------------------------------------------------


def exact(name: str, member_type: str = "Node") -> Obj:
    return {"type": member_type, "selector": {"exactMatch": {"name": name}}}


def hn_obj(name: str, tier: int, *members: Obj, tier_name: str | None = None) -> Obj:
    spec: Obj = {"tier": tier, "members": list(members)}
    if tier_name is not None:
        spec["tierName"] = tier_name
    return {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": spec,
    }


def hn(
    name: str,
    tier: int,
    nodes: Sequence[str] = (),
    children: Sequence[str] = (),
    tier_name: str | None = None,
) -> HyperNode:
    return parse_hypernode(hypernode_object(name, tier, nodes, children, tier_name))


def cpu_nodes(*names: str, cpu: int = 1000) -> list[NodeInfo]:
    return [node(n, host=n, cpu=cpu) for n in names]


def seed_hypernodes(tier_names: bool = False) -> list[HyperNode]:
    """The design's example: s0..s3 (tier 1) of two nodes, s4={s0,s1}, s5={s2,s3}, s6={s4,s5}."""
    leaf, spine, core = ("leaf", "spine", "core") if tier_names else (None, None, None)
    return [
        hn("s0", 1, ["node0", "node1"], tier_name=leaf),
        hn("s1", 1, ["node2", "node3"], tier_name=leaf),
        hn("s2", 1, ["node4", "node5"], tier_name=leaf),
        hn("s3", 1, ["node6", "node7"], tier_name=leaf),
        hn("s4", 2, children=["s0", "s1"], tier_name=spine),
        hn("s5", 2, children=["s2", "s3"], tier_name=spine),
        hn("s6", 3, children=["s4", "s5"], tier_name=core),
    ]


SEED_NODES = [f"node{i}" for i in range(8)]


def preferred(count: int, level: str, limit: str | None = None, cpu: int = 1000) -> PodSetRequest:
    return PodSetRequest(
        name="main",
        count=count,
        requests={"cpu": cpu},
        mode=Mode.PREFERRED,
        level=level,
        limit=limit,
    )


def required(count: int, level: str, cpu: int = 1000) -> PodSetRequest:
    return PodSetRequest(
        name="main", count=count, requests={"cpu": cpu}, mode=Mode.REQUIRED, level=level
    )


def place_on(
    forest: HyperNodeForest, nodes: Sequence[NodeInfo], podset: PodSetRequest
) -> PlacementDecision:
    snapshot = ClusterSnapshot.build(nodes)
    tree = DomainTree.from_paths(snapshot, forest.level_keys, forest.paths)
    return place(tree, snapshot, PlacementRequest("wl", (podset,)), topology_name="hypernodes")


def used_nodes(decision: PlacementDecision) -> dict[str, int]:
    assert decision.fits, decision.message
    return {n: c for n, c in decision.placements[0].node_counts.items() if c}


# --- the seed's tree -------------------------------------------------------------------------


def test_seed_tree_levels_paths_and_counts() -> None:
    forest = build_forest(seed_hypernodes(), cpu_nodes(*SEED_NODES))
    assert forest.problems == {}
    assert forest.tiers == (3, 2, 1, 0)
    assert forest.level_keys == ("tier-3", "tier-2", "tier-1", HOST)
    assert forest.level_aliases == {
        "tier-3": 0,
        "3": 0,
        "tier-2": 1,
        "2": 1,
        "tier-1": 2,
        "1": 2,
    }
    assert forest.paths["node0"] == ("s6", "s4", "s0", "node0")
    assert forest.paths["node5"] == ("s6", "s5", "s2", "node5")
    assert len(forest.paths) == 8
    assert forest.node_count == {"s0": 2, "s1": 2, "s2": 2, "s3": 2, "s4": 4, "s5": 4, "s6": 8}
    assert forest.roots == ("s6",)
    assert forest.parent["s0"] == "s4" and forest.parent["s4"] == "s6"
    assert forest.children["s6"] == ("s4", "s5") and forest.children["s0"] == ()
    assert forest.nodes["s1"] == ("node2", "node3") and forest.nodes["s6"] == ()
    assert forest.node_hypernode["node7"] == "s3"
    assert forest.ancestors("s2") == ("s5", "s6")
    assert (forest.tier_of("s4"), forest.tier_of("node0")) == (2, None)
    assert (forest.level_of("s6"), forest.level_of("s0")) == (0, 2)


def test_seed_tree_tier_names_name_the_levels() -> None:
    forest = build_forest(seed_hypernodes(tier_names=True), cpu_nodes(*SEED_NODES))
    assert forest.level_keys == ("core", "spine", "leaf", HOST)
    assert forest.level_aliases["spine"] == 1
    assert forest.level_aliases["tier-2"] == 1
    source = TopologySource.from_forest(forest)
    assert source.kind == "hypernodes"
    assert source.level_index("leaf") == 2 and source.level_index("tier-1") == 2
    assert source.level_for_tier(2) == 1
    assert source.describe_levels() == (
        f"core (tier 3), spine (tier 2), leaf (tier 1), {HOST} (tier 0)"
    )


def test_seed_tree_preferred_with_limit_stays_in_one_tier2_domain() -> None:
    nodes = cpu_nodes(*SEED_NODES)
    forest = build_forest(seed_hypernodes(), nodes)
    used = used_nodes(place_on(forest, nodes, preferred(4, "tier-1", limit="tier-2")))
    assert sum(used.values()) == 4 and set(used.values()) == {1}
    spines = {forest.paths[n][1] for n in used}
    assert spines in ({"s4"}, {"s5"})


def test_seed_tree_limit_refuses_a_job_larger_than_any_tier2_domain() -> None:
    nodes = cpu_nodes(*SEED_NODES)
    forest = build_forest(seed_hypernodes(), nodes)
    decision = place_on(forest, nodes, preferred(6, "tier-1", limit="tier-2"))
    assert not decision.fits
    assert decision.message == 'topology "hypernodes" allows to fit only 4 out of 6 pod(s)'


def test_seed_tree_without_limit_spans_the_top() -> None:
    nodes = cpu_nodes(*SEED_NODES)
    forest = build_forest(seed_hypernodes(), nodes)
    used = used_nodes(place_on(forest, nodes, preferred(6, "tier-1")))
    assert sum(used.values()) == 6
    assert {forest.paths[n][1] for n in used} == {"s4", "s5"}


def test_forest_feeds_topology_sources() -> None:
    nodes = cpu_nodes(*SEED_NODES, "loose")  # a node in no HyperNode
    forest = build_forest(seed_hypernodes(), nodes)
    assert "loose" not in forest.paths
    sources = topology_sources({}, forest)
    tree = sources["hypernodes"].tree(ClusterSnapshot.build(nodes))
    assert tree.size(tree.node_level) == 8
    assert tree.find(("s6", "s5", "s3")) is not None


def test_no_hypernodes_no_topology() -> None:
    forest = build_forest([], cpu_nodes("a"))
    assert forest.level_keys == () and forest.tiers == () and forest.paths == {}
    assert topology_sources({}, forest) == {}


# --- uneven depth and several roots ----------------------------------------------------------


def uneven() -> tuple[list[HyperNode], list[NodeInfo]]:
    hypernodes = [
        hn("top", 3, nodes=["c", "d"], children=["leaf"]),
        hn("leaf", 1, nodes=["a", "b"]),
        hn("mid", 2, children=["leaf2"]),
        hn("leaf2", 1, nodes=["e", "f"]),
        hn("solo", 1, nodes=["g"]),
    ]
    return hypernodes, cpu_nodes("a", "b", "c", "d", "e", "f", "g")


def test_uneven_depth_is_filled() -> None:
    hypernodes, nodes = uneven()
    forest = build_forest(hypernodes, nodes)
    assert forest.problems == {}
    assert forest.level_keys == ("tier-3", "tier-2", "tier-1", HOST)
    assert forest.roots == ("mid", "solo", "top")
    assert forest.paths["a"] == ("top", "leaf", "leaf", "a")  # tier 2 passes leaf through
    assert forest.paths["c"] == ("top", "c", "c", "c")  # below top: the node's own name
    assert forest.paths["e"] == ("mid", "mid", "leaf2", "e")  # a tier-2 root filled upward
    assert forest.paths["g"] == ("solo", "solo", "solo", "g")
    assert forest.node_count == {"top": 4, "leaf": 2, "mid": 2, "leaf2": 2, "solo": 1}


def test_uneven_depth_places_in_real_tier1_domains() -> None:
    hypernodes, nodes = uneven()
    forest = build_forest(hypernodes, nodes)
    used = used_nodes(place_on(forest, nodes, required(2, "tier-1")))
    assert set(used) in ({"a", "b"}, {"e", "f"})
    # Three pods fit only under the tier-3 HyperNode "top" (a, b, c, d), never across roots.
    used = used_nodes(place_on(forest, nodes, required(3, "tier-3")))
    assert set(used) <= {"a", "b", "c", "d"}
    decision = place_on(forest, nodes, required(5, "tier-3"))
    assert not decision.fits
    assert decision.message == 'topology "hypernodes" allows to fit only 4 out of 5 pod(s)'


def test_hostname_label_value_is_the_last_level() -> None:
    nodes = [node("n1", host="host-1", cpu=1000), node("n2", cpu=1000)]
    forest = build_forest([hn("r", 1, nodes=["n1", "n2"])], nodes)
    assert forest.paths == {"n1": ("r", "host-1"), "n2": ("r", "n2")}


def test_node_named_like_a_child_hypernode_keeps_its_own_domain() -> None:
    hypernodes = [hn("top", 3, nodes=["x"], children=["x"]), hn("x", 1, nodes=["a", "b"])]
    nodes = cpu_nodes("a", "b", "x")
    forest = build_forest(hypernodes, nodes)
    assert forest.paths["a"] == ("top", "x", "a")
    assert forest.paths["x"] == ("top", "x (node)", "x")
    assert forest.problems["top"] == [
        'node "x" has the name of a HyperNode below this one; its domains are called "x (node)"'
    ]
    used = used_nodes(place_on(forest, nodes, required(2, "tier-1")))
    assert set(used) == {"a", "b"}


def test_regex_and_label_members_resolve_against_nodes() -> None:
    nodes = [
        node("gpu-1", cpu=1000, labels={"pool": "a"}),
        node("gpu-2", cpu=1000, labels={"pool": "b"}),
        node("cpu-1", cpu=1000, labels={"pool": "a"}),
    ]
    by_regex = parse_hypernode(
        hn_obj("g", 1, {"type": "Node", "selector": {"regexMatch": {"pattern": "gpu-[0-9]"}}})
    )
    by_label = parse_hypernode(
        hn_obj(
            "c",
            1,
            {"type": "Node", "selector": {"labelMatch": {"matchLabels": {"pool": "a"}}}},
        )
    )
    forest = build_forest([by_regex, by_label], nodes)
    # gpu-1 is claimed by both: "c" sorts first and keeps it.
    assert forest.nodes == {"c": ("cpu-1", "gpu-1"), "g": ("gpu-2",)}
    assert forest.problems["g"] == [
        'node "gpu-1" also belongs to "c", which keeps it; a node belongs to one HyperNode '
        "(the one whose name sorts first), so here it is ignored"
    ]


# --- per-object validation -------------------------------------------------------------------


def valid() -> Obj:
    return hn_obj(
        "s0",
        1,
        exact("node-0"),
        {"type": "Node", "selector": {"regexMatch": {"pattern": "^gpu-[0-9]+$"}}},
        {
            "type": "Node",
            "selector": {
                "labelMatch": {
                    "matchLabels": {"example.com/pool": "a"},
                    "matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["z1"]},
                        {"key": "spot", "operator": "DoesNotExist"},
                    ],
                }
            },
        },
        exact("s1", "HyperNode"),
        tier_name="leaf",
    )


def selector_of(index: int) -> Callable[[Obj], Obj]:
    def at(obj: Obj) -> Obj:
        selector: Obj = obj["spec"]["members"][index]["selector"]
        return selector

    return at


def test_valid_object_parses() -> None:
    assert hypernode_problems(valid()) == []
    parsed = parse_hypernode(valid())
    assert parsed == HyperNode(
        name="s0",
        tier=1,
        tier_name="leaf",
        members=(
            Member("Node", exact="node-0"),
            Member("Node", regex="^gpu-[0-9]+$"),
            Member(
                "Node",
                labels=LabelSelector(
                    {"example.com/pool": "a"},
                    (Requirement("zone", "In", ("z1",)), Requirement("spot", "DoesNotExist", ())),
                ),
            ),
            Member("HyperNode", exact="s1"),
        ),
        labels={},
    )


def set_path(obj: Obj, path: Sequence[str | int], value: Any) -> None:
    target: Any = obj
    for step in path[:-1]:
        target = target[step]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value


DELETE = object()

REJECTED: list[tuple[str, Sequence[str | int], Any, str]] = [
    (
        "api version",
        ["apiVersion"],
        "v1",
        'apiVersion: Unsupported value: "v1": supported values: "topology.volcano.sh/v1alpha1"',
    ),
    ("kind", ["kind"], "Node", 'kind: Unsupported value: "Node": supported values: "HyperNode"'),
    ("name missing", ["metadata", "name"], DELETE, "metadata.name: Required value"),
    ("name not DNS", ["metadata", "name"], "S_0", 'metadata.name: Invalid value: "S_0": must be'),
    ("name too long", ["metadata", "name"], "a" * 254, "metadata.name: Invalid value"),
    ("bad label", ["metadata", "labels"], {"a b": "x"}, 'metadata.labels: Invalid value: "a b"'),
    ("tier missing", ["spec", "tier"], DELETE, "spec.tier: Required value"),
    (
        "tier string",
        ["spec", "tier"],
        "1",
        "spec.tier: Invalid value: \"1\": must be an integer (write tier: 1, not tier: '1')",
    ),
    ("tier bool", ["spec", "tier"], True, "spec.tier: Invalid value: true: must be an integer"),
    ("tier float", ["spec", "tier"], 1.5, "spec.tier: Invalid value: 1.5: must be an integer"),
    ("tier negative", ["spec", "tier"], -1, "spec.tier: Invalid value: -1: must be greater"),
    ("tierName type", ["spec", "tierName"], 7, "spec.tierName: Invalid value: 7: must be a string"),
    ("tierName long", ["spec", "tierName"], "t" * 254, "spec.tierName: Invalid value"),
    ("spec missing", ["spec"], DELETE, "spec: Required value"),
    ("members missing", ["spec", "members"], DELETE, "spec.members: Required value"),
    ("members empty", ["spec", "members"], [], "spec.members: Required value"),
    ("members not a list", ["spec", "members"], {}, "spec.members: Invalid value: {}: must be"),
    ("member not an object", ["spec", "members", 0], "n", 'spec.members[0]: Invalid value: "n"'),
    ("type missing", ["spec", "members", 0, "type"], DELETE, "spec.members[0].type: Required"),
    (
        "type unknown",
        ["spec", "members", 0, "type"],
        "Pod",
        'spec.members[0].type: Unsupported value: "Pod": supported values: "Node", "HyperNode"',
    ),
    ("selector missing", ["spec", "members", 0, "selector"], DELETE, "selector: Required value"),
    (
        "no selector",
        ["spec", "members", 0, "selector"],
        {},
        "spec.members[0].selector: Invalid value: {}: exactly one of exactMatch, regexMatch, "
        "labelMatch must be set",
    ),
    (
        "two selectors",
        ["spec", "members", 1, "selector", "exactMatch"],
        {"name": "n"},
        "spec.members[1].selector: Invalid value: ",
    ),
    (
        "exact name missing",
        ["spec", "members", 0, "selector", "exactMatch"],
        {},
        "spec.members[0].selector.exactMatch.name: Required value",
    ),
    (
        "exact name not DNS",
        ["spec", "members", 0, "selector", "exactMatch", "name"],
        "Node_0",
        'spec.members[0].selector.exactMatch.name: Invalid value: "Node_0": must be a DNS-1123',
    ),
    (
        "exact name too long",
        ["spec", "members", 0, "selector", "exactMatch", "name"],
        "n" * 254,
        "spec.members[0].selector.exactMatch.name: Invalid value",
    ),
    (
        "regex empty",
        ["spec", "members", 1, "selector", "regexMatch", "pattern"],
        "",
        'spec.members[1].selector.regexMatch.pattern: Invalid value: "": must not be empty',
    ),
    (
        "regex too long",
        ["spec", "members", 1, "selector", "regexMatch", "pattern"],
        "a" * 1025,
        "must be at most 1024 characters",
    ),
    (
        "regex backreference",
        ["spec", "members", 1, "selector", "regexMatch", "pattern"],
        r"(a)\1",
        'spec.members[1].selector.regexMatch.pattern: Invalid value: "(a)\\\\1": does not '
        "compile as an RE2 regular expression (invalid escape sequence: \\1)",
    ),
    (
        "regex lookahead",
        ["spec", "members", 1, "selector", "regexMatch", "pattern"],
        "gpu(?=-1)",
        "invalid perl operator: (?=",
    ),
    (
        "regex unbalanced",
        ["spec", "members", 1, "selector", "regexMatch", "pattern"],
        "gpu-[0-9",
        "missing ]",
    ),
    (
        "regex for a HyperNode",
        ["spec", "members", 1, "type"],
        "HyperNode",
        "spec.members[1].selector.regexMatch: Forbidden: a HyperNode member must be named with "
        "exactMatch",
    ),
    (
        "labels for a HyperNode",
        ["spec", "members", 2, "type"],
        "HyperNode",
        "spec.members[2].selector.labelMatch: Forbidden",
    ),
    (
        "empty labelMatch",
        ["spec", "members", 2, "selector", "labelMatch"],
        {},
        "spec.members[2].selector.labelMatch: Invalid value: {}: selects no node",
    ),
    (
        "labelMatch with empty parts",
        ["spec", "members", 2, "selector", "labelMatch"],
        {"matchLabels": {}, "matchExpressions": []},
        "selects no node (Volcano matches nothing with an empty labelMatch); give matchLabels",
    ),
    (
        "bad matchLabels key",
        ["spec", "members", 2, "selector", "labelMatch", "matchLabels"],
        {"-bad": "x"},
        'spec.members[2].selector.labelMatch.matchLabels: Invalid value: "-bad"',
    ),
    (
        "bad matchLabels value",
        ["spec", "members", 2, "selector", "labelMatch", "matchLabels"],
        {"pool": "a b"},
        'spec.members[2].selector.labelMatch.matchLabels[pool]: Invalid value: "a b"',
    ),
    (
        "bad expression key",
        ["spec", "members", 2, "selector", "labelMatch", "matchExpressions", 0, "key"],
        "a/b/c",
        "labelMatch.matchExpressions[0].key: Invalid value",
    ),
    (
        "bad operator",
        ["spec", "members", 2, "selector", "labelMatch", "matchExpressions", 0, "operator"],
        "Gt",
        'matchExpressions[0].operator: Unsupported value: "Gt": supported values: "In", '
        '"NotIn", "Exists", "DoesNotExist"',
    ),
    (
        "In without values",
        ["spec", "members", 2, "selector", "labelMatch", "matchExpressions", 0, "values"],
        [],
        "matchExpressions[0].values: Required value: operator In needs at least one value",
    ),
    (
        "DoesNotExist with values",
        ["spec", "members", 2, "selector", "labelMatch", "matchExpressions", 1, "values"],
        ["x"],
        "matchExpressions[1].values: Forbidden: operator DoesNotExist takes no values",
    ),
    (
        "bad expression value",
        ["spec", "members", 2, "selector", "labelMatch", "matchExpressions", 0, "values"],
        ["z 1"],
        'matchExpressions[0].values[0]: Invalid value: "z 1"',
    ),
    (
        "itself as a member",
        ["spec", "members", 3, "selector", "exactMatch", "name"],
        "s0",
        'spec.members[3].selector.exactMatch.name: Invalid value: "s0": a HyperNode cannot be '
        "its own member",
    ),
]


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [case[1:] for case in REJECTED],
    ids=[case[0] for case in REJECTED],
)
def test_rejected(path: Sequence[str | int], value: Any, expected: str) -> None:
    obj = valid()
    set_path(obj, path, value)
    problems = hypernode_problems(obj)
    # Exactly one problem, the expected one (field and reason); the error carries just it.
    assert len(problems) == 1 and expected in problems[0], problems
    with pytest.raises(InputError) as raised:
        parse_hypernode(obj)
    assert raised.value.message == problems[0]
    assert raised.value.field == ""
    assert str(raised.value) == f"{raised.value.where}: {problems[0]}"


ACCEPTED: list[tuple[str, Sequence[str | int], Any]] = [
    ("tier 0", ["spec", "tier"], 0),
    ("no tierName", ["spec", "tierName"], DELETE),
    (
        "a node named like the HyperNode",
        ["spec", "members", 0, "selector", "exactMatch"],
        {"name": "s0"},
    ),
    ("dotted exact name", ["spec", "members", 0, "selector", "exactMatch"], {"name": "a.b-c"}),
    (
        "hostile but linear regex",
        ["spec", "members", 1, "selector", "regexMatch"],
        {"pattern": "(a+)+$"},
    ),
    ("labels only", ["spec", "members", 2, "selector", "labelMatch"], {"matchLabels": {"a": ""}}),
    (
        "Exists only",
        ["spec", "members", 2, "selector", "labelMatch"],
        {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
    ),
    ("labels", ["metadata", "labels"], {"example.com/x": "y"}),
]


@pytest.mark.parametrize(
    ("path", "value"), [case[1:] for case in ACCEPTED], ids=[case[0] for case in ACCEPTED]
)
def test_accepted(path: Sequence[str | int], value: Any) -> None:
    obj = valid()
    set_path(obj, path, value)
    assert hypernode_problems(obj) == []
    parse_hypernode(obj)


def test_every_problem_is_reported_at_once_with_the_object_named() -> None:
    obj = valid()
    obj["spec"]["tier"] = "2"
    obj["spec"]["members"][0]["selector"] = {}
    obj["spec"]["members"][1]["selector"]["regexMatch"]["pattern"] = "("
    problems = hypernode_problems(obj)
    assert problems == [
        "spec.tier: Invalid value: \"2\": must be an integer (write tier: 1, not tier: '1')",
        "spec.members[0].selector: Invalid value: {}: exactly one of exactMatch, regexMatch, "
        "labelMatch must be set",
        'spec.members[1].selector.regexMatch.pattern: Invalid value: "(": does not compile '
        "as an RE2 regular expression (missing ): (); RE2, like Go's regexp, has no "
        "backreferences or lookaround",
    ]
    with pytest.raises(InputError) as raised:
        parse_hypernode(obj)
    assert raised.value.where == "HyperNode s0"
    assert raised.value.message == "; ".join(problems)


def test_unnamed_object_is_named_in_the_error() -> None:
    with pytest.raises(InputError) as raised:
        parse_hypernode({"kind": "HyperNode"})
    assert raised.value.where == "HyperNode <unnamed>"
    assert raised.value.message == (
        'apiVersion: Unsupported value: null: supported values: "topology.volcano.sh/v1alpha1"; '
        "metadata: Required value: a HyperNode needs metadata.name; "
        "metadata.name: Required value: a HyperNode needs a name; "
        "spec: Required value: set spec.tier and spec.members"
    )


def test_catastrophic_pattern_matches_in_linear_time() -> None:
    name = "a" * 50_000 + "!"
    start = time.perf_counter()
    assert not regex_matches("(a+)+$", name)
    assert regex_matches("(a+)+!$", name)
    assert time.perf_counter() - start < 1.0


def test_regex_search_is_unanchored_like_go() -> None:
    assert regex_matches("node-[0-9]", "gpu-node-7x")
    assert not regex_matches("^node", "gpu-node-7")
    assert regex_matches("^gpu-node-[0-9]+$", "gpu-node-17")
    assert not regex_matches("(", "anything")  # a pattern that does not compile matches nothing


def test_label_selector_semantics() -> None:
    labels = {"zone": "z1", "pool": "a"}

    def sel(*reqs: Requirement, **match: str) -> LabelSelector:
        return LabelSelector(dict(match), reqs)

    assert matches_selector(sel(zone="z1"), labels)
    assert not matches_selector(sel(zone="z2"), labels)
    assert matches_selector(sel(Requirement("zone", "In", ("z1", "z2"))), labels)
    assert matches_selector(sel(Requirement("rack", "NotIn", ("r1",))), labels)  # absent
    assert not matches_selector(sel(Requirement("zone", "NotIn", ("z1",))), labels)
    assert matches_selector(sel(Requirement("pool", "Exists", ())), labels)
    assert not matches_selector(sel(Requirement("pool", "DoesNotExist", ())), labels)
    assert not matches_selector(sel(), labels)  # empty: nothing, as Volcano's labelMatch


# --- structure across objects ----------------------------------------------------------------


def assert_seed_intact(forest: HyperNodeForest) -> None:
    assert forest.paths["node0"][-4:] == ("s6", "s4", "s0", "node0")
    assert forest.node_count["s6"] == 8
    for name in ("s0", "s1", "s2", "s3", "s4", "s5", "s6"):
        assert name not in forest.problems


def test_cycle_is_left_out_and_the_rest_works() -> None:
    hypernodes = [
        *seed_hypernodes(),
        hn("a", 2, nodes=["x1"], children=["b"]),
        hn("b", 3, children=["a"]),
        hn("p", 4, children=["a"]),
    ]
    nodes = cpu_nodes(*SEED_NODES, "x1")
    forest = build_forest(hypernodes, nodes)
    assert forest.excluded == {"a", "b"}
    assert forest.problems["a"] == [
        "is left out of the topology: it is on a membership cycle a -> b -> a; remove one of "
        "these memberships"
    ]
    assert forest.problems["b"][0].endswith("cycle b -> a -> b; remove one of these memberships")
    assert forest.problems["p"] == [
        'member HyperNode "a" is left out of the topology (it is on a membership cycle); this '
        "membership is ignored"
    ]
    assert "x1" not in forest.paths and "a" not in forest.hypernodes
    assert forest.roots == ("p", "s6")
    assert forest.level_keys == ("tier-4", "tier-3", "tier-2", "tier-1", HOST)
    assert_seed_intact(forest)
    used = used_nodes(place_on(forest, nodes, preferred(4, "tier-1", limit="tier-2")))
    assert len(used) == 4


def test_longer_cycle_is_named_from_each_member() -> None:
    hypernodes = [
        hn("c1", 1, children=["c2"]),
        hn("c2", 1, children=["c3"]),
        hn("c3", 1, children=["c1"]),
        hn("ok", 1, nodes=["n"]),
    ]
    forest = build_forest(hypernodes, cpu_nodes("n"))
    assert forest.excluded == {"c1", "c2", "c3"}
    assert "c2 -> c3 -> c1 -> c2" in forest.problems["c2"][0]
    assert forest.paths == {"n": ("ok", "n")}


def test_self_membership_built_directly_is_a_cycle() -> None:
    looped = HyperNode("x", 2, members=(Member("HyperNode", exact="x"),))
    forest = build_forest([looped, hn("y", 1, nodes=["n"])], cpu_nodes("n"))
    assert forest.excluded == {"x"}
    assert "membership cycle x -> x" in forest.problems["x"][0]


def test_two_parents_keep_the_first_name() -> None:
    hypernodes = [
        *seed_hypernodes(),
        hn("c", 1, nodes=["x1"]),
        hn("p1", 2, children=["c"]),
        hn("p2", 2, children=["c"]),
    ]
    nodes = cpu_nodes(*SEED_NODES, "x1")
    forest = build_forest(hypernodes, nodes)
    assert forest.parent["c"] == "p1"
    assert forest.children["p2"] == ()
    assert forest.problems == {
        "p2": [
            'member HyperNode "c" already belongs to "p1"; a HyperNode has one parent (the one '
            "whose name sorts first keeps it), so this membership is ignored"
        ]
    }
    assert forest.paths["x1"] == ("p1", "p1", "c", "x1")
    assert forest.node_count["p1"] == 1 and forest.node_count["p2"] == 0
    assert_seed_intact(forest)


def test_node_in_two_hypernodes_stays_with_the_first_name() -> None:
    hypernodes = [
        *seed_hypernodes(),
        hn("h2", 1, nodes=["x1", "x2"]),
        hn("h1", 1, nodes=["x1"]),
    ]
    forest = build_forest(hypernodes, cpu_nodes(*SEED_NODES, "x1", "x2"))
    assert forest.node_hypernode["x1"] == "h1"
    assert forest.nodes["h2"] == ("x2",)
    assert forest.problems == {
        "h2": [
            'node "x1" also belongs to "h1", which keeps it; a node belongs to one HyperNode '
            "(the one whose name sorts first), so here it is ignored"
        ]
    }
    assert_seed_intact(forest)


def test_many_contested_nodes_make_one_message() -> None:
    names = [f"n{i}" for i in range(8)]
    greedy = parse_hypernode(
        hn_obj("z", 1, {"type": "Node", "selector": {"regexMatch": {"pattern": "^n"}}})
    )
    forest = build_forest([greedy, hn("a", 1, nodes=names)], cpu_nodes(*names))
    assert forest.problems["z"] == [
        '8 nodes "n0", "n1", "n2", "n3", "n4" and 3 more also belong to "a", which keeps them; '
        "a node belongs to one HyperNode (the one whose name sorts first), so here they are "
        "ignored"
    ]


def test_tier_order_violations_drop_the_membership_on_the_parent() -> None:
    hypernodes = [
        *seed_hypernodes(),
        hn("flat", 1, children=["low"]),
        hn("low", 1, nodes=["x1"]),
        hn("upside", 1, children=["high"]),
        hn("high", 2, nodes=["x2"]),
    ]
    forest = build_forest(hypernodes, cpu_nodes(*SEED_NODES, "x1", "x2"))
    assert forest.problems == {
        "flat": [
            'member HyperNode "low" has tier 1, which is not below this HyperNode\'s tier 1; a '
            "parent's tier must be higher than its members' tiers, so this membership is ignored"
        ],
        "upside": [
            'member HyperNode "high" has tier 2, which is not below this HyperNode\'s tier 1; a '
            "parent's tier must be higher than its members' tiers, so this membership is ignored"
        ],
    }
    assert "low" not in forest.parent and "high" not in forest.parent
    assert forest.paths["x1"] == ("low", "low", "low", "x1")
    assert forest.paths["x2"] == ("high", "high", "x2", "x2")  # below high: the node itself
    assert_seed_intact(forest)


def test_tier_check_runs_before_the_one_parent_check() -> None:
    hypernodes = [
        hn("a-wrong", 1, children=["c"]),
        hn("b-right", 2, children=["c"]),
        hn("c", 1, nodes=["n"]),
    ]
    forest = build_forest(hypernodes, cpu_nodes("n"))
    assert forest.parent == {"c": "b-right"}
    assert list(forest.problems) == ["a-wrong"]


def test_missing_child_is_ignored_on_the_parent() -> None:
    forest = build_forest([hn("p", 2, nodes=["n"], children=["later"])], cpu_nodes("n"))
    assert forest.problems == {
        "p": ['member HyperNode "later" does not exist; it is ignored until it is created']
    }
    assert forest.missing_members == {"p": ("later",)}
    assert forest.paths == {"n": ("p", "n")}


def test_duplicate_definitions_keep_the_first() -> None:
    forest = build_forest([hn("p", 2, nodes=["a"]), hn("p", 1, nodes=["b"])], cpu_nodes("a", "b"))
    assert forest.tier_of("p") == 2 and forest.nodes["p"] == ("a",)
    assert forest.problems == {"p": ["is defined more than once; the first definition is used"]}


def test_tier_names_that_disagree_or_collide_fall_back() -> None:
    hypernodes = [
        hn("r1", 1, nodes=["a"], tier_name="rack"),
        hn("r2", 1, nodes=["b"], tier_name="leaf"),
        hn("r3", 1, nodes=["c"]),
        hn("b1", 2, children=["r1", "r2"], tier_name="block"),
        hn("z1", 3, children=["b1"], tier_name="block"),
        hn("w", 4, children=["z1"], tier_name=HOST),
        hn("v", 5, children=["w"], tier_name="tier-1"),
        hn("u", 6, children=["v"], tier_name="tier-6"),
    ]
    forest = build_forest(hypernodes, cpu_nodes("a", "b", "c"))
    assert forest.level_keys == (
        "tier-6",
        "tier-5",
        "tier-4",
        "tier-3",
        "tier-2",
        "tier-1",
        HOST,
    )
    assert forest.level_aliases["rack"] == 5 and forest.level_aliases["leaf"] == 5
    assert "block" not in forest.level_aliases
    assert forest.problems["r1"] == [
        'HyperNodes of tier 1 disagree on its tierName ("leaf", "rack"); the level is called '
        "tier-1 until they agree"
    ]
    assert "r3" not in forest.problems
    assert forest.problems["b1"] == [
        'tierName "block" is used by several tiers (2, 3); give each tier its own name; it is '
        "not used"
    ]
    assert forest.problems["w"] == [f'tierName "{HOST}" is the node level\'s name; it is not used']
    assert forest.problems["v"] == [
        'tierName "tier-1" looks like another tier\'s number; it is not used'
    ]
    assert "u" not in forest.problems


# --- discovery -------------------------------------------------------------------------------

BLOCK, RACK = "example.com/block", "example.com/rack"
LABELS = (BLOCK, RACK, HOST)


def labelled(name: str, block: str | None, rack: str | None) -> NodeInfo:
    labels = {HOST: name}
    if block is not None:
        labels[BLOCK] = block
    if rack is not None:
        labels[RACK] = rack
    return NodeInfo(name, labels, {"cpu": 1000, "pods": 10})


def cluster() -> list[NodeInfo]:
    return [
        labelled("n1", "block-1", "rack-1"),
        labelled("n2", "block-1", "rack-1"),
        labelled("n3", "block-1", "rack-2"),
        labelled("n4", "block-2", "rack-1"),
        labelled("n5", None, "rack-1"),  # no block: its rack is a root
        labelled("n6", "block-2", None),  # no rack: in no HyperNode
    ]


def by_path(objects: Sequence[Mapping[str, Any]]) -> dict[tuple[int, str], list[Mapping[str, Any]]]:
    out: dict[tuple[int, str], list[Mapping[str, Any]]] = {}
    for obj in objects:
        out.setdefault((obj["spec"]["tier"], obj["metadata"]["name"].split("-")[2]), []).append(obj)
    return out


def member_names(obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(m["type"], m["selector"]["exactMatch"]["name"]) for m in obj["spec"]["members"]]


def test_discover_builds_scoped_tiers() -> None:
    objects = discover(cluster(), "rack-net", LABELS)
    assert [o["spec"]["tier"] for o in objects] == [1, 1, 1, 1, 2, 2]
    for obj in objects:
        assert hypernode_problems(obj) == [], obj
        assert obj["metadata"]["labels"] == {SOURCE_LABEL: LABEL_SOURCE, TYPE_LABEL: "rack-net"}
        assert obj["metadata"]["name"].startswith(f"rack-net-t{obj['spec']['tier']}-")
    racks = [o for o in objects if o["spec"]["tier"] == 1]
    assert {o["spec"]["tierName"] for o in racks} == {RACK}
    members = sorted(member_names(o) for o in racks)
    assert members == [
        [("Node", "n1"), ("Node", "n2")],
        [("Node", "n3")],
        [("Node", "n4")],
        [("Node", "n5")],
    ]
    rack1 = [o for o in racks if o["metadata"]["name"].startswith("rack-net-t1-rack-1-")]
    assert len(rack1) == 3  # in block-1, in block-2, and without a block: three HyperNodes
    assert len({o["metadata"]["name"] for o in rack1}) == 3
    blocks = {o["metadata"]["name"]: o for o in objects if o["spec"]["tier"] == 2}
    assert {o["spec"]["tierName"] for o in blocks.values()} == {BLOCK}
    assert sorted(o["status"]["nodeCount"] for o in blocks.values()) == [1, 3]
    block1 = next(o for n, o in blocks.items() if n.startswith("rack-net-t2-block-1-"))
    assert [t for t, _ in member_names(block1)] == ["HyperNode", "HyperNode"]
    assert member_names(block1) == sorted(member_names(block1))


def test_discovered_objects_build_the_labelled_tree() -> None:
    nodes = cluster()
    objects = discover(nodes, "rack-net", LABELS)
    forest = build_forest([parse_hypernode(o) for o in objects], nodes)
    assert forest.problems == {}
    assert forest.level_keys == (BLOCK, RACK, HOST)
    assert set(forest.paths) == {"n1", "n2", "n3", "n4", "n5"}
    assert forest.paths["n1"][:2] == forest.paths["n2"][:2]
    assert forest.paths["n1"][1] != forest.paths["n4"][1]  # rack-1 in two blocks
    rack_of_n5 = forest.paths["n5"][1]
    assert forest.paths["n5"] == (rack_of_n5, rack_of_n5, "n5")
    for obj in objects:
        assert forest.node_count[obj["metadata"]["name"]] == obj["status"]["nodeCount"]


def test_discovered_names_are_deterministic_and_stable() -> None:
    first = discover(cluster(), "rack-net", LABELS)
    again = discover(list(reversed(cluster())), "rack-net", LABELS)
    assert first == again
    grown = discover([*cluster(), labelled("n9", "block-9", "rack-9")], "rack-net", LABELS)
    old_names = {o["metadata"]["name"] for o in first}
    assert old_names < {o["metadata"]["name"] for o in grown}
    other_type = discover(cluster(), "other", LABELS)
    assert not old_names & {o["metadata"]["name"] for o in other_type}


def test_discovered_names_are_valid_for_awkward_values() -> None:
    nodes = [labelled("n1", "Block_A.1", "R" * 63), labelled("n2", "", "---")]
    for obj in discover(nodes, "t", LABELS):
        assert hypernode_problems(obj) == [], obj
        assert len(obj["metadata"]["name"]) <= 253


def test_discover_without_hostname_and_single_tier() -> None:
    objects = discover(cluster(), "racks", (RACK,))
    assert {o["spec"]["tier"] for o in objects} == {1}
    assert len(objects) == 2  # rack-1 and rack-2: no parent label, so values are global
    assert sum(o["status"]["nodeCount"] for o in objects) == 5


def test_discover_refuses_a_bad_type_name() -> None:
    with pytest.raises(InputError) as raised:
        discover(cluster(), "Rack_Net", LABELS)
    assert raised.value.describe() == (
        "topology type 'Rack_Net': a topology type name must be 1-20 lowercase letters, "
        "digits or '-', starting and ending with a letter or digit"
    )


def config(types: Mapping[str, Any], **source: Any) -> Obj:
    entry: Obj = {"source": "label", "enabled": True, "interval": "10m"}
    entry.update(source)
    entry["config"] = {"networkTopologyTypes": types}
    return {"networkTopologyDiscovery": [entry]}


def levels(*labels: str) -> list[dict[str, str]]:
    return [{"nodeLabel": label} for label in labels]


def test_discovery_config_reads_enabled_label_sources() -> None:
    payload = config({"rack-net": levels(*LABELS), "racks": levels(RACK)})
    payload["networkTopologyDiscovery"] += [
        {"source": "ufm", "enabled": True, "config": {"endpoint": "https://ufm"}},
        {"source": "label", "enabled": False, "config": {"networkTopologyTypes": {"x": "junk"}}},
    ]
    assert discovery_config(payload) == [
        DiscoveryType("rack-net", LABELS, 600.0),
        DiscoveryType("racks", (RACK,), 600.0),
    ]
    assert discovery_config({}) == []
    assert (
        discovery_config(config({"t": levels(RACK)}, interval="1h30m"))[0].interval_seconds == 5400
    )
    assert discovery_config(config({"t": levels(RACK)}, interval=None))[0].interval_seconds == 3600


BAD_CONFIGS: list[tuple[str, Obj, str, str]] = [
    (
        "type name too long",
        config({"a" * 21: levels(RACK)}),
        f"networkTopologyDiscovery[0].config.networkTopologyTypes.{'a' * 21}",
        "a topology type name must be 1-20 lowercase letters, digits or '-', starting and "
        "ending with a letter or digit",
    ),
    (
        "repeated label",
        config({"t": levels(BLOCK, RACK, BLOCK)}),
        "networkTopologyDiscovery[0].config.networkTopologyTypes.t[2].nodeLabel",
        f"'{BLOCK}' is listed twice; each label is one tier",
    ),
    (
        "hostname not last",
        config({"t": levels(HOST, RACK)}),
        "networkTopologyDiscovery[0].config.networkTopologyTypes.t[0].nodeLabel",
        "kubernetes.io/hostname can only be the last (node) level",
    ),
    (
        "hostname only",
        config({"t": levels(HOST)}),
        "networkTopologyDiscovery[0].config.networkTopologyTypes.t",
        "needs at least one label above kubernetes.io/hostname",
    ),
    (
        "missing nodeLabel",
        config({"t": [{"label": RACK}]}),
        "networkTopologyDiscovery[0].config.networkTopologyTypes.t[0].nodeLabel",
        "is required",
    ),
    (
        "bad label key",
        config({"t": levels("a b")}),
        "networkTopologyDiscovery[0].config.networkTopologyTypes.t[0].nodeLabel",
        "'a b' is not a valid label key: the name part must be 1-63 characters, alphanumeric, "
        "'-', '_' or '.', starting and ending with an alphanumeric",
    ),
    (
        "empty types",
        config({}),
        "networkTopologyDiscovery[0].config.networkTopologyTypes",
        "must map each topology type to its node labels",
    ),
    (
        "bad interval",
        config({"t": levels(RACK)}, interval="ten minutes"),
        "networkTopologyDiscovery[0].interval",
        "'ten minutes' must be a positive duration such as 10m or 1h",
    ),
    (
        "not a list",
        {"networkTopologyDiscovery": {"source": "label"}},
        "networkTopologyDiscovery",
        "must be a list",
    ),
]


@pytest.mark.parametrize(
    ("payload", "field", "message"),
    [case[1:] for case in BAD_CONFIGS],
    ids=[case[0] for case in BAD_CONFIGS],
)
def test_discovery_config_rejects(payload: Obj, field: str, message: str) -> None:
    with pytest.raises(InputError) as raised:
        discovery_config(payload, where="ConfigMap volcano-controller-configmap")
    assert raised.value.field == field
    assert raised.value.message == message
    assert raised.value.where == "ConfigMap volcano-controller-configmap"


def test_discovery_config_type_in_two_sources() -> None:
    payload = config({"t": levels(RACK)})
    payload["networkTopologyDiscovery"].append(
        copy.deepcopy(payload["networkTopologyDiscovery"][0])
    )
    with pytest.raises(InputError) as raised:
        discovery_config(payload)
    assert raised.value.field == "networkTopologyDiscovery[1].config.networkTopologyTypes.t"
    assert raised.value.message == "is already configured by an earlier label source"
    assert raised.value.where == "network topology discovery"


def test_reconcile_touches_only_its_own_objects() -> None:
    desired = discover(cluster(), "rack-net", LABELS)
    names = [o["metadata"]["name"] for o in desired]
    unchanged = copy.deepcopy(desired[0])
    unchanged["metadata"]["resourceVersion"] = "7"
    stale_count = copy.deepcopy(desired[1])
    stale_count["status"]["nodeCount"] = 99
    stale_count["metadata"]["resourceVersion"] = "8"
    stale_count["metadata"]["labels"]["team"] = "net"
    stale_count["metadata"]["annotations"] = {"note": "kept"}
    changed_members = copy.deepcopy(desired[2])
    changed_members["spec"]["members"] = [*changed_members["spec"]["members"][:1], exact("old")]
    gone = copy.deepcopy(desired[3])
    gone["metadata"]["name"] = "rack-net-t1-gone-0000000000"
    hand_made = hn_obj("manual", 1, exact("n1"))
    other_type = copy.deepcopy(desired[0])
    other_type["metadata"] = {
        "name": "other-t1-x",
        "labels": {SOURCE_LABEL: LABEL_SOURCE, TYPE_LABEL: "other"},
    }
    squatter = hn_obj(names[4], 2, exact("n1"))  # a hand-made object holds a desired name
    existing = [unchanged, stale_count, changed_members, gone, hand_made, other_type, squatter]

    plan = reconcile(existing, desired, "rack-net")

    assert [o["metadata"]["name"] for o in plan.create] == [names[3], names[5]]
    assert [o["metadata"]["name"] for o in plan.update] == [names[1], names[2]]
    updated = plan.update[0]
    assert updated["status"] == {"nodeCount": desired[1]["status"]["nodeCount"]}
    assert updated["metadata"]["resourceVersion"] == "8"
    assert updated["metadata"]["annotations"] == {"note": "kept"}
    assert updated["metadata"]["labels"]["team"] == "net"
    assert plan.update[1]["spec"] == desired[2]["spec"]
    assert plan.delete == ("rack-net-t1-gone-0000000000",)
    assert plan.conflicts == (names[4],)


def test_reconcile_only_adds_labels_when_ours_are_missing() -> None:
    desired = discover(cluster(), "rack-net", LABELS)
    current = copy.deepcopy(desired)
    assert reconcile(current, desired, "rack-net") == dataclasses.replace(
        reconcile([], [], "rack-net")
    )
    del current[0]["metadata"]["labels"][TYPE_LABEL]  # no longer ours: left alone
    plan = reconcile(current, desired, "rack-net")
    assert plan.update == () and plan.delete == ()
    assert plan.conflicts == (desired[0]["metadata"]["name"],)


def test_discovery_type_names_are_lower_cased_as_volcano_does() -> None:
    # Volcano's documented ConfigMap writes topologyA2; Volcano lower-cases it.
    assert discovery_config(config({"topologyA2": levels(*LABELS)})) == [
        DiscoveryType("topologya2", LABELS, 600.0)
    ]


def test_every_problem_of_a_discovery_config_is_listed() -> None:
    payload = config({"ok": levels(RACK), "bad_name": levels(RACK), "empty": []}, interval="x")
    with pytest.raises(InputError) as raised:
        discovery_config(payload)
    types = "networkTopologyDiscovery[0].config.networkTopologyTypes"
    assert not raised.value.field  # each problem names its own
    assert raised.value.message == (
        "networkTopologyDiscovery[0].interval: 'x' must be a positive duration such as 10m or "
        f"1h; {types}.bad_name: a topology type name must be 1-20 lowercase letters, digits or "
        f"'-', starting and ending with a letter or digit; {types}.empty: must be a non-empty "
        "list of {nodeLabel: <key>}, top tier first"
    )
