"""Waiting with a deadline (every wait in the controller has one)."""

from __future__ import annotations

import asyncio


async def sleep_or(event: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` or until ``event`` is set; True when the event was set."""
    # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that arrives
    # as the event is set, and a cancelled controller task would then never end.
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
        return True
    except TimeoutError:
        return False
