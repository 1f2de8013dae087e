"""admission/admitter.py: pending messages queued for the describers are never stranded
without one to write them (a describer that has ended but whose done-callback has not run
yet must not count as one still taking the queue)."""

from __future__ import annotations

import asyncio

from tests.test_shells import Harness, workload
from topogate.admission.admitter import PENDING_WRITE_CONCURRENCY, Admitter
from topogate.api.objects import condition
from topogate.kube.events import EventRecorder
from topogate.kube.resources import WORKLOADS


async def test_a_message_queued_as_the_describers_end_is_written() -> None:
    h = Harness()
    for name in ("a", "b"):
        h.kube.seed(WORKLOADS, workload(name, count=4, gpus=8))  # never fits: a message each
    h.deliver()
    events = EventRecorder(h.kube, "test")
    admitter = Admitter(h.kube, h.state, h.metrics, events, pending_qps=1000)
    admitter.decide()
    assert len(admitter._describers) == PENDING_WRITE_CONCURRENCY
    # Step the loop to where both describers have returned (the queue is empty) and their
    # done-callbacks have not run yet: a cycle's decide() can run right there (serve's loop
    # is woken by a timer in the same loop iteration).
    for _ in range(200):
        await asyncio.sleep(0)
        if all(t.done() for t in admitter._describers):
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
    assert not admitter._to_describe, "queued for a describer that is gone"
    assert pending is not None and pending["reason"] == "Pending"
    await events.drain()
