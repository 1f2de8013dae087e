"""The preferred second pass, level by level, against a brute force on small trees.

For gangs of preferred PodSets (each at the block, rack or host level), the second pass's
objective is lexicographic from the top of the topology down: fewest blocks, then fewest
racks, then fewest hosts, each PodSet counting the levels down to its own, summed over the
PodSets; and when the greedy pass (Kueue's) fits, no PodSet gets more domains than greedily at
a level above its own. A brute force over every plan computes that optimum; the second pass
must reach it, at a budget no shape runs out of, on a corpus rich in the
shapes where the greedy pass misses the fit or spreads over more domains than needed. After a
miss of a gang with required PodSets, the preferred ones must have the fewest domains around
where the joint fit put the required ones, and the fit must hold. When the budget runs out,
the greedy answer stands. How often the production budget (50 ms) runs out is a figure of
the machine and its load: hack/bench_exact.py prints it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kit import BLOCK, HOST, L3, RACK, node, podset, run
from tests.test_exact import POOL, Tiny, brute_force_fits, check_plan, tiny_gangs
from topogate.admission.request import ExactOutcome, Mode, PlacementDecision, PodSetRequest
from topogate.cache.nodes import NodeInfo

GENEROUS = 5.0
Counts = tuple[int, ...]


# --- shapes ------------------------------------------------------------------------------


def gang(rng: random.Random) -> Tiny:
    """A few blocks of a few racks, and 1-3 preferred PodSets of mostly one-GPU pods.

    Biased towards the shapes the greedy pass gets wrong: each rack has either several
    one-GPU hosts or one or two hosts of 2-4 GPUs, so the racks and blocks of most room
    (the greedy pass's choice) are not always those that need the fewest domains below
    them, and gangs are larger than most hosts.
    """
    nodes = []
    blocks = rng.randint(1, 3)
    for b in range(blocks):
        for r in range(rng.randint(1, 3 if blocks < 3 else 2)):
            small = rng.random() < 0.5
            for h in range(rng.randint(2, 4) if small else rng.randint(1, 2)):
                name = f"b{b}-r{r}-h{h}"
                nodes.append(
                    node(
                        name,
                        f"b{b}",
                        f"r{r}",  # rack values repeat across blocks: domains are paths
                        name,
                        cpu=rng.choice([2000, 4000]),
                        memory=rng.choice([2 * 2**30, 4 * 2**30]),
                        gpu=1 if small else rng.choice([2, 3, 4]),
                        pods=rng.choice([2, 3, 4, 10]),
                        labels={POOL: rng.choice(["a", "a", "a", "b"])},
                    )
                )
    podsets = []
    parts = rng.choice([1, 2, 2, 3])
    for i in range(parts):
        podsets.append(
            podset(
                rng.randint(2, 6 if parts < 3 else 3),  # the brute force grows with pods
                f"p{i}",
                cpu=rng.choice([0, 500, 1000]) or None,
                memory=rng.choice([0, 2**29, 2**30]) or None,
                gpu=rng.choice([0, 1, 1, 1]) or None,
                preferred=rng.choice([HOST, HOST, RACK, RACK, BLOCK]),
                node_selector={POOL: "a"} if rng.random() < 0.15 else None,
            )
        )
    return Tiny(tuple(nodes), tuple(podsets))


# --- the brute force -------------------------------------------------------------------------


def depth(ps: PodSetRequest) -> int:
    """The PodSet's level as an index into (block, rack, host)."""
    assert ps.level is not None
    return L3.index(ps.level)


def path(n: NodeInfo) -> tuple[str, str, str]:
    return (n.labels[BLOCK], n.labels[RACK], n.labels[HOST])


def fits_on(n: NodeInfo, podsets: Sequence[PodSetRequest]) -> list[tuple[int, ...]]:
    """Every tuple of pods per PodSet that node ``n`` holds at once."""
    options: list[tuple[int, ...]] = [()]
    for ps in podsets:
        ok = all(n.labels.get(k) == v for k, v in ps.constraints.node_selector.items())
        options = [(*o, k) for o in options for k in range(ps.count + 1 if ok else 1)]
    fitting = []
    for combo in options:
        use = {"pods": sum(combo)}
        for ps, k in zip(podsets, combo, strict=True):
            for resource, amount in ps.requests.items():
                use[resource] = use.get(resource, 0) + k * amount
        if all(amount <= n.allocatable.get(r, 0) for r, amount in use.items() if amount > 0):
            fitting.append(combo)
    return fitting


def per_podset(nodes: Sequence[NodeInfo], ps: PodSetRequest, hosts: Sequence[str]) -> Counts:
    """Blocks, racks, hosts (down to the PodSet's level) that ``hosts`` span."""
    by_name = {n.name: path(n) for n in nodes}
    return tuple(len({by_name[h][: lv + 1] for h in hosts}) for lv in range(depth(ps) + 1))


def summed(vectors: Sequence[Counts]) -> Counts:
    totals = [0] * max(len(v) for v in vectors)
    for v in vectors:
        for lv, c in enumerate(v):
            totals[lv] += c
    return tuple(totals)


def counts_of(tiny: Tiny, d: PlacementDecision) -> list[Counts]:
    placed = {p.name: list(p.node_counts) for p in d.placements}
    return [per_podset(tiny.nodes, ps, placed[ps.name]) for ps in tiny.podsets]


def fewest(tiny: Tiny, caps: Sequence[Counts] | None) -> Counts | None:
    """The lexicographically fewest summed counts over every plan (each PodSet within its
    ``caps`` at the levels above its own); None when no plan holds the gang.

    A walk over the nodes in path order; a state is the pods still to place per PodSet, the
    domains each has used so far per level, and whether it already uses the current block
    and rack (so a domain is counted once). States with the same pods left and flags keep
    only counts no other such state beats at every level.
    """
    podsets = tiny.podsets
    nodes = sorted(tiny.nodes, key=path)
    start = tuple((ps.count, (0,) * (depth(ps) + 1), False, False) for ps in podsets)
    states = {start}
    previous: tuple[str, str, str] | None = None
    for n in nodes:
        here = path(n)
        new_block = previous is None or here[0] != previous[0]
        new_rack = new_block or previous is None or here[1] != previous[1]
        previous = here
        options = fits_on(n, podsets)
        following = set()
        for state in states:
            reset = tuple(
                (left, used, in_block and not new_block, in_rack and not new_rack)
                for left, used, in_block, in_rack in state
            )
            for combo in options:
                step = []
                for (left, used, in_block, in_rack), k in zip(reset, combo, strict=True):
                    if k > left:
                        break
                    if k == 0:
                        step.append((left, used, in_block, in_rack))
                        continue
                    counted = list(used)
                    if not in_block:
                        counted[0] += 1
                    if len(counted) > 1 and not in_rack:
                        counted[1] += 1
                    if len(counted) > 2:
                        counted[2] += 1
                    step.append((left - k, tuple(counted), True, True))
                else:
                    following.add(tuple(step))
        states = _pruned(following)
    best: Counts | None = None
    for state in states:
        if any(left for left, _, _, _ in state):
            continue
        spans = [u for _, u, _, _ in state]
        if caps is not None and any(
            any(u[lv] > cap[lv] for lv in range(len(cap)))
            for u, cap in zip(spans, caps, strict=True)
        ):
            continue
        total = summed(spans)
        if best is None or total < best:
            best = total
    return best


def _pruned(
    states: set[tuple[tuple[int, Counts, bool, bool], ...]],
) -> set[tuple[tuple[int, Counts, bool, bool], ...]]:
    groups: dict[object, list[tuple[tuple[int, Counts, bool, bool], ...]]] = {}
    for state in states:
        key = tuple((left, b, r) for left, _, b, r in state)
        groups.setdefault(key, []).append(state)
    kept = set()
    for members in groups.values():
        flat = [(s, [c for _, u, _, _ in s for c in u]) for s in members]
        for s, mine in flat:
            beaten = any(
                other != mine and all(o <= m for o, m in zip(other, mine, strict=True))
                for _, other in flat
            )
            if not beaten:
                kept.add(s)
    return kept


def alone(tiny: Tiny, ps: PodSetRequest) -> dict[str, int]:
    """Pods of ``ps`` each node holds with nothing else of the gang on it."""
    return {n.name: max(c[0] for c in fits_on(n, [ps])) for n in tiny.nodes}


def bound(tiny: Tiny) -> Counts | None:
    """Per level, the fewest domains each PodSet alone could use (largest first), summed:
    no plan has fewer at any level. None when some PodSet fits nowhere even alone."""
    vectors = []
    by_name = {n.name: path(n) for n in tiny.nodes}
    for ps in tiny.podsets:
        room = alone(tiny, ps)
        if sum(room.values()) < ps.count:
            return None
        mine = []
        for lv in range(depth(ps) + 1):
            per_domain: dict[tuple[str, ...], int] = {}
            for name, k in room.items():
                key = by_name[name][: lv + 1]
                per_domain[key] = per_domain.get(key, 0) + k
            total, used = 0, 0
            for k in sorted(per_domain.values(), reverse=True):
                if total >= ps.count:
                    break
                total, used = total + k, used + 1
            mine.append(used)
        vectors.append(tuple(mine))
    return summed(vectors)


@cache
def corpus() -> tuple[tuple[Tiny, PlacementDecision, Counts | None], ...]:
    """Seeded shapes with their greedy answer and the optimum: the brute force's, except
    where the greedy answer meets the lower bound at every level (then it is the optimum,
    and the brute force's time goes to the shapes that need it)."""
    rng = random.Random(2026)
    cases: list[tuple[Tiny, PlacementDecision, Counts | None]] = []
    for _ in range(SHAPES):
        tiny = gang(rng)
        greedy = run(tiny.nodes, L3, *tiny.podsets, exact_budget=0)
        lowest = bound(tiny)
        if lowest is None:
            cases.append((tiny, greedy, None))
        elif greedy.fits and summed(counts_of(tiny, greedy)) == lowest:
            cases.append((tiny, greedy, lowest))
        else:
            caps = [c[:-1] for c in counts_of(tiny, greedy)] if greedy.fits else None
            cases.append((tiny, greedy, fewest(tiny, caps)))
    return tuple(cases)


SHAPES = 1000


def check(tiny: Tiny, greedy: PlacementDecision, best: Counts | None, budget: float) -> bool:
    """The second pass against the brute force; False when its budget ran out (then the
    greedy answer must stand unchanged)."""
    decision = run(tiny.nodes, L3, *tiny.podsets, exact_budget=budget)
    if decision.exact is ExactOutcome.BUDGET:
        if decision.produced_by == "exact":  # a joint fit after a miss, not yet the fewest
            assert not greedy.fits and best is not None
            check_plan(tiny.nodes, tiny.podsets, decision)
        else:
            assert decision.fits == greedy.fits
            assert decision.placements == greedy.placements
        return False
    assert decision.fits == (best is not None), decision.message
    if not decision.fits:
        return True
    check_plan(tiny.nodes, tiny.podsets, decision)
    got = counts_of(tiny, decision)
    assert summed(got) == best, (summed(got), best)
    if greedy.fits:
        before = counts_of(tiny, greedy)
        # Never more domains than greedily at a level above a PodSet's own, and never a
        # worse vector; an answer already fewest is left exactly as the greedy pass gave it.
        for mine, theirs in zip(got, before, strict=True):
            assert all(m <= t for m, t in zip(mine[:-1], theirs[:-1], strict=True))
        assert summed(got) <= summed(before)
        if summed(before) == best:
            assert decision.placements == greedy.placements
            assert decision.produced_by == "greedy"
        else:
            assert decision.produced_by == "exact"
    return True


def must_act(tiny: Tiny, greedy: PlacementDecision, best: Counts | None) -> bool:
    """Whether the second pass has to change the greedy answer (a miss, or over-spread)."""
    if not greedy.fits:
        return best is not None
    return summed(counts_of(tiny, greedy)) != best


def kinds(cases: Sequence[tuple[Tiny, PlacementDecision, Counts | None]]) -> tuple[int, int, int]:
    """(greedy misses a fit, greedy over-spreads, greedy already fewest) in ``cases``."""
    misses = sum(1 for _, g, best in cases if not g.fits and best is not None)
    spread = sum(1 for t, g, best in cases if g.fits and must_act(t, g, best))
    fewest_ = sum(1 for t, g, best in cases if g.fits and not must_act(t, g, best))
    return misses, spread, fewest_


def test_the_corpus_is_rich_in_greedy_misses() -> None:
    misses, spread, already = kinds(corpus())
    # The test below cannot pass vacuously: many shapes where the second pass must act,
    # and many where it must leave the greedy answer alone.
    assert misses >= 10, misses
    assert spread >= 60, spread
    assert already >= 100, already
    # Over-spreads above the requested level (the racks-for-hosts trade), not only at it.
    above = 0
    for tiny, greedy, best in corpus():
        if greedy.fits and best is not None:
            vector = summed(counts_of(tiny, greedy))
            above += any(v > b for v, b in zip(vector[:-1], best[:-1], strict=False))
    assert above >= 20, above


def test_second_pass_is_lexicographically_fewest() -> None:
    # At a budget no shape runs out of. How often the production budget (50 ms of wall time)
    # runs out depends on the machine and its load, so that figure is measured by
    # hack/bench_exact.py (its third part prints the run-outs), not asserted here.
    assert all(check(tiny, greedy, best, GENEROUS) for tiny, greedy, best in corpus())


def test_a_budget_that_runs_out_leaves_the_greedy_answer() -> None:
    # A microsecond: the second pass starts on every shape where it has work and runs out
    # on most; each such shape must keep the greedy answer (``check`` asserts it) or, after
    # a greedy miss, a joint fit that holds.
    cases = corpus()
    ran_out = [not check(tiny, greedy, best, 1e-6) for tiny, greedy, best in cases]
    acting = [must_act(*case) for case in cases]
    assert sum(o for o, a in zip(ran_out, acting, strict=True) if a) >= sum(acting) // 2


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(st.randoms(use_true_random=False))
def test_second_pass_is_lexicographically_fewest_on_more_shapes(rng: random.Random) -> None:
    tiny = gang(rng)
    greedy = run(tiny.nodes, L3, *tiny.podsets, exact_budget=0)
    caps = [c[:-1] for c in counts_of(tiny, greedy)] if greedy.fits else None
    assert check(tiny, greedy, fewest(tiny, caps), GENEROUS)


def hosts(*spec: tuple[str, str, int]) -> list[NodeInfo]:
    """Nodes of (block, rack, GPUs), named by their path."""
    out = []
    for i, (block, rack, gpus) in enumerate(spec):
        name = f"{block}-{rack}-h{i}"
        out.append(node(name, block, rack, name, cpu=8000, gpu=gpus))
    return out


def test_racks_are_not_traded_for_hosts() -> None:
    # 6 one-GPU pods preferring a host; no rack holds 6, block b0 does. Greedily (Kueue):
    # the largest rack r0 (5 hosts of 1 GPU) and the tightest rack for the last pod, r1:
    # 2 racks, 6 hosts. Fewest hosts alone: r2, r3, r4 (2 GPUs each), 3 hosts but 3 racks,
    # cross-rack traffic bought for hosts. Fewest racks first, then hosts: r0 and one
    # 2-GPU host, 2 racks and 5 hosts.
    nodes = hosts(
        *(("b0", "r0", 1),) * 5, ("b0", "r1", 1), ("b0", "r2", 2), ("b0", "r3", 2), ("b0", "r4", 2)
    )
    ps = podset(6, "main", gpu=1, preferred=HOST)
    tiny = Tiny(tuple(nodes), (ps,))
    greedy = run(nodes, L3, ps, exact_budget=0)
    assert counts_of(tiny, greedy) == [(1, 2, 6)]
    decision = run(nodes, L3, ps, exact_budget=GENEROUS)
    assert counts_of(tiny, decision) == [(1, 2, 5)]
    assert decision.produced_by == "exact"


def test_an_answer_already_fewest_is_left_alone() -> None:
    # No host holds 6, rack r0 does (3 hosts): the greedy answer, 1 rack and 3 hosts, is
    # the fewest; 2 hosts would need 2 racks (r1 and r2).
    nodes = hosts(*(("b0", "r0", 2),) * 3, ("b0", "r1", 3), ("b0", "r2", 3))
    ps = podset(6, "main", gpu=1, preferred=HOST)
    tiny = Tiny(tuple(nodes), (ps,))
    greedy = run(nodes, L3, ps, exact_budget=0)
    decision = run(nodes, L3, ps, exact_budget=GENEROUS)
    assert counts_of(tiny, greedy) == [(1, 1, 3)]
    assert decision.placements == greedy.placements and decision.produced_by == "greedy"


def test_fewest_racks_may_be_in_another_block() -> None:
    # 6 one-GPU pods preferring a rack; no rack holds 6. Greedily: the tightest block that
    # does, b0 (6 GPUs), over its 3 racks. Block b1 (8 GPUs) holds them in 2 racks.
    nodes = hosts(
        ("b0", "r0", 2), ("b0", "r1", 2), ("b0", "r2", 2), ("b1", "r0", 4), ("b1", "r1", 4)
    )
    ps = podset(6, "main", gpu=1, preferred=RACK)
    tiny = Tiny(tuple(nodes), (ps,))
    greedy = run(nodes, L3, ps, exact_budget=0)
    assert counts_of(tiny, greedy) == [(1, 3)]
    decision = run(nodes, L3, ps, exact_budget=GENEROUS)
    assert counts_of(tiny, decision) == [(1, 2)]
    assert {h.split("-")[0] for h in decision.placements[0].node_counts} == {"b1"}
    assert decision.produced_by == "exact" and decision.exact is ExactOutcome.FOUND


def test_a_podset_alone_leaves_the_tightest_rack_for_fewer_hosts() -> None:
    # 8 one-GPU pods preferring a host; no host holds 8. Kueue takes the tightest rack that
    # does, r0 (eight 1-GPU hosts): 8 hosts. Rack r1's two 6-GPU hosts hold them on 2.
    nodes = hosts(*(("b0", "r0", 1),) * 8, ("b0", "r1", 6), ("b0", "r1", 6))
    ps = podset(8, "main", gpu=1, preferred=HOST)
    tiny = Tiny(tuple(nodes), (ps,))
    assert counts_of(tiny, run(nodes, L3, ps, exact_budget=0)) == [(1, 1, 8)]
    decision = run(nodes, L3, ps, exact_budget=GENEROUS)
    assert counts_of(tiny, decision) == [(1, 1, 2)]
    assert set(decision.placements[0].node_counts) == {"b0-r1-h8", "b0-r1-h9"}


@st.composite
def mixed_gangs(draw: st.DrawFn) -> Tiny:
    """test_exact's tiny gangs (each PodSet required in a rack or block), one PodSet turned
    preferred: after a miss, those are moved to their fewest domains around the
    required ones, which must keep the fit."""
    tiny = draw(tiny_gangs())
    free = [i for i, ps in enumerate(tiny.podsets) if ps.group is None]
    moved = draw(st.sampled_from(free)) if free else None
    podsets = tuple(
        replace(ps, mode=Mode.PREFERRED, level=draw(st.sampled_from(L3))) if i == moved else ps
        for i, ps in enumerate(tiny.podsets)
    )
    return Tiny(tiny.nodes, podsets)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(mixed_gangs())
def test_mixed_gangs_keep_their_fit_when_preferred_podsets_move(tiny: Tiny) -> None:
    decision = run(tiny.nodes, L3, *tiny.podsets, exact_budget=GENEROUS)
    assert decision.fits == brute_force_fits(tiny), decision.message
    if decision.fits:
        check_plan(tiny.nodes, tiny.podsets, decision)


def around(tiny: Tiny, fixed: PlacementDecision, names: set[str]) -> Tiny:
    """The preferred PodSets alone, on nodes whose room the PodSets ``names`` of ``fixed``
    already take (as the pods they placed)."""
    used: dict[str, dict[str, int]] = {n.name: {} for n in tiny.nodes}
    requests = {ps.name: {**ps.requests, "pods": 1} for ps in tiny.podsets}
    for placement in fixed.placements:
        if placement.name in names:
            for host, k in placement.node_counts.items():
                for resource, amount in requests[placement.name].items():
                    used[host][resource] = used[host].get(resource, 0) + k * amount
    nodes = tuple(
        replace(
            n,
            allocatable={r: v - used[n.name].get(r, 0) for r, v in n.allocatable.items()},
        )
        for n in tiny.nodes
    )
    return Tiny(nodes, tuple(ps for ps in tiny.podsets if ps.name not in names))


def test_after_a_miss_preferred_podsets_take_the_fewest_domains_around_the_fit() -> None:
    # A PodSet required in a rack first (so the greedy pass can block the others), then a
    # preferred gang; where the greedy pass misses and the joint fit finds room, the
    # preferred PodSets' counts are the brute force's fewest on what the required one left.
    rng = random.Random(7)
    checked = 0
    for _ in range(600):
        shape = gang(rng)
        required = podset(
            rng.randint(1, 3),
            "req",
            cpu=rng.choice([500, 1000, 2000]),
            gpu=rng.choice([0, 1, 2]) or None,
            required=RACK,
        )
        tiny = Tiny(shape.nodes, (required, *shape.podsets))
        if run(tiny.nodes, L3, *tiny.podsets, exact_budget=0).fits:
            continue
        decision = run(tiny.nodes, L3, *tiny.podsets, exact_budget=GENEROUS)
        if not decision.fits:
            continue
        check_plan(tiny.nodes, tiny.podsets, decision)
        rest = around(tiny, decision, {"req"})
        got = summed(counts_of(rest, decision))
        assert got == fewest(rest, None), (got, fewest(rest, None))
        checked += 1
    assert checked >= 10, checked
