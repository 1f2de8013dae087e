"""Writes fenced on the Lease: a leader paused past its Lease writes nothing when it wakes."""

from __future__ import annotations

import asyncio

import pytest

from tests.test_shells import Harness, workload
from topogate.controllers.admitter import Admitter
from topogate.kube.events import EventRecorder
from topogate.kube.resources import LEASES, PODS, WORKLOADS
from topogate.runtime.fencing import FencedKube, NotLeading
from topogate.runtime.leader import LeaderElector, LeadershipLost
from topogate.testing.fakekube import FakeKube


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_leader_paused_past_its_deadline_writes_nothing_on_waking() -> None:
    kube, clock = FakeKube(), Clock()
    elector = LeaderElector(
        kube, "ns", "lease", "a", lease_duration=6, renew_deadline=5, retry_period=1, clock=clock
    )
    fenced = FencedKube(kube, elector.holds_lease)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
    kube.seed(PODS, pod)
    outcome: list[str] = []

    async def lead() -> None:
        await fenced.patch(PODS, "p", {"metadata": {"labels": {"before": "pause"}}}, "ns")
        outcome.append("wrote while leading")
        clock.now += 5.5  # SIGSTOP for 5.5 s: past the renew deadline, the loop not run yet
        with pytest.raises(NotLeading):
            await fenced.patch(PODS, "p", {"metadata": {"labels": {"after": "pause"}}}, "ns")
        outcome.append("refused after the pause")
        await asyncio.sleep(10)  # the renew loop now sees the lapse and steps down

    with pytest.raises(LeadershipLost):
        await asyncio.wait_for(elector.run(lead), 5)
    assert outcome == ["wrote while leading", "refused after the pause"]
    labels = (kube.stored(PODS, "p", "ns") or {})["metadata"]["labels"]
    assert labels == {"before": "pause"}
    assert len(kube.calls_of("patch", PODS)) == 1  # the refused write never left the process
    assert fenced.refused == 1
    assert kube.stored(LEASES, "lease", "ns") is not None  # the Lease itself is not fenced


async def test_a_standby_or_lapsed_replica_s_admitter_writes_nothing_and_keeps_no_capacity() -> (
    None
):
    h = Harness()
    h.kube.seed(WORKLOADS, workload("w"))
    h.deliver()
    fenced = FencedKube(h.kube, lambda: False)
    events = EventRecorder(fenced, "test")
    admitter = Admitter(fenced, h.state, h.metrics, events)
    await admitter.cycle()  # raises nothing
    await events.drain()
    assert [c for c in h.kube.calls if c.method != "list"] == []
    assert h.state.ledger.reserved("ml/w") is None
    assert h.held_gpus() == 0
    assert fenced.refused >= 1


async def test_the_lease_is_checked_after_the_rate_limiter_wait_not_before() -> None:
    """A write that waits for a rate-limiter token while the Lease lapses never leaves: the
    check is made as the request is sent, by the real client, against a real HTTP server."""
    from aiohttp import web
    from kubernetes.aio.client.configuration import Configuration

    from topogate.kube.client import Kube

    received: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        received.append(request.method)
        return web.json_response({"metadata": {"name": "p"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kube = Kube(Configuration(host=f"http://127.0.0.1:{port}"), qps=2, burst=1)
    leading = [True]
    fenced = FencedKube(kube, lambda: leading[0])
    try:
        await fenced.patch(PODS, "p", {"metadata": {}}, "ns")  # the one token of the burst
        # The next write waits 0.5 s for its token; the Lease lapses 0.1 s into that wait.
        asyncio.get_running_loop().call_later(0.1, leading.__setitem__, 0, False)
        with pytest.raises(NotLeading):
            await fenced.patch(PODS, "p", {"metadata": {}}, "ns")
        assert received == ["PATCH"]
        assert fenced.refused == 1
        await kube.get(PODS, "p", "ns")  # reads are not fenced
        assert received == ["PATCH", "GET"]
    finally:
        await kube.close()
        await runner.cleanup()
