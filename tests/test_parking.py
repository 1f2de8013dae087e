"""Kueue's inadmissible workloads in the cycle (topogate.admission.cycle.Parking): a
BestEffortFIFO queue passes a workload that does not fit only while its cohort tree has
given no quota back since it was found so; after quota comes back, the higher-priority one
is tried first again and its lower ones wait for the next cycle, so the room freed gathers
for it (Kueue's QueueAssociatedInadmissibleWorkloadsAfter on a finished workload)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from topogate.admission.cycle import Parking, admission_cycle
from topogate.admission.lanes import QueueLanes
from topogate.admission.quota import Usage
from topogate.controllers import admitter as admitter_module
from topogate.controllers.admitter import Admitter
from topogate.kube.events import EventRecorder
from topogate.kube.resources import WORKLOADS

from .test_cohorts import no_topology, pending, queue
from .test_shells import Harness, workload

QUEUES = {"a": queue("a", 2), "b": queue("b", 2)}  # a cohort of 4
PENDING = [pending("ns/large", "a", 2, priority=200), pending("ns/small", "a", 1, priority=50)]


def _cycle(parking: Parking | None, usage: Usage) -> list[str]:
    result = admission_cycle(QUEUES, QueueLanes(PENDING), usage, no_topology, parking=parking)
    return [one.key for one in result.admitted]


def test_after_quota_comes_back_the_higher_one_holds_its_lane_until_it_fits() -> None:
    running = {"ns/r1": "b", "ns/r2": "b", "ns/r3": "b", "ns/r4": "b"}  # the cohort is full
    parking = Parking()
    parking.follow(frozenset(running), running.get)
    assert _cycle(parking, {("b", "f"): {"nvidia.com/gpu": 4}}) == []  # both parked
    del running["ns/r1"]  # one finishes: 1 free, the large one needs 2
    parking.follow(frozenset(running), running.get)
    assert _cycle(parking, {("b", "f"): {"nvidia.com/gpu": 3}}) == []  # the small one waits
    del running["ns/r2"]  # another one finishes before the next cycle: 2 free
    parking.follow(frozenset(running), running.get)
    assert _cycle(parking, {("b", "f"): {"nvidia.com/gpu": 2}}) == ["ns/large"]
    # Without parking (or with Kueue's next cycle coming before any quota is given back),
    # the small one takes the first CPU freed and the large one waits for two at once.
    assert _cycle(None, {("b", "f"): {"nvidia.com/gpu": 3}}) == ["ns/small"]


def test_a_lane_held_is_passed_in_the_next_cycle_when_nothing_came_back() -> None:
    running = {"ns/r1": "b", "ns/r2": "b", "ns/r3": "b", "ns/r4": "b"}
    parking = Parking()
    parking.follow(frozenset(running), running.get)
    assert _cycle(parking, {("b", "f"): {"nvidia.com/gpu": 4}}) == []
    del running["ns/r1"]
    parking.follow(frozenset(running), running.get)
    usage = {("b", "f"): {"nvidia.com/gpu": 3}}
    held = admission_cycle(QUEUES, QueueLanes(PENDING), usage, no_topology, parking=parking)
    assert (held.admitted, held.held) == ([], 1)
    assert "ns/small" not in held.pending  # its words stay as they were: it is tried next
    parking.follow(frozenset(running), running.get)  # nothing given back meanwhile
    assert _cycle(parking, usage) == ["ns/small"]  # Kueue's next head, as before


def test_a_new_workload_that_does_not_fit_is_passed_at_once() -> None:
    parking = Parking()
    usage = {("b", "f"): {"nvidia.com/gpu": 3}}
    assert _cycle(parking, usage) == ["ns/small"]  # as without parking


def test_a_cycle_with_a_limit_admits_the_best_ranked_first() -> None:
    queues = {"a": queue("a", 8), "b": queue("b", 8)}
    waiting = [
        pending("ns/small", "a", 1, priority=50),
        pending("ns/large", "b", 4, priority=200),
        pending("ns/medium", "a", 2, priority=100),
    ]
    result = admission_cycle(queues, QueueLanes(waiting), {}, no_topology, limit=2)
    assert [one.key for one in result.admitted] == ["ns/large", "ns/medium"]
    assert result.limited
    unlimited = admission_cycle(queues, QueueLanes(waiting), {}, no_topology)
    assert (len(unlimited.admitted), unlimited.limited) == (3, False)


async def test_the_admitter_decides_no_further_ahead_of_its_writes_than_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once writes are the limit, a higher-priority workload that arrives while earlier fits
    wait for their writes is written before them (it is decided when their turn comes)."""
    monkeypatch.setattr(admitter_module, "AHEAD", 1)
    h = Harness()
    for name in ("first", "second"):
        h.kube.seed(WORKLOADS, workload(name, count=1, gpus=1))
    h.deliver()
    admitter, events = h.admitter()
    assert admitter.decide()
    assert h.state.ledger.reserved("ml/first") is not None
    assert h.state.ledger.reserved("ml/second") is None  # one decided ahead of the writes
    assert not admitter.decide()  # behind: no cycle until that write is done
    urgent = workload("urgent", count=1, gpus=1)
    urgent["spec"]["priority"] = 100
    h.kube.seed(WORKLOADS, urgent)
    h.deliver()
    await admitter.settle()
    assert h.state.signals.admit_event.is_set()  # the write done wakes the next cycle
    h.deliver()
    assert admitter.decide()
    assert h.state.ledger.reserved("ml/urgent") is not None  # before "second", come earlier
    assert h.state.ledger.reserved("ml/second") is None
    await admitter.cycle()
    assert h.state.ledger.reserved("ml/second") is not None
    await events.drain()


class _GatedWrites:
    """The harness's API server, with status writes let through one permit at a time."""

    def __init__(self, kube: Any) -> None:
        self.kube, self.gate, self.passed = kube, asyncio.Semaphore(0), 0

    def clock(self) -> float:
        return float(self.passed)  # seconds: a write a second

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)

    async def patch(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("subresource") == "status":
            await self.gate.acquire()
            self.passed += 1
        return await self.kube.patch(*args, **kwargs)


async def _let_through(gated: _GatedWrites, count: int) -> None:
    target = gated.passed + count
    for _ in range(count):
        gated.gate.release()
    for _ in range(200):  # each write is a chain of tasks: let them all run
        if gated.passed >= target:
            break
        await asyncio.sleep(0)
    for _ in range(20):
        await asyncio.sleep(0)


async def test_while_writes_wait_the_next_cycle_waits_for_a_batch_of_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Throttled writes: a change (a new workload, a finish) does not start a cycle of its own
    while more than WRITES_KEPT admissions wait for their writes; the cycle comes once
    WRITES_BATCH of them are written (it could not be written sooner), and decides all that
    changed meanwhile at once."""
    monkeypatch.setattr(admitter_module, "WRITES_KEPT", 1)
    monkeypatch.setattr(admitter_module, "WRITES_BATCH", 2)
    h = Harness()
    for name in ("first", "second", "third"):
        h.kube.seed(WORKLOADS, workload(name, count=1, gpus=1))
    h.deliver()
    gated = _GatedWrites(h.kube)
    admitter = Admitter(gated, h.state, h.metrics, EventRecorder(h.kube, "test"))
    admitter.clock = gated.clock  # a write a second, cycles in no time
    assert admitter.decide()
    assert all(h.state.ledger.reserved(f"ml/{n}") for n in ("first", "second", "third"))
    h.kube.seed(WORKLOADS, workload("late", count=1, gpus=1))
    h.deliver()
    h.state.signals.admit_event.clear()
    assert not admitter.decide(describe=False)  # three wait for their writes: no cycle
    await _let_through(gated, 1)
    assert not h.state.signals.admit_event.is_set()  # one written: not a batch yet
    assert not admitter.decide(describe=False)
    assert h.state.ledger.reserved("ml/late") is None
    await _let_through(gated, 1)
    assert h.state.signals.admit_event.is_set()  # a batch written: the owed cycle is due
    assert admitter.decide(describe=False)
    assert h.state.ledger.reserved("ml/late") is not None
    await _let_through(gated, 2)
    await admitter.settle()


def test_the_writes_kept_for_the_next_cycle_outlast_it() -> None:
    """The next cycle is due while enough writes remain to keep the client busy through it:
    at 50 writes a second and 100 ms cycles, (2 x 0.1 + COALESCE_MAX) / 0.02 of them."""
    h = Harness()
    admitter, _ = h.admitter()
    assert admitter._writes_kept() == admitter_module.WRITES_KEPT  # no pace known yet
    admitter._write_gap, admitter._cycle_took = 0.02, 0.1
    expected = math.ceil((2 * 0.1 + admitter_module.COALESCE_MAX) / 0.02)
    assert admitter._writes_kept() == expected > admitter_module.WRITES_KEPT
    admitter._ahead, admitter._written = expected + 1, 0
    assert not admitter._writes_caught_up()
    admitter._ahead = expected
    assert admitter._writes_caught_up()
