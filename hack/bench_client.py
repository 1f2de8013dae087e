"""serve's HTTP client CPU per request (topogate.kube.client.Kube over aiohttp), against a
local aiohttp server in another process answering as the API server does to a Workload status
patch (the Workload back, about 2.5 KB of JSON), to an Event's creation (the Event back; the
Events emitted and sent through serve's recorder) and to a watch (Workload events, one chunk
each, read through the Reflector into its store): only the client's process CPU is counted.
Plain HTTP on loopback, so TLS (the same for any client) is left out.

    .venv/bin/python hack/bench_client.py [--requests 3000] [--concurrency 4] [--rounds 3]
        [--watch-events 10000] [--qps 1000]

Prints the client's CPU per request (or per watch event) for each kind, best of the rounds;
"at QPS" is the status patch through a client-side rate limit of that QPS (burst 1), whose
wall time is printed against the limit's; "two such clients" runs it through the client and
a view with its own budget at once, as serve's writes and Events.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import socket
import time
from typing import Any

from kubernetes.aio.client.configuration import Configuration

from topogate.kube.client import Kube, own_budget
from topogate.kube.events import EventRecorder
from topogate.kube.reflector import Reflector
from topogate.kube.resources import WORKLOADS

WORKLOAD: dict[str, Any] = {
    "apiVersion": "topogate.dev/v1alpha1",
    "kind": "Workload",
    "metadata": {
        "name": "small-required-rack-0-17-0",
        "namespace": "tas-c0-q0",
        "uid": "5f0c1d2e-0b0a-4c1e-9d3f-1a2b3c4d5e6f",
        "resourceVersion": "123456",
        "generation": 1,
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "labels": {"bench/class": "small-required-rack", "bench/runtime-ms": "200"},
        "managedFields": [
            {
                "manager": "topogate",
                "operation": "Update",
                "apiVersion": "topogate.dev/v1alpha1",
                "time": "2026-01-01T00:00:01Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:admission": {}, "f:conditions": {}}},
                "subresource": "status",
            }
        ],
    },
    "spec": {
        "queueName": "tas-c0-q0",
        "priority": 50,
        "podSets": [
            {
                "name": "main",
                "count": 8,
                "template": {
                    "metadata": {
                        "annotations": {"kueue.x-k8s.io/podset-required-topology": "rack"}
                    },
                    "spec": {
                        "containers": [
                            {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}
                        ]
                    },
                },
            }
        ],
    },
    "status": {
        "admission": {
            "clusterQueue": "cq-0",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"cpu": "tas"},
                    "resourceUsage": {"cpu": "8"},
                    "count": 8,
                    "topologyAssignment": {
                        "levels": ["kubernetes.io/hostname"],
                        "slices": [
                            {
                                "domainCount": 1,
                                "valuesPerLevel": [{"universal": "kwok-node-17"}],
                                "podCounts": {"universal": 8},
                            }
                        ],
                    },
                }
            ],
        },
        "conditions": [
            {
                "type": kind,
                "status": "True",
                "reason": kind,
                "message": "Quota reserved in ClusterQueue cq-0",
                "lastTransitionTime": "2026-01-01T00:00:01Z",
            }
            for kind in ("QuotaReserved", "Admitted")
        ],
    },
}


def _event_back(sent: bytes) -> bytes:
    """An Event as the API server returns it: what was sent, with the server's fields."""
    event = json.loads(sent)
    event["metadata"].update(
        uid="0b0a4c1e-9d3f-1a2b-3c4d-5e6f5f0c1d2e",
        resourceVersion="123457",
        creationTimestamp="2026-01-01T00:00:01Z",
        managedFields=WORKLOAD["metadata"]["managedFields"],
    )
    return json.dumps(event).encode()


def _watch_lines(count: int) -> list[bytes]:
    lines = []
    for i in range(count):
        obj = json.loads(json.dumps(WORKLOAD))
        obj["metadata"]["name"] = f"w-{i % 500}"
        obj["metadata"]["resourceVersion"] = str(200000 + i)
        lines.append(json.dumps({"type": "MODIFIED", "object": obj}).encode() + b"\n")
    return lines


def _serve(port: int, ready: Any, watch_events: int) -> None:
    from aiohttp import web

    body = json.dumps(WORKLOAD).encode()
    lines = _watch_lines(watch_events)

    async def answer(request: web.Request) -> web.StreamResponse:
        sent = await request.read()
        if request.query.get("watch") == "true":
            stream = web.StreamResponse(headers={"Content-Type": "application/json"})
            await stream.prepare(request)
            for line in lines:  # the API server flushes every event by itself
                await stream.write(line)
            await stream.write_eof()
            return stream
        if request.method == "POST":
            return web.Response(body=_event_back(sent), content_type="application/json")
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


async def _events_round(kube: Kube, events: int) -> float:
    """Client CPU per Event, emitted and sent as serve's recorder does (one sender)."""
    recorder = EventRecorder(kube, "bench", capacity=events)
    regarding = {**WORKLOAD, "metadata": dict(WORKLOAD["metadata"])}
    began = time.process_time()
    for i in range(events):
        regarding["metadata"]["name"] = f"w-{i}"
        recorder.emit(regarding, "Pending", f"couldn't assign flavors to pod set main: {i}")
    await recorder.drain(600)
    return (time.process_time() - began) / events


async def _round(kube: Kube, kind: str, requests: int, concurrency: int) -> float:
    if kind == "create":
        return await _events_round(kube, requests)
    status = {"status": {"conditions": WORKLOAD["status"]["conditions"]}}

    async def one(i: int) -> None:
        body = {**status, "metadata": {"resourceVersion": str(i)}}
        await kube.patch(WORKLOADS, f"w-{i}", body, "ns", subresource="status")

    async def worker(start: int) -> None:
        for i in range(start, requests, concurrency):
            await one(i)

    began = time.process_time()
    await asyncio.gather(*(worker(s) for s in range(concurrency)))
    return (time.process_time() - began) / requests


async def _watch_round(kube: Kube, events: int) -> float:
    """Client CPU per watch event, read through a Reflector (decoded, stored, handed on)."""
    seen = [0]

    def changed(old: Any, new: Any) -> None:
        seen[0] += 1

    reflector = Reflector(kube, WORKLOADS, changed)
    reflector.resource_version = "1"
    began = time.process_time()
    await reflector._watch([0])
    took = time.process_time() - began
    if seen[0] != events:
        raise SystemExit(f"the watch delivered {seen[0]} events of {events}")
    return took / events


async def _pair_round(kube: Kube, requests: int, concurrency: int) -> float:
    """Status patches through ``kube`` and as many through a view with its own budget at the
    same time, as serve's writes and Events go: client CPU per request."""
    view = own_budget(kube)
    assert isinstance(view, Kube)
    began = time.process_time()
    await asyncio.gather(*(_round(k, "patch", requests, concurrency) for k in (kube, view)))
    return (time.process_time() - began) / (2 * requests)


async def _sleep_round(sleeps: int) -> float:
    """The process's CPU per 20 ms sleep of the event loop (a rate-limited request's wait at
    QPS 50): what one wake-up costs on this machine, besides any Python work."""
    began = time.process_time()
    for _ in range(sleeps):
        await asyncio.sleep(0.02)
    return (time.process_time() - began) / sleeps


async def _bench(port: int, args: argparse.Namespace) -> dict[str, float]:
    configuration = Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    kube = Kube(configuration, qps=None)
    # The same pool behind a client-side rate limit that every request waits for, as serve's
    # writes and Events do at QPS 50 (only faster, to keep the round short).
    throttled = Kube(configuration, qps=args.qps, burst=1)
    best: dict[str, float] = {}

    def keep(kind: str, took: float) -> None:
        best[kind] = min(best.get(kind, took), took)

    try:
        await _round(kube, "patch", 200, args.concurrency)  # warm the pools
        await _round(throttled, "patch", 20, args.concurrency)
        for _ in range(args.rounds):
            for kind in ("patch", "create"):
                keep(kind, await _round(kube, kind, args.requests, args.concurrency))
            began = time.monotonic()
            keep("throttled", await _round(throttled, "patch", args.requests, args.concurrency))
            keep("throttled wall", time.monotonic() - began)
            keep("pair", await _pair_round(throttled, args.requests, args.concurrency))
            keep("sleep", await _sleep_round(50))
            keep("watch", await _watch_round(kube, args.watch_events))
    finally:
        await kube.close()
        await throttled.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--watch-events", type=int, default=10000)
    parser.add_argument("--qps", type=float, default=1000.0, help="the throttled round's")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ready = multiprocessing.Event()
    server = multiprocessing.Process(
        target=_serve, args=(port, ready, args.watch_events), daemon=True
    )
    server.start()
    try:
        if not ready.wait(30):
            raise SystemExit("the local server did not start within 30 s")
        best = asyncio.run(_bench(port, args))
    finally:
        server.terminate()
        server.join(10)
    for kind, label in (
        ("patch", "Workload status patch"),
        ("throttled", f"the same at QPS {args.qps:g}"),
        ("pair", "two such clients at once"),
        ("create", "Event (emit+create)"),
    ):
        print(f"{label:24} {best[kind] * 1e6:6.0f} us of client CPU per request")
    print(f"{'Workload watch event':24} {best['watch'] * 1e6:6.0f} us of client CPU per event")
    print(f"{'a 20 ms asyncio.sleep':24} {best['sleep'] * 1e6:6.0f} us of CPU (waking up)")
    print(
        f"the QPS {args.qps:g} round: {args.requests} requests in {best['throttled wall']:.2f} s"
        f" (the limit: {(args.requests - 1) / args.qps:.2f} s)"
    )


if __name__ == "__main__":
    main()
