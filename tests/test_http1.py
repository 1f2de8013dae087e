"""The client's own HTTP/1.1 connections (topogate.kube.http1) against a raw local server that
answers each request with bytes of the test's choosing: every framing the API server (Go's
net/http) uses, kept-alive connections reused and dead ones replaced, a server that hangs or
hangs up, and Kube's requests over it as over aiohttp."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from kubernetes.aio.client.configuration import Configuration
from yarl import URL

from topogate.kube.client import Kube
from topogate.kube.errors import TRANSPORT_ERRORS, KubeError
from topogate.kube.http1 import USER_AGENT, Http1Pool
from topogate.kube.resources import WORKLOADS

Answer = Callable[[bytes], bytes | None]  # the request's head and body -> the response


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def _pool_on(handle: Handler) -> AsyncIterator[Http1Pool]:
    """A pool to a local server whose connections ``handle`` serves; both closed after."""
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None)
    try:
        yield pool
    finally:
        await pool.close()
        server.close()


@contextlib.asynccontextmanager
async def _server(answer: Answer) -> AsyncIterator[tuple[int, list[bytes], list[int]]]:
    """A server answering each request with ``answer(request)`` (None: hang up); yields its
    port, the requests it read and the connections it accepted (one int each)."""
    requests: list[bytes] = []
    connections: list[int] = []
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(len(connections))
        writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                request = head + await reader.readexactly(length)
                requests.append(request)
                response = answer(request)
                if response is None:
                    break
                writer.write(response)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client went, or the test ended while a connection stayed open
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, requests, connections
    finally:
        server.close()
        for writer in writers:
            writer.close()
        await asyncio.sleep(0.01)  # the handlers see their ends


def _ok(body: bytes, *extra: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in extra)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


def _chunked(*pieces: bytes) -> bytes:
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"


async def test_a_request_goes_out_whole_and_its_answer_comes_back() -> None:
    async with _server(lambda r: _ok(b'{"a": 1}')) as (port, requests, _):
        pool = Http1Pool(URL(f"http://127.0.0.1:{port}/prefix/"), None)
        status, body = await pool.request(
            "PATCH", "/apis/x/y?z=1", {"Content-Type": "application/json"}, b'{"b":2}', 5
        )
        await pool.close()
    assert (status, body) == (200, b'{"a": 1}')
    assert requests == [
        b"PATCH /prefix/apis/x/y?z=1 HTTP/1.1\r\n"
        + f"Host: 127.0.0.1:{port}\r\n".encode()
        + b"Content-Type: application/json\r\nContent-Length: 7\r\n"
        + f"User-Agent: {USER_AGENT}\r\n\r\n".encode()
        + b'{"b":2}'
    ]


@pytest.mark.parametrize(
    "response",
    [
        _chunked(b'{"a": ', b"1}"),
        _chunked(b'{"a": 1}'),
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\n{"a\r\n5\r\n": 1}\r\n0\r\n\r\n',
        b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\n" + b'{"a": 1}',
    ],
)
async def test_every_framing_of_a_body_is_read(response: bytes) -> None:
    async with _server(lambda r: response) as (port, _, connections):
        pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None)
        for _ in range(3):  # and the connection is reused after each
            assert await pool.request("GET", "/", {}, None, 5) == (200, b'{"a": 1}')
        await pool.close()
    assert len(connections) == 1


async def test_a_large_chunked_body_in_many_reads_is_read_whole() -> None:
    """A relist's page: megabytes in chunks, over many socket reads."""
    pieces = [b"%04d" % i * 256 for i in range(3000)]  # 3 MB in 3,000 chunks
    async with _server(lambda r: _chunked(*pieces)) as (port, _, _):
        pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None)
        for _ in range(2):
            assert await pool.request("GET", "/", {}, None, 30) == (200, b"".join(pieces))
        await pool.close()


async def test_a_connection_the_server_marks_closed_is_not_kept() -> None:
    async with _server(lambda r: _ok(b"{}", "Connection: close")) as (port, _, connections):
        pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None)
        for _ in range(2):
            assert await pool.request("GET", "/", {}, None, 5) == (200, b"{}")
            assert pool._open == 0
        await pool.close()
    assert len(connections) == 2


async def test_a_response_until_close_ends_with_the_connection() -> None:
    # A server that writes a length-less response and closes.
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b'HTTP/1.0 200 OK\r\n\r\n{"a": 1}')
        await writer.drain()
        writer.close()

    async with _pool_on(handle) as pool:
        for _ in range(2):
            assert await pool.request("GET", "/", {}, None, 5) == (200, b'{"a": 1}')
        assert pool._open == 0  # neither kept


async def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    served = [0]

    def answer(request: bytes) -> bytes | None:
        served[0] += 1
        return _ok(b"{}", "Connection: close") if served[0] == 1 else _ok(b"{}")

    async with _server(answer) as (port, _, connections):
        pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None)
        assert await pool.request("GET", "/", {}, None, 5) == (200, b"{}")
        assert await pool.request("GET", "/", {}, None, 5) == (200, b"{}")
        # Closed by the server after an answer it did not mark: seen closed before reuse.
        idle = pool._idle[0]
        assert idle.transport is not None
        idle.transport.close()
        await asyncio.sleep(0.05)
        assert await pool.request("GET", "/", {}, None, 5) == (200, b"{}")
        await pool.close()
    assert len(connections) == 3


async def test_a_server_that_hangs_up_or_hangs_or_garbles_is_a_transport_error() -> None:
    def answer(request: bytes) -> bytes | None:
        if b"/bye" in request:
            return None
        if b"/slow" in request:
            return b""
        if b"/junk" in request:
            return b"SMTP ready\r\n\r\n"
        return _ok(b"{}")

    async with _server(answer) as (port, _, _):
        pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None)
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await pool.request("GET", "/bye", {}, None, 5)
        with pytest.raises(TimeoutError):
            await pool.request("GET", "/slow", {}, None, 0.2)
        with pytest.raises(aiohttp.ClientPayloadError):
            await pool.request("GET", "/junk", {}, None, 5)
        assert await pool.request("GET", "/", {}, None, 5) == (200, b"{}")
        assert pool._open == 1  # only the good one left open
        await pool.close()
    for error in (aiohttp.ServerDisconnectedError(), TimeoutError(), aiohttp.ClientPayloadError()):
        assert isinstance(error, TRANSPORT_ERRORS)


async def test_a_refused_connection_is_a_transport_error_naming_the_server() -> None:
    async with _server(lambda r: None) as (port, _, _):
        pass  # closed: nothing listens there now
    pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None)
    with pytest.raises(aiohttp.ClientOSError, match=f"127.0.0.1:{port}") as raised:
        await pool.request("GET", "/", {}, None, 5)
    assert isinstance(raised.value, TRANSPORT_ERRORS)
    assert pool._open == 0


async def test_at_most_limit_connections_are_open() -> None:
    release = asyncio.Event()
    waiting: list[asyncio.StreamWriter] = []
    asked = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        waiting.append(writer)
        with contextlib.suppress(
            asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError
        ):
            while True:
                await reader.readuntil(b"\r\n\r\n")
                asked[0] += 1
                await release.wait()
                writer.write(_ok(b"{}"))
                await writer.drain()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None, limit=2)
    try:
        requests = [asyncio.create_task(pool.request("GET", "/", {}, None, 5)) for _ in range(5)]
        await asyncio.sleep(0.2)
        assert (asked[0], len(waiting), pool._open) == (2, 2, 2)
        release.set()
        assert await asyncio.gather(*requests) == [(200, b"{}")] * 5
        assert pool._open <= 2
    finally:
        await pool.close()
        server.close()
        for writer in waiting:
            writer.close()
        await asyncio.sleep(0.01)


async def test_kube_requests_and_errors_over_its_own_connections() -> None:
    def answer(request: bytes) -> bytes | None:
        if b"/missing" in request:
            status = {"kind": "Status", "reason": "NotFound", "message": "w not found"}
            body = json.dumps(status).encode()
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        return _ok(b'{"metadata": {"name": "w"}}')

    async with _server(answer) as (port, requests, _):
        kube = Kube(Configuration(host=f"http://127.0.0.1:{port}"), qps=None)
        assert kube._http1 is not None
        got = await kube.patch(WORKLOADS, "w", {"status": {}}, "ns", subresource="status")
        assert got == {"metadata": {"name": "w"}}
        assert await kube.list(WORKLOADS, "ns", limit=5, labelSelector=None) == got
        with pytest.raises(KubeError) as raised:
            await kube.get(WORKLOADS, "missing", "ns")
        assert (raised.value.status, raised.value.reason) == (404, "NotFound")
        await kube.close()
    assert requests[0].startswith(
        b"PATCH /apis/topogate.dev/v1alpha1/namespaces/ns/workloads/w/status HTTP/1.1\r\n"
    )
    assert b"Content-Type: application/merge-patch+json\r\n" in requests[0]
    assert requests[1].startswith(
        b"GET /apis/topogate.dev/v1alpha1/namespaces/ns/workloads?limit=5 HTTP/1.1\r\n"
    )


def test_a_client_with_a_proxy_or_its_own_timeouts_keeps_aiohttps_requests() -> None:
    async def build() -> list[bool]:
        made = [
            Kube(Configuration(host="http://127.0.0.1:1")),
            Kube(Configuration(host="http://127.0.0.1:1"), trust_env=True),
            Kube(Configuration(host="http://127.0.0.1:1", proxy="http://proxy:3128")),
            Kube(
                Configuration(host="http://127.0.0.1:1"),
                request_timeout=aiohttp.ClientTimeout(sock_read=5),
            ),
        ]
        own = [k._http1 is not None for k in made]
        for k in made:
            await k.close()
        return own

    assert asyncio.run(build()) == [True, False, False, False]


def test_requests_on_uvloop() -> None:
    """serve runs on uvloop, whose transports are not asyncio's classes."""
    uvloop = pytest.importorskip("uvloop")

    async def exchange() -> list[tuple[int, bytes]]:
        async with _server(lambda r: _chunked(b"{}")) as (port, _, _):
            pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None)
            got = [await pool.request("GET", "/", {}, None, 5) for _ in range(2)]
            await pool.close()
            return got

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(exchange()) == [(200, b"{}")] * 2


async def test_requests_past_the_limit_are_sent_in_arrival_order() -> None:
    """A burst past the limit: each freed connection goes to the request that waited
    longest, never to a newcomer (a starved one would time out)."""
    async with _server(lambda r: _ok(b"{}")) as (port, requests, connections):
        pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None, limit=2)
        first = [asyncio.create_task(pool.request("GET", f"/{i}", {}, None, 5)) for i in range(6)]
        await asyncio.sleep(0)  # the first six are waiting or sent when six more come
        later = [
            asyncio.create_task(pool.request("GET", f"/{i}", {}, None, 5)) for i in range(6, 12)
        ]
        assert await asyncio.gather(*first, *later) == [(200, b"{}")] * 12
        await pool.close()
    assert [r.split(b" ")[1] for r in requests] == [f"/{i}".encode() for i in range(12)]
    assert len(connections) == 2


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    async with _server(lambda r: _ok(b"{}")) as (port, requests, connections):
        pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None)
        with pytest.raises(ValueError, match="Authorization"):
            await pool.request("GET", "/", {"Authorization": "Bearer a\r\nX: y"}, None, 5)
        await pool.close()
    assert (requests, connections) == ([], [])


# A hostile or broken server: the parser (llhttp) must refuse what RFC 9112 calls ambiguous,
# and no byte of one response may be read as another's.


@pytest.mark.parametrize(
    "response",
    [
        # Both framings: a smuggling attempt, not a choice to make.
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"2\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}x",
        b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n{}",
        # A header injected into the status line behind a bare CR or a bare LF.
        b"HTTP/1.1 200 OK\rContent-Length: 0\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\nContent-Length: 0\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        # An upgrade no request asked for.
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
    ],
)
async def test_a_malformed_or_ambiguous_response_is_refused_and_its_connection_dropped(
    response: bytes,
) -> None:
    async with _server(lambda r: response if b"/bad" in r else _ok(b"{}")) as (
        port,
        _,
        connections,
    ):
        pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None)
        with pytest.raises(aiohttp.ClientPayloadError, match="malformed response"):
            await pool.request("GET", "/bad", {}, None, 5)
        assert pool._open == 0
        assert await pool.request("GET", "/", {}, None, 5) == (200, b"{}")
        await pool.close()
    assert len(connections) == 2


async def test_an_interim_response_before_the_real_one_is_skipped() -> None:
    def answer(request: bytes) -> bytes:
        return b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + _ok(
            b'{"a": 1}'
        )

    async with _server(answer) as (port, _, connections):
        pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None)
        for _ in range(2):
            assert await pool.request("GET", "/", {}, None, 5) == (200, b'{"a": 1}')
        await pool.close()
    assert len(connections) == 1  # kept: the exchange ended where the real response did


@pytest.mark.parametrize(
    "extra",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale",  # a whole response
        b"garbage",
        b"HTTP/1.1 200",  # the start of one
    ],
)
async def test_bytes_past_a_responses_length_drop_the_connection(extra: bytes) -> None:
    served = [0]

    def answer(request: bytes) -> bytes:
        served[0] += 1
        # The first answer runs past its Content-Length (in one write: one read).
        return _ok(b"{}") + extra if served[0] == 1 else _ok(b'{"n": %d}' % served[0])

    async with _server(answer) as (port, _, connections):
        pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None)
        assert await pool.request("GET", "/", {}, None, 5) == (200, b"{}")
        assert pool._open == 0  # not kept: its framing is lost
        assert await pool.request("GET", "/", {}, None, 5) == (200, b'{"n": 2}')
        await pool.close()
    assert len(connections) == 2


async def test_an_answer_to_no_request_on_an_idle_connection_drops_it() -> None:
    """A server that answers before the request is sent: bytes on a kept connection between
    two requests are no one's answer; the next request goes out on a new connection."""

    accepted = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted[0] += 1
        with contextlib.suppress(
            asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError
        ):
            if accepted[0] == 1:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(_ok(b"{}"))
                await writer.drain()
                await asyncio.sleep(0.05)  # the client's connection is idle now
                writer.write(_ok(b'"unasked"'))
                await writer.drain()
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(_ok(b'"asked"'))
                await writer.drain()
        writer.close()

    async with _pool_on(handle) as pool:
        assert await pool.request("GET", "/", {}, None, 5) == (200, b"{}")
        await asyncio.sleep(0.2)
        assert await pool.request("GET", "/", {}, None, 5) == (200, b'"asked"')
        assert (pool._open, accepted[0]) == (1, 2)


class _Transport:
    """Enough of a transport for a _Connection fed by hand."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    "response",
    [
        _ok(b'{"a": 1}', "Date: Mon, 1 Jan 2024 00:00:00 GMT"),
        _chunked(b'{"a": ', b"1}"),
        b"HTTP/1.1 100 Continue\r\n\r\n" + _chunked(b'{"a": 1}'),
    ],
)
async def test_a_response_read_one_byte_at_a_time(response: bytes) -> None:
    from topogate.kube.http1 import _Connection

    connection = _Connection()
    transport = _Transport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    for _ in range(2):  # and again on the kept connection
        answer = connection.send(b"GET / HTTP/1.1\r\n\r\n")
        for i in range(len(response)):
            assert not answer.done()
            connection.data_received(response[i : i + 1])
        assert answer.result() == (200, b'{"a": 1}', True)
    assert not transport.closed


async def test_a_head_or_a_body_past_its_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from topogate.kube import http1

    monkeypatch.setattr(http1, "MAX_RESPONSE_BYTES", 1000)
    long_header = "X-Long: " + "a" * 70_000
    responses = {
        b"/head-one-read": _ok(b"{}", long_header),
        b"/head-many-headers": _ok(b"{}", *[f"X-{i}: {'b' * 1000}" for i in range(70)]),
        b"/body": _ok(b"x" * 1001),
        b"/chunked": _chunked(*[b"y" * 100] * 11),
    }

    def answer(request: bytes) -> bytes:
        return responses.get(request.split(b" ")[1], _ok(b"{}"))

    async with _server(answer) as (port, _, _):
        pool = Http1Pool(URL(f"http://127.0.0.1:{port}"), None)
        for path, limit in [
            ("/head-one-read", "64 KiB"),
            ("/head-many-headers", "64 KiB"),
            ("/body", "64 MiB"),
            ("/chunked", "64 MiB"),
        ]:
            with pytest.raises(aiohttp.ClientPayloadError, match=limit):
                await pool.request("GET", path, {}, None, 5)
        assert await pool.request("GET", "/", {}, None, 5) == (200, b"{}")
        await pool.close()


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Len",
    ],
)
async def test_a_body_cut_short_by_the_connections_end_is_a_disconnection(response: bytes) -> None:
    """Only a response framed by neither a length nor chunks ends with the connection."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(response)
        await writer.drain()
        writer.close()

    async with _pool_on(handle) as pool:
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await pool.request("GET", "/", {}, None, 5)


async def test_a_length_less_body_ended_by_a_reset_is_a_disconnection() -> None:
    """The connection's end completes a length-less body only if the server closed it: a reset
    may have cut it short."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b'HTTP/1.0 200 OK\r\n\r\n{"a": ')
        await writer.drain()
        await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # linger 0: a reset, not a close

    async with _pool_on(handle) as pool:
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await pool.request("GET", "/", {}, None, 5)
