"""The admitter's shell: runs an admission cycle when something changed and writes the outcome.

A cycle reads the controller's state (queues, flavors, topologies, pending and admitted
workloads, the capacity cache), calls the pure :func:`admission_cycle` and then writes, per
workload: ``status.admission`` with the topology assignment and the conditions QuotaReserved
and Admitted, or QuotaReserved=False/Pending with the reason. The job is unsuspended only
after its admission is written (by the job sync, which the written status wakes).

Cycles run when the world changed (a workload arrived or finished, a node or queue changed, a
pod left its node, a pending message's write failed). The one timed wake: a cycle that left its
pending messages unworded (they are worded at most once a second) is followed by one when they
are due, changes or not.

A cycle never waits for its writes (Kueue's assume, then write): an admission holds its
capacity and quota in the state before its write is sent, so the next cycle can run at once.
Writes to one Workload run one after the other, each from the version the previous one
returned. The pending messages are written by :mod:`.pending`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from prometheus_client import Counter, Histogram

from topogate import clock
from topogate.admission.assignments import node_usage
from topogate.admission.cycle import Admitted, CycleResult, Parking, admission_cycle
from topogate.admission.exact import EXACT_BUDGET
from topogate.admission.fairpreemption import DEFAULT_STRATEGIES
from topogate.admission.fairshare import tree_shares
from topogate.admission.gpuplace import assignment_of
from topogate.admission.podsets import Catalog, build_placer
from topogate.admission.preemption import FutileSearches, Preemption, Victim
from topogate.admission.quota import CohortTree, QueueSpec, QuotaBook
from topogate.admission.request import PlacementDecision, PlacementRequest
from topogate.api.gpus import GpuAssignment
from topogate.api.objects import is_evicted, meta, owner_job
from topogate.api.quantity import format_units
from topogate.api.times import parse_time
from topogate.api.topology_assignment import AssignedDomain, encode
from topogate.kube.errors import API_ERRORS
from topogate.kube.events import EventRecorder
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import WORKLOADS, Obj
from topogate.metrics import Metrics
from topogate.state import ControllerState

from .evictions import NoPlanMemo, evict, preemptor
from .fairstatus import ShareStatus
from .pending import PENDING_WRITES_PER_SECOND, PendingMessages
from .writes import NewestCopies, new_condition, write_gpu_assignment, write_status

log = logging.getLogger("topogate.admitter")

# Seconds between a change and the cycle it wakes: at least 20 ms, so finishes that come
# tens a second are decided a few at a time (a cycle each cost more CPU than the rest of
# their admission), at most 50 ms, so a costly cycle leaves the loop time for watches.
COALESCE_MIN, COALESCE_MAX = 0.02, 0.05
# Admissions decided ahead of their writes, at most: once the client budget is the limit, a
# cycle that assumed every fit at once would have them written in the order decided (those
# that came first, not the higher priorities that came since); Kueue's scheduler waits on the
# same client for its status writes, so it never runs far ahead of them either.
AHEAD = 128
# While admissions wait for their writes (more than WRITES_KEPT of them, and more than the
# writes done while a cycle runs), the next cycle waits until WRITES_BATCH of them are
# written: what it admits cannot be written before those anyway, and waiting lets the
# finishes that come meanwhile be decided together (and a refused higher-priority head sees
# all the room they free). Without it, throttled writes turn each finish into a cycle of its
# own and the controller's CPU grows as its client budget shrinks.
WRITES_KEPT, WRITES_BATCH = 4, 16
DESCRIBE_EVERY = 1.0  # seconds between two updates of the pending messages (serve's loop)
# While no Workload waits, the snapshot and trees are built again after a node change at most
# once per this many times the last build took (at least WARM_GAP_MIN s apart): node updates
# streaming in must not keep a core busy rebuilding.
WARM_SPACING, WARM_GAP_MIN = 4.0, 1.0


class Admitter:
    def __init__(
        self,
        kube: KubeApi,
        state: ControllerState,
        metrics: Metrics,
        events: EventRecorder,
        write_concurrency: int = 16,
        exact_budget: float = EXACT_BUDGET,
        pending_qps: float = PENDING_WRITES_PER_SECOND,
        fair_sharing: bool = False,
        preemption_strategies: Sequence[str] = DEFAULT_STRATEGIES,
    ) -> None:
        self.kube = kube
        self.exact_budget = exact_budget
        self.fair_sharing = fair_sharing  # serve --fair-sharing
        # serve --fair-sharing-preemption-strategies (Kueue's fairSharing.preemptionStrategies)
        self.preemption_strategies = tuple(preemption_strategies)
        self.state = state
        self.metrics = metrics
        self.events = events
        self._writes = asyncio.Semaphore(write_concurrency)
        self.copies = NewestCopies(state.store.objects(WORKLOADS))
        self.messages = PendingMessages(kube, state, events, self.copies, pending_qps)
        self.messages.on_idle = self._settled
        # status.fairSharing of ClusterQueues and Cohorts, at the pending messages' rate.
        self.shares = ShareStatus(kube, state, pending_qps)
        # The shares last computed, with what they read (the catalog, the ledger's and the
        # Workloads' change counts).
        self._shares: tuple[Catalog, tuple[int, int], dict[str, int], dict[str, int]] | None = None
        # Stopped waiting; what is kept for them goes once their writes are done.
        self._left = Leaving()
        # Preemption searches that found nothing, kept across cycles (re-run only when their
        # cohort tree changed).
        self._no_plan = NoPlanMemo()
        # Workloads refused and set aside, as Kueue's inadmissible ones (passed until their
        # cohort tree gives quota back).
        self._parking = Parking()
        self._gauged: dict[tuple[str, str], int] = {}  # the gauges' values last set
        # What the gauges were last counted from: the catalog's queues, the lanes and held
        # admissions changed since (feeds), the admissions a cycle subtracted from its
        # lanes, and each held admission's ClusterQueue with the count per queue.
        self._gauge_queues: Mapping[str, QueueSpec] | None = None
        # (lanes', ledger's) feeds, from the first count: a standby's would only ever grow.
        self._feeds: tuple[set[str], set[str]] | None = None
        self._gauge_admitted: dict[str, int] = {}
        self._held_in: dict[str, str] = {}
        self._held_per_queue: dict[str, int] = {}
        # The metrics' children by label, looked up once: labels() validates and locks on
        # every call, several times per admission.
        self._attempts: dict[str, Counter] = {}
        self._waits: dict[str, Histogram] = {}
        self.cycles = 0
        self.skipped = 0  # cycles not run: nothing they read had changed
        self.put_off_wakes = 0  # the loop's wakes not followed by a cycle: writes were behind
        # What the last cycle read (the capacity snapshot, and the versions of the catalog,
        # the pending queue, the Workloads and the ledger) and what it decided.
        self._last: tuple[object, tuple[int, ...], CycleResult] | None = None
        # Per Workload, the last write spawned (the next one waits for it).
        self._chains: dict[str, asyncio.Task[None]] = {}
        self._ahead = 0  # admissions spawned and not yet written
        # A cycle is owed once enough admissions are written (:data:`AHEAD`, :data:`WRITES_BATCH`).
        self._behind = False
        self._written = 0  # admission writes finished since the last cycle
        self._limited = False  # the last cycle stopped at AHEAD: half of them first
        # Seconds the last cycle took, and between two admission writes while more waited
        # (the client budget's pace): the writes left must outlast the next cycle.
        self._cycle_took = 0.0
        self._write_gap = 0.0
        self._last_write: float | None = None  # when one was written with more waiting
        self.clock = time.perf_counter  # the pace's clock (a replay in virtual time sets its own)
        self.futile = FutileSearches()  # preemption searches that found nothing
        # The catalog the trees were last built for (by :meth:`warm` or a cycle), when the
        # next idle warm-up may run, and whether one is owed (nodes changed meanwhile).
        self._warm_catalog: Catalog | None = None
        # The cohort tree of the catalog's queues and cohorts (static: their quotas only),
        # built once per catalog instead of in every cycle (a walk of 1,000 queues).
        self._tree: tuple[object, object, CohortTree] | None = None
        self._warm_next = 0.0
        self.warm_owed = False
        self.warmups = 0

    # --- the loop ------------------------------------------------------------------------

    async def run(self) -> None:
        event = self.state.signals.admit_event
        took = 0.0  # seconds the last cycle took, its writes spawned
        described = -DESCRIBE_EVERY  # when pending messages were last brought up to date
        owed = False  # the last cycle left its pending messages unworded
        while True:
            due = None
            if owed:  # a cycle comes by the time they are due, changes or not
                due = described + DESCRIBE_EVERY
            if self.warm_owed:  # and one by the time an idle warm-up may run
                due = self._warm_next if due is None else min(due, self._warm_next)
            if due is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), timeout=max(due - time.perf_counter(), 0))
            else:
                await event.wait()
            if self._waits_for_writes(described):
                # Put off until more admissions are written (their write wakes the loop),
                # and nothing is due sooner: a wake per Workload created or finished meanwhile
                # would only sync the queue to find the cycle put off again.
                event.clear()
                owed = True
                # As after the put-off decide it saves: the cycle the catching-up write
                # wakes gathers changes for the shortest wait, not the last cycle's.
                took = 0.0
                self.put_off_wakes += 1
                continue
            # Coalesce a burst of changes into one cycle, waiting as long as the last cycle
            # took (within bounds): a cheap cycle answers a finished workload within 20 ms,
            # a costly one leaves the event loop half its time for watches and writes.
            await asyncio.sleep(min(max(took, COALESCE_MIN), COALESCE_MAX))
            event.clear()
            started = time.perf_counter()
            # Pending messages are worded and compared at most once a second: with
            # thousands waiting that is most of a cycle's cost, and they are a courtesy.
            describe = started >= described + DESCRIBE_EVERY
            self.decide(describe=describe)
            took = time.perf_counter() - started
            owed = not describe
            if describe:
                described = started

    def _waits_for_writes(self, described: float) -> bool:
        """The loop's next cycle would be put off (:meth:`_put_off`) without words due:
        writes the client is busy with must catch up first, and the one that does so wakes
        the loop (:meth:`_admit`). An idle warm-up that is due is not put off."""
        now = time.perf_counter()
        return (
            self._behind
            and not self._writes_caught_up()
            and now < described + DESCRIBE_EVERY
            and not (self.warm_owed and now >= self._warm_next)
        )

    async def cycle(self) -> None:
        """One cycle (and those it makes due: lanes held behind a workload just parked, or
        more admissions than :data:`AHEAD`), and its writes finished."""
        while True:
            ran = self.decide()
            result = self._last[2] if ran and self._last is not None else None
            if result is not None and result.held:
                continue
            again = self._behind  # stopped at AHEAD: more once these are written
            await self.settle()
            if not again:
                return

    async def settle(self) -> None:
        """Wait until every write spawned so far has finished."""
        while self._chains or self.messages.describers or self.shares.writer:
            tasks = [*self._chains.values(), *self.messages.describers]
            if self.shares.writer is not None:
                tasks.append(self.shares.writer)
            await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, key: str, write: Callable[[], Awaitable[None]]) -> None:
        """Run ``write`` after the writes already spawned for this Workload, and after a
        pending message being sent for it right now (so it builds on that version; one still
        waiting for its turn sees the admission and skips itself)."""
        earlier = [t for t in (self._chains.get(key), self.messages.sending(key)) if t is not None]

        async def chained() -> None:
            if earlier:
                await asyncio.gather(*earlier, return_exceptions=True)
            await write()

        task = asyncio.create_task(chained(), name=f"admitter-write {key}")
        self._chains[key] = task

        def done(finished: asyncio.Task[None]) -> None:
            if self._chains.get(key) is finished:
                del self._chains[key]
                self._settled(key)
            if not finished.cancelled() and finished.exception() is not None:
                log.error("writing %s failed", key, exc_info=finished.exception())

        task.add_done_callback(done)

    def decide(self, describe: bool = True) -> bool:
        """Run one cycle: decide in memory, hold what is admitted, and spawn the writes (of
        the pending messages that changed too, if ``describe``). False: no cycle was run
        (nothing waits, or nothing it reads changed)."""
        started = time.perf_counter()
        catalog = self.state.catalogs.catalog()
        queue = self.state.pending
        for key in queue.sync():  # stopped waiting
            self.messages.drop(key)
            self._left.add(key)
        self._forget()
        if not queue.lanes and not queue.problems:
            self._warm_when_idle()
            if describe:
                self._gauges(catalog.queues, {})
                self._report_shares(catalog)
            return False
        if self._put_off(describe):
            return False
        paced = self.clock()
        snapshot = self.state.ledger.snapshot()
        state = self.state
        self._parking.follow(state.ledger.held(), self._queue_of)
        read = (
            state.catalogs.generation,
            queue.version,
            state.workload_changes,
            state.ledger.changes,
            self._parking.version,
        )
        if self._last is not None and self._last[0] is snapshot and self._last[1] == read:
            # Nothing a decision reads changed (a wake by a pending message written back, or
            # the pending messages' timer): the last cycle's outcome stands, and running it
            # again would only spend CPU while the writes it spawned wait for their turn.
            self.skipped += 1
            if describe:
                self.messages.update({**queue.problems, **self._last[2].pending})
                self._gauges(catalog.queues, {})  # the lanes hold no admission of its
            return False
        named = queue.lanes.topologies()
        placer = build_placer(snapshot, catalog, named, clock.exact_budget(self.exact_budget))
        self._warm_catalog, self.warm_owed = catalog, False  # built by this cycle
        strategies = self.preemption_strategies if self.fair_sharing else None
        preempt = preemptor(
            self.state,
            catalog.queues,
            placer,
            catalog.cohorts,
            strategies,
            self._no_plan,
            self.futile,
        )
        result = admission_cycle(
            catalog.queues,
            queue.lanes,
            self.state.workloads.quota_in_use(),
            placer,
            preempt,
            catalog.cohorts,
            fair_sharing=self.fair_sharing,
            parking=self._parking,
            limit=AHEAD - self._ahead,
            tree=self._cohort_tree(catalog),
        )
        self._paced(result, paced)
        for outcome, count in placer.exact_outcomes.items():
            self.metrics.exact_pass.labels(outcome).inc(count)
        self.metrics.admission_cycle_seconds.observe(time.perf_counter() - started)
        self.cycles += 1
        self._last = (snapshot, read, result)
        admitted = self._apply(result, describe)
        if describe:  # with what this cycle admitted held
            # The gauges go with the words, at most once a second in serve's loop (a scrape
            # shows them as of then; they count only the queues that changed).
            self._gauges(catalog.queues, admitted)
            self._report_shares(catalog)
        if result.held:  # Kueue's next cycle takes the next heads at once
            self.state.signals.admit()
        return True

    def _apply(self, result: CycleResult, describe: bool) -> dict[str, int]:
        """Hold and write the cycle's admissions, its words (if ``describe``) and its
        evictions; returns the admissions per ClusterQueue."""
        queue = self.state.pending
        workloads = self.state.store.objects(WORKLOADS)
        admitted: dict[str, int] = {}
        for one in result.admitted:
            entry = queue.lanes.get(one.key)
            assert entry is not None  # the cycle admits only what the lanes hold
            # Partial admission: the cycle's request has the lowered counts.
            self._assume(workloads[one.key], one, one.request or entry.request)
            admitted[one.cluster_queue] = admitted.get(one.cluster_queue, 0) + 1
        # Counted every cycle, worded or not: what was tried and left waiting.
        waiting = len(queue.lanes) - len(result.admitted) + len(queue.problems)
        self._attempt("pending").inc(waiting)
        if describe:
            self.messages.update({**queue.problems, **result.pending})
        for key, plan in result.preemptions:
            self._preempt(key, plan)
        return admitted

    def _attempt(self, result: str) -> Counter:
        """The attempts counter's child for ``result``."""
        child = self._attempts.get(result)
        if child is None:
            child = self._attempts[result] = self.metrics.admission_attempts.labels(result)
        return child

    def _queue_of(self, key: str) -> str | None:
        """The ClusterQueue whose quota the workload holds (None: it holds none)."""
        for cluster_queue, _ in self.state.workloads.quota_of(key):
            return cluster_queue
        return None

    def warm(self) -> None:
        """Build the capacity snapshot and every flavor's domain tree now, so the next
        Workload's cycle finds them built instead of building them first (about 2 s of CPU
        at 100,000 nodes). `serve` calls it once its caches synced; the loop calls it again
        when nodes changed while no Workload waits."""
        started = time.perf_counter()
        catalog = self.state.catalogs.catalog()
        snapshot = self.state.ledger.snapshot()
        # The trees are kept by their topology source, for the snapshot's nodes and labels;
        # the free capacity in a tree's order by the snapshot (until usage changes).
        for flavor in build_placer(snapshot, catalog, exact=None).flavors.values():  # no plan
            flavor.tree.warm(snapshot.node_names)
            snapshot.free_rows(flavor.tree.nodes)
        self._warm_catalog = catalog
        self.warm_owed = False
        self.warmups += 1
        took = time.perf_counter() - started
        self._warm_next = time.perf_counter() + max(WARM_GAP_MIN, WARM_SPACING * took)
        log.debug("snapshot and domain trees built in %.0f ms", took * 1000)

    def warm_needed(self) -> bool:
        """Nodes or the catalog changed since the snapshot and trees were last built."""
        catalog = self.state.catalogs.catalog()
        return not self.state.ledger.snapshot_built() or catalog is not self._warm_catalog

    def _warm_when_idle(self) -> None:
        if not self.warm_needed():
            self.warm_owed = False  # built meanwhile: the loop must not wake for it again
        elif time.perf_counter() >= self._warm_next:
            self.warm()
        else:
            self.warm_owed = True  # the loop wakes for it when it is due

    def _cohort_tree(self, catalog: Catalog) -> CohortTree:
        kept = self._tree
        if kept is None or kept[0] is not catalog.queues or kept[1] is not catalog.cohorts:
            kept = self._tree = (
                catalog.queues,
                catalog.cohorts,
                CohortTree(catalog.queues, catalog.cohorts),
            )
        return kept[2]

    def _report_shares(self, catalog: Catalog) -> None:
        """Bring status.fairSharing up to date: the shares over the quota held now with fair
        sharing on, none with it off."""
        if not self.fair_sharing:
            self.shares.clear()
            return
        # The shares read the catalog and the quota in use: computed again only when either
        # changed (a held admission or a Workload's admission), compared every time.
        read = (self.state.ledger.changes, self.state.workload_changes)
        if self._shares is None or self._shares[0] is not catalog or self._shares[1] != read:
            tree = CohortTree(catalog.queues, catalog.cohorts)
            queues, cohorts = tree_shares(
                QuotaBook(catalog.queues, self.state.workloads.quota_in_use(), tree)
            )
            rounded = (
                {name: share.rounded for name, share in queues.items()},
                {name: share.rounded for name, share in cohorts.items()},
            )
            self._shares = (catalog, read, *rounded)
        self.shares.update(self._shares[2], self._shares[3])

    def _settled(self, key: str) -> None:
        """A write of the Workload's (an admission's, an eviction's, a pending message's)
        ended: the next cycle looks whether what is kept for it can go."""
        self._left.settled(key)

    def _busy(self, key: str) -> bool:
        return key in self._chains or self.messages.has_work(key)

    def _forget(self) -> None:
        """Drop what is kept per Workload once it waits no more and has no write left."""
        for key in self._left.done(self._busy):
            if not self.state.pending.holds(key):
                self.copies.drop(key)
                self._no_plan.forget_one(key)
                self._parking.forget(key)

    def _gauges(self, queues: Mapping[str, QueueSpec], admitted: Mapping[str, int]) -> None:
        """Set the per-queue gauges: workloads waiting (less those this cycle admitted) and
        admissions held, per ClusterQueue. Only the queues whose lanes or held admissions
        changed since the last call are counted again (all of them after the catalog
        changed): at 1,000 queues and thousands held, walking them all once a second cost
        more than the rest of an idle second."""
        lanes = self.state.pending.lanes
        if self._feeds is None:
            # Subscribed here, not when built: a standby builds its admitter but counts
            # nothing, and feeds nobody empties would keep every Workload it saw go. They
            # start with every lane and held admission: the first count is whole.
            self._feeds = (lanes.changes(), self.state.ledger.held_changes())
        full = queues is not self._gauge_queues
        waiting = set(self._feeds[0]) | admitted.keys() | self._gauge_admitted.keys()
        self._feeds[0].clear()
        self._gauge_admitted = dict(admitted)
        held = self._count_held(self._feeds[1])
        if full:  # queues came or went
            gone = {name for _, name in self._gauged} - queues.keys()
            waiting |= queues.keys() | gone
            held |= queues.keys() | gone
            self._gauge_queues = queues
        for name in waiting:
            lane = lanes.lane(name)
            if lane:
                self._gauge("pending", name, len(lane) - admitted.get(name, 0))
            else:
                self._gauge("pending", name, 0 if name in queues else None)
        for name in held:
            count = self._held_per_queue.get(name, 0)
            self._gauge("admitted", name, count if count or name in queues else None)

    def _count_held(self, changes: set[str]) -> set[str]:
        """Bring the admissions held per ClusterQueue up to date with the ledger's changes;
        returns the queues whose count may have changed."""
        ledger = self.state.ledger
        touched: set[str] = set()
        per_queue = self._held_per_queue
        for key in changes:
            was = self._held_in.pop(key, None)
            if was is not None:
                per_queue[was] -= 1
                touched.add(was)
            if ledger.holds(key):
                admission = ledger.reserved(key) or {}
                name = self._held_in[key] = str(admission.get("clusterQueue") or "")
                per_queue[name] = per_queue.get(name, 0) + 1
                touched.add(name)
        changes.clear()
        return touched

    def _gauge(self, kind: str, name: str, count: int | None) -> None:
        """Set one gauge (None: the queue is gone and nothing counts in it: no series)."""
        if self._gauged.get((kind, name)) == count:  # labels() costs; most are equal
            return
        gauge = (
            self.metrics.pending_workloads if kind == "pending" else self.metrics.admitted_workloads
        )
        if count is None:
            del self._gauged[(kind, name)]
            gauge.remove(name)
        else:
            self._gauged[(kind, name)] = count
            gauge.labels(name).set(count)

    # --- writing outcomes ----------------------------------------------------------------

    def _assume(self, workload: Obj, admitted: Admitted, request: PlacementRequest) -> None:
        """Hold the admission's capacity now, so no later cycle gives it away; write it after
        the Workload's earlier writes."""
        admission = _admission(admitted, request)
        gpus = assignment_of(admitted.decision)
        self.state.ledger.assume(
            admitted.key, admission, node_usage(request, admitted.decision), gpus
        )
        self.messages.drop(admitted.key)
        self._ahead += 1
        self._spawn(
            admitted.key,
            functools.partial(self._admit, workload, admitted, admission, gpus),
        )

    async def _admit(
        self,
        seen: Obj,
        admitted: Admitted,
        admission: Obj,
        gpus: GpuAssignment,
    ) -> None:
        try:
            await self._admit_once(seen, admitted, admission, gpus)
        finally:
            now = self.clock()
            if self._last_write is not None:  # this one waited since: the gap is the pace
                gap = now - self._last_write
                self._write_gap = gap if not self._write_gap else 0.8 * self._write_gap + 0.2 * gap
            self._ahead -= 1
            # Measured only from a write that left others waiting: an idle spell is no pace.
            self._last_write = now if self._ahead > 0 else None
            self._written += 1
            if self._behind and self._writes_caught_up():
                self._behind = False
                self.state.signals.admit()

    def _put_off(self, describe: bool) -> bool:
        """Whether the cycle waits until more of its writes are done (the next is owed). One
        that words the waiting workloads (at most once a second) runs short of AHEAD: the
        words must not wait for a slow API server's writes."""
        if self._writes_caught_up() or (describe and self._ahead < AHEAD):
            return False
        self._behind = True
        return True

    def _paced(self, result: CycleResult, started: float) -> None:
        """A cycle that started at ``started`` (on :attr:`clock`) ran: the next is due as
        :meth:`_writes_caught_up` says."""
        self._behind = self._limited = result.limited
        self._written = 0
        self._cycle_took = self.clock() - started

    def _writes_caught_up(self) -> bool:
        """Whether a cycle may run as far as the admissions waiting for their writes go: few
        wait, or a batch of them was written since the last cycle (and fewer than
        :data:`AHEAD` wait)."""
        if self._ahead >= AHEAD or (self._limited and self._ahead > AHEAD // 2):
            return False
        return self._ahead <= self._writes_kept() or self._written >= WRITES_BATCH

    def _writes_kept(self) -> int:
        """The admissions waiting for their writes at which the next cycle is due: enough to
        keep the client busy through twice the last cycle and the loop's gathering wait."""
        if not self._write_gap:
            return WRITES_KEPT
        cover = (2 * self._cycle_took + COALESCE_MAX) / self._write_gap
        return max(WRITES_KEPT, math.ceil(cover))

    async def _admit_once(
        self,
        seen: Obj,
        admitted: Admitted,
        admission: Obj,
        gpus: GpuAssignment,
    ) -> None:
        key = admitted.key
        workload = self.copies.current(key, seen)
        message = f"admitted by ClusterQueue {admitted.cluster_queue} on flavor {admitted.flavor}"
        if admitted.request is not None:  # fewer pods than asked for
            counts = ", ".join(f"{p.name} {p.count}" for p in admitted.request.podsets)
            message += f" with fewer pods (partial admission): {counts}"
        status = {
            "admission": admission,
            "conditions": [
                *_kept_on_admission(workload),
                new_condition(
                    "QuotaReserved", "True", "QuotaReserved", f"Quota reserved: {message}"
                ),
                new_condition("Admitted", "True", "Admitted", f"The workload is {message}"),
            ],
        }
        m = meta(workload)
        try:
            async with self._writes:
                if gpus:  # first: an admission is never seen without its GPU sets
                    workload = await write_gpu_assignment(self.kube, workload, gpus)
                self.copies.returned(key, await write_status(self.kube, workload, status))
        except API_ERRORS as error:
            # Not admitted after all (changed or deleted meanwhile, or the API server could not
            # be reached): give the capacity back; the next cycle decides again.
            log.info("admitting %s failed: %s", key, error)
            self.state.ledger.forget(key)
            self._attempt("conflict").inc()
            self.state.signals.admit()
            return
        self.state.ledger.confirm(key)
        self._attempt("admitted").inc()
        created = parse_time(m.get("creationTimestamp"))
        if created is not None:
            wait = self._waits.get(admitted.cluster_queue)
            if wait is None:
                wait = self.metrics.admission_wait_seconds.labels(admitted.cluster_queue)
                self._waits[admitted.cluster_queue] = wait
            wait.observe(max(time.time() - created, 0.0))
        described = _describe(admission, admitted.decision)  # once, for both
        log.info("admitted %s: %s", key, described)
        self.events.emit(workload, "Admitted", f"{message}; {described}")
        owner = owner_job(workload)
        if owner is not None:
            self.state.signals.job(*owner)
        self.state.signals.ungate_workload(key)

    def _preempt(self, preemptor_key: str, plan: Preemption) -> None:
        """Evict the victims not evicted yet; their capacity stays held until their pods are
        gone (the job sync takes their admission back then)."""
        for victim in plan.victims:
            obj = self.state.store.objects(WORKLOADS).get(victim.key)
            if obj is None or is_evicted(obj):
                continue
            self._spawn(victim.key, functools.partial(self._evict, obj, preemptor_key, victim))

    async def _evict(self, seen: Obj, preemptor_key: str, victim: Victim) -> None:
        obj = self.copies.current(victim.key, seen)
        if is_evicted(obj):
            return
        try:
            async with self._writes:
                self.copies.returned(victim.key, await evict(self.kube, obj, preemptor_key, victim))
        except API_ERRORS as error:
            log.info("evicting %s for %s failed: %s", victim.key, preemptor_key, error)
            self.state.signals.admit()
            return
        log.info("evicted %s for %s (%s)", victim.key, preemptor_key, victim.reason)
        self._attempt("preempted").inc()
        self.events.emit(obj, "Preempted", f"preempted to make room for {preemptor_key}")
        owner = owner_job(obj)
        if owner is not None:
            self.state.signals.job(*owner)


class Leaving:
    """The Workloads that stopped waiting and still have writes out, kept incrementally: a
    cycle looks only at those that left since the last one or whose write ended since (a
    scan of all of them per cycle was a visible share of serve's CPU while thousands of
    writes waited for a throttled client). Every write's end must call :meth:`settled`."""

    def __init__(self) -> None:
        self._busy: set[str] = set()  # seen with a write out, not ended since
        self._look: set[str] = set()  # left, or a write of theirs ended: look again

    def add(self, key: str) -> None:
        """The Workload stopped waiting."""
        self._busy.discard(key)
        self._look.add(key)

    def settled(self, key: str) -> None:
        """A write of the Workload ended (others may still be out)."""
        if key in self._busy:
            self._busy.discard(key)
            self._look.add(key)

    def done(self, busy: Callable[[str], bool]) -> list[str]:
        """Those that left and have no write out now (``busy`` says), taken out."""
        done = []
        for key in self._look:
            if busy(key):
                self._busy.add(key)
            else:
                done.append(key)
        self._look.clear()
        return done


def _kept_on_admission(workload: Obj) -> list[Obj]:
    """The Workload's other conditions, with an active Evicted or Preempted set back to False
    ("Previously: ..."), as Kueue's SetQuotaReservation does: a requeued victim admitted
    again is no longer evicted, and its history stays readable."""
    kept = []
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if not isinstance(cond, dict) or cond.get("type") in ("QuotaReserved", "Admitted"):
            continue
        if cond.get("type") in ("Evicted", "Preempted") and cond.get("status") == "True":
            previously = f"Previously: {cond.get('message', '')}"
            cond = new_condition(str(cond["type"]), "False", "QuotaReserved", previously)
        kept.append(cond)
    return kept


def _admission(admitted: Admitted, request: PlacementRequest) -> Obj:
    """``status.admission`` as ``Admission(...).to_wire()`` of :func:`pod_set_assignments`
    writes it (tests hold them equal, byte for byte). Built as plain data: the models' check
    decodes every topology assignment just encoded from the core's own decision (three
    quarters of this function's CPU, for nothing)."""
    placements = {p.name: p for p in admitted.decision.placements} if admitted.decision else {}
    assignments: list[Obj] = []
    for podset in request.podsets:
        resources = sorted(podset.requests)
        one: Obj = {
            "name": podset.name,
            "flavors": dict.fromkeys(resources, admitted.flavor),
            "resourceUsage": {
                r: format_units(r, podset.requests[r] * podset.count) for r in resources
            },
            "count": podset.count,
        }
        placement = placements.get(podset.name)
        if placement is not None and podset.count:
            domains = [AssignedDomain(tuple(d.values), d.count) for d in placement.domains]
            one["topologyAssignment"] = encode(placement.levels, domains)
        assignments.append(one)
    return {"clusterQueue": admitted.cluster_queue, "podSetAssignments": assignments}


def _describe(admission: Obj, decision: PlacementDecision | None) -> str:
    """The admission's domains per PodSet, for the log and the Event: those of the decision
    it was encoded from (decoding the document back gives the same, in the same order)."""
    placements = {p.name: p for p in decision.placements} if decision else {}
    parts = []
    for assignment in admission["podSetAssignments"]:
        placement = placements.get(assignment["name"])
        text = ""
        if "topologyAssignment" in assignment and placement is not None:
            text = ", ".join(f"{'/'.join(d.values)} x{d.count}" for d in placement.domains)
        parts.append(f"{assignment['name']}: {text or 'no topology'}")
    return "; ".join(parts)
