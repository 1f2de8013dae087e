"""serve's CPU per Workload watch event into the state and per admission write, outside the
admission cycle: the two paths of Kueue's large-scale scenario that scale with the Workloads.

- watch event: a Workload's ADDED (waiting), MODIFIED (its pending message) and MODIFIED (its
  admission written) events, as the reflector applies them to the controller's state
  (store, ledger, waiting index, signals): three per Workload, as in the scenario;
- admission write: a Workload status merge-patch through the lease fence and the client
  (no rate limit) to a local aiohttp server in another process answering with the Workload
  (hack/bench_client.py's), and the admitter's log line per admission formatted as serve's
  (to /dev/null).

    .venv/bin/python hack/bench_watchpath.py [--workloads 3000] [--writes 3000] [--rounds 3]
        [--event-loop auto|uvloop|asyncio]

Prints the process CPU per event and per write, best of the rounds; the write over the
client's own HTTP/1.1 connections (topogate.kube.http1) and, in turns with it on the same
load, over aiohttp's request (as before them).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import multiprocessing
import socket
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes.aio.client.configuration import Configuration

from topogate.controllers.writes import new_condition, write_status
from topogate.kube import eventloop
from topogate.kube.client import Kube
from topogate.kube.reflector import Reflector
from topogate.kube.resources import WORKLOADS
from topogate.runtime.fencing import FencedKube
from topogate.state import ControllerState
from topogate.testing.fakekube import FakeKube

sys.path.insert(0, str(Path(__file__).parent))
from bench_client import WORKLOAD, _serve

ADMISSION: dict[str, Any] = {
    "clusterQueue": "cq-0",
    "podSetAssignments": [
        {
            "name": "main",
            "flavors": {"cpu": "default"},
            "resourceUsage": {"cpu": "1"},
            "count": 1,
        }
    ],
}


def _events(workloads: int) -> list[dict[str, Any]]:
    """Three events per Workload: created, told why it waits, admitted."""
    base = copy.deepcopy(WORKLOAD)
    base.pop("status")
    events: list[dict[str, Any]] = []
    version = 1000
    for i in range(workloads):
        added = copy.deepcopy(base)
        added["metadata"].update(name=f"w-{i}", namespace=f"ns-{i % 100}")
        added["metadata"]["resourceVersion"] = str(version)
        waiting = copy.deepcopy(added)
        waiting["metadata"]["resourceVersion"] = str(version + 1)
        waiting["status"] = {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": "couldn't assign flavors to pod set main: insufficient quota",
                    "lastTransitionTime": "2026-01-01T00:00:01Z",
                }
            ]
        }
        admitted = copy.deepcopy(added)
        admitted["metadata"]["resourceVersion"] = str(version + 2)
        admitted["status"] = {
            "admission": ADMISSION,
            "conditions": [
                {**c, "type": t, "status": "True", "reason": t}
                for t in ("QuotaReserved", "Admitted")
                for c in waiting["status"]["conditions"]
            ],
        }
        version += 3
        events += [
            {"type": "ADDED", "object": added},
            {"type": "MODIFIED", "object": waiting},
            {"type": "MODIFIED", "object": admitted},
        ]
    # Interleaved as the scenario's are: all created, then all told, then all admitted.
    return events[0::3] + events[1::3] + events[2::3]


def _event_round(workloads: int) -> float:
    events = _events(workloads)
    state = ControllerState()
    reflector = Reflector(FakeKube(), WORKLOADS, state.handler(WORKLOADS))
    began = time.process_time()
    for event in events:
        reflector._apply(event)
    took = time.process_time() - began
    if len(state.store.objects(WORKLOADS)) != workloads:
        raise SystemExit("the state did not keep every Workload")
    return took / len(events)


async def _write_round(kube: FencedKube, writes: int, concurrency: int) -> float:
    log = logging.getLogger("topogate.admitter")

    async def one(i: int) -> None:
        workload = {"metadata": {"name": f"w-{i}", "namespace": "ns", "resourceVersion": str(i)}}
        status = {
            "admission": ADMISSION,
            "conditions": [
                new_condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved"),
                new_condition("Admitted", "True", "Admitted", "The workload is admitted"),
            ],
        }
        await write_status(kube, workload, status)
        log.info("admitted %s: %s", f"ns/w-{i}", "main: no topology")

    async def worker(start: int) -> None:
        for i in range(start, writes, concurrency):
            await one(i)

    began = time.process_time()
    await asyncio.gather(*(worker(s) for s in range(concurrency)))
    return (time.process_time() - began) / writes


async def _writes(port: int, args: argparse.Namespace) -> dict[str, float]:
    configuration = Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    own, old = Kube(configuration, qps=None), Kube(configuration, qps=None)
    old._http1 = None  # aiohttp's request for every request, as before topogate.kube.http1
    clients = {
        "own HTTP/1.1": FencedKube(own, lambda: True),
        "aiohttp": FencedKube(old, lambda: True),
    }
    best: dict[str, float] = {}
    try:
        for kube in clients.values():
            await _write_round(kube, 200, args.concurrency)  # warm the pools
        for _ in range(args.rounds):
            for name, kube in clients.items():
                took = await _write_round(kube, args.writes, args.concurrency)
                best[name] = min(best.get(name, took), took)
        return best
    finally:
        for kube in clients.values():
            await kube.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=3000)
    parser.add_argument("--writes", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    eventloop.add_argument(parser)  # serve's: uvloop when installed
    args = parser.parse_args()
    # serve's logging (topogate.runtime.serve.run), written where nothing reads it.
    with open("/dev/null", "w") as sink:
        logging.basicConfig(
            level=logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sink,
        )
        event = min(_event_round(args.workloads) for _ in range(args.rounds))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ready = multiprocessing.Event()
        server = multiprocessing.Process(target=_serve, args=(port, ready, 0), daemon=True)
        server.start()
        try:
            if not ready.wait(30):
                raise SystemExit("the local server did not start within 30 s")
            write = eventloop.run(_writes(port, args), args.event_loop)
        finally:
            server.terminate()
            server.join(10)
    print(f"{'Workload watch event':30} {event * 1e6:6.1f} us of CPU per event (into the state)")
    for name, took in write.items():
        print(f"admission write, {name:13} {took * 1e6:6.1f} us of client CPU (fence, client, log)")


if __name__ == "__main__":
    main()
