"""controllers/pending.py: pending messages queued for the describers are never stranded
without one to write them (a describer that has ended but whose done-callback has not run
yet must not count as one still taking the queue)."""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

import pytest

from tests.test_shells import Harness, workload
from topogate.api.objects import condition
from topogate.controllers.admitter import Admitter
from topogate.controllers.pending import PENDING_WRITE_CONCURRENCY
from topogate.kube import ratelimit
from topogate.kube.events import EventRecorder
from topogate.kube.ratelimit import TokenBucket
from topogate.kube.resources import CLUSTER_QUEUES, WORKLOADS


async def test_a_message_queued_as_the_describers_end_is_written() -> None:
    h = Harness()
    for name in ("a", "b"):
        h.kube.seed(WORKLOADS, workload(name, count=4, gpus=8))  # never fits: a message each
    h.deliver()
    events = EventRecorder(h.kube, "test")
    admitter = Admitter(h.kube, h.state, h.metrics, events, pending_qps=1000)
    admitter.decide()
    assert len(admitter.messages.describers) == PENDING_WRITE_CONCURRENCY
    # Step the loop to where both describers have returned (the queue is empty) and their
    # done-callbacks have not run yet: a cycle's decide() can run right there (serve's loop
    # is woken by a timer in the same loop iteration).
    for _ in range(200):
        await asyncio.sleep(0)
        if all(t.done() for t in admitter.messages.describers):
            break
    else:
        raise AssertionError("the describers never ended")
    h.kube.seed(WORKLOADS, workload("c", count=4, gpus=8))
    h.deliver()
    admitter.decide()  # "c" is queued for a describer
    await admitter.settle()
    for _ in range(20):  # the callbacks run; nothing else would take the queue
        await asyncio.sleep(0.01)
    stored = h.kube.stored(WORKLOADS, "c", "ml")
    assert stored is not None
    pending = condition(stored, "QuotaReserved")
    assert not admitter.messages.queued(), "queued for a describer that is gone"
    assert pending is not None and pending["reason"] == "Pending"
    await events.drain()


async def test_a_newer_message_waits_for_the_write_of_the_older_one() -> None:
    """A Workload whose message changes while its last one is being written is written once
    more, after that write and over the version it returns: the second describer does not
    send a write of its own at the same time (a 409, and the newer message left unwritten)."""
    h = Harness()
    h.kube.seed(WORKLOADS, workload("big", count=4, gpus=8))  # never fits: a message
    h.deliver()
    gate = asyncio.Event()
    patch = h.kube.patch
    held_back: list[str] = []

    async def slow_first(*args: Any, **kwargs: Any) -> Any:
        written = await patch(*args, **kwargs)
        if kwargs.get("subresource") == "status" and not held_back:
            held_back.append(args[1])
            await gate.wait()  # applied; its answer is on its way back
        return written

    h.kube.patch = slow_first  # type: ignore[method-assign]
    events = EventRecorder(h.kube, "test")
    admitter = Admitter(h.kube, h.state, h.metrics, events, pending_qps=1000)
    admitter.decide()
    for _ in range(50):
        await asyncio.sleep(0)
    assert held_back == ["big"]  # the first message is on its way
    # The quota shrinks: the message changes while the first write is out.
    queue = h.kube.stored(CLUSTER_QUEUES, "cq")
    assert queue is not None
    smaller = copy.deepcopy(queue)
    smaller["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = 8
    h.kube.seed(CLUSTER_QUEUES, smaller)
    stored = h.kube.stored(CLUSTER_QUEUES, "cq")
    h.state.handler(CLUSTER_QUEUES)(queue, copy.deepcopy(stored))  # the watch of the write lags
    admitter.decide()
    for _ in range(50):
        await asyncio.sleep(0)
    gate.set()
    await admitter.settle()
    stored = h.kube.stored(WORKLOADS, "big", "ml")
    assert stored is not None
    pending = condition(stored, "QuotaReserved")
    assert pending is not None and "insufficient quota" in pending["message"]
    assert len(h.kube.calls_of("patch", "workloads/status")) == 2  # one each, no retry
    await events.drain()


async def test_a_message_back_to_what_the_workload_says_cancels_the_queued_one() -> None:
    """A queued message that the next wording takes back (the Workload already says the
    newest) is not written: the Workload is never told the words in between."""
    h = Harness()
    h.kube.seed(WORKLOADS, workload("big", count=4, gpus=8))  # never fits: a message
    h.deliver()
    events = EventRecorder(h.kube, "test")
    admitter = Admitter(h.kube, h.state, h.metrics, events, pending_qps=5)
    await admitter.cycle()
    first = condition(h.kube.stored(WORKLOADS, "big", "ml") or {}, "QuotaReserved")
    assert first is not None and "allows to fit only 2" in first["message"]
    queue = h.kube.stored(CLUSTER_QUEUES, "cq")
    assert queue is not None
    smaller = copy.deepcopy(queue)
    smaller["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = 8
    admitter.messages.limit._tokens = 0  # the courtesy writes are behind others
    for spec in (smaller, queue):  # the quota shrinks, and is given back before the write
        h.kube.seed(CLUSTER_QUEUES, spec)
        h.deliver()
        admitter.decide()
    await admitter.settle()
    assert len(h.kube.calls_of("patch", "workloads/status")) == 1
    last = condition(h.kube.stored(WORKLOADS, "big", "ml") or {}, "QuotaReserved")
    assert last is not None and last["message"] == first["message"]
    await events.drain()


async def test_pending_messages_reach_their_workloads_under_a_steady_stream_of_admissions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At the client's budget the messages yield to admissions (ratelimit.courtesy), but only
    for their patience: with admissions always waiting for a token, every message is still
    written, each after its patience, and the admissions kept going meanwhile."""
    monkeypatch.setattr(ratelimit, "COURTESY_PATIENCE", 0.1)
    h = Harness()
    names = ("a", "b", "c", "d")
    for name in names:
        h.kube.seed(WORKLOADS, workload(name, count=4, gpus=8))  # never fits: a message each
    h.deliver()
    stop = asyncio.Event()
    admitted = _busy_budget(h, stop)
    await asyncio.sleep(0.02)
    events = EventRecorder(h.kube, "test")
    admitter = Admitter(h.kube, h.state, h.metrics, events, pending_qps=1000)
    started = time.monotonic()
    admitter.decide()
    try:
        await asyncio.wait_for(admitter.settle(), 5.0)
    finally:
        stop.set()
        await asyncio.gather(*admitted.streams)
    took = time.monotonic() - started
    for name in names:
        stored = h.kube.stored(WORKLOADS, name, "ml")
        assert stored is not None
        pending = condition(stored, "QuotaReserved")
        assert pending is not None and pending["reason"] == "Pending", name
    # Two describers, each message after its patience: they did yield, and not for ever.
    rounds = len(names) / PENDING_WRITE_CONCURRENCY
    assert rounds * 0.1 <= took < 3.0
    assert admitted.count >= 20 * took  # the admissions were not held up meanwhile
    await events.drain()


async def test_an_admission_does_not_wait_out_the_courtesy_of_its_own_pending_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Workload admitted while its pending message still yields at the client's budget is
    written at once: the admission waits only for a message whose request has left, and the
    message, at its turn, sees the admission and is not sent."""
    monkeypatch.setattr(ratelimit, "COURTESY_PATIENCE", 1.0)
    h = Harness()
    queue = h.kube.stored(CLUSTER_QUEUES, "cq")
    assert queue is not None
    none = copy.deepcopy(queue)
    none["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = 0
    h.kube.seed(CLUSTER_QUEUES, none)
    h.kube.seed(WORKLOADS, workload("x"))  # no quota: a message
    h.deliver()
    stop = asyncio.Event()
    others = _busy_budget(h, stop)  # the others' admissions, one always waiting
    events = EventRecorder(h.kube, "test")
    admitter = Admitter(h.kube, h.state, h.metrics, events, pending_qps=1000)
    try:
        admitter.decide()
        await asyncio.sleep(0.05)  # its message waits for its turn
        h.kube.seed(CLUSTER_QUEUES, queue)  # the quota comes back
        h.deliver()
        started = time.monotonic()
        admitter.decide()
        admitted = None
        while time.monotonic() - started < 5.0:
            stored = h.kube.stored(WORKLOADS, "x", "ml")
            if stored is not None and (stored.get("status") or {}).get("admission"):
                admitted = time.monotonic() - started
                break
            await asyncio.sleep(0.01)
        await asyncio.wait_for(admitter.settle(), 5.0)
    finally:
        stop.set()
        await asyncio.gather(*others.streams)
    assert admitted is not None and admitted < 0.5, admitted  # not after the message's 1 s
    stored = h.kube.stored(WORKLOADS, "x", "ml")
    assert stored is not None
    reserved = condition(stored, "QuotaReserved")
    assert reserved is not None and reserved["status"] == "True"
    await events.drain()


class _Admissions:
    """Others' admissions taking the client's tokens, one always waiting, until stopped."""

    def __init__(self, budget: TokenBucket, stop: asyncio.Event) -> None:
        self.budget, self.stop, self.count = budget, stop, 0
        self.streams = [asyncio.create_task(self._take()) for _ in range(2)]

    async def _take(self) -> None:
        while not self.stop.is_set():
            await self.budget.take()
            self.count += 1


def _busy_budget(h: Harness, stop: asyncio.Event) -> _Admissions:
    """Put the harness's Workload writes behind a client budget (QPS 200, burst 1) that others'
    admissions keep busy, as at a small ``--kube-api-qps``."""
    budget = TokenBucket(qps=200, burst=1)
    patch = h.kube.patch

    async def budgeted(*args: Any, **kwargs: Any) -> Any:
        await budget.take()
        return await patch(*args, **kwargs)

    h.kube.patch = budgeted  # type: ignore[method-assign]
    return _Admissions(budget, stop)
