"""Leader election on a real API server, and the ops endpoints (health, readiness, metrics)."""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from prometheus_client import CONTENT_TYPE_LATEST

from topogate.api.times import micro_time
from topogate.clock import micro_now
from topogate.kube.client import Kube
from topogate.kube.errors import KubeError
from topogate.kube.resources import LEASES, Obj, Resource
from topogate.metrics import Metrics
from topogate.runtime import serve
from topogate.runtime.leader import LeaderElector, LeadershipLost
from topogate.runtime.ops import make_metrics_app, make_ops_app, start_ops_server
from topogate.testing.controlplane import ControlPlane

AiohttpClient = Callable[..., Any]

NAMESPACES = Resource("v1", "namespaces", namespaced=False)
LEASE = "topogate-leader"


def fast(
    kube: Kube,
    namespace: str,
    identity: str,
    metrics: Metrics | None = None,
    release_on_cancel: bool = True,
) -> LeaderElector:
    """Short periods keep the tests fast: lease 2 s, renew deadline 1.5 s, retry 0.2 s."""
    return LeaderElector(
        kube,
        namespace,
        LEASE,
        identity,
        lease_duration=2.0,
        renew_deadline=1.5,
        retry_period=0.2,
        metrics=metrics,
        release_on_cancel=release_on_cancel,
    )


# -- ops endpoints ----------------------------------------------------------------------


def _ops(
    ready: tuple[bool, str] = (True, ""),
    healthy: tuple[bool, str] = (True, ""),
    metrics: Metrics | None = None,
) -> Any:
    return make_ops_app(lambda: ready, lambda: healthy)


async def test_healthz_ok_and_failing(aiohttp_client: AiohttpClient) -> None:
    client: TestClient[Any, Any] = await aiohttp_client(_ops())
    response = await client.get("/healthz")
    assert (response.status, await response.text()) == (200, "ok")

    client = await aiohttp_client(_ops(healthy=(False, "watch of pods stalled for 120s")))
    response = await client.get("/healthz")
    assert (response.status, await response.text()) == (500, "watch of pods stalled for 120s")


async def test_readyz_renders_the_callback(aiohttp_client: AiohttpClient) -> None:
    client: TestClient[Any, Any] = await aiohttp_client(
        _ops(ready=(False, "caches not synced: pods, nodes"))
    )
    response = await client.get("/readyz")
    assert response.status == 503
    assert await response.text() == "caches not synced: pods, nodes"

    client = await aiohttp_client(_ops(ready=(True, "standby")))
    response = await client.get("/readyz")
    assert (response.status, await response.text()) == (200, "standby")

    client = await aiohttp_client(_ops(ready=(True, "")))
    response = await client.get("/readyz")
    assert (response.status, await response.text()) == (200, "ok")


async def test_a_raising_check_fails_the_probe(aiohttp_client: AiohttpClient) -> None:
    def broken() -> tuple[bool, str]:
        raise RuntimeError("boom")

    client: TestClient[Any, Any] = await aiohttp_client(make_ops_app(broken, broken))
    response = await client.get("/readyz")
    assert response.status == 503
    assert "boom" in await response.text()
    response = await client.get("/healthz")
    assert response.status == 500


async def test_metrics_in_prometheus_text_format(aiohttp_client: AiohttpClient) -> None:
    metrics = Metrics()
    metrics.leader.set(1)
    metrics.ungated_pods.inc(3)
    client: TestClient[Any, Any] = await aiohttp_client(make_metrics_app(metrics))
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST
    text = await response.text()
    assert "# TYPE topogate_leader gauge" in text
    assert "topogate_leader 1.0" in text
    assert "topogate_ungated_pods_total 3.0" in text


async def test_metrics_are_not_served_with_the_probes_and_default_to_loopback(
    aiohttp_client: AiohttpClient,
) -> None:
    # The probe port must be reachable on the pod's address; metrics carry no authentication.
    client: TestClient[Any, Any] = await aiohttp_client(_ops())
    assert (await client.get("/metrics")).status == 404
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args([])
    assert (args.metrics_host, args.metrics_port) == ("127.0.0.1", 8080)
    assert args.ops_host == "0.0.0.0"


async def test_ops_server_on_port_zero() -> None:
    server = await start_ops_server(_ops(ready=(True, "standby")), "127.0.0.1", 0)
    try:
        assert server.port > 0
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{server.port}/readyz") as response,
        ):
            assert (response.status, await response.text()) == (200, "standby")
    finally:
        await server.cleanup()


def test_periods_are_validated() -> None:
    kube: Any = object()
    with pytest.raises(ValueError, match="lease_duration"):
        LeaderElector(kube, "ns", "l", "a", lease_duration=2, renew_deadline=2)
    with pytest.raises(ValueError, match="renew_deadline"):
        LeaderElector(kube, "ns", "l", "a", lease_duration=3, renew_deadline=1, retry_period=1)
    with pytest.raises(ValueError, match="identity"):
        LeaderElector(kube, "ns", "l", "")


def test_micro_time_format() -> None:
    from datetime import UTC, datetime

    moment = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert micro_time(moment) == "2026-01-02T03:04:05.123456Z"


# -- leader election on the control plane ----------------------------------------------


class FlakyKube(Kube):
    """A Kube whose requests fail with 503 while ``failing`` is set (a partitioned leader)."""

    failing = False

    async def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> Obj:
        if self.failing:
            raise KubeError(503, "ServiceUnavailable", "partitioned by the test")
        return await super().request(method, path, *args, **kwargs)


@pytest.fixture
async def cluster(control_plane: ControlPlane) -> AsyncIterator[tuple[Kube, str]]:
    """A Kube on the control plane and a fresh namespace."""
    kube = await Kube.connect(str(control_plane.kubeconfig))
    namespace = f"leader-{uuid.uuid4().hex[:8]}"
    await kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    try:
        yield kube, namespace
    finally:
        await kube.delete(NAMESPACES, namespace)
        await kube.close()


class Probe:
    """A lead() that records when it ran and fails the test if two ever overlap."""

    active: set[str]

    def __init__(self, active: set[str] | None = None) -> None:
        self.active = set() if active is None else active
        self.started: dict[str, float] = {}
        self.cancelled: set[str] = set()
        self.overlaps = 0

    def lead(self, identity: str, hold: float | None = None) -> Callable[[], Any]:
        async def lead() -> None:
            if self.active:
                self.overlaps += 1
            self.active.add(identity)
            self.started[identity] = time.monotonic()
            try:
                if hold is None:
                    await asyncio.Event().wait()  # forever, until cancelled
                else:
                    await asyncio.sleep(hold)
            except asyncio.CancelledError:
                self.cancelled.add(identity)
                raise
            finally:
                self.active.discard(identity)

        return lead


async def _lease(kube: Kube, namespace: str) -> Obj:
    return await kube.get(LEASES, LEASE, namespace)


async def _stop(*tasks: asyncio.Task[Any]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _wait(event: asyncio.Event, seconds: float = 5.0) -> None:
    await asyncio.wait_for(event.wait(), seconds)


@pytest.mark.cluster
async def test_acquires_and_the_lease_names_it(cluster: tuple[Kube, str]) -> None:
    kube, namespace = cluster
    metrics = Metrics()
    probe = Probe()
    elector = fast(kube, namespace, "replica-a", metrics=metrics)
    assert not elector.is_leader
    assert metrics.registry.get_sample_value("topogate_leader") == 0
    task = asyncio.create_task(elector.run(probe.lead("replica-a")))
    try:
        await _wait(elector.leading)
        assert elector.is_leader
        assert metrics.registry.get_sample_value("topogate_leader") == 1
        spec = (await _lease(kube, namespace))["spec"]
        assert spec["holderIdentity"] == "replica-a"
        assert spec["leaseDurationSeconds"] == 2
        assert spec["leaseTransitions"] == 0
        first_renew = spec["renewTime"]
        await asyncio.sleep(0.5)  # renewed every 0.2 s
        spec = (await _lease(kube, namespace))["spec"]
        assert spec["renewTime"] > first_renew
        assert spec["holderIdentity"] == "replica-a"
        assert probe.active == {"replica-a"}
    finally:
        await _stop(task)
    # Cancelled (the SIGTERM path): lead() cancelled, Lease released.
    assert probe.cancelled == {"replica-a"}
    assert not elector.is_leader
    assert metrics.registry.get_sample_value("topogate_leader") == 0
    spec = (await _lease(kube, namespace))["spec"]
    assert spec.get("holderIdentity", "") == ""
    assert spec["leaseDurationSeconds"] == 1


@pytest.mark.cluster
async def test_standby_waits_then_takes_over_on_release(cluster: tuple[Kube, str]) -> None:
    kube, namespace = cluster
    probe = Probe()
    first = fast(kube, namespace, "replica-a")
    second = fast(kube, namespace, "replica-b")
    done = asyncio.Event()

    async def lead_until_done() -> None:
        probe.started["replica-a"] = time.monotonic()
        await done.wait()

    task_a = asyncio.create_task(first.run(lead_until_done))
    await _wait(first.leading)
    task_b = asyncio.create_task(second.run(probe.lead("replica-b")))
    try:
        await asyncio.sleep(1.0)
        assert not second.is_leader
        assert "replica-b" not in probe.started
        assert second.leader_identity == "replica-a"

        done.set()  # first's lead() returns: it releases, second takes over
        released = time.monotonic()
        await task_a  # returns normally
        assert not first.is_leader
        await _wait(second.leading, 3.0)
        took = time.monotonic() - released
        assert took < 3.0, took
        spec = (await _lease(kube, namespace))["spec"]
        assert spec["holderIdentity"] == "replica-b"
        assert spec["leaseTransitions"] == 1  # a (created: 0) -> released -> b: one change
        assert spec["leaseDurationSeconds"] == 2
    finally:
        await _stop(task_a, task_b)


@pytest.mark.cluster
async def test_lead_error_releases_and_propagates(cluster: tuple[Kube, str]) -> None:
    kube, namespace = cluster
    elector = fast(kube, namespace, "replica-a")

    async def lead() -> None:
        raise RuntimeError("controller failed")

    with pytest.raises(RuntimeError, match="controller failed"):
        await elector.run(lead)
    spec = (await _lease(kube, namespace))["spec"]
    assert spec.get("holderIdentity", "") == ""


@pytest.mark.cluster
async def test_takes_over_a_crashed_leader_after_the_lease_expires(
    cluster: tuple[Kube, str],
) -> None:
    kube, namespace = cluster
    probe = Probe()
    # A crash: no release when its task dies.
    crashing = fast(kube, namespace, "replica-a", release_on_cancel=False)
    second = fast(kube, namespace, "replica-b")
    task_a = asyncio.create_task(crashing.run(probe.lead("replica-a")))
    await _wait(crashing.leading)
    task_b = asyncio.create_task(second.run(probe.lead("replica-b")))
    try:
        await asyncio.sleep(0.6)  # second has seen the Lease being renewed
        assert not second.is_leader
        await _stop(task_a)
        crashed = time.monotonic()
        assert (await _lease(kube, namespace))["spec"]["holderIdentity"] == "replica-a"
        await _wait(second.leading, 5.0)
        took = time.monotonic() - crashed
        # Not before the 2 s lease ran out (counted from second's last sight of a renewal,
        # at most one retry before the crash), and soon after.
        assert 1.5 < took < 3.5, took
        assert (await _lease(kube, namespace))["spec"]["holderIdentity"] == "replica-b"
        assert probe.overlaps == 0
    finally:
        await _stop(task_a, task_b)


@pytest.mark.cluster
async def test_lease_held_by_a_silent_holder_expires(cluster: tuple[Kube, str]) -> None:
    kube, namespace = cluster
    # A renewTime far in the future must not matter: expiry is judged by our own clock.
    await kube.create(
        LEASES,
        {
            "metadata": {"name": LEASE, "namespace": namespace},
            "spec": {
                "holderIdentity": "ghost",
                "leaseDurationSeconds": 2,
                "acquireTime": "2099-01-01T00:00:00.000000Z",
                "renewTime": "2099-01-01T00:00:00.000000Z",
                "leaseTransitions": 4,
            },
        },
        namespace,
    )
    probe = Probe()
    elector = fast(kube, namespace, "replica-b")
    started = time.monotonic()
    task = asyncio.create_task(elector.run(probe.lead("replica-b")))
    try:
        await asyncio.sleep(0.5)
        assert not elector.is_leader
        assert elector.leader_identity == "ghost"
        await _wait(elector.leading, 5.0)
        took = time.monotonic() - started
        assert 2.0 <= took < 3.5, took
        spec = (await _lease(kube, namespace))["spec"]
        assert spec["holderIdentity"] == "replica-b"
        assert spec["leaseTransitions"] == 5
    finally:
        await _stop(task)


@pytest.mark.cluster
async def test_partitioned_leader_loses_after_the_renew_deadline(
    cluster: tuple[Kube, str], control_plane: ControlPlane
) -> None:
    kube, namespace = cluster
    flaky = await FlakyKube.connect(str(control_plane.kubeconfig))
    assert isinstance(flaky, FlakyKube)
    probe = Probe()
    metrics = Metrics()
    first = fast(flaky, namespace, "replica-a", metrics=metrics)
    second = fast(kube, namespace, "replica-b")
    task_a = asyncio.create_task(first.run(probe.lead("replica-a")))
    try:
        await _wait(first.leading)
        task_b = asyncio.create_task(second.run(probe.lead("replica-b")))
        await asyncio.sleep(0.4)
        flaky.failing = True
        cut = time.monotonic()
        with pytest.raises(LeadershipLost, match="not renewed"):
            await asyncio.wait_for(task_a, 5.0)
        lost = time.monotonic() - cut
        assert 1.2 < lost < 2.2, lost  # the 1.5 s renew deadline, counted from the last renew
        assert probe.cancelled == {"replica-a"}
        assert not first.is_leader
        assert metrics.registry.get_sample_value("topogate_leader") == 0
        # The second takes over once the 2 s lease has run out, never while first led.
        await _wait(second.leading, 5.0)
        assert probe.overlaps == 0
        await _stop(task_b)
    finally:
        await _stop(task_a)
        await flaky.close()


@pytest.mark.cluster
async def test_leader_whose_lease_is_taken_loses_at_once(cluster: tuple[Kube, str]) -> None:
    kube, namespace = cluster
    probe = Probe()
    elector = fast(kube, namespace, "replica-a")
    task = asyncio.create_task(elector.run(probe.lead("replica-a")))
    try:
        await _wait(elector.leading)
        lease = await _lease(kube, namespace)
        lease["spec"]["holderIdentity"] = "usurper"
        lease["spec"]["renewTime"] = micro_now()
        await kube.replace(LEASES, lease)
        with pytest.raises(LeadershipLost, match="usurper"):
            await asyncio.wait_for(task, 2.0)
        assert probe.cancelled == {"replica-a"}
        # Lost leadership does not release: the Lease stays with the usurper.
        assert (await _lease(kube, namespace))["spec"]["holderIdentity"] == "usurper"
    finally:
        await _stop(task)


@pytest.mark.cluster
async def test_simultaneous_electors_never_lead_together(cluster: tuple[Kube, str]) -> None:
    kube, namespace = cluster
    probe = Probe()
    names = ["replica-a", "replica-b", "replica-c"]
    electors = [fast(kube, namespace, name) for name in names]
    # Each leads for 0.4 s and returns (releasing); the next one takes over.
    tasks = [
        asyncio.create_task(elector.run(probe.lead(name, hold=0.4)))
        for elector, name in zip(electors, names, strict=True)
    ]
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), 8.0)
    finally:
        await _stop(*tasks)
    assert probe.overlaps == 0
    assert set(probe.started) == set(names)
    spec = (await _lease(kube, namespace))["spec"]
    assert spec.get("holderIdentity", "") == ""
