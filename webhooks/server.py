"""The HTTPS admission webhook server (aiohttp) and its certificates.

Certificates: files in ``--cert-dir`` (tls.crt, tls.key, ca.crt) are used when present, for
instance mounted from a Secret; otherwise a CA and a serving certificate with the given DNS
and IP SANs are made. Either way the files are watched and reloaded when they rotate, so new
connections get the new certificate without a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from .certs import issue, make_ca
from .review import ClusterView, NoView, Review, mutate, response, validate

log = logging.getLogger("topogate.webhooks")

MAX_BODY = 3 * 1024 * 1024  # the API server sends at most ~3 MiB objects
# The view a review is validated against, chosen (and prepared) per review.
ViewFor = Callable[[Review], Awaitable[ClusterView]]
VIEW_KEY: web.AppKey[ViewFor] = web.AppKey("view")
# True when the view makes blocking API calls (the standalone webhook): run it in a thread.
BLOCKING_KEY = web.AppKey("blocking", bool)


def fixed_view(view: ClusterView | None) -> ViewFor:
    """The same view for every review."""
    chosen: ClusterView = view or NoView()

    async def view_for(review: Review) -> ClusterView:
        return chosen

    return view_for


@dataclass
class ServingCertificate:
    """tls.crt/tls.key (and ca.crt) in ``directory``, reloaded into one SSLContext on change."""

    directory: Path
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
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        if not self.reload():
            raise FileNotFoundError(f"no tls.crt/tls.key in {self.directory}")

    @classmethod
    def prepare(
        cls, directory: Path, dns_names: Sequence[str], ip_addresses: Sequence[str]
    ) -> ServingCertificate:
        """Use the pair in ``directory``, or first make a CA and a serving certificate there."""
        if not ((directory / "tls.crt").exists() and (directory / "tls.key").exists()):
            ca = make_ca("topogate-webhook-ca")
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "ca.crt").write_bytes(ca.cert_pem)
            serving = issue(ca, "topogate-webhook", dns_names=dns_names, ip_addresses=ip_addresses)
            serving.write(directory / "tls.crt", directory / "tls.key")
        return cls(directory)

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
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > MAX_BODY:
            return web.json_response({"error": "review body too large"}, status=400)
        chunks.append(chunk)
    body = b"".join(chunks)
    try:
        return Review.parse(json.loads(body))
    except RecursionError:
        return web.json_response(
            {"error": "malformed AdmissionReview: nested too deeply"}, status=400
        )
    except (ValueError, UnicodeDecodeError) as error:
        log.warning("refused a malformed AdmissionReview: %s", error)
        return web.json_response({"error": f"malformed AdmissionReview: {error}"}, status=400)


async def _mutate(request: web.Request) -> web.Response:
    review = await _review(request)
    if isinstance(review, web.Response):
        return review
    return web.json_response(_answer(mutate, review))


async def _validate(request: web.Request) -> web.Response:
    review = await _review(request)
    if isinstance(review, web.Response):
        return review
    view = await request.app[VIEW_KEY](review)
    if request.app[BLOCKING_KEY]:  # it asks the API server: keep that off the event loop
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(None, _answer, validate, review, view)
    else:  # the controller's own state: read on the loop that owns it
        answer = _answer(validate, review, view)
    return web.json_response(answer)


def _answer(handler: Callable[..., dict[str, Any]], review: Review, *args: Any) -> dict[str, Any]:
    """The handler's answer; an object it cannot process is refused (400), never a 500: the
    handlers are total over well-formed reviews, so this is a bug, logged with its trace."""
    try:
        return handler(review, *args)
    except RecursionError:
        return response(
            review.uid, allowed=False, message="the object is nested too deeply", code=400
        )
    except Exception as error:
        log.exception("could not process %s %s", review.kind, review.uid)
        message = f"topogate could not process this {review.kind}: {type(error).__name__}"
        return response(review.uid, allowed=False, message=message, code=400)


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app(
    view: ClusterView | ViewFor | None = None, *, blocking: bool = False
) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY + 1024)
    app[VIEW_KEY] = view if callable(view) else fixed_view(view)
    app[BLOCKING_KEY] = blocking
    app.router.add_post("/mutate", _mutate)
    app.router.add_post("/validate", _validate)
    app.router.add_get("/healthz", _healthz)
    return app


@contextlib.asynccontextmanager
async def running(
    host: str,
    port: int,
    certificate: ServingCertificate,
    view: ClusterView | ViewFor | None = None,
    reload_interval: float = 5.0,
    *,
    blocking: bool = False,
) -> AsyncIterator[web.AppRunner]:
    """Serve until the context exits; the certificate is re-read every ``reload_interval``."""
    runner = web.AppRunner(make_app(view, blocking=blocking), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=certificate.context)
    await site.start()
    watcher = asyncio.create_task(_watch(certificate, reload_interval))
    try:
        yield runner
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await runner.cleanup()
