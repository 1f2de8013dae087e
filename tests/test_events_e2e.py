"""serve's event recorder (its senders, its own client budget, fenced on the Lease) against the
real API server: a burst faster than one sender's round trips is all stored when the budget
allows it, and when the budget does not, what cannot be sent is dropped and counted, never
more sent than the budget allows."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from topogate.kube.client import Kube, own_budget
from topogate.kube.events import SERVE_SENDERS, EventRecorder
from topogate.kube.resources import EVENTS, Resource
from topogate.runtime.fencing import FencedKube
from topogate.testing.controlplane import ControlPlane

pytestmark = pytest.mark.cluster

NAMESPACES = Resource("v1", "namespaces", namespaced=False)
NOTE = "Quota reserved in ClusterQueue cq-1; flavor default, 1 pod set of 1 pod"


@contextlib.asynccontextmanager
async def _connected(plane: ControlPlane, qps: float, burst: int) -> AsyncIterator[Kube]:
    kube = await Kube.connect(str(plane.kubeconfig), qps=qps, burst=burst)
    try:
        yield kube
    finally:
        await kube.close()


async def _emit(
    recorder: EventRecorder, namespace: str, events: int, per_step: int, busy: float, free: float
) -> None:
    """``per_step`` events at a time, ``events`` in all, each step followed by ``busy``
    seconds of the event loop held (serve's admission cycle between its Events) and
    ``free`` seconds of it free for everything else."""
    for i in range(events):
        regarding = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": f"w-{i}", "namespace": namespace, "uid": f"u-{i}"},
        }
        recorder.emit(regarding, "Admitted", NOTE)
        if (i + 1) % per_step == 0:
            time.sleep(busy)  # noqa: ASYNC251 (the loop held, as by a decision)
            await asyncio.sleep(free)


async def _stored(kube: Kube, namespace: str) -> int:
    return len((await kube.list(EVENTS, namespace)).get("items") or [])


async def _round(
    plane: ControlPlane,
    qps: float,
    burst: int,
    events: int,
    per_step: int,
    busy: float,
    free: float,
    drain: float,
    senders: int = SERVE_SENDERS,
) -> tuple[int, int, float]:
    """Events emitted through a recorder built as serve's, drained for at most ``drain``
    seconds: (stored in the API server, dropped, seconds from the first emit)."""
    async with _connected(plane, qps, burst) as kube:
        namespace = f"events-{uuid.uuid4().hex[:8]}"
        await kube.create(NAMESPACES, {"metadata": {"name": namespace}})
        writer = own_budget(kube)
        recorder = EventRecorder(FencedKube(writer, lambda: True), "test", senders=senders)
        started = time.monotonic()
        await _emit(recorder, namespace, events, per_step, busy, free)
        await recorder.drain(drain)
        took = time.monotonic() - started
        return await _stored(kube, namespace), recorder.dropped, took


def test_a_burst_faster_than_one_sender_is_all_stored_when_the_budget_allows(
    control_plane: ControlPlane,
) -> None:
    # 2,400 events, 8 after each 30 ms of a busy event loop and 10 ms of a free one (200 a
    # second, 12 s): one sender gets a round trip or two per free turn of the loop, so its
    # queue of 1,000 overflows (it stored 1,885 here, dropping 515); serve's senders keep up.
    stored, dropped, _ = asyncio.run(
        _round(control_plane, 10_000, 10_000, 2400, 8, 0.03, 0.01, drain=120)
    )
    assert (stored, dropped) == (2400, 0)


def test_what_the_budget_does_not_allow_is_dropped_and_counted(
    control_plane: ControlPlane,
) -> None:
    # 1,300 events at once at QPS 20, burst 20: 300 over the queue dropped at once, then
    # the budget's worth sent in the 2 s the exit waits, the rest dropped when it ends.
    stored, dropped, took = asyncio.run(_round(control_plane, 20, 20, 1300, 1300, 0, 0, drain=2))
    assert stored <= 20 + 20 * took + 1  # never more than the budget's tokens
    assert stored >= 20  # the burst, at least
    # Each event stored or counted as dropped, but those cut off in flight by the exit.
    assert 1300 - SERVE_SENDERS <= stored + dropped <= 1300
    assert dropped >= 300
