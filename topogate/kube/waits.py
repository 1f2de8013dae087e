"""Waiting with a deadline (every wait in the controller has one)."""

from __future__ import annotations

import asyncio


async def sleep_or(event: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` or until ``event`` is set; True when the event was set."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
        return True
    except TimeoutError:
        return False
