"""serve's admission cycle on Kueue's large-scale shape, in memory: 1,000 ClusterQueues (10
cohorts of 100, preemption on), every Workload created at once, the quota full of admitted
ones and the rest waiting; then, per timed cycle, one admitted Workload finishes (its watch
event delivered to the state) and `Admitter.decide()` runs, as in serve's loop when a
finish wakes it. Prints the CPU time per cycle. Not a test.

    .venv/bin/python hack/bench_large_scale_cycle.py [--scale 0.2] [--cycles 30] [--describe]

The shapes are Kueue v0.19.0's configs/large-scale (hack/bench_kueue_scenario.py reads them
from hack/kueue/build.sh's source copy or the Go module cache); --scale multiplies the
Workloads per queue as the live bench's --scale does.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import cProfile
import pstats
import random
import statistics
import sys
import time
from pathlib import Path

from topogate.api.objects import is_admitted, is_finished
from topogate.controllers.admitter import Admitter
from topogate.kube.events import EventRecorder
from topogate.kube.resources import WORKLOADS, Obj
from topogate.metrics import Metrics
from topogate.state import ControllerState
from topogate.state.store import WATCHED
from topogate.testing.fakekube import FakeKube

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kueue_scenario import (
    BY_KIND,
    KUEUE_VERSIONS,
    cluster_objects,
    counted,
    large_scale,
    large_scale_config,
    queue_name,
    workload,
)

BY_PLURAL = {r.key: r for r in WATCHED}


class Bench:
    def __init__(self, scale: float, cohorts: int) -> None:
        version = KUEUE_VERSIONS["large-scale"]
        self.scenario = large_scale(large_scale_config(version))
        self.kube, self.state = FakeKube(), ControllerState()
        self.cursor = 0
        for obj in cluster_objects(cohorts, scenario=self.scenario):
            if obj["kind"] != "Namespace":
                self.kube.seed(BY_KIND[obj["kind"]], obj)
        n = 0
        for cohort in range(cohorts):
            for q in range(self.scenario.queues_per_cohort):
                namespace = queue_name(cohort, q)
                for index, spec in enumerate(counted(scale, self.scenario.sets)):
                    for i in range(spec[1]):
                        obj = workload(f"{spec[0]}-{index}-{i}-0", namespace, spec)
                        # creation order as the generator makes them, in whole seconds
                        stamp = f"2026-01-01T{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z"
                        obj["metadata"]["creationTimestamp"] = stamp
                        self.kube.seed(WORKLOADS, obj)
                        n += 1
        self.workloads = n
        self.deliver()
        self.admitter = Admitter(self.kube, self.state, Metrics(), EventRecorder(self.kube, "b"))

    def deliver(self) -> None:
        """The API server's new events to the state, as its reflectors would."""
        log = self.kube._log
        for event in log[self.cursor :]:
            resource = BY_PLURAL.get(event.plural)
            if resource is None:
                continue
            new = None if event.type == "DELETED" else copy.deepcopy(event.obj)
            self.state.handler(resource)(copy.deepcopy(event.previous), new)
        self.cursor = len(log)

    def running(self) -> list[Obj]:
        return [
            o
            for o in self.state.store.objects(WORKLOADS).values()
            if is_admitted(o) and not is_finished(o)
        ]

    def finish(self, obj: Obj) -> None:
        done = copy.deepcopy(obj)
        done["status"]["conditions"].append(
            {"type": "Finished", "status": "True", "reason": "Bench", "message": "done"}
        )
        self.kube.seed(WORKLOADS, done)


async def measure(args: argparse.Namespace) -> None:
    bench = Bench(args.scale, args.cohorts)
    started = time.process_time()
    bench.admitter.decide(describe=args.describe)
    first = time.process_time() - started
    await bench.admitter.settle()
    bench.deliver()
    print(
        f"{bench.workloads} Workloads, {len(bench.state.pending.lanes)} waiting after the first "
        f"cycle ({first:.2f} s CPU), {len(bench.running())} running"
    )
    rng = random.Random(1)
    times, admitted = [], 0
    profile = cProfile.Profile() if args.profile else None
    for _ in range(args.cycles):
        running = bench.running()
        if not running:
            break
        bench.finish(rng.choice(running))
        bench.deliver()
        before = bench.admitter.cycles
        waiting = len(bench.state.pending.lanes)
        started = time.process_time()
        if profile is not None:
            profile.enable()
        bench.admitter.decide(describe=args.describe)
        if profile is not None:
            profile.disable()
        times.append(time.process_time() - started)
        assert bench.admitter.cycles == before + 1, "the cycle was skipped"
        await bench.admitter.settle()
        bench.deliver()
        admitted += waiting - len(bench.state.pending.lanes)
    if profile is not None:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
    print(
        f"decide(describe={args.describe}) after one finish: "
        f"{statistics.median(times) * 1000:.1f} ms CPU median, "
        f"{statistics.mean(times) * 1000:.1f} ms mean of {len(times)} cycles "
        f"({len(bench.state.pending.lanes)} waiting at the end, {admitted} admitted)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.2, help="Workloads per queue, scaled")
    parser.add_argument("--cohorts", type=int, default=10)
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--describe", action="store_true", help="word the pending messages")
    parser.add_argument("--profile", action="store_true", help="cProfile the timed cycles")
    asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
