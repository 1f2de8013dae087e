"""The zero-latency bound of Kueue's TAS scenario: the scenario replayed in virtual time through
the same decisions `serve` makes (its admitter's cycle over an in-memory API server), with
every write, watch and cycle taking no time and every Workload finishing exactly its running
time after its admission; prints per class the mean time to admission this leaves, the wait for
quota and capacity alone, and writes it to
hack/results/issue25-bench/bound-<scenario>.json for hack/bench_kueue_summary.py.

    .venv/bin/python hack/bench_kueue_bound.py [--cohorts 5] [--fraction 1]
    .venv/bin/python hack/bench_kueue_bound.py --scenario large-scale [--scale 0.2]

`--scenario large-scale` replays Kueue's configs/large-scale (10 cohorts of 100 queues, quota
only; its generator.yaml from the Go module cache, as the live bench reads it). `--write-qps Q`
makes the admitter's writes (admissions, evictions, pending messages) take turns at Q a
second, one client budget's rate, the rest still taking no time: not a bound any more, but the
order in which a budget-bound controller admits, in seconds instead of a live sitting.

As the live bench: each set creates its Workloads one after the other with its interval
before each (at exactly k x interval), creationTimestamps in whole seconds as the API server
writes them; an evicted Workload is requeued at once. A class's mean is over all its
Workloads. It is a bound for controllers that decide as topogate's core does (its order: priority,
creation time, its preemption); a controller admitting in another order could shift waiting
from one class to another.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import datetime as dt
import heapq
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from topogate.admission.cycle import Parking
from topogate.controllers import admitter as admitter_module
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
    RESULTS,
    TAS,
    Scenario,
    cluster_objects,
    counted,
    large_scale,
    large_scale_config,
    queue_name,
    workload,
)

EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
BY_PLURAL = {r.key: r for r in WATCHED}


def _true(obj: Obj, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


class Budget:
    """The admitter's client as a budget of ``qps`` writes a virtual second: each write waits
    for its turn (first come, first served), then goes to the FakeKube at once."""

    def __init__(self, kube: FakeKube, qps: float, now: Any) -> None:
        self.kube, self.qps, self.now = kube, qps, now
        self.turn = 0.0  # the virtual time of the last turn given
        self.waiting: list[tuple[float, int, asyncio.Future[None]]] = []
        self.seq = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)

    async def _wait(self) -> None:
        self.turn = max(self.now(), self.turn + 1 / self.qps)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.seq += 1
        heapq.heappush(self.waiting, (self.turn, self.seq, future))
        await future

    async def patch(self, *args: Any, **kwargs: Any) -> Any:
        await self._wait()
        return await self.kube.patch(*args, **kwargs)

    def next_turn(self) -> float | None:
        return self.waiting[0][0] if self.waiting else None

    def release(self, until: float) -> None:
        while self.waiting and self.waiting[0][0] <= until:
            heapq.heappop(self.waiting)[2].set_result(None)


class Replay:
    def __init__(
        self, cohorts: int, fraction: float, scenario: Scenario = TAS, qps: float = 0.0
    ) -> None:
        self.now = 0.0  # virtual seconds since the start
        self.kube = FakeKube(clock=lambda: EPOCH + dt.timedelta(seconds=int(self.now)))
        self.state = ControllerState()
        self.cursor = 0  # the FakeKube's events delivered to the state so far
        self.budget = Budget(self.kube, qps, lambda: self.now) if qps > 0 else None
        client: Any = self.budget or self.kube
        self.admitter = Admitter(client, self.state, Metrics(), EventRecorder(self.kube, "b"))
        self.admitter.clock = lambda: self.now  # cycles take no virtual time; writes do
        self.sets = scenario.sets
        self.queue: list[tuple[float, int, str, Any]] = []  # (time, seq, what, payload)
        self.seq = 0
        self.created: dict[str, float] = {}
        self.cls: dict[str, str] = {}
        self.tta: dict[str, float] = {}  # the last admission counts, as Kueue's recorder
        self.admissions: dict[str, int] = defaultdict(int)
        self.admitted: set[str] = set()
        self.evictions = 0
        self.cycles = 0
        for obj in cluster_objects(cohorts, scenario=scenario):
            resource = BY_KIND[obj["kind"]]
            self.kube.seed(resource, obj)
        for cohort in range(cohorts):
            for q in range(scenario.queues_per_cohort):
                namespace = queue_name(cohort, q)
                for index, spec in enumerate(counted(fraction, scenario.sets)):
                    for i in range(spec[1]):
                        at = (i + 1) * spec[2] / 1000
                        self.push(at, "create", (namespace, f"{spec[0]}-{index}-{i}-0", spec))
        self.deliver()

    def push(self, at: float, what: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (at, self.seq, what, payload))

    def deliver(self) -> list[tuple[str, Obj]]:
        """The new events to the state, as its reflectors would; returns the Workloads'."""
        log = self.kube._log
        out = []
        for event in log[self.cursor :]:
            resource = BY_PLURAL.get(event.plural)
            if resource is None:
                continue
            new = None if event.type == "DELETED" else copy.deepcopy(event.obj)
            self.state.handler(resource)(copy.deepcopy(event.previous), new)
            if event.plural == WORKLOADS.key and new is not None:
                meta = new["metadata"]
                out.append((f"{meta['namespace']}/{meta['name']}", new))
        self.cursor = len(log)
        return out

    def apply(self, what: str, payload: Any) -> None:
        if what == "create":
            namespace, name, spec = payload
            self.kube.seed(WORKLOADS, workload(name, namespace, spec))
            key = f"{namespace}/{name}"
            self.created[key], self.cls[key] = self.now, spec[0]
        elif what == "finish":
            key, number = payload
            if self.admissions[key] != number or key not in self.admitted:
                return  # evicted since: its new admission has its own finish
            namespace, name = key.split("/")
            obj = self.kube.stored(WORKLOADS, name, namespace)
            assert obj is not None
            obj["status"]["conditions"].append(
                {"type": "Finished", "status": "True", "reason": "ByTest", "message": "done"}
            )
            self.kube.seed(WORKLOADS, obj)
            self.admitted.discard(key)

    def requeue(self, key: str, obj: Obj) -> None:
        status = obj["status"]
        status["admission"] = None
        status["conditions"] = [
            c for c in status["conditions"] if c["type"] not in ("QuotaReserved", "Admitted")
        ]
        self.kube.seed(WORKLOADS, obj)

    async def run(self, every: float = 0.0) -> None:
        """``every``: cycles at most this often (virtual seconds; 0: at every instant)."""
        budget = self.budget
        due_cycle = 0.0
        while self.queue or (budget is not None and budget.waiting):
            turn = budget.next_turn() if budget is not None else None
            due = [t for t in (self.queue[0][0] if self.queue else None, turn) if t is not None]
            if every:  # a cycle with nothing new returns at once
                due.append(max(due_cycle, self.now))
            self.now = max(self.now, min(due))
            while self.queue and self.queue[0][0] <= self.now:
                _, _, what, payload = heapq.heappop(self.queue)
                self.apply(what, payload)
            if budget is not None:  # the writes whose turn came go through
                budget.release(self.now)
                for _ in range(50):
                    await asyncio.sleep(0)
            self.observe(self.deliver())
            if every and self.now < due_cycle:
                continue
            due_cycle = self.now + every
            # Cycles at this instant until nothing changes: writes and requeues take no time
            # (with a budget, they take their turns as virtual time goes on).
            for _ in range(20):
                ran = self.admitter.decide(describe=False)
                self.cycles += ran
                last = self.admitter._last
                held = ran and last is not None and last[2].held
                if budget is None:
                    await self.admitter.settle()
                else:
                    for _ in range(50):
                        await asyncio.sleep(0)
                if not self.observe(self.deliver()) and not held:
                    break

    def observe(self, events: list[tuple[str, Obj]]) -> bool:
        changed = False
        for key, obj in events:
            admitted = _true(obj, "Admitted") and not _true(obj, "Finished")
            if _true(obj, "Evicted") and obj["status"].get("admission"):
                self.evictions += 1
                self.admitted.discard(key)
                self.admissions[key] += 1
                self.requeue(key, copy.deepcopy(obj))
                changed = True
            elif admitted and key not in self.admitted:
                self.admitted.add(key)
                self.admissions[key] += 1
                self.tta[key] = self.now - self.created[key]
                runtime = int(obj["metadata"]["labels"]["bench/runtime-ms"]) / 1000
                self.push(self.now + runtime, "finish", (key, self.admissions[key]))
                changed = True
        return changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=["tas", "large-scale"], default="tas")
    parser.add_argument("--cohorts", type=int, help="tas: 5 (default); large-scale: 10")
    parser.add_argument("--fraction", type=float, default=1.0, help="tas: scale the counts")
    parser.add_argument("--scale", type=float, default=1.0, help="large-scale: scale the counts")
    parser.add_argument("--write-qps", type=float, default=0.0, help="writes a second (0: free)")
    parser.add_argument(
        "--cycle-every",
        type=float,
        default=0.0,
        help="virtual seconds between cycles (0: at every change, the bound's)",
    )
    parser.add_argument(
        "--pass-at-once",
        action="store_true",
        help="the cycle's rule before Kueue's requeue: a queue passes a workload that does not "
        "fit at once, also after quota came back (for comparison)",
    )
    parser.add_argument(
        "--ahead",
        type=int,
        help="admissions decided ahead of their writes, at most (default: the admitter's "
        "AHEAD; 0: no limit, the admitter's rule before it)",
    )
    parser.add_argument(
        "--writes-batch",
        type=int,
        help="with writes waiting, the next cycle waits for this many to be written (default: "
        "the admitter's WRITES_BATCH; 0: a cycle at every change, the rule before it)",
    )
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.ahead is not None:
        admitter_module.AHEAD = args.ahead or 10**9
    if args.writes_batch is not None:
        admitter_module.WRITES_BATCH = args.writes_batch
        if not args.writes_batch:
            admitter_module.WRITES_KEPT = 10**9
    if args.pass_at_once:
        Parking.refused = lambda self, key, root: False  # type: ignore[method-assign]
    if args.scenario == "tas":
        scenario, fraction, cohorts = TAS, args.fraction, args.cohorts or 5
        name = f"tas-c{cohorts}" + (f"-f{fraction:g}" if fraction != 1 else "")
    else:
        scenario = large_scale(large_scale_config(KUEUE_VERSIONS["large-scale"]))
        fraction, cohorts = args.scale, args.cohorts or 10
        name = f"large-scale-c{cohorts}" + (f"-s{fraction:g}" if fraction != 1 else "")
    if args.write_qps:
        name += f"-qps{args.write_qps:g}"
    if args.cycle_every:
        name += f"-every{args.cycle_every:g}"
    if args.pass_at_once:
        name += "-pass-at-once"
    if args.ahead is not None:
        name += f"-ahead{args.ahead}"
    if args.writes_batch is not None:
        name += f"-batch{args.writes_batch}"
    replay = Replay(cohorts, fraction, scenario, args.write_qps)
    started = time.process_time()
    asyncio.run(replay.run(args.cycle_every))
    took = time.process_time() - started
    by_class: dict[str, list[float]] = defaultdict(list)
    for key, cls in replay.cls.items():
        by_class[cls].append(1000 * replay.tta.get(key, 0.0))
    never = len(replay.cls) - len(replay.tta)
    print(
        f"{name}: {len(replay.cls)} Workloads replayed in {replay.now:.1f} s virtual time, "
        f"{replay.cycles} cycles, {replay.evictions} evictions, {never} never admitted; "
        f"{took:.1f} s CPU"
    )
    print(f"{'class':24} {'bound mean ms':>14} {'p50':>7} {'p90':>7}")
    classes = {}
    for cls in [s[0] for s in replay.sets]:
        values = sorted(by_class.get(cls, []))
        if not values:
            continue
        row = {
            "mean": sum(values) / len(values),
            "p50": values[len(values) // 2],
            "p90": values[max(0, int(len(values) * 0.9) - 1)],
            "n": len(values),
        }
        classes[cls] = row
        print(f"{cls:24} {row['mean']:14.0f} {row['p50']:7.0f} {row['p90']:7.0f}")
    args.results.mkdir(parents=True, exist_ok=True)
    path = args.results / f"bound-{name}.json"
    out = {
        "scenario": name,
        "command": " ".join(sys.argv),
        "virtual_seconds": replay.now,
        "cycles": replay.cycles,
        "evictions": replay.evictions,
        "never_admitted": never,
        "classes": classes,
    }
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
