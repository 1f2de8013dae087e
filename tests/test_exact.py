"""The exact second pass: gangs the greedy pass (Kueue's) misses, and the fewest domains.

A brute-force reference decides, on tiny clusters, whether a gang of PodSets each required in
one domain fits at all; the second pass must find a fit exactly when it does, and every plan
it returns must hold (no node over capacity, required domains honoured, counts right).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import product
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kit import BLOCK, GPU, HOST, L3, RACK, node, podset, run
from topogate.admission import exact
from topogate.admission.request import ExactOutcome, Mode, PlacementDecision, PodSetRequest
from topogate.api.gpus import GPU_RESOURCE
from topogate.cache.nodes import NodeInfo

EXACT = 5.0  # generous: these tests are about answers, not the budget
POOL = "example.com/pool"


def node_counts(decision: PlacementDecision) -> dict[str, dict[str, int]]:
    return {p.name: dict(p.node_counts) for p in decision.placements}


# --- the shapes of the issue -------------------------------------------------------------


def jobset_nodes() -> list[NodeInfo]:
    # n1 is the tightest node for job a (1 pod of 2 CPUs); a there leaves b (7 pods of
    # 250m and 1Gi) one pod short; a on n2 leaves b room for all seven.
    return [
        node("n1", "b1", "r1", "n1", cpu=2250, memory="2Gi"),
        node("n2", "b1", "r1", "n2", cpu=4000, memory="5Gi"),
    ]


def jobset() -> tuple[PodSetRequest, PodSetRequest]:
    return (
        podset(1, "a", cpu=2000, required=RACK),
        podset(7, "b", cpu=250, memory=2**30, required=RACK),
    )


def test_jobset_misses_on_the_greedy_pass_alone() -> None:
    greedy = run(jobset_nodes(), L3, *jobset(), exact_budget=0)
    assert not greedy.fits
    assert "only 6 out of 7" in greedy.message
    assert greedy.exact is ExactOutcome.NOT_RUN


def test_jobset_fits_with_the_second_pass() -> None:
    decision = run(jobset_nodes(), L3, *jobset(), exact_budget=EXACT)
    assert decision.fits, decision.message
    assert decision.produced_by == "exact" and decision.exact is ExactOutcome.FOUND
    counts = node_counts(decision)
    assert counts["a"] == {"n2": 1}
    assert counts["b"] == {"n1": 2, "n2": 5}


def gpu_rack() -> list[NodeInfo]:
    return [
        node("g1", "b1", "r1", "g1", gpu=8),
        node("g2", "b1", "r1", "g2", gpu=4),
        node("g3", "b1", "r1", "g3", gpu=8),
    ]


def gpu_jobs() -> tuple[PodSetRequest, ...]:
    return (
        podset(1, "one", gpu=2, required=RACK),
        podset(2, "two", gpu=3, required=RACK),
        podset(3, "three", gpu=3, required=RACK),
    )


def test_gpu_fragmentation_misses_on_the_greedy_pass_alone() -> None:
    greedy = run(gpu_rack(), L3, *gpu_jobs(), exact_budget=0)
    assert not greedy.fits
    assert greedy.podset == "three"


def test_gpu_fragmentation_fits_when_jobs_share_nodes() -> None:
    # The greedy pass gives "one" the tightest node (g2) and "two" a whole 8: six 3-GPU
    # holes remain for nine GPUs of "three". Jointly, "one" shares an 8 with a pod of
    # another job and every GPU job fits.
    decision = run(gpu_rack(), L3, *gpu_jobs(), exact_budget=EXACT)
    assert decision.fits, decision.message
    assert decision.produced_by == "exact"
    counts = node_counts(decision)
    assert len(counts["one"]) == 1
    (host,) = counts["one"]
    assert host != "g2"
    assert set(counts["one"]) & (set(counts["two"]) | set(counts["three"]))
    gpus = {"g1": 8, "g2": 4, "g3": 8}
    for name, per_node in counts.items():
        need = {"one": 2, "two": 3, "three": 3}[name]
        for host, pods in per_node.items():
            gpus[host] -= pods * need
    assert min(gpus.values()) >= 0


def test_gpu_sets_stay_greedy() -> None:
    # With bandwidth matrices a pod's count on a node is a GPU-set search: no second pass.
    def with_matrix(n: NodeInfo) -> NodeInfo:
        size = n.allocatable[GPU]
        matrix = tuple(tuple(0.0 if i == j else 100.0 for j in range(size)) for i in range(size))
        allocatable = {GPU_RESOURCE: size, "pods": 10}
        return replace(n, allocatable=allocatable, gpu_bandwidth=matrix)

    jobs = [replace(p, requests={GPU_RESOURCE: p.requests[GPU]}) for p in gpu_jobs()]
    decision = run([with_matrix(n) for n in gpu_rack()], L3, *jobs)
    assert not decision.fits
    assert decision.exact is ExactOutcome.UNSUPPORTED


def test_the_same_input_gives_the_same_plan() -> None:
    plans = {repr(node_counts(run(gpu_rack(), L3, *gpu_jobs()))) for _ in range(3)}
    assert len(plans) == 1


def test_a_gang_that_fits_greedily_is_left_alone() -> None:
    nodes = [*jobset_nodes(), node("n3", "b1", "r2", "n3", cpu=8000, memory="8Gi")]
    a, b = jobset()
    assert run(nodes, L3, a, b).exact is ExactOutcome.NOT_RUN


def test_a_gang_that_cannot_fit_keeps_the_greedy_message() -> None:
    a, _ = jobset()
    big = podset(9, "b", cpu=250, memory=2**30, required=RACK)
    greedy = run(jobset_nodes(), L3, a, big, exact_budget=0)
    decision = run(jobset_nodes(), L3, a, big)
    assert not decision.fits
    assert decision.exact is ExactOutcome.NO_BETTER
    assert (decision.message, decision.podset) == (greedy.message, greedy.podset)


def test_a_malformed_group_after_the_miss_is_not_placed() -> None:
    # The greedy pass stops at "b" before it reaches the three-PodSet group; the second
    # pass must not place a request the greedy pass would refuse once there.
    trio = [podset(1, f"t{i}", cpu=1, required=RACK, group="trio") for i in range(3)]
    decision = run(jobset_nodes(), L3, *jobset(), *trio)
    assert not decision.fits
    assert decision.exact is ExactOutcome.NO_BETTER


def test_budget_ran_out_keeps_the_greedy_answer_and_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="topogate.placement"):
        decision = run(jobset_nodes(), L3, *jobset(), exact_budget=1e-9)
    assert not decision.fits
    assert decision.exact is ExactOutcome.BUDGET
    assert any("budget" in r.getMessage() for r in caplog.records)


def test_leader_and_workers_fit_jointly_with_another_job() -> None:
    # "other" takes the tightest node, h2, the only one with the leader's memory; the
    # group then has no room for its leader. With "other" on h1 everything fits.
    nodes = [
        node("h1", "b1", "r1", "h1", cpu=3000, memory="1Gi"),
        node("h2", "b1", "r1", "h2", cpu=1000, memory="8Gi"),
    ]
    other = podset(1, "other", cpu=1000, required=RACK)
    leader = podset(1, "leader", cpu=500, memory=4 * 2**30, required=RACK, group="g")
    workers = podset(2, "workers", cpu=1000, required=RACK, group="g")
    assert not run(nodes, L3, other, leader, workers, exact_budget=0).fits
    decision = run(nodes, L3, other, leader, workers, exact_budget=EXACT)
    assert decision.fits, decision.message
    assert node_counts(decision) == {
        "other": {"h1": 1},
        "leader": {"h2": 1},
        "workers": {"h1": 2},
    }
    check_plan(nodes, [other, leader, workers], decision)


def test_balanced_requests_stay_greedy() -> None:
    a, _ = jobset()
    balanced = PodSetRequest(
        "b", 7, {"cpu": 250, "memory": 2**30}, mode=Mode.PREFERRED, level=RACK, balanced=True
    )
    decision = run(jobset_nodes(), L3, a, balanced)
    assert decision.exact in (ExactOutcome.UNSUPPORTED, ExactOutcome.NOT_RUN)


# --- fewest domains for preferred requests -----------------------------------------------


def test_preferred_gang_gets_the_fewest_racks() -> None:
    # Greedily, p0 takes r1 (its tightest fit) in a way that leaves p1 one rack short of r1;
    # jointly both fit in r1: two racks in all instead of three.
    def host(rack: str, h: int, cpu: int, gib: int, pods: int, gpu: int) -> NodeInfo:
        name = f"{rack}-h{h}"
        return node(name, "b1", rack, name, cpu=cpu, memory=gib * 2**30, pods=pods, gpu=gpu)

    nodes = [
        host("r0", 0, 3000, 1, 4, 2),
        host("r0", 1, 2000, 1, 10, 2),
        host("r1", 0, 3000, 2, 10, 2),
        host("r1", 1, 2000, 4, 4, 2),
        host("r1", 2, 1000, 4, 10, 2),
        host("r1", 3, 3000, 4, 2, 8),
    ]
    p0 = podset(3, "p0", cpu=500, memory=2**30, gpu=2, preferred=RACK)
    p1 = podset(3, "p1", cpu=2000, preferred=RACK)
    greedy = run(nodes, L3, p0, p1, exact_budget=0)
    decision = run(nodes, L3, p0, p1, exact_budget=EXACT)
    assert greedy.fits and decision.fits
    assert (racks(nodes, greedy), racks(nodes, decision)) == (3, 2)
    assert decision.produced_by == "exact" and decision.exact is ExactOutcome.FOUND
    check_plan(nodes, [p0, p1], decision)


def racks(nodes: Sequence[NodeInfo], decision: PlacementDecision) -> int:
    """Racks used, summed over the PodSets."""
    rack_of = {n.name: n.labels[RACK] for n in nodes}
    return sum(len({rack_of[h] for h in p.node_counts}) for p in decision.placements)


# --- a brute-force reference and properties ----------------------------------------------


@dataclass(frozen=True)
class Tiny:
    nodes: tuple[NodeInfo, ...]
    podsets: tuple[PodSetRequest, ...]


def _capacity(n: NodeInfo) -> dict[str, int]:
    return dict(n.allocatable)


def _eligible(n: NodeInfo, ps: PodSetRequest) -> bool:
    selector = ps.constraints.node_selector
    return all(n.labels.get(k) == v for k, v in selector.items())


def _level_value(n: NodeInfo, key: str) -> tuple[str, ...]:
    path = (n.labels[BLOCK], n.labels[RACK])
    return path[:1] if key == BLOCK else path


def _per_node_options(
    n: NodeInfo, podsets: Sequence[PodSetRequest], allowed: Sequence[bool]
) -> list[tuple[int, ...]]:
    """Every tuple of pods per PodSet that node ``n`` holds at once."""
    cap = _capacity(n)
    ranges = []
    for ps, ok in zip(podsets, allowed, strict=True):
        step = ps.slices[0].size if ps.slices and ps.slices[0].level == HOST else 1
        top = step if ps.exclusive_slices else ps.count  # exclusive: one slice per host
        ranges.append(range(0, top + 1, step) if ok else range(1))
    options = []
    for combo in product(*ranges):
        use = {"pods": sum(combo)}
        for ps, k in zip(podsets, combo, strict=True):
            for resource, amount in ps.requests.items():
                use[resource] = use.get(resource, 0) + k * amount
        if all(use[r] <= cap.get(r, 0) for r in use if use[r] > 0):
            options.append(combo)
    return options


def brute_force_fits(tiny: Tiny) -> bool:
    """Whether the gang fits: every choice of domains, then a DP over nodes of the pods
    still to place per PodSet (exact, and small enough for a dozen nodes)."""
    podsets = tiny.podsets
    choices: list[list[tuple[str, ...]]] = []
    for ps in podsets:
        assert ps.level is not None
        if ps.mode is not Mode.REQUIRED:
            choices.append([()])  # anywhere: () prefixes every path
        else:
            choices.append(sorted({_level_value(n, ps.level) for n in tiny.nodes}))
    grouped = [i for i, ps in enumerate(podsets) if ps.group is not None]
    for chosen in product(*choices):
        if len({chosen[i] for i in grouped}) > 1:
            continue  # a leader and its workers share one domain
        states = {tuple(ps.count for ps in podsets)}
        for n in tiny.nodes:
            allowed = [
                _level_value(n, ps.level or "")[: len(domain)] == domain and _eligible(n, ps)
                for ps, domain in zip(podsets, chosen, strict=True)
            ]
            options = _per_node_options(n, podsets, allowed)
            states = {
                tuple(r - k for r, k in zip(state, combo, strict=True))
                for state in states
                for combo in options
                if all(k <= r for r, k in zip(state, combo, strict=True))
            }
        if tuple(0 for _ in podsets) in states:
            return True
    return False


def check_plan(
    nodes: Sequence[NodeInfo], podsets: Sequence[PodSetRequest], d: PlacementDecision
) -> None:
    """No node over capacity, eligibility and required domains honoured, counts right."""
    by_name = {n.name: n for n in nodes}
    used: dict[str, dict[str, int]] = {n.name: {} for n in nodes}
    placed = {p.name: p for p in d.placements}
    for ps in podsets:
        counts = placed[ps.name].node_counts
        assert sum(counts.values()) == ps.count
        if ps.mode is Mode.REQUIRED and ps.level is not None and counts:
            assert len({_level_value(by_name[h], ps.level) for h in counts}) == 1
            if ps.group is not None:  # the group's domain: its PodSets share it
                mates = [p for p in podsets if p.group == ps.group]
                hosts = [h for p in mates for h in placed[p.name].node_counts]
                assert len({_level_value(by_name[h], ps.level) for h in hosts}) == 1
        for host, k in counts.items():
            assert _eligible(by_name[host], ps)
            if ps.slices and ps.slices[0].level == HOST:
                assert k % ps.slices[0].size == 0
                assert k <= ps.slices[0].size or not ps.exclusive_slices
            slot = used[host]
            slot["pods"] = slot.get("pods", 0) + k
            for resource, amount in ps.requests.items():
                slot[resource] = slot.get(resource, 0) + k * amount
    for host, use in used.items():
        cap = _capacity(by_name[host])
        for resource, amount in use.items():
            assert amount <= cap.get(resource, 0), (host, resource, amount)


@st.composite
def tiny_gangs(draw: st.DrawFn) -> Tiny:
    racks = draw(st.integers(1, 3))
    nodes = []
    for r in range(racks):
        block = "b1" if r < 2 else "b2"
        for h in range(draw(st.integers(1, 4))):
            name = f"r{r}-h{h}"
            nodes.append(
                node(
                    name,
                    block,
                    f"r{r}",
                    name,
                    cpu=draw(st.sampled_from([1000, 2000, 3000, 4000])),
                    memory=draw(st.sampled_from([2**30, 2 * 2**30, 4 * 2**30])),
                    gpu=draw(st.sampled_from([0, 2, 4, 8])),
                    pods=draw(st.sampled_from([2, 4, 10])),
                    labels={POOL: draw(st.sampled_from(["a", "b"]))},
                )
            )
    podsets = []
    for i in range(draw(st.integers(2, 3))):
        count = draw(st.integers(1, 4))
        pair = draw(st.booleans()) and count % 2 == 0
        exclusive = pair and draw(st.booleans())
        podsets.append(
            replace(
                podset(
                    count,
                    f"p{i}",
                    cpu=draw(st.sampled_from([0, 500, 1000, 2000])) or None,
                    memory=draw(st.sampled_from([0, 2**29, 2**30])) or None,
                    gpu=draw(st.sampled_from([0, 1, 2, 3])) or None,
                    required=draw(st.sampled_from([RACK, RACK, BLOCK])),
                    slice=(HOST, 2) if pair else None,
                    node_selector={POOL: "a"} if draw(st.booleans()) else None,
                ),
                exclusive_slices=exclusive,
            )
        )
    if draw(st.booleans()):
        # A leader for the first PodSet: one pod, its own requests, the same domain.
        workers = replace(podsets[0], group="g")
        podsets[0] = workers
        leader = podset(
            1,
            "leader",
            cpu=draw(st.sampled_from([0, 500, 2000])) or None,
            memory=draw(st.sampled_from([0, 2**30, 2 * 2**30])) or None,
            required=workers.level,
            group="g",
        )
        podsets.insert(1, leader)
    return Tiny(tuple(nodes), tuple(podsets))


TINY = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@pytest.mark.parametrize("whole_model", [exact.WHOLE_MODEL, 0], ids=["one-ilp", "search"])
@TINY
@given(tiny=tiny_gangs())
def test_second_pass_fits_exactly_when_brute_force_does(tiny: Tiny, whole_model: int) -> None:
    # Both methods: one ILP choosing every domain (small clusters), and the search over
    # domains with an ILP per shared domain (big ones).
    with patch.object(exact, "WHOLE_MODEL", whole_model):
        decision = run(tiny.nodes, L3, *tiny.podsets, exact_budget=EXACT)
    assert decision.exact is not ExactOutcome.BUDGET
    assert decision.fits == brute_force_fits(tiny), decision.message
    if decision.fits:
        check_plan(tiny.nodes, tiny.podsets, decision)


@TINY
@given(tiny_gangs())
def test_second_pass_never_undoes_a_greedy_fit(tiny: Tiny) -> None:
    greedy = run(tiny.nodes, L3, *tiny.podsets, exact_budget=0)
    decision = run(tiny.nodes, L3, *tiny.podsets, exact_budget=EXACT)
    if greedy.fits:
        assert node_counts(decision) == node_counts(greedy)
        assert decision.produced_by == "greedy"


@st.composite
def preferred_gangs(draw: st.DrawFn) -> Tiny:
    tiny = draw(tiny_gangs())
    podsets = tuple(
        podset(
            ps.count,
            ps.name,
            requests=ps.requests,
            preferred=RACK,
            node_selector=ps.constraints.node_selector or None,
        )
        for ps in tiny.podsets
    )
    return Tiny(tiny.nodes, podsets)


def blocks_then_racks(nodes: Sequence[NodeInfo], decision: PlacementDecision) -> tuple[int, int]:
    """(blocks, racks) used, each summed over the PodSets: the preferred second pass's
    objective, lexicographic from the top (tests/test_exact_levels.py checks every level)."""
    block_of = {n.name: n.labels[BLOCK] for n in nodes}
    blocks = sum(len({block_of[h] for h in p.node_counts}) for p in decision.placements)
    return blocks, racks(nodes, decision)


@TINY
@given(preferred_gangs())
def test_preferred_second_pass_is_valid_and_never_spreads_more(tiny: Tiny) -> None:
    greedy = run(tiny.nodes, L3, *tiny.podsets, exact_budget=0)
    decision = run(tiny.nodes, L3, *tiny.podsets, exact_budget=EXACT)
    assert decision.fits == brute_force_fits(tiny), decision.message
    if greedy.fits:
        check_plan(tiny.nodes, tiny.podsets, decision)
        before, after = (
            blocks_then_racks(tiny.nodes, greedy),
            blocks_then_racks(tiny.nodes, decision),
        )
        assert after[0] <= before[0]  # never more blocks, the level above the racks asked for
        if decision.produced_by == "exact":
            assert after < before
        else:
            assert node_counts(decision) == node_counts(greedy)
