"""The operations endpoints over plain HTTP, on two servers: the probes, which the kubelet
must reach on the pod's address, and the metrics, bound to 127.0.0.1 by default (as
controller-runtime's metrics are) because they are not authenticated.

    GET /healthz   200 with the reason ("ok" when none) or 500 with the reason
    GET /readyz    200 with the reason ("ok" when none) or 503 with the reason
    GET /metrics   the registry in Prometheus' text format (the metrics server)

The callbacks decide; this module only renders their ``(ok, reason)``. A standby replica, for
instance, reports ``(True, "standby")`` so a rolling update proceeds, and a leader whose caches
are not synced yet ``(False, "caches not synced: pods, nodes")``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from topogate.metrics import Metrics

log = logging.getLogger("topogate.ops")

Check = Callable[[], tuple[bool, str]]

_METRICS = web.AppKey("metrics", Metrics)
_READY: web.AppKey[Check] = web.AppKey("ready")
_HEALTHY: web.AppKey[Check] = web.AppKey("healthy")


def make_ops_app(ready: Check, healthy: Check) -> web.Application:
    """The probes: /healthz and /readyz."""
    app = web.Application()
    app[_READY], app[_HEALTHY] = ready, healthy
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    return app


def make_metrics_app(metrics: Metrics) -> web.Application:
    """/metrics alone."""
    app = web.Application()
    app[_METRICS] = metrics
    app.router.add_get("/metrics", _metrics)
    return app


def _render(check: Check, failed_status: int, what: str) -> web.Response:
    try:
        ok, reason = check()
    except Exception as error:  # a broken check is a failed check, never a crashed probe
        log.exception("%s check failed", what)
        ok, reason = False, f"{what} check failed: {error!r}"
    if ok:
        return web.Response(text=reason or "ok")
    return web.Response(status=failed_status, text=reason or f"not {what}")


async def _healthz(request: web.Request) -> web.Response:
    return _render(request.app[_HEALTHY], 500, "healthy")


async def _readyz(request: web.Request) -> web.Response:
    return _render(request.app[_READY], 503, "ready")


async def _metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[_METRICS].registry)
    # CONTENT_TYPE_LATEST carries parameters (version, charset) that aiohttp's content_type
    # argument refuses, so it goes in as a header.
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


@dataclass(frozen=True, slots=True)
class OpsServer:
    """A started server: ``port`` is the bound one (useful with port 0)."""

    runner: web.AppRunner
    port: int

    async def cleanup(self) -> None:
        await self.runner.cleanup()


async def start_ops_server(
    app: web.Application, host: str, port: int, what: str = "ops endpoints"
) -> OpsServer:
    """Serve ``app`` on ``host:port`` (0 picks a free port); the caller calls ``cleanup()``."""
    # Probes every few seconds would flood the log with access lines.
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0]
        bound_port = int(bound[1])
    except BaseException:
        await runner.cleanup()
        raise
    log.info("%s on %s:%d", what, host, bound_port)
    return OpsServer(runner, bound_port)
