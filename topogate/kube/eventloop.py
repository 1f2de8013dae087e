"""The event loop serve and the webhook server run on: uvloop (libuv) when it is installed, else
asyncio's own.

serve's CPU is mostly the loop and its transports, not its decisions: per API request (a TLS
write, its response, the watch events it brings back) asyncio's pure-Python selector loop and
SSL protocol cost about as much as aiohttp's request handling. uvloop runs the same coroutines
(aiohttp supports it) with the loop, sockets and TLS in C; ``--event-loop asyncio`` keeps the
standard loop (for debugging, or a platform without uvloop).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
CHOICES = ("auto", "uvloop", "asyncio")


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--event-loop",
        choices=CHOICES,
        default="auto",
        help="the event loop: uvloop when installed (auto, the default), or asyncio's own",
    )


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop to run on (None: asyncio's default); ``uvloop`` when it is not installed is a
    usage error (SystemExit with a message, as argparse gives)."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            message = "--event-loop uvloop: uvloop is not installed (pip install uvloop)"
            raise SystemExit(message) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T], choice: str = "auto") -> T:
    """``asyncio.run(main)`` on the chosen loop."""
    try:
        factory = loop_factory(choice)
    except SystemExit:
        main.close()  # never awaited: no "was never awaited" warning on the way out
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
