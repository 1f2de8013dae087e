"""The API client's token bucket and its defaults."""

from __future__ import annotations

import asyncio
import time

import pytest

from topogate.kube.client import DEFAULT_BURST, DEFAULT_QPS, Kube
from topogate.kube.ratelimit import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_is_taken_at_once_then_one_token_per_interval() -> None:
    clock = Clock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.try_take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.try_take() == pytest.approx(0.1)
    clock.now += 0.1
    assert bucket.try_take() == 0.0
    clock.now += 10  # idle: back to the burst, never more
    assert [bucket.try_take() for _ in range(4)][-1] == pytest.approx(0.1)


async def test_waiters_are_spread_at_the_rate() -> None:
    bucket = TokenBucket(qps=100, burst=1)
    started = time.monotonic()
    await asyncio.gather(*(bucket.take() for _ in range(6)))
    assert time.monotonic() - started >= 0.05 - 0.005  # 5 waits of 10 ms after the first


def test_a_reservation_promises_the_next_token_without_waiting_for_the_ones_before() -> None:
    clock = Clock()
    bucket = TokenBucket(qps=10, burst=2, clock=clock)
    assert [bucket.reserve() for _ in range(5)] == pytest.approx([0.0, 0.0, 0.1, 0.2, 0.3])
    assert bucket.try_take() == pytest.approx(0.4)  # behind the three promised
    clock.now += 0.35  # three promised tokens came and went: the next is 0.05 s away
    assert bucket.reserve() == pytest.approx(0.05)
    clock.now += 10
    assert [bucket.reserve() for _ in range(3)] == pytest.approx([0.0, 0.0, 0.1])


async def test_takers_go_in_arrival_order_at_the_rate() -> None:
    bucket = TokenBucket(qps=200, burst=1)
    order: list[int] = []

    async def take(i: int) -> None:
        await bucket.take()
        order.append(i)

    started = time.monotonic()
    await asyncio.gather(*(take(i) for i in range(10)))
    took = time.monotonic() - started
    assert order == list(range(10))
    assert took >= 9 / 200 - 0.002
    assert took < 9 / 200 + 0.5  # a loaded machine's margin; a lost token would add 5 ms each


async def test_a_taker_that_gives_up_gives_its_token_back_when_last_in_the_queue() -> None:
    clock = Clock()
    bucket = TokenBucket(qps=1, burst=1, clock=clock)
    assert bucket.reserve() == 0.0
    first = asyncio.ensure_future(bucket.take())  # promised the token 1 s from now
    second = asyncio.ensure_future(bucket.take())  # and the one 2 s from now
    await asyncio.sleep(0)
    assert bucket.try_take() == pytest.approx(3.0)
    # The first gives up under the second: the second keeps its slot, nothing comes back.
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert bucket.try_take() == pytest.approx(3.0)
    # The last one gives up: its token is free again.
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert bucket.try_take() == pytest.approx(2.0)


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        TokenBucket(qps=0, burst=1)


async def test_the_session_ignores_proxy_settings_unless_asked() -> None:
    from kubernetes.aio.client.configuration import Configuration

    configuration = Configuration(host="https://127.0.0.1:1")
    kube = Kube(configuration)
    assert kube._session.trust_env is False
    assert (DEFAULT_QPS, DEFAULT_BURST) == (300.0, 500)  # Kueue's
    asked = Kube(Configuration(host="https://127.0.0.1:1"), trust_env=True)
    assert asked._session.trust_env is True
    await kube.close()
    await asked.close()


async def test_a_client_with_its_own_budget_does_not_wait_for_the_others_tokens() -> None:
    """serve's events go through a client with its own bucket (client-go's: one per client):
    a burst of events never takes the tokens the Workload writes wait for, nor waits for
    theirs; both share one connection pool, closed once by its owner."""
    from aiohttp import web
    from kubernetes.aio.client.configuration import Configuration

    from topogate.kube.client import own_budget
    from topogate.kube.resources import EVENTS, WORKLOADS

    received: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        received.append(request.path.rsplit("/", 1)[-1])
        return web.json_response({"metadata": {"name": "x"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kube = Kube(Configuration(host=f"http://127.0.0.1:{port}"), qps=0.5, burst=1)
    events = own_budget(kube)
    assert isinstance(events, Kube) and events is not kube
    try:
        await kube.get(WORKLOADS, "w", "ns")  # the writes' one token
        started = time.monotonic()
        # With the token bucket shared this waits 2 s (one token per 2 s).
        await events.create(EVENTS, {"metadata": {"name": "e"}}, "ns")
        assert time.monotonic() - started < 1.0
        assert received == ["w", "events"]
        await events.close()  # a view: the shared session stays open
        assert not kube._session.closed
    finally:
        await kube.close()
        await runner.cleanup()
    assert kube._session.closed


async def test_a_courtesy_request_lets_the_waiting_others_go_first() -> None:
    """Pending messages yield to admissions at the client's budget: with admissions waiting
    for tokens, a courtesy request takes its turn after them (within its patience)."""
    from topogate.kube.ratelimit import courtesy

    bucket = TokenBucket(qps=100, burst=1)
    order: list[str] = []

    async def take(name: str, polite: bool) -> None:
        if polite:
            with courtesy():
                await bucket.take()
        else:
            await bucket.take()
        order.append(name)

    await bucket.take()  # the bucket is empty: every one below waits
    urgent = [asyncio.create_task(take(f"admit{i}", False)) for i in range(3)]
    await asyncio.sleep(0)
    polite = asyncio.create_task(take("pending", True))
    await asyncio.sleep(0)
    late = asyncio.create_task(take("admit3", False))  # came after the courtesy one
    await asyncio.gather(*urgent, polite, late)
    assert order == ["admit0", "admit1", "admit2", "admit3", "pending"]


async def test_a_courtesy_request_waits_no_longer_than_its_patience(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a steady stream of admissions the words still get out: a courtesy request takes
    its turn once its patience is spent, ahead of admissions that came after that."""
    from topogate.kube import ratelimit

    monkeypatch.setattr(ratelimit, "COURTESY_PATIENCE", 0.05)
    bucket = TokenBucket(qps=200, burst=1)
    stop = asyncio.Event()
    admitted = 0

    async def admissions() -> None:
        nonlocal admitted
        while not stop.is_set():  # always one waiting
            await bucket.take()
            admitted += 1

    streams = [asyncio.create_task(admissions()) for _ in range(2)]
    await asyncio.sleep(0.01)
    started = time.monotonic()
    with ratelimit.courtesy():
        await asyncio.wait_for(bucket.take(), 2.0)
    waited = time.monotonic() - started
    stop.set()
    await asyncio.gather(*streams)
    assert 0.05 <= waited < 0.5
    assert admitted >= 8  # they went first meanwhile


async def test_with_nobody_waiting_a_courtesy_request_goes_at_once() -> None:
    from topogate.kube.ratelimit import courtesy

    bucket = TokenBucket(qps=1, burst=2)
    started = time.monotonic()
    with courtesy():
        await bucket.take()
    assert time.monotonic() - started < 0.05


async def test_a_courtesy_request_cancelled_as_its_wait_ends_stays_cancelled() -> None:
    """Cancelled (serve's shutdown, a describer stopped) in the step its wait for the others
    ends, a courtesy request must not go on to take a token and send: Python 3.11's
    ``wait_for`` returned the inner result then and dropped the cancellation."""
    from topogate.kube.ratelimit import courtesy

    bucket = TokenBucket(qps=1, burst=1)
    await bucket.take()  # the bucket is empty
    urgent = asyncio.create_task(bucket.take())  # an admission waits for its token
    await asyncio.sleep(0)
    sent: list[str] = []

    async def polite() -> None:
        with courtesy():
            await bucket.take()
        sent.append("pending")

    task = asyncio.create_task(polite())
    await asyncio.sleep(0)  # it lets the admission go first
    bucket._clear.set()  # the others are through ...
    await asyncio.sleep(0)
    task.cancel()  # ... and it is cancelled in the same step
    await asyncio.gather(task, return_exceptions=True)
    urgent.cancel()
    await asyncio.gather(urgent, return_exceptions=True)
    assert task.cancelled() and not sent
