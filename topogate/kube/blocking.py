"""Calls to the async client from blocking code in a worker thread.

The standalone webhook's cluster view and the shared CA's store are blocking seams
(``webhooks.review.ClusterView``, ``webhooks.sharedca.CAStore``): their callers run in an
executor, off the event loop, beside CPU work (validation, key generation). Their API calls
still go through the one async client, on the loop that owns it (an aiohttp session belongs
to one loop), and the thread waits for the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class OnLoop:
    """Runs coroutines on ``loop`` for a worker thread and returns (or raises) their result."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def __call__(self, call: Coroutine[Any, Any, T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            call.close()
            # Waiting here would block the loop the call needs: a deadlock, not a slow call.
            raise RuntimeError("a blocking API call made on the event loop; run it in a thread")
        return asyncio.run_coroutine_threadsafe(call, self.loop).result()
