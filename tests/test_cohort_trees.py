"""Cohort trees: the Cohort kind (``parentName``, quota of its own) and quota over the tree by
Kueue's resource-node arithmetic (pkg/cache/scheduler/resource_node.go). Kueue's own cases are
ported with their expected outcomes: pkg/cache/scheduler/resource_test.go TestAvailable, and the
hierarchical cases of pkg/scheduler/scheduler_test.go that concern admission by quota."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topogate.admission.cycle import admission_cycle
from topogate.admission.lanes import PendingWorkload
from topogate.admission.podsets import build_catalog
from topogate.admission.quota import (
    CohortSpec,
    CohortTree,
    FlavorQuota,
    QueueSpec,
    QuotaBook,
    Usage,
)
from topogate.admission.request import Mode, PlacementRequest, PodSetRequest
from topogate.api.errors import InputError
from topogate.api.models import ClusterQueue, Cohort
from topogate.api.validation import parse_model

KUEUE = "kueue.x-k8s.io/v1beta2"
Res = tuple[str, str, str, str]  # (resource, nominal, borrowingLimit, lendingLimit); "" unset


def _groups(flavors: Mapping[str, Sequence[Res]]) -> list[dict[str, Any]]:
    """One resource group per flavor, as Kueue's test wrappers ``ResourceGroup(...)`` build
    them (every flavor of these cases covers the same resources)."""
    if not flavors:
        return []
    covered = [r[0] for r in next(iter(flavors.values()))]
    out = []
    for name, resources in flavors.items():
        quotas = []
        for resource, nominal, borrowing, lending in resources:
            quota = {"name": resource, "nominalQuota": nominal}
            if borrowing:
                quota["borrowingLimit"] = borrowing
            if lending:
                quota["lendingLimit"] = lending
            quotas.append(quota)
        out.append({"name": name, "resources": quotas})
    return [{"coveredResources": covered, "flavors": out}]


def cq(name: str, cohort: str | None = None, **flavors: Sequence[Res]) -> QueueSpec:
    spec: dict[str, Any] = {"resourceGroups": _groups(flavors)}
    if cohort:
        spec["cohortName"] = cohort
    obj = {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}
    model = parse_model(ClusterQueue, {**obj, "apiVersion": "topogate.dev/v1alpha1"}, "")
    return QueueSpec.from_model(model)


def cohort(name: str, parent: str | None = None, **flavors: Sequence[Res]) -> CohortSpec:
    spec: dict[str, Any] = {"resourceGroups": _groups(flavors)}
    if parent:
        spec["parentName"] = parent
    obj = {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}
    return CohortSpec.from_model(parse_model(Cohort, obj, ""))


def cpu(nominal: str, borrowing: str = "", lending: str = "") -> list[Res]:
    return [("cpu", nominal, borrowing, lending)]


# --- Kueue's TestAvailable (pkg/cache/scheduler/resource_test.go) ---------------------------

# Each case: queues, cohorts, usage (cq -> flavor -> millicores), and Kueue's expectations per
# queue and flavor: available after the usage is added, and potentially available (which is
# also what is available with no usage, before it is added and after it is removed).
AVAILABLE_CASES: dict[str, dict[str, Any]] = {
    "base cqs": {
        "queues": [
            cq("cq1", red=cpu("0")),
            cq("cq2", red=cpu("5"), blue=cpu("10")),
        ],
        "cohorts": [],
        "usage": {"cq1": {"red": 1000}, "cq2": {"red": 2_500, "blue": 1_000}},
        "available": {"cq1": {"red": 0}, "cq2": {"red": 2_500, "blue": 9_000}},
        "potential": {"cq1": {"red": 0}, "cq2": {"red": 5_000, "blue": 10_000}},
    },
    "cqs with cohort": {
        "queues": [
            cq("cq1", "cohort", red=cpu("10")),
            cq("cq2", "cohort", red=cpu("10", "", "9")),
        ],
        "cohorts": [cohort("cohort", red=cpu("10"))],
        "usage": {"cq1": {"red": 1000}, "cq2": {"red": 500}},
        "available": {"cq1": {"red": 28_000}, "cq2": {"red": 28_500}},
        "potential": {"cq1": {"red": 29_000}, "cq2": {"red": 30_000}},
    },
    "cq borrows from cohort": {
        "queues": [cq("cq1", "cohort", red=cpu("10"))],
        "cohorts": [cohort("cohort", red=cpu("10"))],
        "usage": {"cq1": {"red": 11_000}},
        "available": {"cq1": {"red": 9_000}},
        "potential": {"cq1": {"red": 20_000}},
    },
    "cq oversubscription spills into cohort": {
        "queues": [
            cq("cq1", "cohort", red=cpu("10")),
            cq("cq2", "cohort", red=cpu("10", "0", "0")),
        ],
        "cohorts": [cohort("cohort", red=cpu("10"))],
        "usage": {"cq1": {"red": 31_000}},
        # cq2 neither borrows nor lends, yet cq1's over-admission takes its availability:
        # the tree must not be over-admitted further.
        "available": {"cq1": {"red": 0}, "cq2": {"red": 0}},
        "potential": {"cq1": {"red": 20_000}, "cq2": {"red": 10_000}},
    },
    "lending and borrowing limits respected": {
        "queues": [
            cq("cq1", "cohort", red=cpu("10")),
            cq("cq2", "cohort", red=cpu("10", "2")),
            cq("cq3", "cohort", red=cpu("10", "", "5")),
        ],
        "cohorts": [cohort("cohort", red=cpu("10"))],
        "usage": {"cq1": {"red": 20_000}, "cq2": {"red": 10_000}, "cq3": {"red": 6_000}},
        "available": {"cq1": {"red": 4_000}, "cq2": {"red": 2_000}, "cq3": {"red": 4_000}},
        "potential": {"cq1": {"red": 35_000}, "cq2": {"red": 12_000}, "cq3": {"red": 40_000}},
    },
    "hierarchical cohort": {
        #        root
        #       /    \
        #    left    right
        #     |        |
        #    cq1      cq2
        "queues": [
            cq("cq1", "left", red=cpu("10")),
            cq("cq2", "right", red=cpu("10", "", "0")),
        ],
        "cohorts": [
            cohort("root"),
            cohort("left", "root", red=cpu("10")),
            cohort("right", "root", red=cpu("10")),
        ],
        "usage": {"cq1": {"red": 10_000}, "cq2": {"red": 5_000}},
        "available": {"cq1": {"red": 20_000}, "cq2": {"red": 25_000}},
        "potential": {"cq1": {"red": 30_000}, "cq2": {"red": 40_000}},
    },
    "hierarchical cohort respects borrowing limit": {
        #              root
        #           5 /    \
        #         left    right -- right-cq
        #        /    \ 5
        # left-cq1    left-cq2
        "queues": [
            cq("left-cq1", "left", red=cpu("10")),
            cq("left-cq2", "left", red=cpu("10", "5")),
            cq("right-cq", "right", red=cpu("10")),
        ],
        "cohorts": [
            cohort("root"),
            cohort("left", "root", red=cpu("10", "5")),
            cohort("right", "root", red=cpu("10")),
        ],
        "usage": {},
        "available": {
            "left-cq1": {"red": 35_000},
            "left-cq2": {"red": 15_000},
            "right-cq": {"red": 50_000},
        },
        "potential": {
            "left-cq1": {"red": 35_000},
            "left-cq2": {"red": 15_000},
            "right-cq": {"red": 50_000},
        },
    },
    "hierarchical cohort respects lending limit": {
        #              root -- root-cq
        #           5 /    \
        #         left    right -- right-cq
        #      5 /    \
        # left-cq1    left-cq2
        "queues": [
            cq("left-cq1", "left", red=cpu("10", "", "5")),
            cq("left-cq2", "left", red=cpu("10")),
            cq("right-cq", "right", red=cpu("0")),
            cq("root-cq", "root", red=cpu("0")),
        ],
        "cohorts": [
            cohort("root"),
            cohort("left", "root", red=cpu("0", "", "5")),
            cohort("right", "root", red=cpu("0")),
        ],
        "usage": {},
        "available": {
            "left-cq1": {"red": 20_000},
            "left-cq2": {"red": 15_000},
            "right-cq": {"red": 5_000},
            "root-cq": {"red": 5_000},
        },
        "potential": {
            "left-cq1": {"red": 20_000},
            "left-cq2": {"red": 15_000},
            "right-cq": {"red": 5_000},
            "root-cq": {"red": 5_000},
        },
    },
}


def _measure(book: QuotaBook, potential: bool = False) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for queue in book.queues.values():
        for quota in queue.flavors:
            if potential:
                value = book.potential(queue, quota, "cpu")
            else:  # Kueue's ClusterQueueSnapshot.Available: 0 when the tree is in debt
                value = max(0, book.available(queue, quota, "cpu"))
            out.setdefault(queue.name, {})[quota.flavor] = value
    return out


@pytest.mark.parametrize("name", sorted(AVAILABLE_CASES))
def test_kueue_available(name: str) -> None:
    case = AVAILABLE_CASES[name]
    queues = {q.name: q for q in case["queues"]}
    tree = CohortTree(queues, {c.name: c for c in case["cohorts"]})
    usage: Usage = {}
    book = QuotaBook(queues, usage, tree)
    assert _measure(book) == case["potential"]  # before any usage
    assert _measure(book, potential=True) == case["potential"]
    for queue, flavors in case["usage"].items():
        for flavor, amount in flavors.items():
            book.add(queue, flavor, {"cpu": amount})
    assert _measure(book) == case["available"]
    assert _measure(book, potential=True) == case["potential"]
    for queue, flavors in case["usage"].items():
        for flavor, amount in flavors.items():
            book.add(queue, flavor, {"cpu": -amount})
    assert _measure(book) == case["potential"]


# --- Kueue's hierarchical scheduler cases (pkg/scheduler/scheduler_test.go) ------------------


def pending(key: str, queue: str, millicpu: int, priority: int = 0) -> PendingWorkload:
    podset = PodSetRequest("main", 1, {"cpu": millicpu}, mode=Mode.UNCONSTRAINED)
    return PendingWorkload(
        key, queue, priority, "2026-01-01T00:00:00Z", PlacementRequest(key, (podset,))
    )


def no_topology(flavor: str, request: PlacementRequest, held: Any) -> None:
    return None


def _lender_and_borrower(lending: str) -> tuple[dict[str, QueueSpec], dict[str, CohortSpec]]:
    """ROOT <- CHILD <- {cq-lender (10, lendingLimit), cq-borrower (5, borrowingLimit 10)}."""
    queues = {
        "cq-lender": cq("cq-lender", "child", **{"on-demand": cpu("10", "", lending)}),
        "cq-borrower": cq("cq-borrower", "child", **{"on-demand": cpu("5", "10")}),
    }
    return queues, {"root": cohort("root"), "child": cohort("child", "root")}


def test_kueue_hierarchical_cohort_respects_lending_limit_when_borrowing() -> None:
    queues, cohorts = _lender_and_borrower("3")
    usage: Usage = {("cq-borrower", "on-demand"): {"cpu": 5_000}}
    result = admission_cycle(
        queues,
        [pending("eng-alpha/wl-pending", "cq-borrower", 4_000)],
        usage,
        no_topology,
        cohorts=cohorts,
    )
    assert result.admitted == []
    # Kueue: "insufficient unused quota for cpu in flavor on-demand, 1 more needed"
    assert result.pending == {
        "eng-alpha/wl-pending": "insufficient quota for cpu in flavor on-demand: needs 4, "
        "3 available"
    }


def test_kueue_hierarchical_cohort_allows_borrowing_up_to_lending_limit() -> None:
    queues, cohorts = _lender_and_borrower("5")
    usage: Usage = {("cq-borrower", "on-demand"): {"cpu": 5_000}}
    result = admission_cycle(
        queues,
        [pending("eng-alpha/wl-borrowing", "cq-borrower", 5_000)],
        usage,
        no_topology,
        cohorts=cohorts,
    )
    assert [(a.key, a.cluster_queue, a.flavor) for a in result.admitted] == [
        ("eng-alpha/wl-borrowing", "cq-borrower", "on-demand")
    ]


def test_kueue_in_a_hierarchical_cohort_borrowing_less_is_scheduled_first() -> None:
    """ROOT <- {GUARANTEED (4 cpu) <- guaranteed (0), best-effort (0)}: both must borrow, the
    guaranteed one only from its own cohort, so it goes first despite its lower priority."""
    queues = {
        "guaranteed": cq("guaranteed", "guaranteed", default=cpu("0")),
        "best-effort": cq("best-effort", "root", default=cpu("0")),
    }
    cohorts = {
        "root": cohort("root"),
        "guaranteed": cohort("guaranteed", "root", default=cpu("4")),
    }
    result = admission_cycle(
        queues,
        [
            pending("eng-alpha/guaranteed", "guaranteed", 4_000, priority=0),
            pending("eng-alpha/best-effort", "best-effort", 4_000, priority=3),
        ],
        {},
        no_topology,
        cohorts=cohorts,
    )
    assert [a.key for a in result.admitted] == ["eng-alpha/guaranteed"]
    assert "eng-alpha/best-effort" in result.pending
    # Without the tree's levels the higher priority would win: the ordering is what decides.
    book = QuotaBook(queues, {}, CohortTree(queues, cohorts))
    assert book.borrows(queues["guaranteed"], {"cpu": 4_000}) == 1
    assert book.borrows(queues["best-effort"], {"cpu": 4_000}) == 2


# --- cycles -------------------------------------------------------------------------------


def test_a_cycle_in_the_tree_makes_its_queues_inactive_and_names_it() -> None:
    queues = {
        "in-a": cq("in-a", "a", f=cpu("10")),
        "below": cq("below", "leaf", f=cpu("10")),  # leaf -> a, which is in the cycle
        "elsewhere": cq("elsewhere", "ok", f=cpu("10")),
    }
    cohorts = {
        "a": cohort("a", "b"),
        "b": cohort("b", "a"),
        "leaf": cohort("leaf", "a"),
        "ok": cohort("ok", "b2"),
    }
    tree = CohortTree(queues, cohorts)
    assert tree.cycles == {"a": ("a", "b", "a"), "b": ("b", "a", "b"), "leaf": ("a", "b", "a")}
    result = admission_cycle(
        queues,
        [
            pending("ns/x", "in-a", 1_000),
            pending("ns/y", "below", 1_000),
            pending("ns/z", "elsewhere", 1_000),
        ],
        {},
        no_topology,
        cohorts=cohorts,
    )
    assert [a.key for a in result.admitted] == ["ns/z"]
    assert result.pending == {
        "ns/x": "ClusterQueue in-a is inactive: its Cohort a is in a cycle (a -> b -> a)",
        "ns/y": "ClusterQueue below is inactive: its Cohort leaf is in a cycle (a -> b -> a)",
    }
    # Asking about a queue in the cycle terminates (the arithmetic cuts the cycle).
    book = QuotaBook(queues, {}, tree)
    assert book.available(queues["in-a"], queues["in-a"].flavors[0], "cpu") == 10_000


def test_a_cohort_that_is_its_own_parent_is_a_cycle() -> None:
    queues = {"q": cq("q", "self", f=cpu("1"))}
    tree = CohortTree(queues, {"self": cohort("self", "self")})
    assert tree.inactive == {
        "q": "ClusterQueue q is inactive: its Cohort self is in a cycle (self -> self)"
    }


# --- the Cohort kind ----------------------------------------------------------------------


def test_kueue_and_topogate_cohorts_parse_to_the_same_node() -> None:
    spec = {
        "parentName": "org",
        "resourceGroups": _groups({"f": cpu("8", "2", "1")}),
        "fairSharing": {"weight": "500m"},
    }
    ours = {"apiVersion": "topogate.dev/v1alpha1", "kind": "Cohort", "metadata": {"name": "t"}}
    theirs = {**ours, "apiVersion": KUEUE}
    got = [
        CohortSpec.from_model(parse_model(Cohort, {**o, "spec": spec}, "")) for o in (ours, theirs)
    ]
    assert (
        got[0]
        == got[1]
        == CohortSpec(
            "t", "org", (FlavorQuota("f", {"cpu": 8_000}, {"cpu": 2_000}, {"cpu": 1_000}),), 0.5
        )
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"resourceGroups": _groups({"f": cpu("8", "2")})},
            "borrowingLimit and lendingLimit need a parentName",
        ),
        ({"parentName": ""}, "spec.parentName"),
        ({"fairSharing": {"weight": "-1"}}, "spec.fairSharing.weight"),
        ({"fairSharing": {"weight": "lots"}}, "spec.fairSharing.weight"),
    ],
)
def test_bad_cohorts_are_refused_naming_the_field(spec: dict[str, Any], message: str) -> None:
    obj = {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": "bad"}, "spec": spec}
    with pytest.raises(InputError) as caught:
        parse_model(Cohort, obj, "Cohort bad")
    assert message in caught.value.describe()


def test_the_catalog_reads_cohorts_and_leaves_out_a_bad_one_with_a_warning() -> None:
    good = {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": "org"}, "spec": {}}
    team = {**good, "metadata": {"name": "team"}, "spec": {"parentName": "org"}}
    bad = {**good, "metadata": {"name": "bad"}, "spec": {"parentName": 7}}
    catalog, warnings = build_catalog([], [], [], [], None, (), [good, team, bad])
    assert catalog.cohorts == {"org": CohortSpec("org"), "team": CohortSpec("team", "org")}
    assert len(warnings) == 1 and "Cohort bad" in warnings[0]


# --- no Cohort objects: every answer as before trees -----------------------------------------


class FlatBook:
    """The quota book as it was before cohort trees (admission/quota.py at 682e1d0), kept
    here as the reference the tree must reproduce when no Cohort object exists."""

    def __init__(self, queues: Mapping[str, QueueSpec], usage: Usage) -> None:
        self.queues, self.usage = queues, usage
        self.members: dict[str, list[QueueSpec]] = {}
        for queue in queues.values():
            if queue.cohort:
                self.members.setdefault(queue.cohort, []).append(queue)

    def used(self, queue: str, flavor: str, resource: str) -> int:
        return self.usage.get((queue, flavor), {}).get(resource, 0)

    @staticmethod
    def local(quota: FlavorQuota, resource: str) -> int:
        if resource not in quota.lending:
            return 0
        return max(0, quota.nominal.get(resource, 0) - quota.lending[resource])

    def pool_left(self, cohort: str, flavor: str, resource: str) -> int:
        size = used = 0
        for member in self.members.get(cohort, ()):
            quota = next((f for f in member.flavors if f.flavor == flavor), None)
            if quota is None or resource not in quota.nominal:
                continue
            local = self.local(quota, resource)
            size += quota.nominal[resource] - local
            used += max(0, self.used(member.name, flavor, resource) - local)
        return size - used

    def available(self, queue: QueueSpec, quota: FlavorQuota, resource: str) -> int:
        nominal = quota.nominal.get(resource, 0)
        used = self.used(queue.name, quota.flavor, resource)
        if not queue.cohort:
            return nominal - used
        local = self.local(quota, resource)
        from_pool = self.pool_left(queue.cohort, quota.flavor, resource)
        if resource in quota.borrowing:
            in_pool = nominal - local
            used_in_pool = max(0, used - local)
            from_pool = min(from_pool, in_pool - used_in_pool + quota.borrowing[resource])
        return max(0, local - used) + from_pool

    def borrows(self, queue: QueueSpec, demand: Mapping[str, int]) -> bool:
        for quota in queue.flavors:
            if set(demand) <= set(quota.nominal):
                return any(
                    self.used(queue.name, quota.flavor, r) + a > quota.nominal[r]
                    for r, a in demand.items()
                )
        return False


@st.composite
def flat_setups(draw: st.DrawFn) -> tuple[dict[str, QueueSpec], Usage]:
    queues: dict[str, QueueSpec] = {}
    usage: Usage = {}
    for i in range(draw(st.integers(1, 6))):
        flavors = []
        for flavor in draw(st.lists(st.sampled_from("fg"), min_size=1, max_size=2, unique=True)):
            resources = draw(st.lists(st.sampled_from("xy"), min_size=1, max_size=2, unique=True))
            nominal = {r: draw(st.integers(0, 8)) for r in resources}
            cohort_limits = st.dictionaries(st.sampled_from(resources), st.integers(0, 8))
            borrowing, lending = draw(cohort_limits), draw(cohort_limits)
            lending = {r: min(v, nominal[r]) for r, v in lending.items()}
            flavors.append(FlavorQuota(flavor, nominal, borrowing, lending))
        cohort = draw(st.sampled_from([None, "c", "d"]))
        name = f"q{i}"
        queues[name] = QueueSpec(name, "BestEffortFIFO", tuple(flavors), cohort)
        for flavor in "fg":  # usage also in flavors and resources the queue has no quota for
            amounts = draw(st.dictionaries(st.sampled_from("xy"), st.integers(0, 10)))
            if amounts:
                usage[(name, flavor)] = amounts
    return queues, usage


@settings(max_examples=300, deadline=None)
@given(flat_setups(), st.integers(0, 10), st.booleans())
def test_without_cohort_objects_every_answer_is_as_before(
    setup: tuple[dict[str, QueueSpec], Usage], amount: int, empty_objects: bool
) -> None:
    """No Cohort objects, or Cohort objects without parent or quota for the cohorts queues
    name (the same thing): available and borrowing as the flat book said."""
    queues, usage = setup
    objects = {name: CohortSpec(name) for name in "cd"} if empty_objects else None
    book = QuotaBook(queues, usage, CohortTree(queues, objects))
    flat = FlatBook(queues, usage)
    for queue in queues.values():
        for quota in queue.flavors:
            for resource in quota.nominal:
                assert book.available(queue, quota, resource) == flat.available(
                    queue, quota, resource
                )
        for resource in "xy":
            demand = {resource: amount}
            assert bool(book.borrows(queue, demand)) == flat.borrows(queue, demand)
            assert book.borrows(queue, demand) in (0, 1)  # a flat cohort has height 1


# --- `plan` honours the tree ----------------------------------------------------------------


def _plan_with(tmp_path: Path, *cohorts: dict[str, Any]) -> int:
    from tests.test_plan_checks import FLAVOR, LOCAL_QUEUE, _cluster_queue, _plan, _queued

    queue = _cluster_queue(8)
    queue["spec"]["cohortName"] = "team"
    return _plan(tmp_path, _queued(2), FLAVOR, queue, LOCAL_QUEUE, *cohorts)


def _gpu_cohort(name: str, parent: str | None, gpus: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if gpus:
        spec["resourceGroups"] = _groups({"gpu": [("nvidia.com/gpu", str(gpus), "", "")]})
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def test_plan_borrows_the_quota_an_ancestor_cohort_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "flat").mkdir()
    assert _plan_with(tmp_path / "flat") == 1  # 16 GPUs asked, the queue has 8
    assert "needs 16, 8 available" in capsys.readouterr().out
    (tmp_path / "tree").mkdir()
    tree = (_gpu_cohort("team", "org"), _gpu_cohort("org", None, gpus=16))
    assert _plan_with(tmp_path / "tree", *tree) == 0
    out = capsys.readouterr()
    assert out.err == ""
    assert out.out.startswith("Workload ml/train on flavor 'gpu' (topology 'dc'")


def test_plan_refuses_a_queue_whose_cohort_is_in_a_cycle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cycle = (_gpu_cohort("team", "org"), _gpu_cohort("org", "team", gpus=16))
    assert _plan_with(tmp_path, *cycle) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "DOES NOT FIT: ClusterQueue cq is inactive: its Cohort team is in a cycle "
        "(team -> org -> team)"
    )


def test_plan_warns_of_a_parent_no_cohort_holds_and_of_a_cycle_elsewhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # team's parent is misspelt: team is not under org, whose 16 GPUs it needed.
    tree = (_gpu_cohort("team", "orgg"), _gpu_cohort("org", None, gpus=16))
    loop = (_gpu_cohort("x", "y"), _gpu_cohort("y", "x"))
    assert _plan_with(tmp_path, *tree, *loop) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "topogate plan: warning: Cohort team: parentName orgg names no Cohort; orgg is a root "
        "cohort without quota of its own",
        "topogate plan: warning: Cohort x is in a cycle (x -> y -> x): ClusterQueues (none) "
        "are inactive and admit nothing",
    ]


def test_plan_refuses_a_bad_cohort_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _gpu_cohort("org", None, gpus=16)
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    assert _plan_with(tmp_path, _gpu_cohort("team", "org"), bad) == 2
    err = capsys.readouterr().err
    assert "Cohort org: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota" in err


# --- serve's state: Cohorts are watched and feed the catalog -------------------------------


def test_a_cohort_event_parses_the_catalog_again_and_wakes_the_admitter() -> None:
    from topogate.kube.resources import COHORTS
    from topogate.state import ControllerState
    from topogate.state.store import WATCHED

    assert COHORTS in WATCHED
    state = ControllerState()
    first = state.catalogs.catalog()
    assert first.cohorts == {}
    org = {"metadata": {"name": "org"}, "spec": {}}
    state.handler(COHORTS)(None, {"metadata": {"name": "team"}, "spec": {"parentName": "org"}})
    state.handler(COHORTS)(None, org)
    assert state.signals.admit_event.is_set()  # a tree change may let a workload in
    catalog = state.catalogs.catalog()
    assert catalog is not first
    assert catalog.cohorts == {"team": CohortSpec("team", "org"), "org": CohortSpec("org")}
    state.handler(COHORTS)(org, None)
    assert set(state.catalogs.catalog().cohorts) == {"team"}
