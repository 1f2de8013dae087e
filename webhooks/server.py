"""The HTTPS admission webhook server (aiohttp) and its certificates.

Certificates: files in ``--cert-dir`` (tls.crt, tls.key, ca.crt) are used when present, for
instance mounted from a Secret; otherwise a CA and a serving certificate with the given DNS
and IP SANs are made. Either way the files are watched and reloaded when they rotate, so new
connections get the new certificate without a restart.

Clients: the server owns its accept loop (:class:`GuardedSite`) so that no client can hold a
connection for free. A connection must complete its TLS handshake and send its first request's
headers within ``Limits.header_timeout`` of being accepted, a body must arrive within
``body_timeout``, an idle keep-alive connection is closed after ``idle_timeout``, and beyond
``max_connections`` new connections are closed at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import math
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from topogate.api.errors import InputError

from .certs import issue, make_ca
from .options import ClientAuth, Limits
from .review import ClusterView, NoView, Review, allow_or_deny, mutate, response, validate

log = logging.getLogger("topogate.webhooks")

MAX_BODY = 3 * 1024 * 1024  # the API server sends at most ~3 MiB objects
# The view a review is validated against, chosen (and prepared) per review; it answers from
# memory (the controller's state, or the standalone webhook's snapshot), on the loop.
ViewFor = Callable[[Review], Awaitable[ClusterView]]
VIEW_KEY: web.AppKey[ViewFor] = web.AppKey("view")


LIMITS_KEY = web.AppKey("limits", Limits)
AUTH_KEY = web.AppKey("client_auth", ClientAuth)
REFUSALS_KEY: web.AppKey[Throttled] = web.AppKey("refusals")
# Pods join their PodSet's PodGroup (`serve --native-gangs`, as resolved at start).
NATIVE_GANGS_KEY = web.AppKey("native_gangs", bool)
# Errors of accept(2) that mean "out of resources": the connection waits in the backlog.
_EXHAUSTED = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
_TLS_SHUTDOWN_TIMEOUT = 2.0  # a peer that never answers close_notify holds no fd for long


def fixed_view(view: ClusterView | None) -> ViewFor:
    """The same view for every review."""
    chosen: ClusterView = view or NoView()

    async def view_for(review: Review) -> ClusterView:
        return chosen

    return view_for


@dataclass
class ServingCertificate:
    """tls.crt/tls.key (and ca.crt) in ``directory``, reloaded into one SSLContext on change.

    With ``client_auth.ca`` the context asks clients for a certificate and verifies one
    against that CA alone (no system CAs: a public CA's certificate must not authenticate);
    ``client_auth.required`` refuses a client without one at the handshake."""

    directory: Path
    client_auth: ClientAuth = field(default_factory=ClientAuth)
    context: ssl.SSLContext = field(init=False)
    _stamp: tuple[float, float] = (0.0, 0.0)

    @property
    def cert(self) -> Path:
        return self.directory / "tls.crt"

    @property
    def key(self) -> Path:
        return self.directory / "tls.key"

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    def __post_init__(self) -> None:
        # Purpose.CLIENT_AUTH without a cafile loads no default CAs (verify_mode is CERT_NONE).
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        if self.client_auth.ca is not None:
            try:
                self.context.load_verify_locations(cafile=self.client_auth.ca)
            except (OSError, ssl.SSLError) as error:
                raise InputError(
                    f"cannot read the client CA {self.client_auth.ca}: {error}",
                    where="webhook client-ca",
                ) from None
            required = self.client_auth.required
            self.context.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
        if not self.reload():
            raise FileNotFoundError(f"no tls.crt/tls.key in {self.directory}")

    @classmethod
    def prepare(
        cls,
        directory: Path,
        dns_names: Sequence[str],
        ip_addresses: Sequence[str],
        client_auth: ClientAuth | None = None,
    ) -> ServingCertificate:
        """Use the pair in ``directory``, or first make a CA and a serving certificate there."""
        if not ((directory / "tls.crt").exists() and (directory / "tls.key").exists()):
            ca = make_ca("topogate-webhook-ca")
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "ca.crt").write_bytes(ca.cert_pem)
            serving = issue(ca, "topogate-webhook", dns_names=dns_names, ip_addresses=ip_addresses)
            serving.write(directory / "tls.crt", directory / "tls.key")
        return cls(directory, client_auth or ClientAuth())

    def reload(self) -> bool:
        """Load the files if they changed since last time; True when a new pair was loaded."""
        if not (self.cert.exists() and self.key.exists()):
            return False
        stamp = (self.cert.stat().st_mtime, self.key.stat().st_mtime)
        if stamp == self._stamp:
            return False
        self.context.load_cert_chain(str(self.cert), str(self.key))
        self._stamp = stamp
        return True


async def _watch(certificate: ServingCertificate, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            if certificate.reload():
                log.info("reloaded the serving certificate from %s", certificate.directory)
        except (OSError, ssl.SSLError) as error:  # half-written files: try again next tick
            log.warning("could not reload the serving certificate: %s", error)


async def _review(request: web.Request) -> Review | web.Response:
    if request.content_length is not None and request.content_length > MAX_BODY:
        return web.json_response({"error": "review body too large"}, status=400)
    # read(n) returns what has arrived so far, not n bytes: gather the whole body.
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(request.app[LIMITS_KEY].body_timeout):
            async for chunk in request.content.iter_chunked(64 * 1024):
                size += len(chunk)
                if size > MAX_BODY:
                    return web.json_response({"error": "review body too large"}, status=400)
                chunks.append(chunk)
    except TimeoutError:
        # The rest of the body is not drained (lingering_time=0): the connection closes.
        return web.json_response({"error": "review body not received in time"}, status=408)
    body = b"".join(chunks)
    if body.lstrip()[:1] != b"{":  # not an object: refused before parsing (e.g. "[" * 3000)
        request.app[REFUSALS_KEY].warn("malformed", "refused malformed AdmissionReviews")
        return web.json_response(
            {"error": "malformed AdmissionReview: body is not an AdmissionReview"}, status=400
        )
    try:
        return Review.parse(json.loads(body))
    except RecursionError:
        return web.json_response(
            {"error": "malformed AdmissionReview: nested too deeply"}, status=400
        )
    except (ValueError, UnicodeDecodeError) as error:
        # Counted, and logged once per interval: a flood of bad reviews must not become a
        # flood of log lines (nor cost a log record each).
        request.app[REFUSALS_KEY].warn("malformed", f"refused malformed AdmissionReviews: {error}")
        return web.json_response({"error": f"malformed AdmissionReview: {error}"}, status=400)


def authenticated(request: web.Request) -> bool:
    """Whether the client presented a certificate the client CA signed (the TLS layer verified
    it; without a client CA no certificate is asked for, and nobody is)."""
    transport = request.transport
    return transport is not None and bool(transport.get_extra_info("peercert"))


def _reply(request: web.Request, answer: dict[str, Any]) -> web.Response:
    """The answer, cut to allow/deny (and the mutation's patch) for an unauthenticated client:
    a refusal's message and the warnings name queues' topologies and levels."""
    if not request.app[AUTH_KEY].tells(authenticated(request)):
        answer = allow_or_deny(answer)
    return web.json_response(answer)


async def _mutate(request: web.Request) -> web.Response:
    review = await _review(request)
    if isinstance(review, web.Response):
        return review
    return _reply(request, _answer(request, mutate, review, request.app[NATIVE_GANGS_KEY]))


async def _validate(request: web.Request) -> web.Response:
    review = await _review(request)
    if isinstance(review, web.Response):
        return review
    view = await request.app[VIEW_KEY](review)
    return _reply(request, _answer(request, validate, review, view))


def _answer(
    request: web.Request, handler: Callable[..., dict[str, Any]], review: Review, *args: Any
) -> dict[str, Any]:
    """The handler's answer; an object it cannot process is refused (400), never a 500: the
    handlers are total over well-formed reviews, so this is a bug, logged with its trace once
    per cause and interval (a review that trips it could be sent in a flood)."""
    try:
        return handler(review, *args)
    except RecursionError:
        return response(
            review.uid, allowed=False, message="the object is nested too deeply", code=400
        )
    except Exception as error:
        request.app[REFUSALS_KEY].emit(
            f"bug {type(error).__name__}",
            logging.ERROR,
            f"could not process {review.kind} {review.uid}",
            exc_info=error,
        )
        message = f"topogate could not process this {review.kind}: {type(error).__name__}"
        return response(review.uid, allowed=False, message=message, code=400)


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app(
    view: ClusterView | ViewFor | None = None,
    *,
    limits: Limits | None = None,
    guard: ConnectionGuard | None = None,
    client_auth: ClientAuth | None = None,
    native_gangs: bool = False,
) -> web.Application:
    middlewares = [guard.middleware] if guard is not None else []
    app = web.Application(client_max_size=MAX_BODY + 1024, middlewares=middlewares)
    app[VIEW_KEY] = view if callable(view) else fixed_view(view)
    app[LIMITS_KEY] = limits or Limits()
    app[AUTH_KEY] = client_auth or ClientAuth()
    app[REFUSALS_KEY] = Throttled(app[LIMITS_KEY].log_interval)
    app[NATIVE_GANGS_KEY] = native_gangs
    app.router.add_post("/mutate", _mutate)
    app.router.add_post("/validate", _validate)
    app.router.add_get("/healthz", _healthz)
    return app


class Throttled:
    """Warnings logged at most once per ``interval`` per key, with how often they happened: a
    flood of refused connections must not become a flood of log lines."""

    def __init__(self, interval: float, logger: logging.Logger = log) -> None:
        self.interval = interval
        self.logger = logger
        self._last: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def warn(self, key: str, message: str) -> None:
        self.emit(key, logging.WARNING, message)

    def emit(self, key: str, level: int, message: str, exc_info: Any = None) -> None:
        self._counts[key] = self._counts.get(key, 0) + 1
        now = time.monotonic()
        if now - self._last.get(key, -math.inf) >= self.interval:
            count = self._counts.pop(key)
            self._last[key] = now
            self.logger.log(
                level,
                "%s (%d time(s) in the last %.0f s)",
                message,
                count,
                self.interval,
                exc_info=exc_info,
            )


class HttpLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server logger, throttled per cause: it logs each malformed request (a header
    over 8 KB, a bad request line) as an ERROR with a traceback, so 500 such requests made
    4,502 lines. A client's malformed HTTP is one WARNING line per cause and interval, without
    a traceback; anything else keeps its traceback, once per cause and interval."""

    def __init__(self, interval: float) -> None:
        super().__init__(logging.getLogger("topogate.webhooks.http"), {})
        self.throttled = Throttled(interval, self.logger)

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if level < logging.WARNING:
            if self.isEnabledFor(level):
                self.logger.log(level, msg, *args, **kwargs)
            return
        text = str(msg) % args if args else str(msg)
        error = kwargs.get("exc_info")
        if isinstance(error, HttpProcessingError):
            detail = " ".join(str(error).split())[:200]
            cause = type(error).__name__
            message = f"refused malformed HTTP: {cause}: {detail}"
            self.throttled.emit(cause, logging.WARNING, message)
        elif isinstance(error, BaseException):
            self.throttled.emit(type(error).__name__, level, text, exc_info=error)
        else:
            self.throttled.emit(str(msg), level, text, exc_info=error)


def _abort(transport: asyncio.BaseTransport) -> None:
    """Drop the connection at once. By name: uvloop's transports have ``abort`` but are no
    ``asyncio.Transport`` (an isinstance check made closing one do nothing there)."""
    abort = getattr(transport, "abort", None)
    if callable(abort):
        abort()


@dataclass(slots=True, eq=False)
class _Connection:
    """What the cap needs to know of one connection to choose which to close."""

    since: float  # accept, then the end of its last request: idle since
    authenticated: bool = False
    busy: int = 0  # requests being handled (headers read, the answer not yet sent)
    sock: socket.socket | None = None
    transport: asyncio.BaseTransport | None = None  # None while the TLS handshake runs
    deadline: asyncio.TimerHandle | None = None  # for its first request's headers
    closed: bool = False

    def closing(self) -> bool:
        return self.closed or (self.transport is not None and self.transport.is_closing())

    def close(self) -> None:
        self.closed = True
        if self.deadline is not None:
            self.deadline.cancel()
        if self.transport is not None:
            _abort(self.transport)  # not close(): a TLS goodbye would wait for this peer
        elif self.sock is not None:
            # The handshake then fails on EOF and cleans up after itself; cancelling it
            # instead can land just after it succeeded and strand a half-closed transport.
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)


class ConnectionGuard:
    """Every connection's state: its first-request deadline, whether a request is being handled
    on it, whether its client authenticated. A middleware sees a request only once its headers
    were read, which is exactly the moment the deadline is met; aiohttp has no header-read
    timeout of its own (its keep-alive timer is the only bound, and is long)."""

    def __init__(self) -> None:
        self.connections: dict[asyncio.BaseProtocol, _Connection] = {}
        self.handshaking: set[_Connection] = set()

    def watch(self, protocol: asyncio.BaseProtocol, connection: _Connection, at: float) -> None:
        loop = asyncio.get_running_loop()
        self.connections[protocol] = connection
        connection.deadline = loop.call_at(at, self._expire, connection)

    def purge(self) -> None:
        """Forget the closed connections (aiohttp's handlers offer no hook for it)."""
        closed = [p for p, c in self.connections.items() if c.closing()]
        for protocol in closed:
            connection = self.connections.pop(protocol)
            if connection.deadline is not None:
                connection.deadline.cancel()

    def _expire(self, connection: _Connection) -> None:
        connection.deadline = None
        connection.close()

    def open(self) -> list[_Connection]:
        """Those not closed yet, handshakes included."""
        self.purge()
        return [c for c in (*self.handshaking, *self.connections.values()) if not c.closed]

    def victim(self, *, anonymous_only: bool = False) -> _Connection | None:
        """The connection to close for a newcomer: never one handling a request; first the
        unauthenticated ones that are idle or slow (no request yet), then handshakes, then
        authenticated idle ones; the longest idle first in each. ``anonymous_only``: the
        first kind alone."""
        ranked: list[tuple[int, float, _Connection]] = []
        if not anonymous_only:
            ranked += [(1, c.since, c) for c in self.handshaking if not c.closed]
        for connection in self.connections.values():
            if connection.busy or connection.closing():
                continue
            if connection.authenticated and anonymous_only:
                continue
            ranked.append((2 if connection.authenticated else 0, connection.since, connection))
        return min(ranked, key=lambda item: item[:2])[2] if ranked else None

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        connection = self.connections.get(request.protocol)
        if connection is None:
            return await handler(request)
        if connection.deadline is not None:
            connection.deadline.cancel()
            connection.deadline = None
        connection.busy += 1
        try:
            return await handler(request)
        finally:
            connection.busy -= 1
            connection.since = asyncio.get_running_loop().time()


class GuardedSite(web.BaseSite):
    """A TLS site that owns its accept loop, in place of aiohttp's TCPSite over asyncio's server:
    that server cannot refuse a connection before its TLS handshake, has no cap, and logs
    "Too many open files" in accept with a traceback every second. Here each connection gets
    one deadline from accept to its first request's headers (the handshake included), and at
    the cap a newcomer takes the place of the connection idle the longest, slow ones and those
    of unauthenticated clients first (:meth:`ConnectionGuard.victim`): closing newcomers
    instead let 128 idle connections, re-opened as each closed, lock every review out. With a
    client CA, unauthenticated clients hold at most three quarters of the cap, so the API
    server always finds room. Refusals and accept errors go through :class:`Throttled`."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext,
        limits: Limits,
        guard: ConnectionGuard,
        backlog: int = 128,
        client_auth: ClientAuth | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self.host, self.limits, self.guard = host, limits, guard
        self.client_auth = client_auth or ClientAuth()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.listener = socket.create_server((host, port), family=family, backlog=backlog)
        self.listener.setblocking(False)
        self.port: int = self.listener.getsockname()[1]
        self._throttled = Throttled(limits.log_interval)
        self._tasks: set[asyncio.Task[None]] = set()
        # A plain set, pruned as connections come: uvloop's TLS transports cannot be weakly
        # referenced (a WeakSet failed every connection after its handshake there).
        self._transports: set[asyncio.BaseTransport] = set()

    @property
    def name(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def anonymous_cap(self) -> int:
        """How many connections unauthenticated clients may hold once their handshake is done."""
        if self.client_auth.ca is None:
            return self.limits.max_connections  # nobody can authenticate: no room to keep
        return max(1, self.limits.max_connections - max(1, self.limits.max_connections // 4))

    async def start(self) -> None:
        await super().start()
        self._accepting = self._spawn(self._accept())

    async def stop(self) -> None:
        for connection in list(self.guard.handshaking):
            connection.close()  # a TLS handshake in progress fails, its socket closed
        self._accepting.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=1.0)
        for task in list(self._tasks):
            task.cancel()  # a handshake that ignored its closed socket
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.listener.close()
        await asyncio.sleep(0)
        await super().stop()

    async def abort_connections(self) -> None:
        """Drop what is left after the runner's graceful shutdown: a TLS close waits for the
        peer's answer, which must not keep sockets open past the server's life."""
        for transport in list(self._transports):
            _abort(transport)
        for _ in range(3):  # connection_lost, then the socket's close, run from the loop
            await asyncio.sleep(0)

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def open_connections(self) -> int:
        return len(self.guard.open())

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(self.listener)
            except OSError as error:
                if error.errno in _EXHAUSTED:
                    self._throttled.warn("accept", f"cannot accept connections: {error.strerror}")
                    await asyncio.sleep(0.1)  # the peer waits in the backlog; do not spin
                continue  # ECONNABORTED and the like: that peer is gone
            if self.open_connections() >= self.limits.max_connections:
                victim = self.guard.victim()
                if victim is None:  # every connection is handling a request
                    sock.close()
                    self._throttled.warn(
                        "cap",
                        f"closed new connections: {self.limits.max_connections} already open, "
                        "all handling requests",
                    )
                    continue
                victim.close()
                self._throttled.warn(
                    "evict",
                    f"closed idle or slow connections to make room: "
                    f"{self.limits.max_connections} already open",
                )
            connection = _Connection(since=loop.time(), sock=sock)
            self.guard.handshaking.add(connection)
            deadline = loop.time() + self.limits.header_timeout
            self._spawn(self._connect(sock, connection, deadline))

    async def _connect(self, sock: socket.socket, connection: _Connection, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        assert self._runner.server is not None
        try:
            transport, _ = await loop.connect_accepted_socket(
                self._runner.server,
                sock,
                ssl=self._ssl_context,
                ssl_handshake_timeout=self.limits.header_timeout,
                ssl_shutdown_timeout=_TLS_SHUTDOWN_TIMEOUT,
            )
        except Exception as error:  # a failed or slow handshake, or closed to make room
            log.debug("TLS handshake failed: %r", error)
            sock.close()
            return
        finally:
            self.guard.handshaking.discard(connection)
        connection.transport, connection.sock = transport, None
        if connection.closed:  # closed to make room just as its handshake ended
            transport.abort()
            return
        connection.authenticated = bool(transport.get_extra_info("peercert"))
        # Those closing are let go (a TLS close is bounded by its shutdown timeout); those
        # open at shutdown are aborted by :meth:`abort_connections`.
        self._transports = {t for t in self._transports if not t.is_closing()}
        self._transports.add(transport)
        # The transport's protocol is aiohttp's handler, which the middleware looks up: uvloop
        # returns its own TLS protocol from connect_accepted_socket, asyncio the handler.
        self.guard.watch(transport.get_protocol(), connection, deadline)
        if not connection.authenticated and self._anonymous() > self.anonymous_cap:
            # Room kept for authenticated clients: an unauthenticated one takes the place of
            # the unauthenticated connection idle the longest, or is closed.
            victim = self.guard.victim(anonymous_only=True) or connection
            victim.close()
            self._throttled.warn(
                "anonymous",
                f"closed unauthenticated connections: {self.anonymous_cap} already open",
            )

    def _anonymous(self) -> int:
        return sum(
            1 for c in self.guard.connections.values() if not c.authenticated and not c.closing()
        )


@dataclass
class Running:
    """What :func:`running` yields: the runner and the site (its port, when 0 was asked)."""

    runner: web.AppRunner
    site: GuardedSite


@contextlib.asynccontextmanager
async def running(
    host: str,
    port: int,
    certificate: ServingCertificate,
    view: ClusterView | ViewFor | None = None,
    reload_interval: float = 5.0,
    *,
    limits: Limits | None = None,
    native_gangs: bool = False,
) -> AsyncIterator[Running]:
    """Serve until the context exits; the certificate is re-read every ``reload_interval``."""
    limits = limits or Limits()
    guard = ConnectionGuard()
    client_auth = certificate.client_auth
    app = make_app(
        view, limits=limits, guard=guard, client_auth=client_auth, native_gangs=native_gangs
    )
    # lingering_time=0: after a 408 the unread rest of a slow body is not waited for.
    runner = web.AppRunner(
        app,
        access_log=None,
        keepalive_timeout=limits.idle_timeout,
        lingering_time=0,
        logger=HttpLog(limits.log_interval),
    )
    await runner.setup()
    site = GuardedSite(
        runner,
        host,
        port,
        ssl_context=certificate.context,
        limits=limits,
        guard=guard,
        client_auth=certificate.client_auth,
    )
    await site.start()
    watcher = asyncio.create_task(_watch(certificate, reload_interval))
    try:
        yield Running(runner, site)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await runner.cleanup()
        await site.abort_connections()
