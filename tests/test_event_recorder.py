"""topogate/kube/events.py: events go out one at a time from a bounded queue (client-go's
broadcaster), are dropped and counted when it is full, and an exit never waits on them for
longer than it allows."""

from __future__ import annotations

import asyncio
import time

from tests.event_fakes import SlowApi, about
from topogate.kube.events import EventRecorder
from topogate.kube.resources import Obj, Resource


async def test_events_are_sent_one_at_a_time_in_order() -> None:
    api = SlowApi(0.001)
    events = EventRecorder(api, "test")  # type: ignore[arg-type]
    for i in range(20):
        events.emit(about(f"w{i}"), "Pending", f"note {i}")
    await events.drain()
    assert api.sent == [f"note {i}" for i in range(20)]
    assert api.most == 1
    assert events.dropped == 0


async def test_a_full_queue_drops_and_counts_instead_of_growing() -> None:
    api = SlowApi(None)  # the API server never answers
    told: list[int] = []
    events = EventRecorder(api, "test", capacity=5, on_drop=lambda: told.append(1))  # type: ignore[arg-type]
    for i in range(12):
        events.emit(about(f"w{i}"), "Pending", f"note {i}")
    await asyncio.sleep(0)  # the sender takes the first one off the queue
    events.emit(about("late"), "Pending", "late")
    # 12 emitted before the sender ran: 5 queued, 7 dropped; then one slot freed for "late".
    assert events.dropped == 7
    assert len(told) == 7  # serve counts them in topogate_events_dropped_total
    started = time.monotonic()
    await events.drain(seconds=0.2)
    assert time.monotonic() - started < 5  # bounded although nothing was ever sent
    assert api.sent == []


async def test_emitting_after_a_drain_sends_again() -> None:
    api = SlowApi(0)
    events = EventRecorder(api, "test")  # type: ignore[arg-type]
    events.emit(about("a"), "Admitted", "first")
    await events.drain()
    events.emit(about("b"), "Admitted", "second")
    await events.drain()
    assert api.sent == ["first", "second"]


class BrokenOnce(SlowApi):
    """The first create fails with something that is not an API error (a bug, a body the
    client cannot encode); the rest go through."""

    def __init__(self) -> None:
        super().__init__(0)
        self.failed = False

    async def create(self, resource: Resource, body: Obj, namespace: str | None = None) -> Obj:
        if not self.failed:
            self.failed = True
            raise TypeError("Object of type set is not JSON serializable")
        return await super().create(resource, body, namespace)


async def test_an_event_that_fails_oddly_does_not_stop_the_ones_behind_it() -> None:
    api = BrokenOnce()
    events = EventRecorder(api, "test")  # type: ignore[arg-type]
    for i in range(3):
        events.emit(about(f"w{i}"), "Pending", f"note {i}")
    await events.drain(seconds=5)
    assert api.sent == ["note 1", "note 2"]
