"""The ungater's decision: which gated pods to release and onto which domain."""

from __future__ import annotations

from typing import Any

from topogate.api.constants import (
    HOSTNAME_LABEL,
    JOB_COMPLETION_INDEX,
    JOBSET_JOB_INDEX,
    TOPOLOGY_GATE,
)
from topogate.api.models import TopologyAssignment
from topogate.ungater.ranks import (
    Domain,
    DomainAssignment,
    Expectations,
    PodView,
    Ungate,
    plan_ungates,
    pod_view,
)

BLOCK = "cloud.com/topology-block"
RACK = "cloud.com/topology-rack"
LEVELS = (BLOCK, RACK)
# Kueue's "ranks ... batch/Job - for all Pods" assignment.
DOMAINS = (Domain(("b1", "r1"), 2), Domain(("b1", "r2"), 1), Domain(("b2", "r1"), 2))


def pod(
    name: str,
    index: int | str | None = None,
    *,
    gated: bool = True,
    on: tuple[str, str] | None = None,
    job: int | None = None,
    terminated: bool = False,
) -> PodView:
    labels: dict[str, str] = {}
    if index is not None:
        labels[JOB_COMPLETION_INDEX] = str(index)
    if job is not None:
        labels[JOBSET_JOB_INDEX] = str(job)
    selector = dict(zip(LEVELS, on, strict=True)) if on else {}
    return PodView(
        name=name,
        uid=f"uid-{name}",
        labels=labels,
        node_selector=selector,
        gated=gated,
        terminated=terminated,
    )


def placed(plan: list[Ungate]) -> dict[str, tuple[str, ...]]:
    return {u.pod: tuple(u.node_selector[level] for level in LEVELS) for u in plan}


def test_ranks_batch_job_all_pods() -> None:
    pods = [pod(f"p{i}", i) for i in (3, 0, 4, 1, 2)]
    plan = plan_ungates(LEVELS, DOMAINS, pods, count=5)
    assert [u.pod for u in plan] == ["p0", "p1", "p2", "p3", "p4"]
    assert plan[0] == Ungate("p0", "uid-p0", {BLOCK: "b1", RACK: "r1"})
    assert placed(plan) == {
        "p0": ("b1", "r1"),
        "p1": ("b1", "r1"),
        "p2": ("b1", "r2"),
        "p3": ("b2", "r1"),
        "p4": ("b2", "r1"),
    }


def test_ranks_not_name_order() -> None:
    """Names sort one way, indexes another: the index decides."""
    pods = [pod("a", 4), pod("b", 3), pod("c", 2), pod("d", 1), pod("e", 0)]
    plan = plan_ungates(LEVELS, DOMAINS, pods, count=5)
    assert placed(plan) == {
        "a": ("b2", "r1"),
        "b": ("b2", "r1"),
        "c": ("b1", "r2"),
        "d": ("b1", "r1"),
        "e": ("b1", "r1"),
    }


def test_ranks_only_gated_pods_are_returned() -> None:
    pods = [pod("p0", 0, gated=False, on=("b1", "r1")), pod("p1", 1), pod("p2", 2)]
    plan = plan_ungates(LEVELS, DOMAINS, pods, count=5)
    assert placed(plan) == {"p1": ("b1", "r1"), "p2": ("b1", "r2")}


def test_hostname_only_assignment() -> None:
    domains = (Domain(("x1",), 1), Domain(("x2",), 1))
    pods = [pod("p1", 1), pod("p0", 0)]
    plan = plan_ungates((HOSTNAME_LABEL,), domains, pods, count=2)
    assert plan == [
        Ungate("p0", "uid-p0", {HOSTNAME_LABEL: "x1"}),
        Ungate("p1", "uid-p1", {HOSTNAME_LABEL: "x2"}),
    ]


def test_assignment_from_model() -> None:
    model = TopologyAssignment.model_validate(
        {"levels": [BLOCK, RACK], "domains": [{"values": ["b1", "r1"], "count": 2}]}
    )
    assert model.decoded() == DomainAssignment(LEVELS, (Domain(("b1", "r1"), 2),))
    written = TopologyAssignment.encoded(LEVELS, DOMAINS)
    assert written.domains is None and written.slices is not None
    assert written.decoded() == DomainAssignment(LEVELS, DOMAINS)


def test_jobset_ranks_use_job_index() -> None:
    # 2 jobs x 2 pods; rank = index + job * 2. Names mislead on purpose.
    domains = (Domain(("b1", "r1"), 2), Domain(("b2", "r1"), 2))
    pods = [
        pod("a", 0, job=1),
        pod("b", 1, job=1),
        pod("c", 0, job=0),
        pod("d", 1, job=0),
    ]
    plan = plan_ungates(
        LEVELS, domains, pods, count=4, sub_group_label=JOBSET_JOB_INDEX, sub_group_count=2
    )
    assert placed(plan) == {
        "a": ("b2", "r1"),
        "b": ("b2", "r1"),
        "c": ("b1", "r1"),
        "d": ("b1", "r1"),
    }


def test_jobset_missing_job_index_falls_back_to_greedy() -> None:
    domains = (Domain(("b1", "r1"), 2), Domain(("b2", "r1"), 2))
    pods = [pod("a", 0, job=1), pod("b", 1, job=1), pod("c", 0), pod("d", 1, job=0)]
    plan = plan_ungates(
        LEVELS, domains, pods, count=4, sub_group_label=JOBSET_JOB_INDEX, sub_group_count=2
    )
    assert placed(plan)["a"] == ("b1", "r1")


def test_rank_out_of_range_falls_back_to_greedy() -> None:
    domains = (Domain(("b1", "r1"), 1), Domain(("b1", "r2"), 2))
    # Ranks 1, 2, 3 with count 3: out of range -> greedy by name.
    pods = [pod("c", 1), pod("b", 2), pod("a", 3)]
    plan = plan_ungates(LEVELS, domains, pods, count=3)
    assert placed(plan) == {"a": ("b1", "r1"), "b": ("b1", "r2"), "c": ("b1", "r2")}


def test_missing_label_falls_back_to_greedy() -> None:
    pods = [pod("p0", 4), pod("p1", 3), pod("p2"), pod("p3", 1), pod("p4", 0)]
    plan = plan_ungates(LEVELS, DOMAINS, pods, count=5)
    # Greedy: by name, domains in order.
    assert placed(plan) == {
        "p0": ("b1", "r1"),
        "p1": ("b1", "r1"),
        "p2": ("b1", "r2"),
        "p3": ("b2", "r1"),
        "p4": ("b2", "r1"),
    }


def test_invalid_label_falls_back_to_greedy() -> None:
    pods = [pod("a", "x"), pod("b", 0)]
    plan = plan_ungates(LEVELS, DOMAINS, pods, count=5)
    assert placed(plan) == {"a": ("b1", "r1"), "b": ("b1", "r1")}


def test_no_index_label_means_greedy() -> None:
    pods = [pod("a", 4), pod("b", 0)]
    plan = plan_ungates(LEVELS, DOMAINS, pods, count=5, index_label=None)
    assert placed(plan) == {"a": ("b1", "r1"), "b": ("b1", "r1")}


def test_duplicate_index_falls_back_to_greedy() -> None:
    pods = [pod("a", 4), pod("b", 4), pod("c", 3)]
    plan = plan_ungates(LEVELS, DOMAINS, pods, count=5)
    assert placed(plan) == {"a": ("b1", "r1"), "b": ("b1", "r1"), "c": ("b1", "r2")}


def test_out_of_range_index_falls_back_to_greedy() -> None:
    pods = [pod("a", 4), pod("b", 5)]
    plan = plan_ungates(LEVELS, DOMAINS, pods, count=5)
    assert placed(plan) == {"a": ("b1", "r1"), "b": ("b1", "r1")}


def test_disagreeing_ungated_pod_falls_back_to_greedy() -> None:
    # p0 (rank 0, expected b1/r1) already runs in b2/r1.
    pods = [pod("p0", 0, gated=False, on=("b2", "r1")), pod("p1", 1), pod("p4", 4)]
    plan = plan_ungates(LEVELS, DOMAINS, pods, count=5)
    # Greedy: p0 takes one b2/r1 place; p1, p4 fill b1/r1.
    assert placed(plan) == {"p1": ("b1", "r1"), "p4": ("b1", "r1")}


def test_agreeing_ungated_pod_keeps_rank_mode() -> None:
    pods = [pod("p0", 3, gated=False, on=("b2", "r1")), pod("p1", 1), pod("p4", 4)]
    plan = plan_ungates(LEVELS, DOMAINS, pods, count=5)
    assert placed(plan) == {"p1": ("b1", "r1"), "p4": ("b2", "r1")}


def test_greedy_respects_already_ungated_per_domain() -> None:
    pods = [
        pod("u1", gated=False, on=("b1", "r1")),
        pod("u2", gated=False, on=("b1", "r1")),
        pod("u3", gated=False, on=("b2", "r1")),
        pod("e"),
        pod("d"),
        pod("c"),
    ]
    plan = plan_ungates(LEVELS, DOMAINS, pods, count=5)
    # b1/r1 is full, b1/r2 has 1 place, b2/r1 has 1: two of three gated pods go.
    assert placed(plan) == {"c": ("b1", "r2"), "d": ("b2", "r1")}


def test_greedy_counts_only_full_matches() -> None:
    # An ungated pod with only the block key does not take a b1/r1 place.
    half = PodView("h", "uid-h", node_selector={BLOCK: "b1"}, gated=False)
    plan = plan_ungates(LEVELS, DOMAINS[:1], [half, pod("a"), pod("b")], count=2, index_label=None)
    assert placed(plan) == {"a": ("b1", "r1"), "b": ("b1", "r1")}


def test_expected_pods_are_not_ungated_twice() -> None:
    pods = [pod("p0", 0), pod("p1", 1), pod("p2", 2)]
    plan = plan_ungates(LEVELS, DOMAINS, pods, count=5, expected={"uid-p0", "uid-p1"})
    assert placed(plan) == {"p2": ("b1", "r2")}


def test_expected_pods_greedy_take_their_domain_once() -> None:
    # "x" is expected and already shows its nodeSelector, "y" is expected without one.
    pods = [pod("x", on=("b1", "r1")), pod("y"), pod("a"), pod("b"), pod("c")]
    plan = plan_ungates(
        LEVELS, DOMAINS[:2], pods, count=3, index_label=None, expected={"uid-x", "uid-y"}
    )
    assert placed(plan) == {"a": ("b1", "r1"), "b": ("b1", "r2")}


def test_terminated_pods_are_ignored() -> None:
    pods = [
        pod("old", 0, terminated=True),  # its replacement reuses index 0
        pod("old-ungated", 1, gated=False, on=("b2", "r1"), terminated=True),
        pod("new", 0),
        pod("p1", 1),
    ]
    plan = plan_ungates(LEVELS, DOMAINS, pods, count=5)
    assert placed(plan) == {"new": ("b1", "r1"), "p1": ("b1", "r1")}


def test_no_pods_no_plan() -> None:
    assert plan_ungates(LEVELS, DOMAINS, [], count=5) == []
    assert plan_ungates(LEVELS, DOMAINS, [pod("a", 0, terminated=True)], count=5) == []


def pod_dict(**over: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "w-0",
            "uid": "u-1",
            "labels": {JOB_COMPLETION_INDEX: "0"},
            "annotations": {"topogate.dev/workload": "ns/wl"},
        },
        "spec": {
            "schedulingGates": [{"name": "other"}, {"name": TOPOLOGY_GATE}],
            "nodeSelector": {"pool": "a"},
            "containers": [],
        },
        "status": {"phase": "Pending"},
    }
    obj.update(over)
    return obj


def test_pod_view_parses_gate_phase_and_maps() -> None:
    view = pod_view(pod_dict())
    assert view == PodView(
        name="w-0",
        uid="u-1",
        labels={JOB_COMPLETION_INDEX: "0"},
        annotations={"topogate.dev/workload": "ns/wl"},
        node_selector={"pool": "a"},
        gated=True,
        terminated=False,
    )


def test_pod_view_without_our_gate_or_finished() -> None:
    other = pod_view(pod_dict(spec={"schedulingGates": [{"name": "other"}]}))
    assert not other.gated
    assert other.node_selector == {}
    assert pod_view(pod_dict(status={"phase": "Succeeded"})).terminated
    assert pod_view(pod_dict(status={"phase": "Failed"})).terminated
    assert not pod_view(pod_dict(status={"phase": "Running"})).terminated
    bare = pod_view({"metadata": {"name": "n"}})
    assert (bare.name, bare.gated, bare.terminated, dict(bare.labels)) == ("n", False, False, {})


def test_expectations() -> None:
    exp = Expectations()
    assert not exp.pending("ns/wl")
    exp.expect("ns/wl", ["a", "b"])
    exp.expect("ns/other", [])
    assert exp.pending("ns/wl")
    assert not exp.pending("ns/other")
    assert exp.uids("ns/wl") == frozenset({"a", "b"})
    exp.observed("ns/wl", "a")
    exp.observed("ns/wl", "zzz")
    exp.observed("ns/none", "a")
    assert exp.pending("ns/wl")
    exp.observed("ns/wl", "b")
    assert not exp.pending("ns/wl")
    assert exp.uids("ns/wl") == frozenset()
    exp.expect("ns/wl", {"c"})
    exp.forget("ns/wl")
    assert not exp.pending("ns/wl")
