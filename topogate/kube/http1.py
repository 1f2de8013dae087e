"""One request, one response: HTTP/1.1 over kept-alive connections to one API server, for the
client's unary requests (get, list, create, update, patch, delete; watches stay on aiohttp).

Why not aiohttp's request for these: in Kueue's large-scale scenario serve sends one request
per admission and one per Event, and aiohttp's per-request machinery (request and response
objects, header multidicts, payload registry, tracing hooks, a writer task per body, cookie
jar) cost about four times the bytes' own work on loopback: 300-450 us of CPU per status patch
against about 80 us for the same exchange here. What the API server needs is small: a request
line, a few headers and a JSON body out; a status, Content-Length or chunked framing and a JSON
body back (no compression is asked for, no redirects are followed, no proxies: a client that
needs one keeps aiohttp's path).

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
from yarl import URL

# Far above any object etcd stores (1.5 MiB by default), to bound a response gone wrong.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_MAX_HEAD_BYTES = 64 * 1024
# What aiohttp sends, so the API server names our field manager as it did ("Python").
USER_AGENT = aiohttp.http.SERVER_SOFTWARE


class _Response:
    """A response being read: its framing from the head, then its body."""

    __slots__ = ("body_start", "chunked", "close", "length", "pieces", "status")

    def __init__(
        self, status: int, length: int | None, chunked: bool, close: bool, start: int
    ) -> None:
        self.status, self.length, self.chunked, self.close = status, length, chunked, close
        self.body_start = start  # chunked: where the next chunk starts
        self.pieces: list[bytes] = []  # chunked: the chunks read so far


class _Connection(asyncio.Protocol):
    """One connection; one request in flight at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.gone = asyncio.get_running_loop().create_future()  # done when the socket is closed
        self._buffer = bytearray()
        self._waiter: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self._response: _Response | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are no subclasses of asyncio's, only alike.
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.gone.done():
            self.gone.set_result(None)
        response = self._response
        if response is not None and response.length is None and not response.chunked:
            # Framed by the connection's end (no length, not chunked): the body is complete.
            self._done(bytes(self._buffer[response.body_start :]), keep=False)
            return
        self._fail(aiohttp.ServerDisconnectedError())

    def eof_received(self) -> bool | None:
        return None  # close: a response never continues after the server's end

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            # Bytes no request asked for: the connection's framing is lost.
            self.close()
            return
        self._buffer += data
        try:
            self._parse()
        except aiohttp.ClientPayloadError as error:
            self._fail(error)
            self.close()

    def send(self, data: bytes) -> asyncio.Future[tuple[int, bytes, bool]]:
        """Write a request; the future is (status, body, reusable) once it is answered."""
        assert self.transport is not None and self._waiter is None
        self._waiter = asyncio.get_running_loop().create_future()
        self._buffer.clear()
        self._response = None
        self.transport.write(data)
        return self._waiter

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()

    def _parse(self) -> None:
        buffer = self._buffer
        response = self._response
        if response is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > _MAX_HEAD_BYTES:
                    raise aiohttp.ClientPayloadError("a response head past 64 KiB")
                return
            response = self._response = _head(bytes(buffer[:end]), end + 4)
        start = response.body_start
        if response.length is not None:
            if len(buffer) - start < response.length:
                if response.length > MAX_RESPONSE_BYTES:
                    raise aiohttp.ClientPayloadError("a response body past 64 MiB")
                return
            body = bytes(buffer[start : start + response.length])
            self._done(body, keep=not response.close and len(buffer) == start + response.length)
        elif response.chunked:
            if len(buffer) - start > MAX_RESPONSE_BYTES:
                raise aiohttp.ClientPayloadError("a response body past 64 MiB")
            # Chunk by chunk as they come (a relist's page is megabytes in many reads).
            used = _dechunk(buffer, response)
            if used is not None:
                body = b"".join(response.pieces)
                self._done(body, keep=not response.close and used == len(buffer))
        elif len(buffer) - start > MAX_RESPONSE_BYTES:
            raise aiohttp.ClientPayloadError("a response body past 64 MiB")

    def _done(self, body: bytes, *, keep: bool) -> None:
        waiter, response = self._waiter, self._response
        self._waiter = self._response = None
        if waiter is not None and not waiter.done() and response is not None:
            waiter.set_result((response.status, body, keep))

    def _fail(self, error: Exception) -> None:
        waiter, self._waiter, self._response = self._waiter, None, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)


def _head(head: bytes, body_start: int) -> _Response:
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise aiohttp.ClientPayloadError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    status = int(parts[1])
    length: int | None = None
    chunked = False
    close = parts[0] == b"HTTP/1.0"
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            value = value.strip()
            if not value.isdigit():
                raise aiohttp.ClientPayloadError(f"a bad Content-Length: {value[:40]!r}")
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            token = value.strip().lower()
            close = token == b"close" or (close and token != b"keep-alive")
    if chunked:
        length = None  # RFC 9112 6.3: chunked framing wins over a length
    elif status in (204, 304) or 100 <= status < 200:
        length = 0
    return _Response(status, length, chunked, close, body_start)


def _dechunk(buffer: bytearray, response: _Response) -> int | None:
    """Read the complete chunks from ``response.body_start`` into ``response.pieces`` (and
    move it past them); where the message ends once its last chunk is read, else None."""
    at = response.body_start
    while True:
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            return None
        size_text = bytes(buffer[at:line_end]).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise aiohttp.ClientPayloadError(f"a bad chunk size: {size_text[:20]!r}") from None
        if size == 0:
            # Trailers (none expected) end with an empty line.
            end = buffer.find(b"\r\n\r\n", line_end)
            return None if end < 0 else end + 4
        if len(buffer) < line_end + 2 + size + 2:
            return None
        response.pieces.append(bytes(buffer[line_end + 2 : line_end + 2 + size]))
        at = response.body_start = line_end + 2 + size + 2


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
