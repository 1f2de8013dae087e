"""serve's HTTP client CPU per request (topogate.kube.client.Kube over aiohttp), against a
local aiohttp server in another process answering as the API server does to a Workload status
patch (the Workload back, about 2.5 KB of JSON) and to an Event's creation: only the client's
process CPU is counted. Plain HTTP on loopback, so TLS (the same for any client) is left out.

    .venv/bin/python hack/bench_client.py [--requests 3000] [--concurrency 4] [--rounds 3]

Prints the client's CPU per request for each kind, best of the rounds.
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

from topogate.kube.client import Kube
from topogate.kube.resources import EVENTS, WORKLOADS

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


def _serve(port: int, ready: Any) -> None:
    from aiohttp import web

    body = json.dumps(WORKLOAD).encode()

    async def answer(request: web.Request) -> web.Response:
        await request.read()
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


async def _round(kube: Kube, kind: str, requests: int, concurrency: int) -> float:
    status = {"status": {"conditions": WORKLOAD["status"]["conditions"]}}
    event = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "note": "x" * 200}

    async def one(i: int) -> None:
        if kind == "patch":
            body = {**status, "metadata": {"resourceVersion": str(i)}}
            await kube.patch(WORKLOADS, f"w-{i}", body, "ns", subresource="status")
        else:
            await kube.create(EVENTS, {**event, "metadata": {"name": f"e.{i:x}"}}, "ns")

    async def worker(start: int) -> None:
        for i in range(start, requests, concurrency):
            await one(i)

    began = time.process_time()
    await asyncio.gather(*(worker(s) for s in range(concurrency)))
    return (time.process_time() - began) / requests


async def _bench(port: int, args: argparse.Namespace) -> dict[str, float]:
    configuration = Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    kube = Kube(configuration, qps=None)
    best: dict[str, float] = {}
    try:
        await _round(kube, "patch", 200, args.concurrency)  # warm the pool
        for _ in range(args.rounds):
            for kind in ("patch", "create"):
                took = await _round(kube, kind, args.requests, args.concurrency)
                best[kind] = min(best.get(kind, took), took)
    finally:
        await kube.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ready = multiprocessing.Event()
    server = multiprocessing.Process(target=_serve, args=(port, ready), daemon=True)
    server.start()
    try:
        if not ready.wait(30):
            raise SystemExit("the local server did not start within 30 s")
        best = asyncio.run(_bench(port, args))
    finally:
        server.terminate()
        server.join(10)
    for kind, label in (("patch", "Workload status patch"), ("create", "Event create")):
        print(f"{label:24} {best[kind] * 1e6:6.0f} us of client CPU per request")


if __name__ == "__main__":
    main()
