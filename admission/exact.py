"""The exact second pass: joint packing of a gang's parts where the greedy pass gave up.

The greedy pass (``placement.py``, Kueue's algorithm) places PodSets one after another, so an
earlier one can take the node a later one needed. This module answers the joint question for
the few domains that matter, exactly, as a small integer program solved by HiGHS
(``scipy.optimize.milp``):

- variables: pods of each part's workers (and its leader) per node of the part's region;
- per node and resource, the parts' pods together stay within the free capacity (and the
  pod slots, which are a resource column of the snapshot);
- each part's count, its slice layers (a multiple of the layer size per domain of the
  layer's level; at most one slice per domain for exclusive slices);
- optionally, fewest domains of each part's counted level (the objective).

Per-node upper bounds reuse the greedy pass's eligibility masks and its per-node count, so
taints, selectors and missing resources are judged exactly as there.

Which domain each part takes (its required domain; the whole tree when it has none) is found
in three steps, each exact about what it claims:

1. a quick search (``_Search`` with ``ilp=False``): depth-first over the parts, each taking its
   candidate domains in the greedy pass's order (Kueue's tie-breaks; identical parts in
   non-decreasing order, since they are interchangeable), fresh domains before shared ones.
   A part alone in its domain fits by the greedy pass's own counts (exact for one part); a
   shared domain counts only when a plain packing (parts one after another) proves it. Most
   misses of the greedy pass end here, in a few milliseconds;
2. otherwise, on small problems (up to ``WHOLE_MODEL`` node columns over all candidates), one
   ILP chooses every part's domain (0/1 columns, earlier candidates cheaper) and packs them;
3. otherwise the search again, now asking the ILP about shared domains the packing cannot
   prove, once per complete choice, with refuted subsets pruning the rest.

Why an ILP rather than a hand-written branch and bound over nodes: the joint per-node packing
is a multi-dimensional integer packing with side constraints (slices, exclusive slices,
leaders); HiGHS proves infeasibility, which is what makes "does not fit" exact, and solves the
sizes met here (a rack or a few, tens to hundreds of nodes) in 2-20 ms. Its fixed cost per
call (a few ms) is why steps 1 and 2 avoid calling it many times.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from topogate.cache.snapshot import BoolArray, IntArray
from topogate.cache.topology import DomainTree

log = logging.getLogger("topogate.placement")

EXACT_BUDGET = 0.05  # seconds per gang for the second pass
TIE_COST = 1e-3  # the most a part's tie-breaking costs add up to (domain choices cost 1)
# Past this many integer variables the ILP is not attempted (the greedy answer stands): the
# model would take longer to build than any budget allows.
MAX_COLUMNS = 5_000

WHOLE_TREE = -1  # a region's level meaning "every node of the tree"

Region = tuple[int, int]  # (level, domain); (WHOLE_TREE, 0) is the whole tree


def per_node_count(free: IntArray, request: IntArray) -> IntArray:
    """How many pods of ``request`` fit on each row of ``free`` (min over requested resources)."""
    used = np.flatnonzero(request > 0)
    if used.size == 0:
        return np.full(free.shape[0], np.iinfo(np.int32).max, dtype=np.int64)
    counts: IntArray = np.min(free[:, used] // request[used], axis=1)
    return counts


class _GiveUp(Exception):
    """The quick search took its number of steps without an answer."""


class OutOfTime(Exception):
    """The second pass's budget ran out; the greedy answer stands."""


class TooLarge(Exception):
    """The joint problem is bigger than the ILP is allowed; the greedy answer stands."""


Clock = Callable[[], float]  # seconds on a monotonic clock


@dataclass(frozen=True, slots=True)
class ExactBudget:
    """How long the second pass may search per gang, and the clock to measure it by.

    The core reads no clock of its own: the caller (serve, plan, a test) hands one in, so a
    decision depends only on its inputs and a test can run the search against a fake clock.
    """

    seconds: float
    clock: Clock

    def start(self) -> Budget:
        # The solver's import (most of a second, once per process) is not the gang's time:
        # charged to the first gang it would run it out of budget, and the answer would
        # depend on which gang came first.
        _import_solver()
        return Budget(self.clock() + self.seconds, self.clock)


@dataclass(slots=True)
class Budget:
    """One gang's deadline on the caller's clock."""

    deadline: float
    clock: Clock

    def remaining(self) -> float:
        return self.deadline - self.clock()

    def check(self) -> None:
        if self.remaining() <= 0:
            raise OutOfTime


@dataclass(frozen=True, slots=True)
class Part:
    """One group of the gang (a PodSet, or a leader and its workers) as the ILP sees it."""

    shape: str  # equal for groups with identical requests: their choices are interchangeable
    count: int  # worker pods
    worker_vec: IntArray
    worker_mask: BoolArray  # eligible node positions (the greedy pass's, GPU rules included)
    leader_vec: IntArray | None = None
    leader_mask: BoolArray | None = None
    # (level, unit): every domain of ``level`` holds a multiple of ``unit`` workers.
    units: tuple[tuple[int, int], ...] = ()
    exclusive_level: int | None = None  # at most one slice per domain of this level
    count_level: int | None = None  # domains of this level are minimised (preferred)

    @property
    def leaders(self) -> int:
        return 0 if self.leader_vec is None else 1


@dataclass(frozen=True, slots=True)
class Candidates:
    """The regions one part may take, in the greedy pass's order (Kueue's tie-breaks)."""

    regions: tuple[Region, ...]
    alone: bool  # a region holding only this part is known to fit without an ILP


class Regions:
    """Node positions of the tree's domains, and which domains overlap."""

    def __init__(self, tree: DomainTree) -> None:
        self.tree = tree
        self._sorted: dict[int, tuple[IntArray, IntArray]] = {}
        # Each node's rank in full-path order: positions are listed in it, not in the order
        # the nodes came in, so the packing and the ILP break ties the same way whatever
        # that order was (the plan depends on the cluster, not on how it was listed).
        node_level = tree.node_level
        self._rank = tree.lexrank[node_level][tree.member_domain[node_level]]
        self._whole = np.argsort(self._rank, kind="stable").astype(np.int64)

    def nodes(self, region: Region) -> IntArray:
        level, domain = region
        if level == WHOLE_TREE:
            return self._whole
        if level not in self._sorted:
            member = self.tree.member_domain[level]
            order = np.lexsort((self._rank, member)).astype(np.int64)
            starts = np.searchsorted(member[order], np.arange(self.tree.size(level) + 1))
            self._sorted[level] = (order, starts.astype(np.int64))
        order, starts = self._sorted[level]
        return order[starts[domain] : starts[domain + 1]]

    def union(self, regions: Sequence[Region]) -> IntArray:
        """The nodes of several regions, in full-path order (never the input order)."""
        nodes = np.concatenate([self.nodes(r) for r in regions])
        return nodes[np.argsort(self._rank[nodes], kind="stable")].astype(np.int64)

    def overlap(self, a: Region, b: Region) -> bool:
        if a[0] == WHOLE_TREE or b[0] == WHOLE_TREE:
            return True
        high, low = (a, b) if a[0] <= b[0] else (b, a)
        inside = self.nodes(low)
        # Domains nest: the lower one lies inside the higher one or not at all.
        return bool(inside.size) and int(self.tree.member_domain[high[0]][inside[0]]) == high[1]


Plan = list[tuple[IntArray, IntArray | None]]  # per part: workers per node, leader per node


@dataclass(slots=True)
class _Model:
    """The ILP being built: columns, sparse rows, and per-node resource terms."""

    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    row_cols: list[IntArray] = field(default_factory=list)
    row_coefs: list[IntArray] = field(default_factory=list)
    row_lo: list[float] = field(default_factory=list)
    row_hi: list[float] = field(default_factory=list)
    # node position -> [(column, per-pod vector)], for the shared-capacity rows
    on_node: dict[int, list[tuple[int, IntArray]]] = field(default_factory=dict)

    def columns(self, upper: npt.NDArray[Any], cost: float = 0.0) -> IntArray:
        start = len(self.upper)
        self.lower.extend([0.0] * len(upper))
        self.upper.extend(float(u) for u in upper)
        self.cost.extend([cost] * len(upper))
        return np.arange(start, start + len(upper), dtype=np.int64)

    def row(self, cols: IntArray, coefs: IntArray, lo: float, hi: float) -> None:
        self.row_cols.append(cols)
        self.row_coefs.append(coefs)
        self.row_lo.append(lo)
        self.row_hi.append(hi)


def _group_rows(
    model: _Model,
    member: npt.NDArray[np.integer[Any]],
    cols: IntArray,
    unit: int,
    at_most: int | None,
) -> None:
    """Per domain (``member`` codes of the columns' nodes): sum(cols) == unit * k, k integer."""
    domains, inverse = np.unique(member, return_inverse=True)
    bound = np.full(len(domains), np.inf if at_most is None else at_most)
    ks = model.columns(bound)
    for i in range(len(domains)):
        mine = cols[inverse == i]
        model.row(
            np.concatenate((mine, ks[i : i + 1])),
            np.concatenate((np.ones(len(mine), np.int64), np.array([-unit]))),
            0.0,
            0.0,
        )


Gate = tuple[int, Mapping[int, int]]  # (level, domain -> its 0/1 "chosen" column)


def _gate_rows(
    model: _Model, tree: DomainTree, gate: Gate, nodes: IntArray, cols: IntArray, upper: IntArray
) -> None:
    """Pods on a node only when its domain of the gate's level is the one chosen."""
    level, chosen = gate
    for node, col, top in zip(nodes.tolist(), cols.tolist(), upper.tolist(), strict=True):
        y = chosen[int(tree.member_domain[level][node])]
        model.row(np.array([col, y]), np.array([1, -top]), -np.inf, 0.0)


def _add_part(
    model: _Model,
    tree: DomainTree,
    free: IntArray,
    part: Part,
    nodes: IntArray,
    gate: Gate | None = None,
) -> tuple[IntArray, IntArray, IntArray, IntArray]:
    """The part's columns (workers, then leader) and the node each stands for."""
    cap = np.where(part.worker_mask[nodes], per_node_count(free[nodes], part.worker_vec), 0)
    w_nodes = nodes[cap > 0]
    w_upper = np.minimum(cap[cap > 0], part.count)
    w_cols = model.columns(w_upper)
    model.row(w_cols, np.ones(len(w_cols), np.int64), part.count, part.count)
    # A tiny cost per pod rising with the node's full-path rank: among equal plans the solver
    # fills nodes in full-path order, so the plan does not depend on how nodes were listed.
    # (It stays far below the unit costs that choose between candidate domains.)
    rank = tree.lexrank[tree.node_level][tree.member_domain[tree.node_level][w_nodes]]
    for col, r in zip(w_cols.tolist(), rank.tolist(), strict=True):
        model.cost[col] = TIE_COST * (1 + r) / (1 + len(tree.nodes)) / max(part.count, 1)
    if gate is not None:
        _gate_rows(model, tree, gate, w_nodes, w_cols, w_upper)
    for node, col in zip(w_nodes.tolist(), w_cols.tolist(), strict=True):
        model.on_node.setdefault(node, []).append((col, part.worker_vec))
    for level, unit in part.units:
        at_most = 1 if level == part.exclusive_level else None
        if unit > 1 or at_most is not None:
            _group_rows(model, tree.member_domain[level][w_nodes], w_cols, unit, at_most)
    l_nodes = np.empty(0, np.int64)
    l_cols = np.empty(0, np.int64)
    if part.leader_vec is not None and part.leader_mask is not None:
        fits = part.leader_mask[nodes] & (per_node_count(free[nodes], part.leader_vec) > 0)
        l_nodes = nodes[fits]
        l_cols = model.columns(np.ones(len(l_nodes), np.int64))
        model.row(l_cols, np.ones(len(l_cols), np.int64), 1, 1)
        if gate is not None:
            _gate_rows(model, tree, gate, l_nodes, l_cols, np.ones(len(l_nodes), np.int64))
        for node, col in zip(l_nodes.tolist(), l_cols.tolist(), strict=True):
            model.on_node.setdefault(node, []).append((col, part.leader_vec))
    if part.count_level is not None:
        _domain_indicators(model, tree, part, w_nodes, w_cols, l_nodes, l_cols)
    return w_nodes, w_cols, l_nodes, l_cols


def _domain_indicators(
    model: _Model,
    tree: DomainTree,
    part: Part,
    w_nodes: IntArray,
    w_cols: IntArray,
    l_nodes: IntArray,
    l_cols: IntArray,
) -> None:
    """One 0/1 column per domain of the counted level, at cost 1, on whenever it holds a pod."""
    assert part.count_level is not None
    member = tree.member_domain[part.count_level]
    nodes = np.concatenate((w_nodes, l_nodes))
    cols = np.concatenate((w_cols, l_cols))
    domains, inverse = np.unique(member[nodes], return_inverse=True)
    used = model.columns(np.ones(len(domains), np.int64), cost=1.0)
    big = part.count + part.leaders
    for i in range(len(domains)):
        mine = cols[inverse == i]
        model.row(
            np.concatenate((mine, used[i : i + 1])),
            np.concatenate((np.ones(len(mine), np.int64), np.array([-big]))),
            -np.inf,
            0.0,
        )


def _capacity_rows(model: _Model, free: IntArray) -> None:
    """Shared nodes: the parts' pods together within every resource of the node."""
    for node, terms in model.on_node.items():
        if len(terms) < 2:
            continue  # one column: its upper bound already is the node's count
        cols = np.array([c for c, _ in terms], dtype=np.int64)
        vectors = np.stack([v for _, v in terms])
        for resource in np.flatnonzero(vectors.any(axis=0)).tolist():
            model.row(cols, vectors[:, resource], -np.inf, float(free[node, resource]))


def solve(
    tree: DomainTree,
    free: IntArray,
    items: Sequence[tuple[Part, IntArray]],
    budget: Budget,
) -> Plan | None:
    """Pods per node for every (part, nodes it may use), jointly; None: provably none.

    With parts that count domains, the plan uses the fewest such domains in total.
    """
    budget.check()
    if sum(int(part.worker_mask[nodes].sum()) for part, nodes in items) > MAX_COLUMNS:
        raise TooLarge  # before building: the model alone would eat the budget
    model = _Model()
    added = [_add_part(model, tree, free, part, nodes) for part, nodes in items]
    _capacity_rows(model, free)
    x = _milp(model, budget)
    if x is None:
        return None
    return _plan(tree, [part for part, _ in items], added, x)


def _plan(
    tree: DomainTree,
    parts: Sequence[Part],
    added: Sequence[tuple[IntArray, IntArray, IntArray, IntArray]],
    x: IntArray,
) -> Plan:
    plan: Plan = []
    for part, (w_nodes, w_cols, l_nodes, l_cols) in zip(parts, added, strict=True):
        workers = np.zeros(len(tree.nodes), np.int64)
        workers[w_nodes] = x[w_cols]
        leader: IntArray | None = None
        if part.leader_vec is not None:
            leader = np.zeros(len(tree.nodes), np.int64)
            leader[l_nodes] = x[l_cols]
        plan.append((workers, leader))
    return plan


def _over_capacity(free: IntArray, items: Sequence[tuple[Part, IntArray]]) -> bool:
    """Whether the parts need more of some resource than all their regions hold."""
    nodes = np.unique(np.concatenate([n for _, n in items]))
    need = sum(
        (part.count * part.worker_vec + (0 if part.leader_vec is None else part.leader_vec))
        for part, _ in items
    )
    return bool((need > free[nodes].sum(axis=0)).any())


def pack(free: IntArray, items: Sequence[tuple[Part, IntArray]]) -> Plan | None:
    """Parts one after another, each on the roomiest nodes first: a plan when that works,
    None when it proves nothing (then the ILP decides). Plain parts only (no slices, no
    leader): theirs is the only rule this packing states."""
    if any(part.units or part.leader_vec is not None for part, _ in items):
        return None
    left = free.copy()
    plan: Plan = []
    for part, nodes in items:
        cap = np.where(part.worker_mask[nodes], per_node_count(left[nodes], part.worker_vec), 0)
        order = np.argsort(-cap, kind="stable")
        before = np.cumsum(cap[order]) - cap[order]
        take = np.clip(part.count - before, 0, cap[order])
        if int(take.sum()) < part.count:
            return None
        workers = np.zeros(len(free), np.int64)
        workers[nodes[order]] = take
        left -= workers[:, None] * part.worker_vec
        plan.append((workers, None))
    return plan


def _import_solver() -> None:
    from scipy.optimize import milp  # noqa: F401  (cached by Python after the first call)


def _milp(model: _Model, budget: Budget) -> IntArray | None:
    # Imported here: scipy costs most of a second to import, and only this pass needs it.
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    n = len(model.upper)
    if n == 0:
        return np.zeros(0, np.int64) if not model.row_lo or max(model.row_lo) <= 0 else None
    rows = np.concatenate(
        [np.full(len(c), i, np.int64) for i, c in enumerate(model.row_cols)]
        or [np.empty(0, np.int64)]
    )
    cols = np.concatenate(model.row_cols or [np.empty(0, np.int64)])
    coefs = np.concatenate(model.row_coefs or [np.empty(0, np.int64)]).astype(np.float64)
    matrix = coo_array((coefs, (rows, cols)), shape=(len(model.row_lo), n)).tocsr()
    budget.check()
    result: Any = milp(
        np.array(model.cost),
        constraints=[LinearConstraint(matrix, np.array(model.row_lo), np.array(model.row_hi))],
        integrality=np.ones(n),
        bounds=Bounds(np.array(model.lower), np.array(model.upper)),
        options={"time_limit": max(budget.remaining(), 0.001), "presolve": True},
    )
    if result.status == 0:
        solution: IntArray = np.rint(result.x).astype(np.int64)
        return solution
    if result.status == 2:
        return None  # infeasible: proved
    raise OutOfTime  # time limit (or HiGHS gave up): no proof either way


# --- which region each part takes --------------------------------------------------------


@dataclass(slots=True)
class _Search:
    tree: DomainTree
    free: IntArray
    parts: Sequence[Part]
    candidates: Sequence[Candidates]
    budget: Budget
    regions: Regions
    memo: dict[tuple[tuple[str, Region], ...], Plan | None] = field(default_factory=dict)
    chosen: list[Region] = field(default_factory=list)
    index: list[int] = field(default_factory=list)  # candidate index of each choice
    plans: dict[tuple[int, ...], Plan | None] = field(default_factory=dict)
    refuted: list[Counter[tuple[str, Region]]] = field(default_factory=list)
    # Without the ILP: a shared domain counts only when the plain packing proves it, and the
    # search gives up after ``steps`` choices (a quick first try, not a proof of no fit).
    ilp: bool = True
    steps: int = -1

    def component(self, members: list[int]) -> list[int]:
        """The chosen parts whose regions overlap, transitively, those of ``members``."""
        found = list(members)
        grew = True
        while grew:
            grew = False
            for j in range(len(self.chosen)):
                if j not in found and any(
                    self.regions.overlap(self.chosen[j], self.chosen[i]) for i in found
                ):
                    found.append(j)
                    grew = True
        return sorted(found)

    def feasible(self, members: list[int], final: bool) -> bool:
        """Whether the parts ``members`` (one component) fit their chosen regions together.

        Not ``final`` (inside the search): a cheap packing proves it, a capacity sum or a
        known infeasible subset refutes it, and otherwise the question waits for the
        complete choice (``final``), where the ILP answers it once rather than once per part
        added to the domain.
        """
        if len(members) == 1 and self.candidates[members[0]].alone:
            self.plans[tuple(members)] = None
            return True
        # Memoised by shape: identical parts in the same regions are the same question.
        ordered = sorted(members, key=lambda i: (self.parts[i].shape, self.chosen[i]))
        key = tuple((self.parts[i].shape, self.chosen[i]) for i in ordered)
        if not self.ilp and key not in self.memo:
            items = [(self.parts[i], self.regions.nodes(self.chosen[i])) for i in ordered]
            found = pack(self.free, items)
            if found is None:
                return False
            self.memo[key] = found
        if key not in self.memo:
            self.budget.check()
            counted = Counter(key)
            if any(not (bad - counted) for bad in self.refuted):
                return False  # fewer parts in the same regions already did not fit
            items = [(self.parts[i], self.regions.nodes(self.chosen[i])) for i in ordered]
            plan = pack(self.free, items)
            if plan is None and not final:
                if _over_capacity(self.free, items):
                    self.refuted.append(counted)
                    return False
                return True  # undecided: the complete choice will ask the ILP
            if plan is None:
                plan = solve(self.tree, self.free, items, self.budget)
                if plan is None:
                    self.refuted.append(counted)
            self.memo[key] = plan
        plan = self.memo[key]
        if plan is None:
            return False
        by_part = {i: plan[k] for k, i in enumerate(ordered)}
        self.plans[tuple(members)] = [by_part[i] for i in members]
        return True

    def complete(self) -> bool:
        """Every component of the complete choice, proved."""
        seen: set[int] = set()
        for i in range(len(self.parts)):
            if i not in seen:
                members = self.component([i])
                seen.update(members)
                if not self.feasible(members, final=True):
                    return False
        return True

    def start(self, part: int) -> int:
        """Symmetry: a part takes a candidate no earlier than its last identical part did."""
        for j in range(part - 1, -1, -1):
            if self.parts[j].shape == self.parts[part].shape:
                return self.index[j]
        return 0

    def dfs(self, part: int) -> bool:
        if part == len(self.parts):
            return self.complete()
        self.budget.check()
        self.steps -= 1
        if self.steps == 0:
            raise _GiveUp
        regions = self.candidates[part].regions
        begin = self.start(part)
        taken = set(self.chosen)
        # Fresh regions first (no ILP needed), then sharing; each group in Kueue's order.
        order = [k for k in range(begin, len(regions)) if regions[k] not in taken]
        order += [k for k in range(begin, len(regions)) if regions[k] in taken]
        for k in order:
            self.chosen.append(regions[k])
            self.index.append(k)
            if self.feasible(self.component([part]), final=False) and self.dfs(part + 1):
                return True
            self.chosen.pop()
            self.index.pop()
        return False


@dataclass(frozen=True, slots=True)
class JointFit:
    regions: tuple[Region, ...]  # per part
    # Per component (sorted part indices): the ILP's plan, or None where a part is alone and
    # its region holds it by the greedy pass's own counts (the caller places it Kueue's way).
    components: Mapping[tuple[int, ...], Plan | None]


def fit_jointly(
    tree: DomainTree,
    free: IntArray,
    parts: Sequence[Part],
    candidates: Sequence[Candidates],
    budget: Budget,
) -> JointFit | None:
    """A region per part such that all fit together, or None when provably none does."""
    regions = Regions(tree)
    if any(not options.regions for options in candidates):
        return None  # a part that fits nowhere even alone
    size = sum(
        int(part.worker_mask[regions.nodes(r)].sum())
        for part, options in zip(parts, candidates, strict=True)
        for r in options.regions
    )
    # A quick try first: most gangs the greedy pass misses fit by packing shared domains
    # plainly, which costs a fraction of one ILP.
    search = _Search(tree, free, parts, candidates, budget, regions, ilp=False, steps=QUICK)
    try:
        found = search.dfs(0)
    except _GiveUp:
        found = False
    if not found:
        if size <= WHOLE_MODEL:
            return _choose_all(tree, free, parts, candidates, budget, regions)
        search = _Search(tree, free, parts, candidates, budget, regions)
        if not search.dfs(0):
            return None
    # The last complete() proved every component of this choice and left its plan.
    components: dict[tuple[int, ...], Plan | None] = {}
    seen: set[int] = set()
    for i in range(len(parts)):
        if i not in seen:
            members = search.component([i])
            seen.update(members)
            components[tuple(members)] = search.plans[tuple(members)]
    return JointFit(tuple(search.chosen), components)


# Up to this many node columns over all candidate domains, one ILP chooses every part's
# domain and packs them at once (one HiGHS call instead of a search of many); the search
# takes over beyond it (a 20,000-node cluster has thousands of candidate racks).
WHOLE_MODEL = 600
QUICK = 64  # choices the quick search (plain packings, no ILP) may try


def _choose_all(
    tree: DomainTree,
    free: IntArray,
    parts: Sequence[Part],
    candidates: Sequence[Candidates],
    budget: Budget,
    regions: Regions,
) -> JointFit | None:
    """Every part's domain and pods per node from one ILP; earlier candidates (Kueue's
    order) cost less, so ties go Kueue's way."""
    model = _Model()
    chosen: list[dict[int, int]] = []
    for options in candidates:
        cols = model.columns(np.ones(len(options.regions), np.int64))
        model.cost[cols[0] : cols[-1] + 1] = [float(k) for k in range(len(cols))]
        model.row(cols, np.ones(len(cols), np.int64), 1, 1)
        pairs = zip(options.regions, cols.tolist(), strict=True)
        chosen.append({domain: int(c) for (_, domain), c in pairs})
    added = []
    for part, options, gates in zip(parts, candidates, chosen, strict=True):
        level = options.regions[0][0]
        nodes = regions.union(options.regions)
        gate = None if level == WHOLE_TREE else (level, gates)
        added.append(_add_part(model, tree, free, part, nodes, gate))
    _capacity_rows(model, free)
    x = _milp(model, budget)
    if x is None:
        return None
    picked = tuple(
        next(r for r in options.regions if x[gates[r[1]]] > 0.5)
        for options, gates in zip(candidates, chosen, strict=True)
    )
    return JointFit(picked, {tuple(range(len(parts))): _plan(tree, parts, added, x)})


def fewest_domains(
    tree: DomainTree,
    free: IntArray,
    items: Sequence[tuple[Part, IntArray]],
    budget: Budget,
    used: int,
) -> Plan | None:
    """A joint plan using fewer counted domains than ``used``, or None when none does."""
    plan = solve(tree, free, items, budget)
    if plan is None:
        return None
    total = 0
    for (part, _), (workers, leader) in zip(items, plan, strict=True):
        assert part.count_level is not None
        held = workers if leader is None else workers + leader
        total += len(np.unique(tree.member_domain[part.count_level][np.flatnonzero(held)]))
    return plan if total < used else None


def lower_bound(capacity: IntArray, need: int) -> int:
    """The fewest domains whose capacities could add up to ``need`` (largest first)."""
    if need <= 0:
        return 0
    cumulative = np.cumsum(np.sort(capacity)[::-1])
    return int(np.searchsorted(cumulative, need, side="left")) + 1
