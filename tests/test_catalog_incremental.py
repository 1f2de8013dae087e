"""The catalog is built from objects parsed once each, and a catalog change translates again
only the waiting Workloads it can touch: both equal the from-scratch answer after any sequence
of queue, flavor, topology and Workload changes, in any order."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topogate.admission import podsets
from topogate.admission.lanes import QueueLanes
from topogate.admission.podsets import CatalogBuilder, CatalogChange, build_catalog, translate
from topogate.api import validation
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
    Resource,
)
from topogate.state import ControllerState
from topogate.state.waiting import PendingQueue

Obj = dict[str, Any]
BLOCK, RACK, HOST = "cloud.com/block", "cloud.com/rack", "kubernetes.io/hostname"
QUEUES = [f"cq{i}" for i in range(3)]
LOCALS = [("ml", "q0"), ("ml", "q1"), ("dev", "q0"), ("dev", "q2")]
FLAVORS = ["f0", "f1", "f2"]
LEVELS: dict[str, list[str]] = {"t0": [BLOCK, RACK, HOST], "t1": [RACK, HOST]}


def cluster_queue(name: str, flavors: list[str], quota: int, bad: bool) -> Obj:
    group = {
        "coveredResources": ["cpu"],
        "flavors": [
            {"name": f, "resources": [{"name": "cpu", "nominalQuota": quota}]} for f in flavors
        ],
    }
    return {"metadata": {"name": name}, "spec": {"resourceGroups": "nope" if bad else [group]}}


def local_queue(namespace: str, name: str, target: str | None, label: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"l": label}},
        "spec": {"clusterQueue": target} if target else {},
    }


def flavor(name: str, topology: str | None, bad: bool) -> Obj:
    spec: Obj = {"nodeLabels": {"pool": name}}
    if topology:
        spec["topologyName"] = topology
    if bad:
        spec["tolerations"] = "nope"
    return {"metadata": {"name": name}, "spec": spec}


def topology(name: str, levels: list[str]) -> Obj:
    return {"metadata": {"name": name}, "spec": {"levels": [{"nodeLabel": v} for v in levels]}}


def workload(name: str, namespace: str, queue: str | None, level: str | None, rv: int) -> Obj:
    annotations = {"kueue.x-k8s.io/podset-required-topology": level} if level else {}
    resources = {"requests": {"cpu": "1"}}
    template = {
        "metadata": {"annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
    }
    spec: Obj = {"podSets": [{"name": "main", "count": 2, "template": template}]}
    if queue:
        spec["queueName"] = queue
    return {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv)},
        "spec": spec,
    }


names = st.sampled_from
queue_step = st.tuples(
    st.just("cq"),
    names(QUEUES),
    st.lists(names(FLAVORS), min_size=1, max_size=2, unique=True),
    st.sampled_from([4, 8]),
    st.just(False),  # parses (bad_queue_step: one that does not)
    st.booleans(),  # delete
)
bad_queue_step = st.tuples(
    st.just("cq"), names(QUEUES), st.just(["f0"]), st.just(4), st.just(True), st.just(False)
)
local_step = st.tuples(
    st.just("lq"),
    names(LOCALS),
    st.one_of(st.none(), names([*QUEUES, "missing"])),
    names(["a", "b"]),
    st.booleans(),  # delete
)
flavor_step = st.tuples(
    st.just("rf"),
    names(FLAVORS),
    st.one_of(st.none(), names(["t0", "t1", "t9"])),
    st.integers(0, 5).map(lambda n: n == 0),  # a flavor that does not parse, now and then
    st.booleans(),
)
topology_step = st.tuples(
    st.just("tp"),
    names(["t0", "t1"]),
    names([[BLOCK, RACK, HOST], [RACK, HOST]]),
    st.booleans(),
)
workload_step = st.tuples(
    st.just("wl"),
    names(["w0", "w1", "w2", "w3", "w4", "w5"]),
    names(["ml", "dev"]),
    st.one_of(st.none(), names(["q0", "q1", "q2"])),
    st.one_of(st.none(), names([RACK, BLOCK, "nowhere"])),
    st.integers(0, 6).map(lambda n: n == 0),  # delete
)
step = st.one_of(
    queue_step,
    bad_queue_step,
    local_step,
    local_step,
    flavor_step,
    topology_step,
    workload_step,
    workload_step,
    workload_step,
    st.just(("sync",)),
    st.just(("sync",)),
)

KINDS: dict[str, Resource] = {
    "cq": CLUSTER_QUEUES,
    "lq": LOCAL_QUEUES,
    "rf": RESOURCE_FLAVORS,
    "tp": TOPOLOGIES,
    "wl": WORKLOADS,
}


class World:
    """The objects as the watches hold them, applied to a state through its handlers."""

    def __init__(self) -> None:
        self.state = ControllerState()
        self.objects: dict[tuple[str, str], Obj] = {}
        self.rv = 0

    def put(self, kind: str, key: str, new: Obj | None) -> None:
        old = self.objects.pop((kind, key), None)
        if new is not None:
            self.objects[(kind, key)] = new
        if old is not None or new is not None:
            self.state.handler(KINDS[kind])(old, new)

    def apply(self, s: tuple[Any, ...]) -> None:
        self.rv += 1
        kind = s[0]
        if kind == "cq":
            _, name, flavors, quota, bad, delete = s
            self.put(kind, name, None if delete else cluster_queue(name, flavors, quota, bad))
        elif kind == "lq":
            _, (namespace, name), target, label, delete = s
            obj = None if delete else local_queue(namespace, name, target, label)
            self.put(kind, f"{namespace}/{name}", obj)
        elif kind == "rf":
            _, name, topo, bad, delete = s
            self.put(kind, name, None if delete else flavor(name, topo, bad))
        elif kind == "tp":
            _, name, levels, delete = s
            self.put(kind, name, None if delete else topology(name, levels))
        elif kind == "wl":
            _, name, namespace, queue, level, delete = s
            obj = None if delete else workload(name, namespace, queue, level, self.rv)
            self.put(kind, f"{namespace}/{name}", obj)

    def listed(self, kind: str) -> list[Obj]:
        return [obj for (k, _), obj in self.objects.items() if k == kind]


View = tuple[dict[str, list[Any]], dict[str, str]]


def view(pending: PendingQueue) -> View:
    """Each lane, head first, and the problems."""
    lanes = pending.lanes
    return {name: list(lanes.lane(name)) for name in lanes.names()}, dict(pending.problems)


def from_scratch(state: ControllerState) -> View:
    """What :func:`translate` makes of every waiting Workload against a catalog built from
    scratch: the lanes and the problems."""
    objects = state.store.objects
    catalog, _ = build_catalog(
        list(objects(CLUSTER_QUEUES).values()),
        list(objects(LOCAL_QUEUES).values()),
        list(objects(RESOURCE_FLAVORS).values()),
        list(objects(TOPOLOGIES).values()),
        None,
    )
    lanes = QueueLanes()
    problems = {}
    for key in state.workloads.waiting():
        made = translate(objects(WORKLOADS)[key], key, catalog)
        if made.pending is None:
            problems[key] = made.problem
        else:
            lanes.put(made.pending)
    return {name: list(lanes.lane(name)) for name in lanes.names()}, problems


# A cluster where every kind of change touches some waiting Workload.
PREFIX: list[tuple[Any, ...]] = [
    ("tp", "t0", LEVELS["t0"], False),
    ("tp", "t1", LEVELS["t1"], False),
    ("rf", "f0", "t0", False, False),
    ("rf", "f1", "t1", False, False),
    ("rf", "f2", None, False, False),
    ("cq", "cq0", ["f0"], 4, False, False),
    ("cq", "cq1", ["f1", "f0"], 4, False, False),
    ("cq", "cq2", ["f2"], 4, False, False),
    ("lq", ("ml", "q0"), "cq0", "a", False),
    ("lq", ("ml", "q1"), "cq1", "a", False),
    ("lq", ("dev", "q0"), "cq2", "a", False),
    ("lq", ("dev", "q2"), "cq1", "a", False),
    ("wl", "w0", "ml", "q0", RACK, False),
    ("wl", "w1", "ml", "q1", BLOCK, False),
    ("wl", "w2", "dev", "q0", None, False),
    ("wl", "w3", "dev", "q2", RACK, False),
    ("wl", "w4", "ml", "q0", BLOCK, False),
]


@settings(max_examples=150, deadline=None)
@given(st.lists(step, min_size=1, max_size=40))
def test_a_built_catalog_equals_one_from_scratch(steps: list[tuple[Any, ...]]) -> None:
    world = World()
    builder = CatalogBuilder()
    for s in steps:
        world.apply(s)
        if s[0] == "wl":
            continue
        args = (
            world.listed("cq"),
            world.listed("lq"),
            world.listed("rf"),
            world.listed("tp"),
            None,
        )
        assert builder.build(*args) == build_catalog(*args)
        # and the state's own, with every warning the same
        assert world.state.catalogs.catalog() == build_catalog(*args)[0]


@settings(max_examples=150, deadline=None)
@given(st.lists(step, min_size=1, max_size=50))
def test_the_pending_queue_after_any_changes_equals_a_fresh_translation(
    steps: list[tuple[Any, ...]],
) -> None:
    world = World()
    pending = world.state.pending
    for s in [*PREFIX, ("sync",), *steps, ("sync",)]:
        if s[0] != "sync":
            world.apply(s)
            continue
        pending.sync()
        assert view(pending) == from_scratch(world.state)


def test_queues_and_workloads_arriving_interleaved_end_as_from_scratch() -> None:
    """Workloads come before, between and after the objects they need, a sync between any
    two; each ends translated as a state that saw all of it at once translates it."""
    world = World()
    pending = world.state.pending
    arrivals: list[tuple[Any, ...]] = []
    for i in range(8):
        queue = f"cq{i}"
        arrivals += [
            ("wl", f"early{i}", "ml", f"q{i}", RACK, False),
            ("cq", queue, ["f0"] if i % 2 else ["f1", "f0"], 4, False, False),
            ("wl", f"mid{i}", "ml", f"q{i}", BLOCK if i % 3 else None, False),
            ("lq", ("ml", f"q{i}"), queue, "a", False),
            ("wl", f"late{i}", "ml", f"q{i}", None, False),
        ]
        if i == 3:
            arrivals += [("tp", "t0", LEVELS["t0"], False), ("rf", "f0", "t0", False, False)]
        if i == 5:
            arrivals += [("rf", "f1", "t1", False, False), ("tp", "t1", LEVELS["t1"], False)]
    for n, arrival in enumerate(arrivals):
        world.apply(arrival)
        if n % 3 == 0:
            pending.sync()
    pending.sync()
    lanes, problems = from_scratch(world.state)
    assert view(pending) == (lanes, problems)
    # Both kinds of answer are there: in a lane, and refused (t1 has no block level).
    assert sum(map(len, lanes.values())) + len(problems) == 24 and lanes and problems


def test_a_queue_added_translates_only_its_own_workloads(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World()
    world.apply(("tp", "t0", LEVELS["t0"], False))
    world.apply(("rf", "f0", "t0", False, False))
    for i in range(4):
        world.apply(("cq", f"cq{i}", ["f0"], 4, False, False))
        world.apply(("lq", ("ml", f"q{i}"), f"cq{i}", "a", False))
    for i in range(5):
        world.apply(("wl", f"w{i}", "ml", f"q{i}", RACK, False))
    pending = world.state.pending
    pending.sync()
    assert set(pending.problems) == {"ml/w4"}  # its queue is yet to come
    seen: list[str] = []

    def counting(obj: Obj, key: str, catalog: Any) -> Any:
        seen.append(key)
        return translate(obj, key, catalog)

    monkeypatch.setattr("topogate.state.waiting.translate", counting)
    world.apply(("cq", "cq4", ["f0"], 4, False, False))
    world.apply(("lq", ("ml", "q4"), "cq4", "a", False))
    pending.sync()
    assert seen == ["ml/w4"] and not pending.problems
    world.apply(("cq", "cq9", ["f0"], 4, False, False))  # a queue no LocalQueue names
    pending.sync()
    assert seen == ["ml/w4"]
    world.apply(("rf", "f0", "t1", False, False))  # every queue's flavor topology
    pending.sync()
    assert sorted(seen) == sorted(["ml/w4", *(f"ml/w{i}" for i in range(5))])


def test_a_build_after_one_queue_changed_parses_that_queue_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = World()
    for i in range(20):
        world.apply(("cq", f"cq{i}", ["f0"], 4, False, False))
        world.apply(("lq", ("ml", f"q{i}"), f"cq{i}", "a", False))
    world.apply(("rf", "f0", "t0", False, False))
    world.apply(("tp", "t0", LEVELS["t0"], False))
    first = world.state.catalogs.catalog()
    parsed: list[str] = []
    real = validation.parse_model

    def counting(model: Any, data: Any, where: str) -> Any:
        parsed.append(where)
        return real(model, data, where)

    monkeypatch.setattr(podsets, "parse_model", counting)
    world.apply(("cq", "cq3", ["f0"], 8, False, False))
    world.apply(("cq", "cq20", ["f0"], 8, False, False))
    world.apply(("lq", ("ml", "q20"), "cq20", "a", False))
    catalog = world.state.catalogs.catalog()
    assert sorted(parsed) == ["ClusterQueue cq20", "ClusterQueue cq3"]
    assert catalog.flavors is first.flavors  # a kind with no change is taken whole
    assert catalog.sources is first.sources
    assert world.state.catalogs.change_since(first) == CatalogChange(
        False, frozenset({"ml/q20"}), frozenset({"cq20", "cq3"})
    )


def test_an_object_added_under_a_name_already_built_is_built_as_from_scratch() -> None:
    """Only a list given to the builder can hold two objects of a name (a watch keys them by
    name); the later one wins, in the earlier one's place, as in a build from scratch."""
    builder = CatalogBuilder()
    first = cluster_queue("a", ["f0"], 4, False)
    other = cluster_queue("b", ["f0"], 4, False)
    again = cluster_queue("a", ["f1"], 8, False)
    broken = {"metadata": {"name": "a"}, "spec": {"resourceGroups": "nope"}}
    for objects in ([first, other], [first, other, again], [first, other, again, broken]):
        built = builder.build(objects, [], [], [], None)
        assert built == build_catalog(objects, [], [], [], None)
        assert list(built[0].queues) == ["a", "b"]
    assert built[0].queues["a"].flavors[0].flavor == "f1"


def test_a_template_is_translated_once_per_flavor_topology_not_per_queue() -> None:
    world = World()
    for step_ in PREFIX[:5]:
        world.apply(step_)
    for i, flavors in enumerate((["f0"], ["f0"], ["f1"], ["f2"], ["f2"])):
        world.apply(("cq", f"cq{i}", flavors, 4, False, False))
        world.apply(("lq", ("ml", f"q{i}"), f"cq{i}", "a", False))
        world.apply(("wl", f"w{i}", "ml", f"q{i}", None, False))
    pending = world.state.pending
    pending.sync()
    assert view(pending) == from_scratch(world.state) and not pending.problems
    assert pending._translations.hits == 2  # cq1 as cq0 (t0), cq4 as cq3 (no topology)
