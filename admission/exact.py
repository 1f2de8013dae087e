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
- optionally (preferred parts, ``fewest_domains``), fewest domains lexicographically from the
  top level down to each part's counted level (the objective), within caps per level.

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
# Up to this many node columns over the preferred parts, their fewest domains are searched
# for over the whole tree; beyond it, inside the domains the greedy pass settled in (a big
# tree's whole ILP takes longer to build and solve than the budget allows).
WHOLE_TREE_COLUMNS = 1_000

Region = tuple[int, int]  # (level, domain); (WHOLE_TREE, 0) is the whole tree


def per_node_count(free: IntArray, request: IntArray) -> IntArray:
    """How many pods of ``request`` fit on each row of ``free`` (min over requested resources)."""
    used = np.flatnonzero(request > 0).tolist()
    if not used:
        return np.full(free.shape[0], np.iinfo(np.int32).max, dtype=np.int64)
    # A column at a time with a scalar divisor: numpy's fast path, and no (nodes x
    # resources) temporaries (30 resources at 100,000 nodes made this the core's largest cost).
    counts: IntArray = free[:, used[0]] // int(request[used[0]])
    step = np.empty_like(counts)
    for column in used[1:]:
        np.floor_divide(free[:, column], int(request[column]), out=step)
        np.minimum(counts, step, out=counts)
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
    # Preferred: the domains of every level from the top down to this one are counted (the
    # objective of ``fewest_domains``).
    count_level: int | None = None
    limit_level: int | None = None  # a climb limit: one domain of this level at most

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
        # Kept with the tree and shared by every placement on it: read-only, so no caller
        # can change another's view of the nodes.
        self._rank.flags.writeable = False
        self._whole.flags.writeable = False

    def nodes(self, region: Region) -> IntArray:
        level, domain = region
        if level == WHOLE_TREE:
            return self._whole
        if level not in self._sorted:
            member = self.tree.member_domain[level]
            order = np.lexsort((self._rank, member)).astype(np.int64)
            starts = np.searchsorted(member[order], np.arange(self.tree.size(level) + 1))
            order.flags.writeable = False
            self._sorted[level] = (order, starts.astype(np.int64))
        order, starts = self._sorted[level]
        return order[starts[domain] : starts[domain + 1]]

    def union(self, regions: Sequence[Region]) -> IntArray:
        """The nodes of several regions, in full-path order (never the input order)."""
        levels = {level for level, _ in regions}
        domains = [domain for _, domain in regions]
        if len(levels) == 1 and WHOLE_TREE not in levels and len(set(domains)) == len(domains):
            # Distinct domains of one level hold disjoint runs of the full-path order: their
            # nodes, taken domain by domain in path order, are already in it (no sort).
            (level,) = levels
            rank = self.tree.lexrank[level]
            ordered = sorted(domains, key=lambda d: int(rank[d]))
            return np.concatenate([self.nodes((level, d)) for d in ordered]).astype(np.int64)
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
    # level -> the 0/1 "domain holds a pod" columns of every counting part at that level
    counted: dict[int, list[IntArray]] = field(default_factory=dict)

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

    def pairs(self, cols: IntArray, gates: IntArray, scale: IntArray) -> None:
        """Rows cols[i] <= scale[i] * gates[i], all at once (thousands on a big tree)."""
        self.row_cols.extend(np.stack((cols, gates), axis=1).astype(np.int64))
        ones = np.ones(len(cols), np.int64)
        self.row_coefs.extend(np.stack((ones, -np.asarray(scale, np.int64)), axis=1))
        self.row_lo.extend([-np.inf] * len(cols))
        self.row_hi.extend([0.0] * len(cols))


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
    caps: Sequence[int] = (),
) -> tuple[IntArray, IntArray, IntArray, IntArray]:
    """The part's columns (workers, then leader) and the node each stands for; ``caps``: the
    most domains the part may use at levels 0, 1, ... (a counting part only)."""
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
        _domain_indicators(
            model,
            tree,
            part,
            np.concatenate((w_nodes, l_nodes)),
            np.concatenate((w_cols, l_cols)),
            np.concatenate((w_upper, np.ones(len(l_nodes), np.int64))),
            caps,
        )
    return w_nodes, w_cols, l_nodes, l_cols


def _domain_indicators(
    model: _Model,
    tree: DomainTree,
    part: Part,
    nodes: IntArray,
    cols: IntArray,
    upper: IntArray,
    caps: Sequence[int],
) -> None:
    """Per level from the top down to the counted one, a 0/1 column per domain, on whenever
    the domain holds a pod of the part; at most ``caps[level]`` of them on, and one at the
    climb limit. They cost nothing here: ``fewest_domains`` prices them.

    Each pod column is bounded by its own domain column (pods <= upper * on), and a domain
    is on only when its parent is: a tighter LP relaxation than one sum per domain, and the
    solver's bounds come from it.
    """
    assert part.count_level is not None
    above: tuple[npt.NDArray[Any], IntArray] | None = None  # the level above: domains, columns
    for level in range(part.count_level + 1):
        domains, inverse = np.unique(tree.member_domain[level][nodes], return_inverse=True)
        used = model.columns(np.ones(len(domains), np.int64))
        model.counted.setdefault(level, []).append(used)
        model.pairs(cols, used[inverse], upper)
        if above is not None:
            parents = np.searchsorted(above[0], tree.parent[level][domains])
            model.pairs(used, above[1][parents], np.ones(len(used), np.int64))
        above = (domains, used)
        ones = np.ones(len(used), np.int64)
        if level < len(caps):
            model.row(used, ones, -np.inf, float(caps[level]))
        if level == part.limit_level:
            model.row(used, ones, -np.inf, 1.0)


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
    """Pods per node for every (part, nodes it may use), jointly; None: provably none."""
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


def _milp(model: _Model, budget: Budget, gap: float | None = None) -> IntArray | None:
    """``gap``: HiGHS's relative MIP gap (its default, 0.01%, can stop one domain short of
    the optimum once the objective passes 5,000)."""
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
        options={
            "time_limit": max(budget.remaining(), 0.001),
            "presolve": True,
            **({"mip_rel_gap": gap} if gap is not None else {}),
        },
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


Counts = tuple[int, ...]  # domains used per level, summed over the counting parts


def domain_counts(tree: DomainTree, parts: Sequence[Part], plan: Plan) -> Counts:
    """Per level from the top down, the domains each counting part uses, summed over parts
    (a part counts the levels down to its own ``count_level``)."""
    depth = 1 + max(p.count_level for p in parts if p.count_level is not None)
    totals = [0] * depth
    for part, (workers, leader) in zip(parts, plan, strict=True):
        if part.count_level is None:
            continue
        held = np.flatnonzero(workers if leader is None else workers + leader)
        for level in range(part.count_level + 1):
            totals[level] += len(np.unique(tree.member_domain[level][held]))
    return tuple(totals)


def fewest_domains(
    tree: DomainTree,
    free: IntArray,
    items: Sequence[tuple[Part, IntArray]],
    budget: Budget,
    *,
    reference: Counts | None = None,
    lower: Counts | None = None,
    caps: Sequence[Sequence[int]] | None = None,
) -> Plan | None:
    """A joint plan whose domain counts (``domain_counts``) are lexicographically fewest from
    the top level down, each part within its ``caps`` (most domains per level); None when
    there is none, or it is no fewer than ``reference`` (the plan in hand, whose counts).

    When the counts can only vary a little (small trees), one ILP: each level's domains
    weigh more than every possible difference below it together, so the weighted sum orders
    plans as the lexicographic order does. Otherwise one level at a time, top first: price
    only that level, solve, hold the level to its optimum for the levels below; a level is
    not solved when the plan in hand already meets ``lower`` (a lower bound per level).
    """
    budget.check()
    if sum(int(part.worker_mask[nodes].sum()) for part, nodes in items) > MAX_COLUMNS:
        raise TooLarge
    model = _Model()
    parts = [part for part, _ in items]
    added = []
    for k, (part, nodes) in enumerate(items):
        added.append(
            _add_part(model, tree, free, part, nodes, caps=() if caps is None else caps[k])
        )
        budget.check()  # building a big model takes time of its own
    _capacity_rows(model, free)
    levels = sorted(model.counted)
    if lower is not None:  # handed to the solver: its bound starts there, not at the LP's
        for level in levels:
            cols = np.concatenate(model.counted[level])
            model.row(cols, np.ones(len(cols), np.int64), float(lower[level]), np.inf)
    most = _most(model, parts, levels, caps)
    weights = _weights(most, lower)
    if weights is not None:
        for level, weight in zip(levels, weights, strict=True):
            for col in np.concatenate(model.counted[level]).tolist():
                model.cost[col] = weight
        x = _milp(model, budget, _gap(sum(w * m for w, m in zip(weights, most, strict=True))))
        if x is None:
            return None
        plan = _plan(tree, parts, added, x)
        better = reference is None or domain_counts(tree, parts, plan) < reference
        return plan if better else None
    current = reference
    staged: Plan | None = None
    for level in levels:
        cols = np.concatenate(model.counted[level])
        if current is None or lower is None or current[level] > lower[level]:
            for priced in levels:
                for col in np.concatenate(model.counted[priced]).tolist():
                    model.cost[col] = 1.0 if priced == level else 0.0
            x = _milp(model, budget, _gap(most[level]))
            if x is None:
                return None
            staged = _plan(tree, parts, added, x)
            current = domain_counts(tree, parts, staged)
        assert current is not None
        model.row(cols, np.ones(len(cols), np.int64), -np.inf, float(current[level]))
    if staged is None or (reference is not None and current is not None and current >= reference):
        return None
    return staged


# Past this weighted objective the counts' weights would drown the tie-breaking costs and
# strain the solver's tolerances: the levels are solved one at a time instead.
MAX_WEIGHTED = 1e5


def _most(
    model: _Model,
    parts: Sequence[Part],
    levels: Sequence[int],
    caps: Sequence[Sequence[int]] | None,
) -> list[int]:
    """Per level, the most domains the counting parts can use together (bounded by the
    domains they can reach, their pods, and their caps)."""
    most = [0] * len(levels)
    for level in levels:
        k = 0
        for index, part in enumerate(parts):
            if part.count_level is None or level > part.count_level:
                continue
            columns = model.counted[level][k]
            k += 1
            bound = min(len(columns), part.count + part.leaders)
            if caps is not None and level < len(caps[index]):
                bound = min(bound, caps[index][level])
            most[level] += bound
    return most


def _weights(most: Sequence[int], lower: Counts | None) -> list[float] | None:
    """Per level, a cost per domain above every difference the levels below can make
    (their most domains minus their fewest); None when that grows past ``MAX_WEIGHTED``."""
    fewest = [0] * len(most) if lower is None else list(lower)
    weights = [1.0] * len(most)
    below = 0.0
    for level in reversed(range(len(most))):
        weights[level] = 1.0 + below
        below += weights[level] * (most[level] - fewest[level])
    if sum(w * m for w, m in zip(weights, most, strict=True)) > MAX_WEIGHTED:
        return None
    return weights


def _gap(largest: float) -> float:
    """A relative gap at which an objective of at most ``largest`` (whole domain costs plus
    tie-breaking costs under 0.5 in all) is optimal in its whole part: HiGHS then stops as
    soon as the counts are proved, without proving the tie-breaking optimal too (which can
    take it a hundred times longer; a tie broken slightly off is still a tie)."""
    return 0.4 / max(largest + 1.0, 1.0)


def lower_bound(capacity: IntArray, need: int) -> int:
    """The fewest domains whose capacities could add up to ``need`` (largest first)."""
    if need <= 0:
        return 0
    cumulative = np.cumsum(np.sort(capacity)[::-1])
    return int(np.searchsorted(cumulative, need, side="left")) + 1
