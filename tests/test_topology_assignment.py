"""The TopologyAssignment wire forms: Kueue v1beta2 ``slices`` (written) and ``domains`` (read).

The expected slices follow the rules of Kueue's encoder (``V1Beta2From``, hostname-prefix gate
on), checked here on vectors of our own.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from topogate.api.constants import HOSTNAME_LABEL
from topogate.api.errors import InputError
from topogate.api.models import TopologyAssignment
from topogate.api.topology_assignment import (
    MAX_DOMAINS_PER_SLICE,
    MAX_SLICES,
    AssignedDomain,
    Assignment,
    decode,
    encode,
    encode_domains,
    encode_hostname_runs,
    encode_single,
    hostname_prefix_keys,
    wire_size,
)

H = HOSTNAME_LABEL


def doms(*rows: tuple[Any, ...]) -> list[AssignedDomain]:
    """(value, ..., count) rows."""
    return [AssignedDomain(tuple(row[:-1]), row[-1]) for row in rows]


def one_slice(count: int, values: list[dict[str, Any]], pods: dict[str, Any]) -> dict[str, Any]:
    return {"domainCount": count, "valuesPerLevel": values, "podCounts": pods}


def ind(roots: list[str], prefix: str | None = None, suffix: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if prefix is not None:
        out["prefix"] = prefix
    if suffix is not None:
        out["suffix"] = suffix
    return {"individual": {**out, "roots": roots}}


# (name, levels, domains, the one slice Kueue's encoder writes for them)
COMPACTION = [
    ("no domains", ["zone", "rack"], [], None),
    (
        "one domain: every level universal",
        ["zone", "rack"],
        doms(("z7", "r3", 4)),
        one_slice(1, [{"universal": "z7"}, {"universal": "r3"}], {"universal": 4}),
    ),
    (
        "common prefix per level, same counts",
        ["zone", "rack"],
        doms(("z7", "r3", 2), ("z8", "r4", 2)),
        one_slice(2, [ind(["7", "8"], "z"), ind(["3", "4"], "r")], {"universal": 2}),
    ),
    (
        "prefix and suffix, different counts",
        ["zone", "rack"],
        doms(("eu-zone-1a", "rack-01.dc", 3), ("eu-zone-1b", "rack-02.dc", 1)),
        one_slice(
            2,
            [ind(["a", "b"], "eu-zone-1"), ind(["1", "2"], "rack-0", ".dc")],
            {"individual": [3, 1]},
        ),
    ),
    (
        "a level with one value becomes universal",
        ["zone", "rack"],
        doms(("west", "k1", 1), ("west", "m2", 5)),
        one_slice(2, [{"universal": "west"}, ind(["k1", "m2"])], {"individual": [1, 5]}),
    ),
    (
        "a prefix that shrinks, and an empty root",
        ["rack"],
        doms(("h123", 1), ("h12", 1), ("h1", 1), ("h13", 1)),
        one_slice(4, [ind(["23", "2", "", "3"], "h1")], {"universal": 1}),
    ),
    (
        "a suffix that shrinks",
        ["rack"],
        doms(("987x", 1), ("87x", 1), ("7x", 1), ("97x", 1)),
        one_slice(4, [ind(["98", "8", "", "9"], suffix="7x")], {"universal": 1}),
    ),
    (
        # Longest prefix "koko" and suffix "okowa" overlap in "kokowa": the prefix gives way.
        "prefix and suffix overlap: the prefix is cut",
        ["rack"],
        doms(("kokolokowa", 1), ("kokowa", 1)),
        one_slice(2, [ind(["okol", ""], "k", "okowa")], {"universal": 1}),
    ),
    (
        "overlap leaves no prefix at all (longer first)",
        ["rack"],
        doms(("xoxox", 1), ("xox", 1)),
        one_slice(2, [ind(["xo", ""], suffix="xox")], {"universal": 1}),
    ),
    (
        "overlap leaves no prefix at all (shorter first)",
        ["rack"],
        doms(("xox", 1), ("xoxox", 1)),
        one_slice(2, [ind(["", "xo"], suffix="xox")], {"universal": 1}),
    ),
]


@pytest.mark.parametrize(
    ("levels", "domains", "expected"), [c[1:] for c in COMPACTION], ids=[c[0] for c in COMPACTION]
)
def test_compaction_matches_kueue(
    levels: list[str], domains: list[AssignedDomain], expected: dict[str, Any] | None
) -> None:
    written = encode(levels, domains)
    assert written == {"levels": levels, "slices": [expected] if expected else []}
    assert decode(written) == Assignment(tuple(levels), tuple(domains))


def test_hostname_runs_cloud_pools() -> None:
    # GKE-style pools: the longest "-"-ended prefix two hosts share keys a run.
    domains = doms(
        ("gke-prod-np-gpu-7f3a-x1q", 2),
        ("gke-prod-np-gpu-7f3a-x2w", 2),
        ("gke-prod-np-cpu-91bc-aa1", 1),
        ("gke-prod-np-cpu-91bc-aa2", 4),
    )
    assert encode_hostname_runs([H], domains)["slices"] == [
        one_slice(2, [ind(["1q", "2w"], "gke-prod-np-gpu-7f3a-x")], {"universal": 2}),
        one_slice(2, [ind(["1", "2"], "gke-prod-np-cpu-91bc-aa")], {"individual": [1, 4]}),
    ]


def test_hostname_runs_private_dns_names() -> None:
    suffix = ".eu-west-1.compute.internal"
    domains = doms(
        (f"ip-10-0-7-12{suffix}", 1),
        (f"ip-10-0-7-13{suffix}", 1),
        (f"ip-10-0-9-4{suffix}", 3),
        (f"ip-10-0-9-5{suffix}", 2),
    )
    assert encode_hostname_runs([H], domains)["slices"] == [
        one_slice(2, [ind(["2", "3"], "ip-10-0-7-1", suffix)], {"universal": 1}),
        one_slice(2, [ind(["4", "5"], "ip-10-0-9-", suffix)], {"individual": [3, 2]}),
    ]


def test_hostname_runs_keep_the_order() -> None:
    # Interleaved pools are never regrouped: the order is the ranks' order.
    domains = doms(("pa-n-1", 1), ("pb-n-1", 2), ("pa-n-2", 3), ("pb-n-2", 4))
    written = encode_hostname_runs([H], domains)
    assert len(written["slices"]) == 4
    assert decode(written).domains == tuple(domains)


def test_hostname_runs_only_at_a_hostname_level() -> None:
    domains = doms(("row-a", 1), ("row-b", 2))
    assert len(encode_hostname_runs(["rack"], domains)["slices"]) == 1
    assert len(encode_hostname_runs([H], domains)["slices"]) == 1  # "row-": one run


def test_prefix_keys() -> None:
    assert hostname_prefix_keys(["a-b-c1", "a-b-c2", "a-d-e", "x-y"]) == ["a-b-", "a-b-", "a-", ""]
    assert hostname_prefix_keys(["node-a", "host-b"]) == ["", ""]  # none shared
    assert hostname_prefix_keys(["nodea", "hostb"]) is None  # no "-" at all
    assert hostname_prefix_keys(["trailing-", "trailing-"]) is None  # a final "-" is no prefix


def test_prefix_keys_back_off_to_fit_1000_slices() -> None:
    # Alternating middle parts would need 1001 runs: the shorter shared prefix is used.
    hosts = [f"r-{'pq'[i % 2]}-{i:04d}" for i in range(1001)]
    assert hostname_prefix_keys(hosts) == ["r-"] * 1001
    # Alternating first parts: no depth fits, so one run (cut only at 100,000 domains).
    hosts = [f"{('u-p', 'v-q')[i % 2]}-{i:04d}" for i in range(1001)]
    assert hostname_prefix_keys(hosts) is None
    assert len(encode([H], [AssignedDomain((h,), 1) for h in hosts])["slices"]) == 1


def test_a_run_is_cut_at_100000_domains() -> None:
    # 1200 pools of 100 hosts: 1200 runs are too many, so "gke-c-" keys one run of 120,000
    # domains, cut into 100,000 + 20,000 (the hostname form is the only one above 100,000).
    hosts = [f"gke-c-{p:04d}-{n:03d}" for p in range(1200) for n in range(100)]
    written = encode([H], [AssignedDomain((h,), 1) for h in hosts])
    assert [s["domainCount"] for s in written["slices"]] == [MAX_DOMAINS_PER_SLICE, 20_000]
    assert [d.values[0] for d in decode(written).domains] == hosts


def pools(count: int) -> list[AssignedDomain]:
    half = count // 2
    return [
        AssignedDomain((f"pool-{'ab'[i >= half]}-node-{i % half if half else i:05d}",), 1)
        for i in range(count)
    ]


@pytest.mark.parametrize(("count", "runs_win"), [(1, True), (4, False), (20, True)])
def test_the_smaller_encoding_is_written(count: int, runs_win: bool) -> None:
    domains = pools(count)
    runs, single = encode_hostname_runs([H], domains), encode_single([H], domains)
    assert encode([H], domains) == (runs if runs_win else single)
    if count > 1:
        assert (wire_size(runs) <= wire_size(single)) is runs_win


def test_wire_size_is_compact_json_bytes() -> None:
    written = encode([H], pools(20))
    assert wire_size(written) == len(json.dumps(written, separators=(",", ":")).encode())
    assert wire_size({"v": "a<b&"}) == len('{"v":"a\\u003cb\\u0026"}')  # Go escapes < > &


def test_both_forms_decode_alike() -> None:
    levels = ["zone", "rack", H]
    domains = doms(("z1", "r1", "n-1", 2), ("z1", "r2", "n-7", 1), ("z2", "r9", "n-8", 3))
    old = encode_domains(levels, domains)
    assert "slices" not in old
    assert (
        decode(old) == decode(encode(levels, domains)) == Assignment(tuple(levels), tuple(domains))
    )


def test_reads_slices_kueue_could_write_but_we_do_not() -> None:
    written = {
        "levels": ["zone", "rack"],
        "slices": [
            one_slice(2, [{"universal": "z1"}, ind(["1", "2"], "r", "-s")], {"individual": [2, 3]}),
            one_slice(
                3, [ind(["2", "3", "4"], "z"), ind(["x", "y", "z"], suffix="-t")], {"universal": 5}
            ),
            one_slice(1, [ind(["z10"]), ind(["r10"])], {"individual": [10]}),
        ],
    }
    assert decode(written).domains == tuple(
        doms(
            ("z1", "r1-s", 2),
            ("z1", "r2-s", 3),
            ("z2", "x-t", 5),
            ("z3", "y-t", 5),
            ("z4", "z-t", 5),
            ("z10", "r10", 10),
        )
    )


GOOD = {
    "levels": ["zone", "rack"],
    "slices": [one_slice(2, [{"universal": "z1"}, ind(["1", "2"], "r")], {"universal": 1})],
}
S0 = "slices[0]"
MALFORMED = [
    (
        "roots shorter than domainCount",
        f"{S0}.valuesPerLevel.1.individual.roots",
        ["1"],
        "domainCount (2)",
    ),
    (
        "both universal and individual",
        f"{S0}.valuesPerLevel.0.individual",
        {"roots": ["a", "b"]},
        "exactly one",
    ),
    ("neither universal nor individual", f"{S0}.valuesPerLevel.0.universal", None, "exactly one"),
    ("pod counts shorter", f"{S0}.podCounts", {"individual": [1]}, "domainCount (2)"),
    ("both pod counts", f"{S0}.podCounts.individual", [1, 1], "exactly one"),
    ("a zero pod count", f"{S0}.podCounts.universal", 0, "at least 1"),
    ("domainCount zero", f"{S0}.domainCount", 0, "at least 1"),
    ("a level missing", f"{S0}.valuesPerLevel", [{"universal": "z1"}], "same length as levels"),
    (
        "a root not a string",
        f"{S0}.valuesPerLevel.1.individual.roots",
        ["1", 2],
        "must be a string",
    ),
    ("slices not a list", "slices", {"a": 1}, "must be a list"),
    ("domainCount above int32", f"{S0}.domainCount", 2**31, "at most 100000"),
    ("a pod count above int32", f"{S0}.podCounts.universal", 2**31, "at most 2147483647"),
    (
        "a root longer than a label value",
        f"{S0}.valuesPerLevel.1.individual.roots",
        ["1", "x" * 64],
        "at most 63",
    ),
    ("a prefix longer than 63", f"{S0}.valuesPerLevel.1.individual.prefix", "p" * 64, "at most 63"),
    ("a universal longer than 63", f"{S0}.valuesPerLevel.0.universal", "z" * 64, "at most 63"),
    (
        "one domain repeated by universal values",
        f"{S0}.valuesPerLevel",
        [{"universal": "z1"}, {"universal": "r1"}],
        "one domain 2 times",
    ),
    ("both slices and domains", "domains", [], "not both"),
    ("no levels", "levels", [], "at least one level"),
]


def _broken(path: str, value: Any) -> dict[str, Any]:
    topology: dict[str, Any] = json.loads(json.dumps(GOOD))
    keys = path.replace("[", ".").replace("]", "").split(".")
    node: Any = topology
    for key in keys[:-1]:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is None:
        node.pop(keys[-1])
    else:
        node[keys[-1]] = value
    return topology


@pytest.mark.parametrize(
    ("path", "value", "says"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_malformed_assignments_name_the_object_and_field(path: str, value: Any, says: str) -> None:
    assert decode(GOOD).domains == tuple(doms(("z1", "r1", 1), ("z1", "r2", 1)))
    broken = _broken(path, value)
    with pytest.raises(InputError) as caught:
        decode(broken, "Workload ns/w", "status.admission.podSetAssignments[0].topologyAssignment")
    error = caught.value
    assert error.where == "Workload ns/w"
    assert error.field.startswith("status.admission.podSetAssignments[0].topologyAssignment.")
    assert says in error.message
    with pytest.raises(ValidationError, match=re.escape(says)):
        TopologyAssignment.model_validate(broken)


def test_malformed_field_paths_are_exact() -> None:
    cases = {
        f"{S0}.valuesPerLevel[1].individual.roots": _broken(
            f"{S0}.valuesPerLevel.1.individual.roots", ["1"]
        ),
        f"{S0}.valuesPerLevel[0]": _broken(f"{S0}.valuesPerLevel.0.universal", None),
        f"{S0}.podCounts.individual": _broken(f"{S0}.podCounts", {"individual": [1]}),
    }
    for field, broken in cases.items():
        with pytest.raises(InputError) as caught:
            decode(broken, "w", "t")
        assert caught.value.field == f"t.{field}"


def test_the_model_writes_slices_and_reads_domains() -> None:
    domains = pools(20)
    model = TopologyAssignment.encoded([H], domains)
    assert model.to_wire() == encode([H], domains)
    old = TopologyAssignment.model_validate(encode_domains([H], domains))
    assert old.decoded() == model.decoded() == Assignment((H,), tuple(domains))
    # Built from models (not wire data), it is checked alike.
    rebuilt = TopologyAssignment(levels=[H], slices=model.slices)
    assert rebuilt.to_wire() == model.to_wire()
    (only,) = TopologyAssignment.encoded([H], domains[:2]).slices or []
    only.domain_count = 3
    with pytest.raises(ValidationError, match=r"slices\[0\].*domainCount \(3\)"):
        TopologyAssignment(levels=[H], slices=[only])


values = st.text(alphabet="ab-.0", max_size=6)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=1, max_value=3),
    st.lists(st.tuples(values, values, values, st.integers(1, 4)), max_size=40),
    st.booleans(),
)
def test_round_trip(level_count: int, rows: list[tuple[str, str, str, int]], host: bool) -> None:
    levels = ["a", "b", H if host else "c"][-level_count:]
    # Each domain once, as every writer (topogate's placement, Kueue's) lists them.
    unique = {(r[0], r[1], r[2])[3 - level_count :]: r[3] for r in reversed(rows)}
    domains = [AssignedDomain(values, count) for values, count in reversed(unique.items())]
    written = encode(levels, domains)
    assert decode(written) == Assignment(tuple(levels), tuple(domains))
    if len(written["slices"]) > 1:  # several slices only when they are not larger
        assert wire_size(written) <= wire_size(encode_single(levels, domains))
    TopologyAssignment.model_validate(written)  # what we write passes the CRD's own checks


def test_ten_thousand_hosts_take_far_fewer_bytes() -> None:
    rnd = random.Random(7)
    hosts = [
        f"gke-train-pool-{p:02d}-{rnd.getrandbits(32):08x}-{n:04x}"
        for p in range(10)
        for n in range(1000)
    ]
    domains = [AssignedDomain((h,), 1) for h in hosts]
    new, old = wire_size(encode([H], domains)), wire_size(encode_domains([H], domains))
    assert new * 2 < old


def test_a_few_bytes_never_expand_into_a_billion_domains() -> None:
    # Each of these is under 300 bytes; expanded, it would be 10**9 domains (or 10**9-byte
    # values) and exhaust the memory of the ungater, status or restart that reads it.
    universal = one_slice(10**9, [{"universal": "z1"}, {"universal": "r1"}], {"universal": 1})
    wide = one_slice(10**9, [{"universal": "z1"}, ind(["1"] * 3)], {"universal": 1})
    huge_prefix = one_slice(
        2, [{"universal": "z1"}, ind(["1", "2"], "p" * 10**6)], {"universal": 1}
    )
    many = [one_slice(1, [{"universal": "z"}], {"universal": 1})] * (MAX_SLICES + 1)
    for topology, field in [
        ({"levels": ["zone", "rack"], "slices": [universal]}, f"t.{S0}.domainCount"),
        ({"levels": ["zone", "rack"], "slices": [wide]}, f"t.{S0}.domainCount"),
        (
            {"levels": ["zone", "rack"], "slices": [huge_prefix]},
            f"t.{S0}.valuesPerLevel[1].individual.prefix",
        ),
        ({"levels": ["zone"], "slices": many}, "t.slices"),
    ]:
        with pytest.raises(InputError) as caught:
            decode(topology, "w", "t")
        assert caught.value.field == field


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet="abz-1", max_size=4),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=3), children)
    ),
    max_leaves=20,
)
texts = st.text(alphabet="ab", max_size=70)
level_values = st.fixed_dictionaries({"universal": texts}) | st.fixed_dictionaries(
    {
        "individual": st.fixed_dictionaries(
            {"roots": st.lists(st.text(alphabet="ab", max_size=2), max_size=5)},
            optional={"prefix": texts},
        )
    }
)
pod_counts = st.fixed_dictionaries({"universal": st.integers(-2, 2**40)}) | (
    st.fixed_dictionaries({"individual": st.lists(st.integers(-1, 2**33), max_size=5)})
)


def _rarely_any_json(draw: st.DrawFn, value: st.SearchStrategy[Any]) -> Any:
    """Mostly the value, one time in eight any JSON at all."""
    return draw(json_values) if draw(st.integers(0, 7)) == 3 else draw(value)


@st.composite
def assignments(draw: st.DrawFn) -> Any:
    """Mostly well-formed assignments (the levels and valuesPerLevel agree), with counts and
    strings of any size, and now and then any JSON in any place."""
    level_count = draw(st.integers(1, 3))
    slices = [
        {
            "domainCount": _rarely_any_json(draw, st.integers(1, 5) | st.integers(-2, 2**40)),
            "valuesPerLevel": _rarely_any_json(
                draw, st.lists(level_values, min_size=level_count, max_size=level_count)
            ),
            "podCounts": _rarely_any_json(draw, pod_counts),
        }
        for _ in range(draw(st.integers(0, 3)))
    ]
    topology = {
        "levels": _rarely_any_json(draw, st.just(["zone", "rack", H][-level_count:])),
        "slices": _rarely_any_json(draw, st.just(slices)),
    }
    return _rarely_any_json(draw, st.just(topology))


@settings(max_examples=400, deadline=None)
@given(assignments())
def test_decode_refuses_anything_malformed_and_expands_no_more_than_the_input(
    topology: Any,
) -> None:
    """Whatever the JSON, decode answers an Assignment or an InputError, and never more
    domains than the input has bytes (no domainCount is trusted before it is checked)."""
    try:
        decoded = decode(topology, "w", "t")
    except InputError as error:
        assert error.where == "w" and error.field.startswith("t")
        return
    assert len(decoded.domains) <= len(json.dumps(topology))
