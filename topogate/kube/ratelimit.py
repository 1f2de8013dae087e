"""A client-side rate limit on API requests: a token bucket, as client-go's flowcontrol.

``qps`` tokens are added per second up to ``burst``; a request takes one, waiting for it when
the bucket is empty. A controller that writes thousands of statuses in a burst then spreads
them instead of meeting the API server's priority-and-fairness 429s.

Courtesy writes (pending messages: :func:`courtesy`) yield: while other requests wait for a
token they wait too, at most ``COURTESY_PATIENCE`` seconds, so at a small budget admissions are
never queued behind the words of why others wait, and the words still get out.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar

# How long a courtesy request lets others go first before it takes its own turn.
COURTESY_PATIENCE = 1.0
_COURTESY: ContextVar[bool] = ContextVar("courtesy", default=False)


@contextlib.contextmanager
def courtesy() -> Iterator[None]:
    """Requests made inside this block yield their turn at the bucket to the others'."""
    token = _COURTESY.set(True)
    try:
        yield
    finally:
        _COURTESY.reset(token)


class TokenBucket:
    """Each taker reserves the next token at once (the count may go below zero: tokens
    promised to earlier takers) and sleeps until its own; as golang.org/x/time/rate's
    Reserve, which client-go's limiter waits on. No lock: a lock's handover cost every
    throttled request a further wake-up of the event loop, and reservations in call order
    already serve takers in arrival order (each one 1/qps after the one before)."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be positive and burst at least 1")
        self.qps, self.burst = qps, burst
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()
        self._last_waiter = 0  # the number of the latest taker that had to wait
        self._urgent = 0  # takers that are not courtesy, sleeping until their token
        self._clear = asyncio.Event()  # set while none is
        self._clear.set()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now

    def try_take(self) -> float:
        """Take a token if one is there (0.0), else how many seconds until one is."""
        self._refill()
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self.qps

    def reserve(self) -> float:
        """Take the next token, now or promised: the seconds to wait for it (0.0: now)."""
        self._refill()
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def take(self) -> None:
        polite = _COURTESY.get()
        if polite and self._urgent:
            # asyncio.timeout, not wait_for: 3.11's wait_for drops a cancellation that comes
            # as the wait ends, and the request would then be sent anyway.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(COURTESY_PATIENCE):
                    await self._clear.wait()
        wait = self.reserve()
        if wait <= 0:
            return
        self._last_waiter += 1
        mine = self._last_waiter
        if not polite:
            self._urgent += 1
            self._clear.clear()
        try:
            await asyncio.sleep(wait)  # exactly until its token (one per 1/qps)
        except asyncio.CancelledError:
            # A taker that gives up gives its token back when no one queued behind it
            # (as rate's Reservation.Cancel): later takers keep their slots, and a token
            # given back under them would let two requests leave at once.
            if self._last_waiter == mine:
                self._last_waiter -= 1
                self._refill()
                self._tokens = min(self.burst, self._tokens + 1)
            raise
        finally:
            if not polite:
                self._urgent -= 1
                if not self._urgent:
                    self._clear.set()


# The check a write must pass at the moment it leaves, after the bucket's wait: a check made
# before the wait could pass, the wait outlast the Lease, and the write leave anyway. The
# fence (``topogate.runtime.fencing``) sets it around each write; the transports
# (``client.Kube``, ``FakeKube``) call :func:`check_before_send` right before sending. A
# context variable, so the Lease's own writes and the webhooks, outside that scope, pass.
_BEFORE_SEND: ContextVar[Callable[[], None] | None] = ContextVar("before_send", default=None)


@contextlib.contextmanager
def checked_before_send(check: Callable[[], None]) -> Iterator[None]:
    """Run ``check`` (it raises to refuse) right before each request sent inside this block,
    after the checks of the blocks around it (a fence inside a caller's own check)."""
    outer = _BEFORE_SEND.get()

    def both() -> None:
        if outer is not None:
            outer()
        check()

    token = _BEFORE_SEND.set(check if outer is None else both)
    try:
        yield
    finally:
        _BEFORE_SEND.reset(token)


def check_before_send() -> None:
    check = _BEFORE_SEND.get()
    if check is not None:
        check()
