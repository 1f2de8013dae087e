"""Reliability figures for `topogate serve` and its webhooks (loopback only, bounded in time).

1. Webhook latency: valid AdmissionReviews at --rate per second (default 200) for --seconds,
   while a concurrent flood sends malformed ones as fast as one connection allows; prints
   p50/p99 of the valid ones and the status codes seen.
   Then the throughput ceiling: valid reviews as fast as two client processes of eight
   keep-alive connections each get them answered, for --seconds; and the lock-out: 100
   reviews on new connections while another process holds 128 idle connections (the cap),
   re-opening each as the server closes it.
2. Fuzz: --fuzz random hostile reviews (default 10,000); prints how many got a 500.
3. Recovery (--cluster): on the local control plane, `serve` admits a queued Job; kube-apiserver
   is restarted; prints the seconds from "API server ready again" to "the next Job admitted".

    .venv/bin/python hack/bench_reliability.py [--rate 200] [--seconds 10] [--fuzz 10000]
                                               [--cluster]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from topogate.testing.controlplane import free_port

QUEUE = "kueue.x-k8s.io/queue-name"


def review(obj: Any, kind: str, group: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": {"group": group, "version": "v1", "kind": kind},
            "operation": "CREATE",
            "namespace": "ml",
            "object": obj,
        },
    }


def valid_job() -> dict[str, Any]:
    annotations = {"kueue.x-k8s.io/podset-required-topology": "example.com/rack"}
    container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    return review(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j", "namespace": "ml", "labels": {QUEUE: "q"}},
            "spec": {
                "parallelism": 4,
                "template": {
                    "metadata": {"annotations": annotations},
                    "spec": {"containers": [container]},
                },
            },
        },
        "Job",
        "batch",
    )


def hostile(rng: random.Random) -> bytes:
    """A review whose parts are replaced by random values of random shapes."""

    def anything(depth: int = 0) -> Any:
        choice = rng.randrange(8 if depth < 4 else 5)
        if choice == 0:
            return None
        if choice == 1:
            return rng.randrange(-(2**40), 2**40)
        if choice == 2:
            return "".join(rng.choice("ab/.-_~x0\u00e9") for _ in range(rng.randrange(80)))
        if choice == 3:
            return rng.random()
        if choice == 4:
            return rng.choice([True, False])
        if choice == 5:
            return [anything(depth + 1) for _ in range(rng.randrange(4))]
        keys = ["metadata", "labels", "annotations", "spec", "template", "name", QUEUE]
        return {rng.choice(keys): anything(depth + 1) for _ in range(rng.randrange(5))}

    kinds = [
        ("Job", "batch"),
        ("JobSet", "jobset.x-k8s.io"),
        ("Pod", ""),
        ("HyperNode", "topology.volcano.sh"),
        ("ClusterQueue", "topogate.dev"),
    ]
    body = valid_job() if rng.random() < 0.5 else review({}, *rng.choice(kinds))
    target = body["request"]["object"]
    for _ in range(rng.randrange(1, 4)):
        path = rng.choice(
            [
                ("metadata",),
                ("metadata", "labels"),
                ("spec",),
                ("spec", "template"),
                ("spec", "template", "metadata"),
                ("spec", "template", "spec"),
            ]
        )
        node = target
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node[path[-1]] = anything()
    if rng.random() < 0.1:
        return b"[" * rng.randrange(100, 5000)
    return json.dumps(body).encode()


MALFORMED = [
    b"{",
    b'{"kind": "AdmissionReview"}',
    b"[" * 3000,
    json.dumps(review([], "Pod", "")).encode(),
]


async def flood(url: str, cafile: str, seconds: float) -> int:
    """Malformed reviews back to back on one connection (run in a process of its own, so
    its work does not slow down the measuring client)."""
    context = ssl.create_default_context(cafile=cafile)
    sent = 0
    stop = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(ssl=context, limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        while time.monotonic() < stop:
            async with session.post(f"{url}/validate", data=MALFORMED[sent % 4]) as reply:
                await reply.read()
            sent += 1
    return sent


def _flood_process(url: str, cafile: str, seconds: float, out: Any) -> None:
    out.put(asyncio.run(flood(url, cafile, seconds)))


async def latency(url: str, cafile: str, rate: int, seconds: float) -> None:
    context = ssl.create_default_context(cafile=cafile)
    body = json.dumps(valid_job()).encode()
    codes: Counter[int] = Counter()
    times: list[float] = []
    connector = aiohttp.TCPConnector(ssl=context, limit=64)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(record: bool = True) -> None:
            started = time.perf_counter()
            async with session.post(f"{url}/validate", data=body) as reply:
                await reply.read()
                codes[reply.status] += record
            if record:
                times.append(time.perf_counter() - started)

        # Open the connections first, as the API server keeps its own open.
        await asyncio.gather(*(one(record=False) for _ in range(16)))
        results: multiprocessing.Queue[int] = multiprocessing.Queue()
        flooder = multiprocessing.Process(
            target=_flood_process, args=(url, cafile, seconds, results)
        )
        flooder.start()
        tasks = []
        stop = time.monotonic() + seconds
        next_at = time.monotonic()
        while time.monotonic() < stop:
            tasks.append(asyncio.create_task(one()))
            next_at += 1 / rate
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        await asyncio.gather(*tasks)
        malformed = results.get(timeout=seconds + 30)
        flooder.join(10)
    ordered = sorted(times)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[int(len(ordered) * 0.99) - 1] * 1000
    print(f"webhook: {len(times)} valid reviews at {rate}/s with {malformed} malformed alongside")
    print(f"  valid p50 {p50:.1f} ms, p99 {p99:.1f} ms; status codes {dict(sorted(codes.items()))}")


async def _closed_loop(url: str, cafile: str, seconds: float, connections: int) -> int:
    """Valid reviews back to back on ``connections`` keep-alive connections; how many were
    answered 200 within ``seconds``."""
    context = ssl.create_default_context(cafile=cafile)
    body = json.dumps(valid_job()).encode()
    done = 0
    connector = aiohttp.TCPConnector(ssl=context, limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:
        stop = time.monotonic() + seconds

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < stop:
                async with session.post(f"{url}/validate", data=body) as reply:
                    await reply.read()
                    done += reply.status == 200

        await asyncio.gather(*(worker() for _ in range(connections)))
    return done


def _closed_loop_process(url: str, cafile: str, seconds: float, connections: int, out: Any) -> None:
    out.put(asyncio.run(_closed_loop(url, cafile, seconds, connections)))


def ceiling(url: str, cafile: str, seconds: float, clients: int = 2, connections: int = 8) -> None:
    """The throughput ceiling: valid reviews as fast as ``clients`` processes of
    ``connections`` connections each get them answered (the server's one event loop and the
    clients share this machine's cores)."""
    results: multiprocessing.Queue[int] = multiprocessing.Queue()
    workers = [
        multiprocessing.Process(
            target=_closed_loop_process, args=(url, cafile, seconds, connections, results)
        )
        for _ in range(clients)
    ]
    for worker in workers:
        worker.start()
    answered = sum(results.get(timeout=seconds + 30) for _ in workers)
    for worker in workers:
        worker.join(10)
    print(
        f"ceiling: {answered / seconds:.0f} valid reviews/s answered "
        f"({clients} client processes x {connections} connections, {seconds:.0f} s)"
    )


async def _hold(port: int, cafile: str, seconds: float, count: int) -> int:
    """``count`` idle TLS connections, each re-opened as soon as the server closes it, for
    ``seconds``; how many times one was re-opened."""
    context = ssl.create_default_context(cafile=cafile)
    stop = time.monotonic() + seconds
    reopened = 0

    async def one() -> None:
        nonlocal reopened
        while time.monotonic() < stop:
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
                )
            except (OSError, ssl.SSLError):
                await asyncio.sleep(0.01)
                continue
            with contextlib.suppress(TimeoutError, OSError, ssl.SSLError):
                await asyncio.wait_for(reader.read(1), max(0.01, stop - time.monotonic()))
            writer.transport.abort()
            reopened += time.monotonic() < stop  # closed by the server, not by the end

    await asyncio.gather(*(one() for _ in range(count)))
    return reopened


def _hold_process(port: int, cafile: str, seconds: float, count: int, out: Any) -> None:
    out.put(asyncio.run(_hold(port, cafile, seconds, count)))


async def lockout(url: str, cafile: str, reviews: int = 100, held: int = 128) -> None:
    """Reviews on new connections while another process holds ``held`` idle connections
    (the server's cap), re-opening each as it is closed."""
    port = int(url.rsplit(":", 1)[1])
    seconds = 30.0
    results: multiprocessing.Queue[int] = multiprocessing.Queue()
    holder = multiprocessing.Process(
        target=_hold_process, args=(port, cafile, seconds, held, results)
    )
    holder.start()
    await asyncio.sleep(3)  # all of them open
    context = ssl.create_default_context(cafile=cafile)
    body = json.dumps(valid_job()).encode()
    answered = 0
    started = time.monotonic()
    for _ in range(reviews):
        connector = aiohttp.TCPConnector(ssl=context, force_close=True)
        try:
            async with (
                aiohttp.ClientSession(connector=connector) as session,
                session.post(
                    f"{url}/validate", data=body, timeout=aiohttp.ClientTimeout(2)
                ) as reply,
            ):
                answered += reply.status == 200
        except (aiohttp.ClientError, TimeoutError):
            pass
    took = time.monotonic() - started
    reopened = results.get(timeout=seconds + 30)
    holder.join(10)
    print(
        f"lock-out: {answered} of {reviews} reviews on new connections answered in {took:.1f} s "
        f"while {held} idle connections were held ({reopened} re-opened after being closed)"
    )


async def fuzz(url: str, context: ssl.SSLContext, count: int) -> None:
    rng = random.Random(20261123)
    codes: Counter[int] = Counter()
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=context, limit=16)
    ) as session:

        async def one(body: bytes, path: str) -> None:
            async with session.post(f"{url}{path}", data=body) as reply:
                await reply.read()
                codes[reply.status] += 1

        for start in range(0, count, 200):
            batch = [hostile(rng) for _ in range(min(200, count - start))]
            await asyncio.gather(
                *(one(b, "/validate" if i % 2 else "/mutate") for i, b in enumerate(batch))
            )
    print(
        f"fuzz: {count} hostile reviews: {codes.get(500, 0)} answered 500; "
        f"codes {dict(sorted(codes.items()))}"
    )


def webhook_server(directory: Path) -> tuple[subprocess.Popen[bytes], str, ssl.SSLContext]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "topogate",
            "webhook",
            "--cert-dir",
            str(directory),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(directory / "webhook.log", "wb"),  # noqa: SIM115 - the child's
    )
    deadline = time.monotonic() + 30
    while not (directory / "ca.crt").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    time.sleep(1.0)
    return process, f"https://127.0.0.1:{port}", context


def recovery(directory: Path) -> None:
    from tests.test_e2e import RACK, Pool, Serve, job, submit
    from tests.test_restart_e2e import admitted_within  # the end-to-end test's own steps
    from topogate.testing.controlplane import ControlPlane
    from topogate.testing.localcluster import create_all, install_crds

    plane = ControlPlane.start(directory / "plane")
    try:
        install_crds(plane.kubeconfig)
        levels = [
            {"nodeLabel": "example.com/block"},
            {"nodeLabel": RACK},
            {"nodeLabel": "kubernetes.io/hostname"},
        ]
        create_all(
            plane.kubeconfig,
            [
                {
                    "apiVersion": "topogate.dev/v1alpha1",
                    "kind": "Topology",
                    "metadata": {"name": "e2e"},
                    "spec": {"levels": levels},
                }
            ],
        )
        serve = Serve(plane, directory)
        with serve.stack:
            serve.start("--lease-duration=60", "--renew-deadline=45", "--retry-period=1")
            pool = Pool(plane, "bench", "bench")
            pool.setup()
            pool.nodes({("b0", "r0"): 4})
            annotations = {"kueue.x-k8s.io/podset-required-topology": RACK}
            for round_ in range(3):
                submit(pool, job(f"warm{round_}", 1, annotations=annotations))
                admitted_within(pool, f"warm{round_}", 60)
                time.sleep(3)
                down = plane.restart_apiserver(kill=round_ % 2 == 1)
                submit(pool, job(f"after{round_}", 1, annotations=annotations))
                took = admitted_within(pool, f"after{round_}", 120)
                print(
                    f"recovery {round_ + 1}: API server down {down:.1f} s; "
                    f"next Job admitted {took:.2f} s after it was ready"
                )
    finally:
        plane.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--fuzz", type=int, default=10_000)
    parser.add_argument(
        "--cluster", action="store_true", help="also measure recovery on the local control plane"
    )
    args = parser.parse_args()
    cores, load = os.cpu_count(), os.getloadavg()[0]
    print(f"machine: {cores} cores, load average {load:.1f} before the run")
    with tempfile.TemporaryDirectory() as tmp:
        process, url, context = webhook_server(Path(tmp))
        try:
            asyncio.run(latency(url, str(Path(tmp) / "ca.crt"), args.rate, args.seconds))
            ceiling(url, str(Path(tmp) / "ca.crt"), args.seconds)
            asyncio.run(lockout(url, str(Path(tmp) / "ca.crt")))
            asyncio.run(fuzz(url, context, args.fuzz))
        finally:
            process.terminate()
            process.wait(10)
        if args.cluster:
            recovery(Path(tmp))


if __name__ == "__main__":
    main()
