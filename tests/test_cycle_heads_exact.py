"""admission/cycle.py: the heads' ordering kept between pops (a lazy heap of ranks, fair
sharing's tournament re-keyed only along the paths an admission or a new head touched) decides
exactly what ranking every head again at every pop decides: the same admissions in the same
order (flavors, usage, counts), the same preemptions and the same pending messages. The
reference (:class:`ReferenceHeads`) is the walk as it was before, which ranked every head, and
played the whole tournament, after every change of the quota in use. Random cohort trees (up to
three levels, quota and limits at queues and cohorts, weights including 0), queues without a
cohort, two flavors (one not covering a resource), StrictFIFO, a queue that does not exist,
placements that fail where quota fits, preemption plans that reserve quota, Jobs that may
shrink; with fair sharing on and off."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topogate.admission import cycle as q
from topogate.admission.cycle import CycleResult, admission_cycle
from topogate.admission.fairshare import FairShares, FlavorResource, Share
from topogate.admission.lanes import PendingWorkload, QueueLanes
from topogate.admission.preemption import Preemption, Victim
from topogate.admission.quota import (
    CohortSpec,
    FlavorQuota,
    PreemptionPolicy,
    QueueSpec,
    QuotaBook,
    Usage,
)
from topogate.admission.request import PlacementDecision, PlacementRequest, PodSetRequest

GPU = "example.com/gpu"
CPU = "cpu"
QUEUES = [f"cq-{i}" for i in range(6)]
COHORTS = ["root", "org-a", "org-b", "team-a1", "team-b1"]
FLAVORS = ["f1", "f2"]

LIMIT = st.one_of(st.none(), st.integers(0, 6))
WEIGHT = st.sampled_from([None, 0.0, 0.5, 1.0, 2.0])
FLAVOR = st.tuples(
    st.sampled_from(FLAVORS),
    st.integers(0, 3),  # gpu nominal
    st.one_of(st.none(), st.integers(0, 6)),  # cpu nominal (None: not covered)
    LIMIT,  # gpu borrowing limit
    LIMIT,  # gpu lending limit
)
QUEUE = st.tuples(
    st.sampled_from(["BestEffortFIFO", "BestEffortFIFO", "StrictFIFO"]),
    st.lists(FLAVOR, min_size=0, max_size=2, unique_by=lambda f: f[0]),
    # mostly in the deepest cohorts, where a head's borrowing level can change
    st.sampled_from([None, *COHORTS, "team-a1", "team-b1", "team-a1"]),
    st.booleans(),  # preemption enabled
    WEIGHT,
)
COHORT = st.tuples(
    st.lists(FLAVOR, max_size=1),  # quota of its own
    WEIGHT,
)
WORKLOAD = st.tuples(
    st.sampled_from([*QUEUES, "cq-missing"]),
    st.sampled_from([0, 0, 0, 1, 2]),  # priority: mostly equal, so the levels decide
    st.integers(1, 4),  # day
    st.integers(1, 4),  # pods
    st.integers(0, 2),  # gpu per pod
    st.integers(0, 1),  # cpu per pod
    st.one_of(st.none(), st.integers(1, 3)),  # minCount
)
# The tree's shape: team-a1 under org-a, team-b1 under org-b, the orgs under root (or not).
PARENTS = st.tuples(st.booleans(), st.booleans(), st.booleans())


def _quota(raw: Any) -> FlavorQuota:
    flavor, gpu, cpu, borrowing, lending = raw
    nominal = {GPU: gpu} if cpu is None else {GPU: gpu, CPU: cpu}
    return FlavorQuota(
        flavor,
        nominal,
        {GPU: borrowing} if borrowing is not None else {},
        {GPU: min(lending, gpu)} if lending is not None else {},
    )


def _specs(raw: list[Any]) -> dict[str, QueueSpec]:
    queues = {}
    for name, (strategy, flavors, cohort, preempts, weight) in zip(QUEUES, raw, strict=True):
        policy = PreemptionPolicy("LowerPriority") if preempts else PreemptionPolicy()
        quotas = tuple(_quota(f) for f in flavors)
        queues[name] = QueueSpec(name, strategy, quotas, cohort, policy, weight)
    return queues


def _cohorts(raw: list[Any], parents: tuple[bool, bool, bool]) -> dict[str, CohortSpec]:
    linked = {
        "root": None,
        "org-a": "root" if parents[0] else None,
        "org-b": "root" if parents[1] else None,
        "team-a1": "org-a",
        "team-b1": "org-b" if parents[2] else "org-a",
    }
    return {
        name: CohortSpec(name, linked[name], tuple(_quota(f) for f in flavors), weight)
        for name, (flavors, weight) in zip(COHORTS, raw, strict=True)
    }


def _workloads(raw: list[Any]) -> list[PendingWorkload]:
    out = []
    for i, (queue, priority, day, pods, gpu, cpu, min_count) in enumerate(raw):
        requests = {k: v for k, v in ((GPU, gpu), (CPU, cpu)) if v}
        if min_count is not None and min_count >= pods:
            min_count = None
        podset = PodSetRequest("main", pods, requests, min_count=min_count)
        request = PlacementRequest(f"ns/w{i}", (podset,))
        out.append(
            PendingWorkload(f"ns/w{i}", queue, priority, f"2026-01-{day:02d}T00:00:00Z", request)
        )
    return out


def _placer(capacity: dict[str, int], bad: frozenset[str]) -> Any:
    """A topology per flavor holding ``capacity`` pods, that never places the keys in ``bad``."""

    def place(flavor: str, request: PlacementRequest, held: Any) -> PlacementDecision:
        used = sum(
            p.count for r, d in held if d is not None and d.produced_by == flavor for p in r.podsets
        )
        pods = sum(p.count for p in request.podsets)
        if request.workload in bad or used + pods > capacity.get(flavor, 0):
            return PlacementDecision(False, message="does not fit", produced_by=flavor)
        return PlacementDecision(True, produced_by=flavor)

    return place


def _preempt(workload: PendingWorkload, queue: QueueSpec, usage: Usage, held: Any) -> Any:
    """Plans for every other preemptor while the queue uses little (depends on usage)."""
    if not queue.flavors or int(workload.key[4:]) % 2:
        return None
    used = sum(sum(v.values()) for (cq, _), v in usage.items() if cq == queue.name)
    if used > 8:
        return None
    victim = Victim(f"ns/victim{int(workload.key[4:]) % 3}", "InClusterQueue")
    return Preemption(queue.flavors[0].flavor, (victim,), None)


def _run(queues: Any, cohorts: Any, pending: Any, fair: bool, placer: Any, preempt: Any) -> Any:
    usage: Usage = {("cq-0", "f1"): {GPU: 2}, ("cq-3", "f2"): {GPU: 1, CPU: 1}}
    result = admission_cycle(
        queues, QueueLanes(pending), usage, placer, preempt, cohorts=cohorts, fair_sharing=fair
    )
    admitted = [
        (a.key, a.cluster_queue, a.flavor, dict(a.usage), a.request) for a in result.admitted
    ]
    return admitted, result.preemptions, result.pending, result.targeted, usage


@settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(QUEUE, min_size=len(QUEUES), max_size=len(QUEUES)),
    st.lists(COHORT, min_size=len(COHORTS), max_size=len(COHORTS)),
    PARENTS,
    st.lists(WORKLOAD, max_size=50),
    st.dictionaries(st.sampled_from(FLAVORS), st.integers(0, 14)),
    st.frozensets(st.integers(0, 49).map(lambda i: f"ns/w{i}"), max_size=4),
    st.booleans(),
    st.booleans(),
)
def test_kept_ordering_decides_as_ranking_every_head_at_every_pop(
    monkeypatch: pytest.MonkeyPatch,
    raw_queues: list[Any],
    raw_cohorts: list[Any],
    parents: tuple[bool, bool, bool],
    raw_workloads: list[Any],
    capacity: dict[str, int],
    bad: frozenset[str],
    preempting: bool,
    fair: bool,
) -> None:
    queues = _specs(raw_queues)
    cohorts = _cohorts(raw_cohorts, parents)
    pending = _workloads(raw_workloads)
    placer = _placer(capacity, bad)
    preempt = _preempt if preempting else None
    fast = _run(queues, cohorts, pending, fair, placer, preempt)
    with monkeypatch.context() as patched:
        patched.setattr(q, "_Heads", ReferenceHeads)
        slow = _run(queues, cohorts, pending, fair, placer, preempt)
    assert fast[0] == slow[0]  # admissions, in order, with flavors, usage and counts
    assert fast[1] == slow[1]  # preemptions
    assert fast[2] == slow[2]  # pending messages
    assert fast[3:] == slow[3:]


def test_usage_given_back_ranks_every_head_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change that takes usage away (a hook giving quota back) can make a head's rank better:
    the kept ordering then ranks every head again, as the reference does."""
    flavor = (FlavorQuota("f1", {GPU: 2}),)
    queues = {
        "cq-a": QueueSpec("cq-a", "BestEffortFIFO", flavor, "c"),
        "cq-b": QueueSpec("cq-b", "BestEffortFIFO", flavor, "c"),
    }
    pending = _workloads(
        [
            ("cq-a", 0, 1, 2, 1, 0, None),
            ("cq-a", 0, 2, 2, 1, 0, None),
            ("cq-b", 0, 3, 1, 1, 0, None),
            ("cq-b", 0, 4, 1, 1, 0, None),
        ]
    )
    gave: list[bool] = []
    real = q._try

    def give_back(workload: PendingWorkload, queue: QueueSpec, book: QuotaBook, *a: Any) -> Any:
        outcome = real(workload, queue, book, *a)
        if not gave and not isinstance(outcome, str):  # the first admission frees cq-a's usage
            gave.append(True)
            book.add("cq-a", "f1", {GPU: -4})
        return outcome

    monkeypatch.setattr(q, "_try", give_back)
    runs = []
    for heads in (q._Heads, ReferenceHeads):
        gave.clear()
        with monkeypatch.context() as patched:
            patched.setattr(q, "_Heads", heads)
            # cq-a borrows: its head would borrow beyond the cohort (ranked after cq-b's)
            usage: Usage = {("cq-a", "f1"): {GPU: 3}}
            result = admission_cycle(queues, QueueLanes(pending), usage, lambda *a: None)
        runs.append([a.key for a in result.admitted])
    assert runs[0] == runs[1]
    # once cq-a's usage is given back, its older head fits nominal quota and goes first
    assert runs[0][:2] == ["ns/w2", "ns/w0"]


def _both(queues: Any, cohorts: Any, pending: Any, fair: bool) -> list[list[str]]:
    """The keys admitted, in order, by the kept ordering and by the reference."""
    runs = []
    for heads in (q._Heads, ReferenceHeads):
        with pytest.MonkeyPatch.context() as patched:
            patched.setattr(q, "_Heads", heads)
            result = admission_cycle(
                queues, QueueLanes(pending), {}, lambda *a: None, cohorts=cohorts, fair_sharing=fair
            )
        runs.append([a.key for a in result.admitted])
    return runs


def test_a_head_pushed_before_its_cohort_filled_is_ranked_again() -> None:
    """Queue a's head would borrow within its team when pushed; b's admissions fill the team,
    so it must borrow from the org, where c's older head borrows too: c's goes first."""
    queues = {
        "a": QueueSpec("a", "BestEffortFIFO", (FlavorQuota("f1", {GPU: 0}),), "team"),
        "b": QueueSpec("b", "BestEffortFIFO", (FlavorQuota("f1", {GPU: 2}),), "team"),
        "c": QueueSpec("c", "BestEffortFIFO", (FlavorQuota("f1", {GPU: 0}),), "org"),
    }
    cohorts = {
        "team": CohortSpec("team", "org"),
        "org": CohortSpec("org", None, (FlavorQuota("f1", {GPU: 4}),)),
    }
    pending = _workloads(
        [(name, 0, day, 1, 1, 0, None) for name, day in (("a", 3), ("b", 1), ("b", 2), ("c", 2))]
    )
    fast, reference = _both(queues, cohorts, pending, fair=False)
    assert fast == reference == ["ns/w1", "ns/w2", "ns/w3", "ns/w0"]


def test_fair_key_of_a_head_whose_flavor_changes_with_others_usage() -> None:
    """Queue x's head is counted in f1 while f1 has quota (it would borrow), then in f2, where
    x has quota of its own (it would not): y's admission, which takes f1, moves x's head
    ahead of v's older borrowing one."""
    queues = {
        "x": QueueSpec(
            "x", "BestEffortFIFO", (FlavorQuota("f1", {GPU: 0}), FlavorQuota("f2", {GPU: 1})), "c"
        ),
        "y": QueueSpec("y", "BestEffortFIFO", (FlavorQuota("f1", {GPU: 1}),), "c"),
        "v": QueueSpec("v", "BestEffortFIFO", (FlavorQuota("f2", {GPU: 0}),), "c"),
    }
    cohorts = {"c": CohortSpec("c", "root"), "root": CohortSpec("root")}
    pending = _workloads(
        [(name, 0, day, 1, 1, 0, None) for name, day in (("x", 5), ("y", 1), ("v", 3))]
    )
    fast, reference = _both(queues, cohorts, pending, fair=True)
    assert fast == reference == ["ns/w1", "ns/w0"]


# The walk as it was before the ordering was kept between pops: the reference.


class ReferenceHeads:
    """The queues' lanes, each walked from its head, and the next head to try across them.

    Each lane's head is ranked once, and again only after the quota in use changed (an
    admission or a preemptor's reservation); whether a head would borrow is worked out once
    per (queue, shape) between such changes. The lanes are not changed: the walk is a cursor.

    The rest of a blocked StrictFIFO lane is passed over at once (:meth:`block`), and so is
    the rest of a lane in which every shape is refused for quota (:meth:`pass_rest`): each of
    them would be refused without side effects, and a lane holding only such refusals does
    not change the order in which the other lanes' heads come up. (Passing over only the rest
    of one refused shape would not be exact: a refused head holds its lane back, so the order
    of the other lanes' admissions depends on its rank.)
    """

    def __init__(
        self,
        queues: Mapping[str, QueueSpec],
        book: QuotaBook,
        lanes: QueueLanes,
        result: CycleResult,
        fair: FairShares | None = None,
    ) -> None:
        self.queues, self.book, self.lanes, self.result = queues, book, lanes, result
        self.fair = fair
        # Fair sharing: per lane, (head key, quota state) -> its shares along the tree.
        self._shares: dict[
            str, tuple[str, int, Mapping[str, Share], frozenset[FlavorResource]]
        ] = {}
        self.heads: dict[str, PendingWorkload] = {}
        self._walks: dict[str, Iterator[PendingWorkload]] = {}
        # The lanes' heads by rank (a heap, built again when the quota in use changed).
        self._ranked: list[tuple[tuple[int, int, str, str, str], str]] = []
        self._borrows: dict[tuple[str, tuple[tuple[str, int], ...]], int] = {}
        self._booked = -1
        self._popped: str | None = None  # the lane to move on before the next pop
        self._blocked: dict[str, str] = {}
        self._taken: dict[str, int] = {}  # per lane, how many the walk has reached

    def fill(self) -> None:
        for name in self.lanes.names():
            lane = self.lanes.lane(name)
            if name not in self.queues:
                missing = q._same_words(f"ClusterQueue {name} does not exist")
                self.result.deferred.append((list(lane), missing))
                continue
            inactive = self.book.tree.inactive.get(name)
            if inactive is not None:  # its cohort is in a cycle: nothing is admitted from it
                self.result.deferred.append((list(lane), q._same_words(inactive)))
                continue
            walk = iter(lane)
            self._walks[name] = walk
            self._taken[name] = 1
            self.heads[name] = next(walk)

    def block(self, name: str, why: str) -> None:
        """A StrictFIFO queue waits behind its head: the rest of it waits too."""
        self._blocked[name] = why

    def pass_rest(self, name: str) -> Sequence[PendingWorkload]:
        """Take the queue just popped off the walk: the rest of its lane, for the caller."""
        assert self._popped == name
        self._popped = None
        del self.heads[name], self._walks[name]
        return self._rest(name)

    def _rest(self, name: str) -> Sequence[PendingWorkload]:
        return self.lanes.lane(name)[self._taken[name] :]

    def _rank(self, name: str) -> tuple[int, int, str, str, str]:
        head = self.heads[name]
        borrows = self._borrows.get((name, head.shape))
        if borrows is None:
            borrows = self.book.borrows(self.queues[name], head.demand())
            self._borrows[(name, head.shape)] = borrows
        return (borrows, -head.priority, head.created, name, head.key)

    def _advance(self, name: str) -> None:
        """Move the lane past the head just popped."""
        why = self._blocked.get(name)
        if why is None:
            following = next(self._walks[name], None)
            if following is not None:
                self._taken[name] += 1
                self.heads[name] = following
                return
        else:
            self.result.deferred.append((self._rest(name), q._same_words(why)))
        del self.heads[name], self._walks[name]

    def pop(self) -> tuple[str, PendingWorkload] | None:
        """The next head to try, by :func:`admission_cycle`'s rule (None: all tried)."""
        moved, self._popped = self._popped, None
        if moved is not None:
            self._advance(moved)
        if not self.heads:
            return None
        if self.fair is not None:
            name = self._tournament()
            self._popped = name
            return name, self.heads[name]
        if self.book.changes != self._booked:  # every head is ranked again
            self._borrows.clear()
            self._booked = self.book.changes
            self._ranked = [(self._rank(name), name) for name in self.heads]
            heapq.heapify(self._ranked)
        elif moved is not None and moved in self.heads:
            heapq.heappush(self._ranked, (self._rank(moved), moved))
        _, name = heapq.heappop(self._ranked)
        self._popped = name
        return name, self.heads[name]

    def _head_shares(self, name: str) -> tuple[Mapping[str, Share], frozenset[FlavorResource]]:
        """The shares along the tree with the lane's head admitted (keyed by the cohort where
        each is compared), and the (flavor, resource) pairs it asks for. The head is counted
        in the first flavor with quota for it, else the first that covers it (Kueue counts
        the flavor its assignment chose)."""
        head, changes = self.heads[name], self.book.changes
        found = self._shares.get(name)
        if found is not None and found[0] == head.key and found[1] == changes:
            return found[2], found[3]
        assert self.fair is not None
        queue, demand = self.queues[name], head.demand()
        chosen = ""
        for flavor, problem in q._quota_by_flavor(queue, self.book, demand):
            if not problem:
                chosen = flavor.flavor
                break
            if not chosen and set(demand) <= set(flavor.nominal):
                chosen = flavor.flavor
        shares = self.fair.path(queue, chosen, demand)
        asked = frozenset((chosen, r) for r, a in demand.items() if a > 0)
        self._shares[name] = (head.key, changes, shares, asked)
        return shares, asked

    def _fair_key(
        self, level: str, name: str
    ) -> tuple[bool, tuple[int, float], int, str, str, str]:
        """A head's rank among its siblings at cohort ``level`` (Kueue's fair-sharing
        comparer, with its default feature gates): a child not borrowing from ``level`` on
        what the head asks for first, then the lower share after admitting it, then higher
        priority, then older (then queue and key, for determinism)."""
        shares, asked = self._head_shares(name)
        share = shares[level]
        head = self.heads[name]
        return (share.borrows_on(asked), share.order, -head.priority, head.created, name, head.key)

    def _winner(self, cohort: str) -> str | None:
        """The lane whose head wins the tournament at ``cohort`` (None: no heads below)."""
        tree = self.book.tree
        candidates = [w for c in tree.child_cohorts[cohort] if (w := self._winner(c)) is not None]
        candidates += [q.name for q in tree.child_queues[cohort] if q.name in self.heads]
        if not candidates:
            return None
        return min(candidates, key=lambda name: self._fair_key(cohort, name))

    def _tournament(self) -> str:
        """Fair sharing: each cohort tree's winner of Kueue's tournament; across trees (and
        queues without a cohort), whose order Kueue leaves open, the usual rank decides."""
        tree = self.book.tree
        winners: set[str] = set()
        roots: set[str] = set()
        for name in self.heads:
            cohort = self.queues[name].cohort
            if not cohort:
                winners.add(name)
            else:
                roots.add(tree.root(cohort))
        for root in roots:
            winner = self._winner(root)
            if winner is not None:
                winners.add(winner)
        if self.book.changes != self._booked:
            self._borrows.clear()
            self._booked = self.book.changes
        return min(winners, key=lambda name: (self._rank(name), name))


DEEP_QUEUE = st.tuples(
    st.sampled_from(["team", "team", "org", "other"]),
    st.integers(0, 2),  # gpu nominal
    st.one_of(st.none(), st.integers(0, 2)),  # gpu lending limit
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(DEEP_QUEUE, min_size=4, max_size=4),
    st.integers(0, 4),  # the team's own quota
    st.integers(0, 6),  # the org's own quota
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 1), st.integers(1, 6), st.integers(1, 3)),
        max_size=30,
    ),
    st.booleans(),
)
def test_kept_ranks_in_a_deep_tree(
    raw_queues: list[Any], team: int, org: int, raw_workloads: list[Any], fair: bool
) -> None:
    """One flavor, GPUs only, queues in a team under an org under a root: the space where a
    head's borrowing level (and its share) moves most as the cycle admits elsewhere."""
    queues = {
        f"cq-{i}": QueueSpec(
            f"cq-{i}",
            "BestEffortFIFO",
            (
                FlavorQuota(
                    "f1",
                    {GPU: nominal},
                    {},
                    {GPU: min(lending, nominal)} if lending is not None else {},
                ),
            ),
            cohort,
        )
        for i, (cohort, nominal, lending) in enumerate(raw_queues)
    }
    cohorts = {
        "team": CohortSpec("team", "org", (FlavorQuota("f1", {GPU: team}),)),
        "org": CohortSpec("org", "root", (FlavorQuota("f1", {GPU: org}),)),
        "other": CohortSpec("other", "root"),
        "root": CohortSpec("root"),
    }
    pending = _workloads(
        [(f"cq-{q}", priority, day, 1, gpus, 0, None) for q, priority, day, gpus in raw_workloads]
    )
    fast, reference = _both(queues, cohorts, pending, fair)
    assert fast == reference
