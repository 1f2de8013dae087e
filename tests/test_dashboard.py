"""The dashboard's document, from the controller's state alone, and its routes on the metrics
listener (only with the flag)."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.test_state import admitted, node, template
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    NODES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
)
from topogate.metrics import Metrics
from topogate.runtime import dashboard
from topogate.runtime.dashboard import Feed, add_dashboard, document, page_html
from topogate.runtime.ops import make_metrics_app
from topogate.state import ControllerState

RACK, HOST = "cloud.com/rack", "kubernetes.io/hostname"
Obj = dict[str, Any]


def cluster() -> ControllerState:
    """Racks r1 (a1, a2, a3) and r2 (b1) of 8 GPUs; a flavor over them; a queue of 32 GPUs in
    cohort "all"; one Workload admitted onto a1 and a2 (2 pods of 2 GPUs each)."""
    state = ControllerState()
    for name, rack in [("a1", "r1"), ("a2", "r1"), ("a3", "r1"), ("b1", "r2")]:
        labelled = node(name, rack)
        labelled["metadata"]["labels"]["pool"] = "gpu"
        state.handler(NODES)(None, labelled)
    levels = [{"nodeLabel": RACK}, {"nodeLabel": HOST}]
    state.handler(TOPOLOGIES)(None, {"metadata": {"name": "dc"}, "spec": {"levels": levels}})
    flavor = {
        "metadata": {"name": "tas"},
        "spec": {"nodeLabels": {"pool": "gpu"}, "topologyName": "dc"},
    }
    state.handler(RESOURCE_FLAVORS)(None, flavor)
    quota = [{"name": "nvidia.com/gpu", "nominalQuota": 32}]
    queue = {
        "metadata": {"name": "cq"},
        "spec": {
            "cohort": "all",
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "tas", "resources": quota}],
                }
            ],
        },
    }
    state.handler(CLUSTER_QUEUES)(None, queue)
    local = {"metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "cq"}}
    state.handler(LOCAL_QUEUES)(None, local)
    running = admitted("train", [HOST], [(["a1"], 1), (["a2"], 1)])
    running["spec"]["queueName"] = "q"
    assignment = running["status"]["admission"]["podSetAssignments"][0]
    assignment["flavors"] = {"nvidia.com/gpu": "tas"}
    assignment["resourceUsage"] = {"nvidia.com/gpu": "4"}
    running["status"]["conditions"] = [{"type": "Admitted", "status": "True"}]
    state.handler(WORKLOADS)(None, running)
    return state


def pending_workload(pods: int, gpus: int) -> Obj:
    return {
        "metadata": {"name": "big", "namespace": "ml", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "queueName": "q",
            "podSets": [
                {
                    "name": "main",
                    "count": pods,
                    "template": template(gpus),
                    "topologyRequest": {"required": RACK},
                }
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": 'topology "dc" allows to fit only 3 out of 4 pod(s)',
                }
            ]
        },
    }


def test_the_document_sums_domains_and_draws_the_assignment() -> None:
    state = cluster()
    doc = document(state, leading=True)
    [topology] = doc["topologies"]
    assert (topology["flavor"], topology["topology"], topology["resource"]) == (
        "tas",
        "dc",
        "nvidia.com/gpu",
    )
    domains = {"/".join(d["path"]): d for d in topology["domains"]}
    assert list(domains) == ["r1", "r1/a1", "r1/a2", "r1/a3", "r2", "r2/b1"]  # parents first
    assert domains["r1"] | {"path": None} == {
        "path": None,
        "level": RACK,
        "nodes": 3,
        "capacity": 24,
        "used": 4,
        "reserved": 4,
        "free": 20,
    }
    assert domains["r1/a1"]["level"] == HOST and domains["r1/a1"]["reserved"] == 2
    assert domains["r2"]["used"] == 0 and domains["r2"]["free"] == 8
    [listed] = doc["workloads"]
    assert (listed["key"], listed["state"], listed["clusterQueue"], listed["flavor"]) == (
        "ml/train",
        "Admitted",
        "cq",
        "tas",
    )
    assert [(a["path"], a["count"]) for a in listed["assignment"]] == [
        (["r1", "a1"], 1),
        (["r1", "a2"], 1),
    ]
    [queue] = doc["queues"]["clusterQueues"]
    assert (queue["name"], queue["cohort"], queue["admitted"], queue["pending"]) == (
        "cq",
        "all",
        1,
        0,
    )
    assert queue["resources"] == [
        {
            "flavor": "tas",
            "resource": "nvidia.com/gpu",
            "nominal": 32,
            "used": 4,
            "borrowed": 0,
            "available": 28,
        }
    ]
    assert doc["queues"]["cohorts"] == [{"name": "all", "parent": None}]


def test_a_pending_workload_shows_its_reason_and_the_nearest_domain() -> None:
    state = cluster()
    state.handler(WORKLOADS)(None, pending_workload(pods=4, gpus=8))
    doc = document(state, leading=True)
    big = next(w for w in doc["workloads"] if w["name"] == "big")
    assert doc["workloads"][0] is big  # pending first
    assert big["state"] == "Pending"
    assert big["message"] == 'topology "dc" allows to fit only 3 out of 4 pod(s)'
    # a1 and a2 hold 2 GPUs each (6 free): pods of 8 fit only on a3 in r1 and on b1 in r2,
    # one each. Equal: the first by path.
    assert big["nearest"] == {"level": RACK, "path": ["r1"], "fits": 1, "count": 4}
    assert doc["queues"]["clusterQueues"][0]["pending"] == 1
    # Smaller pods: 3 GPUs each fit twice on a3, twice on a1/a2 (6 free): r1 holds 6.
    state.handler(WORKLOADS)(pending_workload(4, 8), pending_workload(pods=8, gpus=3))
    big = next(w for w in document(state, True)["workloads"] if w["name"] == "big")
    assert big["nearest"] == {"level": RACK, "path": ["r1"], "fits": 6, "count": 8}


def test_nearest_counts_no_room_on_a_node_no_pod_may_use() -> None:
    state = cluster()
    cordoned = node("a3", "r1")
    cordoned["metadata"]["labels"]["pool"] = "gpu"
    cordoned["spec"] = {"unschedulable": True}
    state.handler(NODES)(None, cordoned)
    state.handler(WORKLOADS)(None, pending_workload(pods=4, gpus=8))
    big = next(w for w in document(state, True)["workloads"] if w["name"] == "big")
    # a3's 8 GPUs are free but cordoned: only b1 in r2 holds a pod of 8.
    assert big["nearest"] == {"level": RACK, "path": ["r2"], "fits": 1, "count": 4}


def test_the_feed_rebuilds_only_after_a_change_and_not_too_often() -> None:
    state = cluster()
    now = [100.0]

    def clock() -> float:
        now[0] += 0.5  # every reading: as if each build took half a second
        return now[0]

    feed = Feed(state, lambda: True, clock)
    first = feed.current()
    assert feed.current() is first  # nothing changed: the same bytes
    state.handler(WORKLOADS)(None, pending_workload(4, 8))
    # Changed, but the last build took 0.5 s: the next waits 5 s (a tenth of the loop).
    assert feed.current() is first
    now[0] += 5
    second = feed.current()
    assert second[0] != first[0]
    assert [w["name"] for w in json.loads(second[1])["workloads"]] == ["big", "train"]


def test_the_page_fetches_nothing_from_elsewhere() -> None:
    text = page_html()
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)|<link|\bsrc=|url\(|@import", text)
    assert 'new EventSource("dashboard/events")' in text


async def test_the_routes_are_on_the_metrics_listener_only_with_the_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dashboard, "CHECK_INTERVAL", 0.05)
    bare = TestClient(TestServer(make_metrics_app(Metrics())))
    await bare.start_server()
    try:
        assert (await bare.get("/dashboard")).status == 404
    finally:
        await bare.close()
    state = cluster()
    app = make_metrics_app(Metrics())
    add_dashboard(app, Feed(state, lambda: False))
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        page = await client.get("/dashboard")
        assert page.status == 200 and page.content_type == "text/html"
        assert (await client.get("/metrics")).status == 200
        answer = await (await client.get("/dashboard/state")).json()
        assert answer["leading"] is False and answer["workloads"][0]["name"] == "train"
        events = await client.get("/dashboard/events")
        assert events.content_type == "text/event-stream"
        first = await asyncio.wait_for(events.content.readuntil(b"\n\n"), 5)
        assert json.loads(first.removeprefix(b"data: "))["workloadCount"] == 1
        state.handler(WORKLOADS)(None, pending_workload(4, 8))  # a change is pushed
        second = await asyncio.wait_for(events.content.readuntil(b"\n\n"), 5)
        assert json.loads(second.removeprefix(b"data: "))["workloadCount"] == 2
        events.close()
    finally:
        await client.close()


def test_the_dashboard_needs_the_metrics_listener(capsys: pytest.CaptureFixture[str]) -> None:
    from topogate.cli import main

    assert main(["serve", "--dashboard", "--metrics-port=-1"]) == 2
    error = capsys.readouterr().err
    assert "--dashboard: is served on the metrics listener: --metrics-port is -1" in error
    assert "Traceback" not in error


def test_a_workload_the_page_cannot_read_is_left_out_not_a_crash() -> None:
    state = cluster()
    broken = pending_workload(4, 8)
    broken["spec"]["podSets"][0]["count"] = "many"  # no API server stores this; still no crash
    state.handler(WORKLOADS)(None, broken)
    doc = document(state, leading=True)
    assert [w["name"] for w in doc["workloads"]] == ["train"]


async def _serving(feed: Feed) -> TestClient[Any, Any]:
    app = make_metrics_app(Metrics())
    add_dashboard(app, feed)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client


async def _until(done: Any, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if done():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within {seconds} s")


async def test_a_viewer_that_never_reads_is_dropped_not_buffered_for_ever(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Its stream waited in drain for ever, holding the unread documents (the loop was free,
    # but the memory and the handler were not), and nothing bounded how many such viewers.
    import logging
    import socket

    caplog.set_level(logging.INFO, "topogate.dashboard")
    monkeypatch.setattr(dashboard, "CHECK_INTERVAL", 0.01)
    monkeypatch.setattr(dashboard, "WRITE_TIMEOUT", 0.5)
    feed = Feed(cluster(), lambda: True)
    versions = iter(range(1_000_000))
    big = b"x" * (4 << 20)  # a new 4 MiB document every check: past any socket buffer
    monkeypatch.setattr(feed, "current", lambda: ((next(versions), True), big))
    client = await _serving(feed)
    sock = socket.socket()
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        assert client.port is not None
        await loop.sock_connect(sock, (str(client.host), client.port))
        await loop.sock_sendall(sock, b"GET /dashboard/events HTTP/1.1\r\nHost: x\r\n\r\n")
        await _until(lambda: feed.viewers == 1)
        await _until(lambda: feed.viewers == 0)  # dropped after WRITE_TIMEOUT
        assert "dropped a dashboard viewer that read nothing for 0.5 s" in caplog.text
    finally:
        sock.close()
        await client.close()


async def test_viewers_past_the_limit_are_told_to_come_back_and_drops_free_their_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dashboard, "CHECK_INTERVAL", 0.01)
    monkeypatch.setattr(dashboard, "KEEPALIVE", 0.05)
    monkeypatch.setattr(dashboard, "MAX_VIEWERS", 2)
    feed = Feed(cluster(), lambda: True)
    client = await _serving(feed)
    try:
        for _ in range(20):  # viewers that connect and drop at once
            (await client.get("/dashboard/events")).close()
        await _until(lambda: feed.viewers == 0)
        streams = [await client.get("/dashboard/events") for _ in range(2)]
        assert [s.status for s in streams] == [200, 200]
        refused = await client.get("/dashboard/events")
        assert refused.status == 503 and refused.headers["Retry-After"] == "30"
        assert "/dashboard/state" in await refused.text()
        assert (await client.get("/dashboard/state")).status == 200  # the snapshot still serves
        streams[0].close()
        await _until(lambda: feed.viewers == 1)
        again = await client.get("/dashboard/events")
        assert again.status == 200
        again.close()
        streams[1].close()
    finally:
        await client.close()
