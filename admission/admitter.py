"""The admitter's shell: runs an admission cycle when something changed and writes the outcome.

A cycle reads the controller's state (queues, flavors, topologies, pending and admitted
workloads, the capacity cache), calls the pure :func:`admission_cycle` and then writes, per
workload: ``status.admission`` with the topology assignment and the conditions QuotaReserved
and Admitted, or QuotaReserved=False/Pending with the reason. The job is unsuspended only
after its admission is written (by the job sync, which the written status wakes).

Cycles run when the world changed (a workload arrived or finished, a node or queue changed, a
pod left its node), never on a timer: nothing that cannot change the outcome triggers one.

A cycle never waits for its writes (Kueue's assume, then write): an admission holds its
capacity and quota in the state before its write is sent, so the next cycle can run at once.
Writes to one Workload run one after the other, each from the version the previous one
returned; a pending message is written only when it changed, and never twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from topogate.api.gpus import GpuAssignment
from topogate.api.models import Admission
from topogate.api.objects import condition, is_evicted, meta, owner_job
from topogate.api.times import parse_time
from topogate.api.topology_assignment import decode
from topogate.clock import exact_budget
from topogate.kube.errors import API_ERRORS
from topogate.kube.events import EventRecorder
from topogate.kube.protocol import KubeApi
from topogate.kube.ratelimit import TokenBucket
from topogate.kube.resources import WORKLOADS, Obj
from topogate.metrics import Metrics
from topogate.state import ControllerState

from .assignments import node_usage, pod_set_assignments
from .evictions import evict, preemptor
from .exact import EXACT_BUDGET
from .gpuplace import assignment_of
from .podsets import Catalog, Translation, build_placer, translate
from .preemption import Preemption, Victim
from .queues import (
    Admitted,
    QueueLanes,
    QueueSpec,
    admission_cycle,
)
from .request import PlacementRequest
from .writes import new_condition, write_gpu_assignment, write_status

log = logging.getLogger("topogate.admitter")

PENDING = "Pending"
PENDING_WRITE_CONCURRENCY = 2
PENDING_WRITES_PER_SECOND = 20.0  # serve's --pending-status-qps
COALESCE_MIN, COALESCE_MAX = 0.005, 0.05  # seconds between a change and the cycle it wakes
DESCRIBE_EVERY = 1.0  # seconds between two updates of the pending messages (serve's loop)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A waiting workload as the cycle sees it, translated once per (resourceVersion, catalog
    generation): a queue, flavor, topology or HyperNode change translates it again."""

    version: str
    translation: Translation


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
    ) -> None:
        self.kube = kube
        self.exact_budget = exact_budget
        self.state = state
        self.metrics = metrics
        self.events = events
        self._writes = asyncio.Semaphore(write_concurrency)
        # Pending messages are a courtesy: few at a time and at a bounded rate, so they never
        # stand in the API server's queue ahead of admissions and evictions in numbers.
        self._pending_limit = TokenBucket(pending_qps, max(1, int(pending_qps)))
        self._candidates: dict[str, Candidate] = {}
        # The waiting workloads, kept up to date from the state's feed of changed workloads:
        # in their queues' order (``_lanes``), or with the reason they cannot be considered
        # (``_problems``). A cycle translates only what changed since the last one.
        self._changes = state.waiting_changes()
        self._lanes = QueueLanes()
        self._problems: dict[str, str] = {}
        self._generation = -1
        self._left: set[str] = set()  # stopped waiting; what is kept for them goes soon
        self.cycles = 0
        # Per Workload: the last write spawned (the next one waits for it), the Workload as
        # our last write returned it, and the pending message written or being written.
        self._chains: dict[str, asyncio.Task[None]] = {}
        self._returned: dict[str, Obj] = {}
        self._said: dict[str, str] = {}
        # Workloads whose pending message is to be written, oldest first, taken by a few
        # describers (which end when it is empty); a write says the newest message in
        # ``_said`` when its turn comes (latest wins). They are not chained with admissions:
        # both are guarded by the version read, so a race costs a 409 and never a lost write,
        # and an admission never waits behind them.
        self._to_describe: dict[str, Obj] = {}  # key -> the version the cycle saw
        self._describers: set[asyncio.Task[None]] = set()
        self._sending: dict[str, asyncio.Task[None]] = {}  # those whose request is out

    def _candidate(self, key: str, workload: Obj, catalog: Catalog) -> Translation:
        version = f"{meta(workload).get('resourceVersion')}/{self.state.catalog_generation}"
        cached = self._candidates.get(key)
        if cached is None or cached.version != version:
            cached = Candidate(version, translate(workload, key, catalog))
            self._candidates[key] = cached
        return cached.translation

    # --- the loop ------------------------------------------------------------------------

    async def run(self) -> None:
        event = self.state.signals.admit_event
        took = 0.0  # seconds the last cycle took, its writes spawned
        described = -DESCRIBE_EVERY  # when pending messages were last brought up to date
        owed = False  # the last cycle left its pending messages unwritten
        while True:
            if owed:  # a cycle comes by the time they are due, changes or not
                due = described + DESCRIBE_EVERY - time.perf_counter()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), timeout=max(due, 0.0))
            else:
                await event.wait()
            # Coalesce a burst of changes into one cycle, waiting as long as the last cycle
            # took (within bounds): a cheap cycle answers a finished workload at once, a
            # costly one leaves the event loop half its time for watches and writes.
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

    async def cycle(self) -> None:
        """One cycle, and its writes finished."""
        self.decide()
        await self.settle()

    async def settle(self) -> None:
        """Wait until every write spawned so far has finished."""
        while self._chains or self._describers:
            tasks = [*self._chains.values(), *self._describers]
            await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, key: str, write: Callable[[], Awaitable[None]]) -> None:
        """Run ``write`` after the writes already spawned for this Workload, and after a
        pending message being sent for it right now (so it builds on that version; one still
        waiting for its turn sees the admission and skips itself)."""
        earlier = [t for t in (self._chains.get(key), self._sending.get(key)) if t is not None]

        async def chained() -> None:
            if earlier:
                await asyncio.gather(*earlier, return_exceptions=True)
            await write()

        task = asyncio.create_task(chained(), name=f"admitter-write {key}")
        self._chains[key] = task

        def done(finished: asyncio.Task[None]) -> None:
            if self._chains.get(key) is finished:
                del self._chains[key]
            if not finished.cancelled() and finished.exception() is not None:
                log.error("writing %s failed", key, exc_info=finished.exception())

        task.add_done_callback(done)

    def _current(self, key: str, seen: Obj) -> Obj:
        """The newest version known of a Workload: as the cycle saw it, as the watch holds it
        now, or as our last write returned it."""
        candidates = [seen, self.state.store(WORKLOADS).get(key), self._returned.get(key)]
        return max((c for c in candidates if c is not None), key=_version)

    def _sync(self, catalog: Catalog) -> None:
        """Bring the lanes up to the state: translate what changed since the last cycle (every
        waiting workload after the catalog changed)."""
        if self._generation != self.state.catalog_generation:
            self._generation = self.state.catalog_generation
            self._changes |= self.state.waiting()
        changed = set(self._changes)
        self._changes.clear()  # in place: the state fills this very set
        workloads = self.state.store(WORKLOADS)
        for key in changed:
            self._lanes.discard(key)
            self._problems.pop(key, None)
            workload = workloads.get(key)
            if workload is None or not self.state.is_waiting(key):
                self._candidates.pop(key, None)
                self._said.pop(key, None)
                self._left.add(key)
                continue
            translation = self._candidate(key, workload, catalog)
            if translation.pending is None:
                self._problems[key] = translation.problem
            else:
                self._lanes.put(translation.pending)

    def decide(self, describe: bool = True) -> None:
        """Run one cycle: decide in memory, hold what is admitted, and spawn the writes (of
        the pending messages that changed too, if ``describe``)."""
        started = time.perf_counter()
        catalog = self.state.catalog()
        self._sync(catalog)
        self._forget()
        if not self._lanes and not self._problems:
            self._gauges(catalog.queues, {})
            return
        snapshot = self.state.snapshot()
        named = self._lanes.topologies()
        placer = build_placer(snapshot, catalog, named, exact_budget(self.exact_budget))
        preempt = preemptor(self.state, catalog.queues, placer)
        result = admission_cycle(
            catalog.queues, self._lanes, self.state.quota_in_use(), placer, preempt
        )
        for outcome, count in placer.exact_outcomes.items():
            self.metrics.exact_pass.labels(outcome).inc(count)
        self.metrics.admission_cycle_seconds.observe(time.perf_counter() - started)
        self.cycles += 1
        workloads = self.state.store(WORKLOADS)
        admitted: dict[str, int] = {}
        for one in result.admitted:
            entry = self._lanes.get(one.key)
            assert entry is not None  # the cycle admits only what the lanes hold
            # Partial admission: the cycle's request has the lowered counts.
            self._assume(workloads[one.key], one, one.request or entry.request)
            admitted[one.cluster_queue] = admitted.get(one.cluster_queue, 0) + 1
        # Counted every cycle, worded or not: what was tried and left waiting.
        waiting = len(self._lanes) - len(result.admitted) + len(self._problems)
        self.metrics.admission_attempts.labels("pending").inc(waiting)
        if describe:
            self._pending_messages({**self._problems, **result.pending})
        for key, plan in result.preemptions:
            self._preempt(key, plan)
        self._gauges(catalog.queues, admitted)

    def _pending_messages(self, messages: Mapping[str, str]) -> None:
        """Queue a write for each message that changed (the newest wins when its turn comes)."""
        workloads = self.state.store(WORKLOADS)
        for key, message in messages.items():
            if self._said.get(key) == message:
                continue  # written, or queued to be
            seen = workloads[key]
            if _says(self._current(key, seen), message):
                # Older words queued, not yet sent: taken back (once sent, they are kept, so
                # the next wording sees the Workload say them and puts this back).
                if key in self._said and key not in self._sending:
                    self._said[key] = message
                continue
            self._said[key] = message  # a queued write takes the newest message
            self._to_describe.setdefault(key, seen)
        while self._to_describe and len(self._describers) < PENDING_WRITE_CONCURRENCY:
            task = asyncio.create_task(self._describe(), name="pending messages")
            self._describers.add(task)
            task.add_done_callback(self._describers.discard)

    def _forget(self) -> None:
        """Drop what is kept per Workload once it waits no more and has no write left."""
        for key in list(self._left):
            if key in self._chains or key in self._to_describe or key in self._sending:
                continue
            self._left.discard(key)
            if self._lanes.get(key) is None and key not in self._problems:
                self._returned.pop(key, None)

    def _gauges(self, queues: Mapping[str, QueueSpec], admitted: Mapping[str, int]) -> None:
        counts = dict.fromkeys(queues, 0)
        for name in self._lanes.names():
            counts[name] = len(self._lanes.lane(name)) - admitted.get(name, 0)
        for name, count in counts.items():
            self.metrics.pending_workloads.labels(name).set(count)
        held = dict.fromkeys(queues, 0)
        for key in self.state.held():
            admission = self.state.reserved(key) or {}
            cq = str(admission.get("clusterQueue") or "")
            held[cq] = held.get(cq, 0) + 1
        for name, count in held.items():
            self.metrics.admitted_workloads.labels(name).set(count)

    # --- writing outcomes ----------------------------------------------------------------

    def _assume(self, workload: Obj, admitted: Admitted, request: PlacementRequest) -> None:
        """Hold the admission's capacity now, so no later cycle gives it away; write it after
        the Workload's earlier writes."""
        admission = _admission(admitted, request)
        gpus = assignment_of(admitted.decision)
        self.state.assume_admission(
            admitted.key, admission, node_usage(request, admitted.decision), gpus
        )
        self._said.pop(admitted.key, None)
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
        key = admitted.key
        workload = self._current(key, seen)
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
                self._returned[key] = await write_status(self.kube, workload, status)
        except API_ERRORS as error:
            # Not admitted after all (changed or deleted meanwhile, or the API server could not
            # be reached): give the capacity back; the next cycle decides again.
            log.info("admitting %s failed: %s", key, error)
            self.state.forget_admission(key)
            self.metrics.admission_attempts.labels("conflict").inc()
            self.state.signals.admit()
            return
        self.state.confirm_admission(key)
        self.metrics.admission_attempts.labels("admitted").inc()
        created = parse_time(m.get("creationTimestamp"))
        if created is not None:
            self.metrics.admission_wait_seconds.labels(admitted.cluster_queue).observe(
                max(time.time() - created, 0.0)
            )
        described = _describe(admission)  # decodes the assignment: once, for both
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
            obj = self.state.store(WORKLOADS).get(victim.key)
            if obj is None or is_evicted(obj):
                continue
            self._spawn(victim.key, functools.partial(self._evict, obj, preemptor_key, victim))

    async def _evict(self, seen: Obj, preemptor_key: str, victim: Victim) -> None:
        obj = self._current(victim.key, seen)
        if is_evicted(obj):
            return
        try:
            async with self._writes:
                self._returned[victim.key] = await evict(self.kube, obj, preemptor_key, victim)
        except API_ERRORS as error:
            log.info("evicting %s for %s failed: %s", victim.key, preemptor_key, error)
            self.state.signals.admit()
            return
        log.info("evicted %s for %s (%s)", victim.key, preemptor_key, victim.reason)
        self.metrics.admission_attempts.labels("preempted").inc()
        self.events.emit(obj, "Preempted", f"preempted to make room for {preemptor_key}")
        owner = owner_job(obj)
        if owner is not None:
            self.state.signals.job(*owner)

    async def _describe(self) -> None:
        """Write queued pending messages, oldest first, until none is left."""
        try:
            while self._to_describe:
                key = next(iter(self._to_describe))
                seen = self._to_describe.pop(key)
                if self._said.get(key) is None or self.state.reserved(key) is not None:
                    continue  # admitted or gone meanwhile: no token spent on it
                # The other describer may be writing this Workload's older message: write
                # after it, over the version it returns (not beside it: a 409, and the newer
                # message left unwritten until some later change brought a cycle).
                while (earlier := self._sending.get(key)) is not None:
                    await asyncio.gather(earlier, return_exceptions=True)
                await self._pending_limit.take()
                task = asyncio.create_task(self._write_pending(key, seen), name=f"pending {key}")
                self._sending[key] = task
                try:
                    await task
                except Exception:  # API errors are handled inside; anything else is a bug
                    log.exception("writing the pending message of %s failed", key)
                finally:
                    if self._sending.get(key) is task:
                        del self._sending[key]
        finally:
            # Out of the count in the same step as the queue was seen empty: the done
            # callback runs a loop iteration later, and a cycle in between would queue a
            # message for describers that are gone (stranded until the next wording).
            self._describers.discard(asyncio.current_task())

    async def _write_pending(self, key: str, seen: Obj) -> None:
        message = self._said.get(key)
        workload = self._current(key, seen)
        if message is None or self.state.reserved(key) is not None or _says(workload, message):
            return  # admitted or gone meanwhile, or already says so
        # A merge patch replaces the whole list: keep the other conditions (Evicted, ...).
        others = [
            c
            for c in (workload.get("status") or {}).get("conditions") or []
            if isinstance(c, dict) and c.get("type") != "QuotaReserved"
        ]
        reserved = new_condition("QuotaReserved", "False", PENDING, message)
        status = {"conditions": [*others, reserved]}
        try:
            self._returned[key] = await write_status(self.kube, workload, status)
        except API_ERRORS as error:
            log.debug("pending status of %s not written: %s", key, error)
            if self._said.get(key) == message:
                del self._said[key]  # the next wording writes it again
                self.state.signals.admit()  # and comes without waiting for another change
            return
        self.events.emit(workload, PENDING, message, warning=True)


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


def _says(workload: Obj, message: str) -> bool:
    """The Workload already waits with this message."""
    current = condition(workload, "QuotaReserved")
    return (
        current is not None
        and current.get("status") == "False"
        and current.get("reason") == PENDING
        and current.get("message") == message
    )


def _version(workload: Obj) -> int:
    """resourceVersion as a number, to pick the newest copy (-1 when it is not one)."""
    value = meta(workload).get("resourceVersion")
    try:
        return int(str(value))
    except ValueError:
        return -1


def _admission(admitted: Admitted, request: PlacementRequest) -> Obj:
    assignments = pod_set_assignments(request, admitted.decision, admitted.flavor)
    return Admission(
        cluster_queue=admitted.cluster_queue, pod_set_assignments=assignments
    ).to_wire()


def _describe(admission: Obj) -> str:
    parts = []
    for assignment in admission.get("podSetAssignments") or []:
        topology = assignment.get("topologyAssignment")
        domains = decode(topology).domains if topology else ()
        text = ", ".join(f"{'/'.join(d.values)} x{d.count}" for d in domains)
        parts.append(f"{assignment['name']}: {text or 'no topology'}")
    return "; ".join(parts)
