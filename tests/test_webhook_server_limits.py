"""The webhook server bounds what a client may hold: slow headers, slow bodies, idle keep-alive
connections and too many connections. Loopback only, with deadlines of a second or less.

Server and clients share one event loop, so the bounds on how long something took are on the
seconds the loop spent waiting (:class:`LoopClock`), not on the wall clock: on a loaded machine
the process is not scheduled for whole seconds, and every timer, the server's deadlines
included, fires that much late. A server that waits out a deadline too long, or that waits
where it must act at once, still shows it in those seconds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.kit import review_for
from topogate.webhooks.options import Limits
from topogate.webhooks.server import Running, ServingCertificate, Throttled, running

LIMITS = Limits(
    header_timeout=1.0, body_timeout=1.0, idle_timeout=1.0, max_connections=4, log_interval=60
)
POD = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
REVIEW = json.dumps(review_for(POD, "Pod")).encode()


@dataclass(frozen=True)
class Took:
    wall: float  # seconds on the wall clock
    waited: float  # of which the event loop was waiting, not late: wall less its lateness


class LoopClock:
    """How late the event loop runs: a task asks to wake every ``TICK`` seconds and adds up
    how late it woke (the process not scheduled, or the loop busy with other callbacks,
    TLS handshakes included). What a timer of the server is late by is within that sum."""

    TICK = 0.01

    def __init__(self) -> None:
        self._late = 0.0
        self._due = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._due = loop.time() + self.TICK
            await asyncio.sleep(self.TICK)
            self._late += max(0.0, loop.time() - self._due)

    def late(self) -> float:
        """Seconds late so far, the tick not yet woken included (a stall just ending)."""
        return self._late + max(0.0, asyncio.get_running_loop().time() - self._due)

    def start(self) -> tuple[float, float]:
        return time.monotonic(), self.late()

    def took(self, mark: tuple[float, float]) -> Took:
        wall = time.monotonic() - mark[0]
        return Took(wall, max(0.0, wall - (self.late() - mark[1])))


@pytest.fixture
async def clock() -> AsyncIterator[LoopClock]:
    meter = LoopClock()
    meter._task = asyncio.create_task(meter._run())
    await asyncio.sleep(0)  # ticking from here
    yield meter
    meter._task.cancel()
    await asyncio.gather(meter._task, return_exceptions=True)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Running]:
    certificate = ServingCertificate.prepare(tmp_path, ["localhost"], ["127.0.0.1"])
    async with running("127.0.0.1", 0, certificate, limits=LIMITS) as served:
        served.site.ca = tmp_path / "ca.crt"  # type: ignore[attr-defined]
        yield served


def _tls(served: Running) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(served.site.ca))  # type: ignore[attr-defined]


async def _connect(served: Running) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(
        "127.0.0.1", served.site.port, ssl=_tls(served), server_hostname="127.0.0.1"
    )


async def _closed_after(reader: asyncio.StreamReader, clock: LoopClock, limit: float = 5.0) -> Took:
    """How long until the server closes the connection (EOF or reset); ``limit`` seconds on
    the wall clock at the most."""
    mark = clock.start()
    try:
        while await asyncio.wait_for(reader.read(4096), limit):
            pass
    except (ConnectionError, ssl.SSLError):
        pass
    return clock.took(mark)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, ssl.SSLError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), 2)


def _head(length: int) -> bytes:
    return (
        f"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def test_half_a_header_line_is_disconnected_at_the_deadline(
    server: Running, clock: LoopClock
) -> None:
    reader, writer = await _connect(server)
    writer.write(b"POST /mutate HTT")
    await writer.drain()
    took = await _closed_after(reader, clock)
    await _close(writer)
    # Timers never fire early: the wall clock bounds it from below; the loop's wait, above.
    assert took.wall > 0.5 and took.waited < 2.0, took


async def test_a_silent_tcp_client_is_disconnected_at_the_deadline(
    server: Running, clock: LoopClock
) -> None:
    """No TLS handshake at all: the same deadline, from accept."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.site.port)
    took = await _closed_after(reader, clock)
    await _close(writer)
    assert took.wall > 0.5 and took.waited < 2.0, took


async def test_a_trickled_body_is_answered_408_and_closed(
    server: Running, clock: LoopClock
) -> None:
    reader, writer = await _connect(server)
    writer.write(_head(len(REVIEW)))
    mark = clock.start()

    async def trickle() -> None:
        for byte in REVIEW[:50]:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.1)

    sender = asyncio.create_task(trickle())
    answer = await asyncio.wait_for(reader.read(4096), 5)
    took = clock.took(mark)
    rest = await _closed_after(reader, clock)
    sender.cancel()
    await asyncio.gather(sender, return_exceptions=True)
    await _close(writer)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"review body not received in time" in answer
    assert took.wall > 0.8 and took.waited < 2.0 and rest.waited < 1.0, (took, rest)


async def _post(port: int, context: ssl.SSLContext, body: bytes = REVIEW) -> dict[str, Any]:
    """One review on a new connection; its AdmissionReview answer."""
    connector = aiohttp.TCPConnector(ssl=context, force_close=True)
    url = f"https://127.0.0.1:{port}/validate"
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(url, data=body) as response,
    ):
        assert response.status == 200, await response.text()
        answer: dict[str, Any] = await response.json()
        return answer


async def test_at_the_cap_a_newcomer_takes_the_place_of_the_connection_idle_the_longest(
    server: Running, caplog: pytest.LogCaptureFixture, clock: LoopClock
) -> None:
    idle = [await _connect(server) for _ in range(LIMITS.max_connections)]
    mark = clock.start()
    answer = await _post(server.site.port, _tls(server))
    # Answered at once, not after the idle connections' deadline (1 s).
    assert answer["response"]["allowed"] is True
    took = clock.took(mark)
    assert took.waited < 0.5, took
    # The oldest idle connection made the room, closed at once.
    closed = await _closed_after(idle[0][0], clock)
    assert closed.waited < 0.1, closed
    for _, writer in idle:
        await _close(writer)
    refusals = [r for r in caplog.records if "to make room" in r.getMessage()]
    assert [r.getMessage() for r in refusals] == [
        "closed idle or slow connections to make room: 4 already open (1 time(s) in the last 60 s)"
    ]


async def test_reviews_are_served_while_128_idle_connections_are_held_and_reopened(
    tmp_path: Path, clock: LoopClock
) -> None:
    """Issue #26: with the cap held by idle TLS connections, re-opened as each is closed,
    92% of reviews on new connections were reset. The first-request deadline is long here,
    so only the choice of which connection to close can let the reviews in."""
    limits = Limits(header_timeout=30.0, max_connections=128)
    certificate = ServingCertificate.prepare(tmp_path, ["localhost"], ["127.0.0.1"])
    async with running("127.0.0.1", 0, certificate, limits=limits) as served:
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        port = served.site.port
        stop = asyncio.Event()
        established, reopened = [0], [0]

        async def hold() -> None:
            while not stop.is_set():
                try:
                    reader, writer = await asyncio.open_connection(
                        "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
                    )
                except (ConnectionError, ssl.SSLError):
                    continue  # closed in its handshake (made room for another): again
                established[0] += 1
                try:
                    await _closed_after(reader, clock, 60.0)  # held until the server closes it
                finally:
                    writer.transport.abort()
                reopened[0] += 1

        holders = [asyncio.create_task(hold()) for _ in range(limits.max_connections)]
        # The cap held by idle TLS connections, every handshake done (accepted is not enough:
        # on a loaded machine the reviews would displace handshakes, not idle connections).
        deadline = time.monotonic() + 60
        while established[0] < limits.max_connections:
            assert time.monotonic() < deadline, f"{established[0]} connections made in 60 s"
            await asyncio.sleep(0.05)
        assert served.site.open_connections() == limits.max_connections
        answers, waits = [], []
        for _ in range(20):
            mark = clock.start()
            answer = await asyncio.wait_for(_post(port, context), 30.0)
            waits.append(clock.took(mark).waited)
            answers.append(answer["response"]["allowed"])
        stop.set()
        for task in holders:
            task.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        await asyncio.sleep(0.1)  # the cancelled handshakes' transports close on the loop
    assert answers == [True] * 20
    assert max(waits) < 2.0, waits  # none waited for a connection's deadline (30 s)
    assert reopened[0] >= 20  # each review took an idle connection's place, which came back


async def test_beyond_the_cap_with_every_connection_handling_a_request_newcomers_are_closed(
    server: Running, caplog: pytest.LogCaptureFixture, clock: LoopClock
) -> None:
    busy = []
    for _ in range(LIMITS.max_connections):  # headers sent, the body held back: in a handler
        reader, writer = await _connect(server)
        writer.write(_head(len(REVIEW)) + REVIEW[:10])
        await writer.drain()
        busy.append((reader, writer))
    await asyncio.sleep(0.2)
    beyond = [await asyncio.open_connection("127.0.0.1", server.site.port) for _ in range(20)]
    # Closed at once, not queued behind the busy ones.
    took = await asyncio.gather(*(_closed_after(reader, clock) for reader, _ in beyond))
    assert max(t.waited for t in took) < 0.5, took
    # Once the bodies' deadline answered them (408), reviews get through again.
    for reader, _ in busy:
        assert (await asyncio.wait_for(reader.read(4096), 5)).startswith(b"HTTP/1.1 408")
    answer = await _post(server.site.port, _tls(server))
    assert answer["response"]["allowed"] is True
    for _, writer in busy + beyond:
        await _close(writer)
    refusals = [r for r in caplog.records if "closed new connections" in r.getMessage()]
    assert [r.getMessage() for r in refusals] == [
        "closed new connections: 4 already open, all handling requests (1 time(s) in the last 60 s)"
    ]


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(
    server: Running, clock: LoopClock
) -> None:
    reader, writer = await _connect(server)
    writer.write(_head(len(REVIEW)) + REVIEW)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    await reader.readexactly(length)
    took = await _closed_after(reader, clock)
    await _close(writer)
    assert took.wall > 0.8 and took.waited < 2.5, took


def test_refusals_are_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    """EMFILE in accept or a flood beyond the cap: one line per interval, no traceback."""
    throttled = Throttled(60)
    with caplog.at_level(logging.WARNING):
        for _ in range(1000):
            throttled.warn("accept", "cannot accept connections: Too many open files")
    assert [(r.getMessage(), r.exc_info) for r in caplog.records] == [
        ("cannot accept connections: Too many open files (1 time(s) in the last 60 s)", None)
    ]


async def test_headers_over_8_kb_are_refused_with_one_line_per_interval_and_no_traceback(
    server: Running, caplog: pytest.LogCaptureFixture
) -> None:
    big = b"POST /validate HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"
    with caplog.at_level(logging.INFO):
        for _ in range(30):
            reader, writer = await _connect(server)
            writer.write(big)
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(4096), 5)
            assert answer.startswith(b"HTTP/1.0 400"), answer
            await _close(writer)
    lines = [(r.levelname, r.getMessage()[:60], r.exc_info) for r in caplog.records]
    assert lines == [
        ("WARNING", "refused malformed HTTP: LineTooLong: 400, message: Got more ", None)
    ]


async def test_a_handler_bug_is_logged_with_its_trace_once_per_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A review that trips a bug gets a 400 each time; its traceback is logged once."""
    from collections.abc import Mapping

    from tests.test_webhook_auth import REVIEW as JOB_REVIEW
    from topogate.admission.podsets import Catalog

    class Broken:
        def catalog_for(self, namespace: str, queue: str) -> Catalog | None:
            raise RuntimeError("a bug")

        def hypernodes(self) -> list[Mapping[str, Any]] | None:
            return None

    certificate = ServingCertificate.prepare(tmp_path, ["localhost"], ["127.0.0.1"])
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    with caplog.at_level(logging.INFO):
        async with (
            running("127.0.0.1", 0, certificate, Broken(), limits=LIMITS) as served,
            aiohttp.ClientSession() as session,
        ):
            for _ in range(30):
                url = f"https://127.0.0.1:{served.site.port}/validate"
                async with session.post(url, data=JOB_REVIEW, ssl=context) as response:
                    assert (await response.json())["response"]["allowed"] is False
    bugs = [r for r in caplog.records if "could not process" in r.getMessage()]
    assert [(r.levelname, r.getMessage(), bool(r.exc_info)) for r in bugs] == [
        (
            "ERROR",
            "could not process Job 00000000-0000-0000-0000-000000000000 "
            "(1 time(s) in the last 60 s)",
            True,
        )
    ]


def test_on_uvloop_each_tls_connection_is_guarded(tmp_path: Path) -> None:
    """serve and the webhook server run on uvloop by default, whose TLS transports cannot be
    weakly referenced and are no ``asyncio.Transport``: a weak set of them made every
    connection's guard fail after its handshake (no first-request deadline, no cap), with a
    task traceback per connection, and closing one to make room did nothing."""
    uvloop = pytest.importorskip("uvloop")
    certificate = ServingCertificate.prepare(tmp_path, ["localhost"], ["127.0.0.1"])

    async def main() -> tuple[int, float]:
        assert "uvloop" in type(asyncio.get_running_loop()).__module__
        async with running("127.0.0.1", 0, certificate, limits=LIMITS) as served:
            context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", served.site.port, ssl=context, server_hostname="127.0.0.1"
            )
            for _ in range(200):  # the handshake's end reaches the server's side
                if served.site.guard.connections:
                    break
                await asyncio.sleep(0.01)
            guarded = len(served.site.guard.connections)
            victim = served.site.guard.victim()  # as a newcomer at the cap would have it
            assert victim is not None
            started = time.monotonic()
            victim.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError, TimeoutError):
                while await asyncio.wait_for(reader.read(4096), 5.0):
                    pass
            waited = time.monotonic() - started
            await _close(writer)
            return guarded, waited

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        guarded, waited = runner.run(main())
    assert guarded == 1
    assert waited < 0.5  # closed at once, not at its first-request deadline (1 s)


def test_on_uvloop_a_keep_alive_connection_outlives_its_first_request_deadline(
    tmp_path: Path,
) -> None:
    """uvloop's ``connect_accepted_socket`` returns its TLS protocol, not aiohttp's handler:
    the guard keyed connections by it, the middleware never found them, and every connection
    was aborted at its first-request deadline (5 s by default), reviews in flight included."""
    uvloop = pytest.importorskip("uvloop")
    certificate = ServingCertificate.prepare(tmp_path, ["localhost"], ["127.0.0.1"])
    limits = Limits(header_timeout=0.5, idle_timeout=5.0, max_connections=4, log_interval=60)

    async def review(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
        writer.write(_head(len(REVIEW)) + REVIEW)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        await asyncio.wait_for(reader.readexactly(length), 5.0)
        return head

    async def main() -> tuple[bytes, bytes]:
        async with running("127.0.0.1", 0, certificate, limits=limits) as served:
            context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", served.site.port, ssl=context, server_hostname="127.0.0.1"
            )
            first = await review(reader, writer)
            await asyncio.sleep(1.0)  # past the first-request deadline, within the idle one
            try:
                second = await review(reader, writer)
            except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError) as error:
                second = repr(error).encode()
            await _close(writer)
            return first, second

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        first, second = runner.run(main())
    assert first.startswith(b"HTTP/1.1 200") and second.startswith(b"HTTP/1.1 200"), second
