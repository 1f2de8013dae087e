"""One request, one response: HTTP/1.1 over kept-alive connections to one API server, for the
client's unary requests (get, list, create, update, patch, delete; watches stay on aiohttp).

Why not aiohttp's request for these: in Kueue's large-scale scenario serve sends one request
per admission and one per Event, and aiohttp's per-request machinery (request and response
objects, header multidicts, payload registry, tracing hooks, a writer task per body, cookie
jar) cost about four times the bytes' own work on loopback: 300-450 us of CPU per status patch
against about 80 us for the same exchange here. What the API server needs is small: a request
line, a few headers and a JSON body out; a status, Content-Length or chunked framing and a JSON
body back (no compression is asked for, no redirects are followed, no proxies: a client that
needs one keeps aiohttp's path). The response is parsed by httptools (llhttp, the parser of
Node.js and uvicorn, and in C aiohttp's own), which refuses what RFC 9112 calls ambiguous: both
a Content-Length and chunked, two Content-Lengths, a bad length, a bare CR or LF in the head.

Failures are aiohttp's and asyncio's exceptions, which every caller already handles
(``topogate.kube.errors.TRANSPORT_ERRORS``): a refused or failed connection is a
``ClientOSError``, a connection closed before its response a ``ServerDisconnectedError``, a
malformed response a ``ClientPayloadError``, an expired deadline a ``TimeoutError``. A request
is never sent twice (a write that may have reached the server is the caller's to retry).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Mapping
from typing import cast

import aiohttp
import httptools
from yarl import URL

# Far above any object etcd stores (1.5 MiB by default), to bound a response gone wrong.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_MAX_HEAD_BYTES = 64 * 1024
# What aiohttp sends, so the API server names our field manager as it did ("Python").
USER_AGENT = aiohttp.http.SERVER_SOFTWARE


class _Connection(asyncio.Protocol):
    """One connection; one request in flight at a time. Its response is parsed by llhttp
    (``httptools``): the framing rules (status line, Content-Length, chunked, 1xx, 204 and 304,
    keep-alive) and the refusal of a malformed or ambiguous response are the parser's; the
    limits, the end of a body framed by the connection's end, and the errors are ours."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.gone = asyncio.get_running_loop().create_future()  # done when the socket is closed
        self._waiter: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._status = 0
        self._headed = False  # the head of the response being read is complete
        self._head_size = 0  # of the headers read
        self._fed = 0  # bytes read while the head is incomplete
        self._framed = False  # by a Content-Length or a Transfer-Encoding
        self._pieces: list[bytes] = []
        self._size = 0
        self._answer: tuple[int, bytes, bool] | None = None  # the final response, once read

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are no subclasses of asyncio's, only alike.
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.gone.done():
            self.gone.set_result(None)
        if self._waiter is not None and self._headed and not self._framed and exc is None:
            # Framed by the connection's end (no length, not chunked): the body is complete.
            # llhttp would say so on a call to llhttp_finish, which httptools does not offer.
            # Not on a reset (exc): the body may be cut short.
            self._answer = (self._status, b"".join(self._pieces), False)
            self._deliver()
            return
        self._fail(aiohttp.ServerDisconnectedError())

    def eof_received(self) -> bool | None:
        return None  # close: a response never continues after the server's end

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if self._waiter is None or parser is None:
            # Bytes no request asked for: the connection's framing is lost.
            self.close()
            return
        error: aiohttp.ClientPayloadError | None = None
        try:
            parser.feed_data(data)
            if not self._headed:
                # A head still incomplete (httptools holds a header's parts until it ends).
                self._fed += len(data)
                if self._fed > _MAX_HEAD_BYTES:
                    error = aiohttp.ClientPayloadError("a response head past 64 KiB")
        except httptools.HttpParserCallbackError as failure:
            # Raised by one of our callbacks below: its own error is the context.
            cause = failure.__context__
            error = (
                cause
                if isinstance(cause, aiohttp.ClientPayloadError)
                else aiohttp.ClientPayloadError(f"a malformed response: {failure}")
            )
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as failure:
            error = aiohttp.ClientPayloadError(f"a malformed response: {failure!r}")
        if self._answer is not None:
            if error is not None:
                # Bytes past the response's end: they must not be read as the next one's.
                status, body, _ = self._answer
                self._answer = (status, body, False)
            self._deliver()
        elif error is not None:
            self._fail(error)
            self.close()

    # The parser's callbacks (httptools.HttpResponseParser calls them by these names).

    def on_message_begin(self) -> None:
        if self._answer is not None:
            raise aiohttp.ClientPayloadError("a second response to one request")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value) + 4
        if self._head_size > _MAX_HEAD_BYTES:
            raise aiohttp.ClientPayloadError("a response head past 64 KiB")
        if len(name) in (14, 17) and name.lower() in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        assert self._parser is not None
        self._headed = True
        self._status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > MAX_RESPONSE_BYTES:
            raise aiohttp.ClientPayloadError("a response body past 64 MiB")
        self._pieces.append(body)

    def on_message_complete(self) -> None:
        assert self._parser is not None
        if 100 <= self._status < 200:
            # An interim response (100 Continue, 103 Early Hints): the real one follows.
            self._reset()
            return
        # Asked now: llhttp forgets the response's keep-alive state once it is complete.
        keep = self._parser.should_keep_alive()
        self._answer = (self._status, b"".join(self._pieces), keep)

    def send(self, data: bytes) -> asyncio.Future[tuple[int, bytes, bool]]:
        """Write a request; the future is (status, body, reusable) once it is answered."""
        assert self.transport is not None and self._waiter is None
        self._waiter = asyncio.get_running_loop().create_future()
        # A parser per response: nothing of the last one's state can leak into this one.
        self._parser = httptools.HttpResponseParser(self)
        self._reset()
        self._answer = None
        self.transport.write(data)
        return self._waiter

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()

    def _reset(self) -> None:
        self._status, self._headed, self._framed = 0, False, False
        self._head_size = self._fed = 0
        self._pieces, self._size = [], 0

    def _deliver(self) -> None:
        waiter, answer = self._waiter, self._answer
        self._waiter = self._parser = self._answer = None
        if waiter is not None and not waiter.done() and answer is not None:
            waiter.set_result(answer)

    def _fail(self, error: Exception) -> None:
        waiter, self._waiter, self._parser = self._waiter, None, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)


class Http1Pool:
    """Kept-alive connections to one server (``base``: its URL, with any path prefix), at most
    ``limit`` of them open at once, the most recently used first. Requests past the limit wait
    in arrival order, as aiohttp's connector's do (each freed connection, or slot, goes to the
    first waiter): a burst of thousands must not starve one request past its deadline."""

    def __init__(
        self,
        base: URL,
        ssl_context: ssl.SSLContext | None,
        *,
        limit: int = 100,
        server_hostname: str | None = None,
    ) -> None:
        if base.scheme not in ("http", "https") or not base.host:
            raise ValueError(f"not an http(s) URL: {base}")
        self._host = base.raw_host or base.host
        self._port = base.port or (443 if base.scheme == "https" else 80)
        self._ssl = ssl_context if base.scheme == "https" else None
        self._server_hostname = server_hostname if self._ssl is not None else None
        self._prefix = base.raw_path.rstrip("/")
        authority = base.raw_authority
        self._host_header = authority.rsplit("@", 1)[-1]
        self._idle: list[_Connection] = []
        self._open = 0  # connections open or being opened, and slots handed to a waiter
        self._limit = limit
        # A waiter gets a free connection, or None: a slot of its own to open one in.
        self._waiters: deque[asyncio.Future[_Connection | None]] = deque()
        self._closed = False

    async def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None,
        seconds: float,
    ) -> tuple[int, bytes]:
        """(status, body) of ``method target`` (``target``: path and query, encoded)."""
        lines = [f"{method} {self._prefix}{target} HTTP/1.1\r\nHost: {self._host_header}\r\n"]
        for name, value in headers.items():
            if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
                # As aiohttp refuses them: a header must not end the head (a token gone bad).
                raise ValueError(f"a line break in the value of HTTP header {name!r}")
            lines.append(f"{name}: {value}\r\n")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}\r\n")
        lines.append(f"User-Agent: {USER_AGENT}\r\n\r\n")
        head = "".join(lines).encode("latin-1")
        async with asyncio.timeout(seconds):
            connection = await self._acquire()
            try:
                status, raw, keep = await connection.send(head if body is None else head + body)
            except BaseException:
                self._drop(connection)
                raise
        if keep and not connection.lost and not self._closed:
            self._release(connection)
        else:
            self._drop(connection)
        return status, raw

    async def _acquire(self) -> _Connection:
        if self._closed:
            raise aiohttp.ClientConnectionError("the client is closed")
        if not self._waiters:
            while self._idle:
                connection = self._idle.pop()
                if not connection.lost:
                    return connection
                connection.close()
                self._open -= 1
            if self._open < self._limit:
                self._open += 1
                return await self._connect()
        waiter: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            handed = await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                # Handed a connection or a slot as it gave up: the next waiter's.
                given = waiter.result()
                if given is not None and not given.lost:
                    self._release(given)
                else:
                    self._drop(given)
            raise
        if handed is not None and not handed.lost:
            return handed
        if handed is not None:
            handed.close()  # lost while idle: its slot is this request's
        return await self._connect()

    async def _connect(self) -> _Connection:
        """A new connection, in a slot already counted."""
        try:
            _, connection = await asyncio.get_running_loop().create_connection(
                _Connection,
                self._host,
                self._port,
                ssl=self._ssl,
                server_hostname=self._server_hostname,
            )
        except OSError as error:
            self._drop(None)
            raise aiohttp.ClientOSError(
                error.errno, f"cannot connect to {self._host_header}: {error}"
            ) from error
        except BaseException:
            self._drop(None)
            raise
        return connection

    def _release(self, connection: _Connection) -> None:
        """A kept-alive connection is free: the first waiter's, else idle."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        self._idle.append(connection)

    def _drop(self, connection: _Connection | None) -> None:
        """Close ``connection``; its slot is the first waiter's, else free."""
        if connection is not None:
            connection.close()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._open -= 1

    async def close(self) -> None:
        """Close the idle connections (one in use closes when its request ends), and wait a
        moment for their sockets to close: a loop ended right after would leave them open."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
            self._open -= 1
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(aiohttp.ClientConnectionError("the client is closed"))
        if idle:
            await asyncio.wait([c.gone for c in idle], timeout=1.0)
