"""The client's watch stream against a local HTTP server: events split anywhere across the
socket's reads, several in one read, a large one, an ERROR event, a truncated last line and
a runaway line."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from kubernetes.aio.client.configuration import Configuration

from topogate.kube import client as client_module
from topogate.kube.client import Kube
from topogate.kube.errors import KubeError
from topogate.kube.resources import WORKLOADS


def _event(i: int, size: int = 0) -> dict[str, Any]:
    obj = {"metadata": {"name": f"w-{i}", "resourceVersion": str(100 + i)}, "pad": "x" * size}
    return {"type": "MODIFIED", "object": obj}


def _line(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode() + b"\n"


@contextlib.asynccontextmanager
async def _watch(pieces: list[bytes]) -> AsyncIterator[Kube]:
    """A Kube whose watch receives ``pieces``, each flushed as its own chunk."""

    async def answer(request: web.Request) -> web.StreamResponse:
        stream = web.StreamResponse(headers={"Content-Type": "application/json"})
        await stream.prepare(request)
        for piece in pieces:
            await stream.write(piece)
        await stream.write_eof()
        return stream

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kube = Kube(Configuration(host=f"http://127.0.0.1:{port}"), qps=None)
    try:
        yield kube
    finally:
        await kube.close()
        await runner.cleanup()


async def _events(pieces: list[bytes]) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    async with _watch(pieces) as kube:
        async for event in kube.watch(WORKLOADS, "1"):
            got.append(event)
    return got


def _cut(data: bytes, sizes: list[int]) -> list[bytes]:
    """``data`` in pieces of the given sizes (cycled), the last one what is left."""
    pieces, at, i = [], 0, 0
    while at < len(data):
        size = sizes[i % len(sizes)]
        pieces.append(data[at : at + size])
        at, i = at + size, i + 1
    return pieces


@pytest.mark.parametrize("sizes", [[1], [7, 300, 2], [50_000], [10**9]])
async def test_events_arrive_whole_however_the_stream_is_cut(sizes: list[int]) -> None:
    events = [_event(i, size=i * 40) for i in range(30)]
    data = b"".join(_line(e) for e in events)
    assert await _events(_cut(data, sizes)) == events


async def test_a_large_event_arrives_whole_between_small_ones() -> None:
    events = [_event(0), _event(1, size=600_000), _event(2)]
    data = b"".join(_line(e) for e in events)
    assert await _events(_cut(data, [16_384])) == events


async def test_an_error_event_ends_the_watch_after_the_events_before_it() -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    data = _line(_event(0)) + _line(gone) + _line(_event(1))
    got: list[dict[str, Any]] = []
    with pytest.raises(KubeError) as raised:
        async with _watch([data]) as kube:
            async for event in kube.watch(WORKLOADS, "1"):
                got.append(event)
    assert raised.value.gone
    assert got == [_event(0)]


async def test_a_truncated_last_event_is_a_value_error() -> None:
    data = _line(_event(0)) + _line(_event(1))[:-10]
    got: list[dict[str, Any]] = []
    with pytest.raises(ValueError):
        async with _watch([data]) as kube:
            async for event in kube.watch(WORKLOADS, "1"):
                got.append(event)
    assert got == [_event(0)]


async def test_a_line_without_end_is_refused_past_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_module, "MAX_EVENT_BYTES", 10_000)
    with pytest.raises(ValueError, match="watch of workloads: an event longer than 10000"):
        await _events([b"{" + b" " * 999 for _ in range(20)])
