"""What went wrong talking to the API server, and whether trying again can help.

Every writer catches :data:`API_ERRORS` instead of its own list of exceptions: an answer
from the server (``KubeError``) and a broken transport (connection reset, timeout) are both
ordinary events for a controller, never a reason to crash.
"""

from __future__ import annotations

import asyncio

import aiohttp


class KubeError(Exception):
    """A non-2xx answer; ``status`` is the HTTP status, ``reason`` the API's reason."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410


# Failures of the connection itself (the request may or may not have reached the server).
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientError,
    asyncio.TimeoutError,
    ConnectionError,
)
# Everything a call to the API can fail with that is not a bug in the caller.
API_ERRORS: tuple[type[BaseException], ...] = (KubeError, *TRANSPORT_ERRORS)
