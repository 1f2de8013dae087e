"""topogate/kube/events.py with several senders (serve's): at most ``senders`` events in flight,
taken off the queue in the order they were emitted, each still spending a token of the
recorder's own client budget, and an exit bounded as with one sender."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.event_fakes import SlowApi, about
from topogate.kube.events import SERVE_SENDERS, EventRecorder
from topogate.kube.ratelimit import TokenBucket


async def test_no_more_than_senders_events_are_in_flight() -> None:
    api = SlowApi(0.01)
    events = EventRecorder(api, "test", senders=4)  # type: ignore[arg-type]
    for i in range(40):
        events.emit(about(f"w{i}"), "Pending", f"note {i}")
    await events.drain(seconds=10)
    assert api.most == 4
    assert sorted(api.sent) == sorted(f"note {i}" for i in range(40))
    # Taken off the queue in the order emitted (each carries its own eventTime).
    assert api.started == [f"note {i}" for i in range(40)]
    assert events.dropped == 0


async def test_several_senders_send_a_burst_in_a_fraction_of_one_senders_time() -> None:
    """What serve's senders are for: a round trip per event no longer sets the rate."""

    async def took(senders: int) -> float:
        api = SlowApi(0.02)
        events = EventRecorder(api, "test", senders=senders)  # type: ignore[arg-type]
        started = time.monotonic()
        for i in range(50):
            events.emit(about(f"w{i}"), "Pending", f"note {i}")
        await events.drain(seconds=30)
        assert len(api.sent) == 50
        return time.monotonic() - started

    one = await took(1)
    assert one >= 50 * 0.02
    assert await took(10) < one / 3


async def test_the_senders_together_stay_within_the_client_budget() -> None:
    """Each event still takes a token: 16 senders at 50/s with a burst of 5 send 30 events in
    no less than (30 - 5) / 50 seconds."""
    api = SlowApi(0, TokenBucket(50, 5))
    events = EventRecorder(api, "test", senders=SERVE_SENDERS)  # type: ignore[arg-type]
    started = time.monotonic()
    for i in range(30):
        events.emit(about(f"w{i}"), "Pending", f"note {i}")
    await events.drain(seconds=10)
    assert len(api.sent) == 30
    assert time.monotonic() - started >= (30 - 5) / 50 - 0.02


async def test_a_full_queue_drops_and_counts_with_every_sender_stuck() -> None:
    api = SlowApi(None)  # the API server never answers
    told: list[int] = []
    events = EventRecorder(api, "test", capacity=5, on_drop=lambda: told.append(1), senders=3)  # type: ignore[arg-type]
    for i in range(12):
        events.emit(about(f"w{i}"), "Pending", f"note {i}")
    await asyncio.sleep(0)  # each sender takes one off the queue and waits on it
    assert api.in_flight == 3
    for i in range(4):
        events.emit(about(f"late{i}"), "Pending", "late")
    # 12 emitted before the senders ran: 5 queued, 7 dropped; 3 slots freed, 1 late dropped.
    assert events.dropped == 8 and len(told) == 8
    started = time.monotonic()
    await events.drain(seconds=0.2)
    assert time.monotonic() - started < 5  # bounded although nothing was ever sent
    assert api.in_flight == 0 and api.sent == []
    # The 5 still queued when the exit's wait ended are never sent: dropped, and counted.
    assert events.dropped == 13 and len(told) == 13


async def test_after_a_drain_the_senders_start_again() -> None:
    api = SlowApi(0)
    events = EventRecorder(api, "test", senders=3)  # type: ignore[arg-type]
    events.emit(about("a"), "Admitted", "first")
    await events.drain()
    events.emit(about("b"), "Admitted", "second")
    await events.drain()
    assert api.sent == ["first", "second"]


def test_a_recorder_without_a_sender_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one sender, not 0"):
        EventRecorder(SlowApi(0), "test", senders=0)  # type: ignore[arg-type]


def test_an_events_time_is_the_micro_time_of_its_name_suffix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """event_time formats a second once and reuses it: against micro_time of the same moment,
    within a second, across one, and back to an earlier one."""
    import types
    from datetime import UTC, datetime

    from topogate import clock
    from topogate.api.times import micro_time

    moments = [
        1_795_764_808_899_198_285,
        1_795_764_808_000_000_999,
        1_795_764_808_999_999_999,
        1_795_764_809_000_000_000,
        1_795_764_809_000_001_000,
        1_700_000_000_123_456_789,
        0,
    ]
    for nanos in moments:
        monkeypatch.setattr(clock, "time", types.SimpleNamespace(time_ns=lambda n=nanos: n))
        second, rest = divmod(nanos, 1_000_000_000)
        expected = datetime.fromtimestamp(second, UTC).replace(microsecond=rest // 1000)
        assert clock.event_time() == (nanos, micro_time(expected))
