"""serve's Event path against a real local API server: N Events emitted at a rate (or at
once) through the recorder as serve builds it (its own client budget, fenced on the Lease),
sent, and counted back with a list. Prints the client's process CPU per Event, the wall time,
the Events stored and dropped, for each number of senders asked; ``--cprofile OUT`` adds the
top functions by CPU time and writes the profile to OUT.

    TOPOGATE_CONTROLPLANE_BIN=... .venv/bin/python hack/bench_events.py \\
        [--events 2000] [--rate 2000] [--senders 1,16] [--qps 300] [--burst 500]
        [--rounds 2] [--cprofile OUT]

The API server runs on the same machine: its CPU is not counted, but it competes for the
cores, so the wall times depend on the load (print `uptime` with the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

from topogate.kube.client import Kube, own_budget
from topogate.kube.events import EventRecorder
from topogate.kube.resources import EVENTS
from topogate.runtime.fencing import FencedKube
from topogate.testing.controlplane import ControlPlane

REGARDING: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Workload",
    "metadata": {"name": "w", "namespace": "default", "uid": "5f0c1d2e-0b0a-4c1e-9d3f-1a2b"},
}
NOTE = (
    "Quota reserved in ClusterQueue cq-3-17, wait time since queued was 2s; flavor default, "
    "1 pod set of 1 pod"
)


async def _round(
    plane: ControlPlane, namespace: str, args: argparse.Namespace, senders: int
) -> tuple[float, float, int, int]:
    kube = await Kube.connect(str(plane.kubeconfig), qps=args.qps, burst=args.burst)
    try:
        recorder = EventRecorder(
            FencedKube(own_budget(kube), lambda: True), "bench", senders=senders
        )
        regarding = {**REGARDING, "metadata": {**REGARDING["metadata"], "namespace": namespace}}
        profile = cProfile.Profile(time.process_time) if args.cprofile else None
        wall, cpu = time.monotonic(), time.process_time()
        if profile is not None:
            profile.enable()
        step = max(1, round(args.rate / 100)) if args.rate else args.events
        for i in range(args.events):
            regarding["metadata"]["name"] = f"w-{i}"
            recorder.emit(regarding, "Admitted", NOTE)
            if (i + 1) % step == 0 and args.rate:
                await asyncio.sleep(0.01)  # the admissions between, as serve emits them
        await recorder.drain(600)
        if profile is not None:
            profile.disable()
            text = io.StringIO()
            stats = pstats.Stats(profile, stream=text)
            stats.sort_stats("tottime").print_stats(30)
            stats.dump_stats(args.cprofile)
            stats.sort_stats("cumulative").print_stats("topogate", 20)
            print(text.getvalue())
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        stored = len((await kube.list(EVENTS, namespace)).get("items") or [])
        return cpu / args.events, wall, stored, recorder.dropped
    finally:
        await kube.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--senders", default="1,16", help="comma-separated")
    parser.add_argument(
        "--rate", type=float, default=2000.0, help="events emitted per second (0: all at once)"
    )
    parser.add_argument("--qps", type=float, default=300.0)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cprofile", metavar="OUT", help="profile (CPU time) into OUT too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        plane = ControlPlane.start(Path(directory), scheduler=False)
        try:
            round_ = 0
            for senders in (int(s) for s in args.senders.split(",")):
                for _ in range(args.rounds):
                    round_ += 1
                    namespace = f"bench-{round_}"
                    plane.request(
                        "POST",
                        "/api/v1/namespaces",
                        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                    )
                    per, wall, stored, dropped = asyncio.run(
                        _round(plane, namespace, args, senders)
                    )
                    print(
                        f"senders {senders:3d}: {args.events} events at {args.rate:g}/s, "
                        f"budget {args.qps:g}/{args.burst}: "
                        f"{per * 1e6:6.0f} us client CPU per event, wall {wall:6.2f} s, "
                        f"stored {stored}, dropped {dropped}",
                        flush=True,
                    )
        finally:
            plane.stop()


if __name__ == "__main__":
    main()
