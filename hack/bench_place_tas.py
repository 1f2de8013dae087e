"""Time the placement core's `place` (and preemption's plan) on Kueue's TAS scenario as serve
calls them (prints figures; not a test).

It replays the scenario in virtual time (hack/bench_kueue_bound.py's replay: 640 nodes in 10
racks of 64, gangs of 2, 4 or 8 pods required / preferred / balanced in a rack) once, records
every `place` call the admission cycle makes (tree, snapshot, request, options) and every
`plan_preemption` call, then times those same calls again ``--repeat`` times and prints the
CPU per call. It also prints a digest of the decisions: equal digests before and after a
change mean the core answered every recorded call the same way.

    .venv/bin/python hack/bench_place_tas.py [--cohorts 1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from topogate.admission import cycle as cycle_module
from topogate.admission import placement as placement_module
from topogate.admission import preemption as preemption_module
from topogate.admission.exact import ExactBudget
from topogate.controllers import evictions as evictions_module

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kueue_bound import Replay
from bench_kueue_scenario import TAS

Call = tuple[tuple[Any, ...], dict[str, Any]]


def _frozen(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The options with a fixed clock: a replayed exact pass must not depend on load."""
    exact = kwargs.get("exact")
    if isinstance(exact, ExactBudget):
        kwargs = {**kwargs, "exact": ExactBudget(exact.seconds, lambda: 0.0)}
    return kwargs


def record(cohorts: int) -> tuple[list[Call], list[Call]]:
    places: list[Call] = []
    plans: list[Call] = []
    place, plan = placement_module.place, preemption_module.plan_preemption

    def recording_place(*args: Any, **kwargs: Any) -> Any:
        kwargs = _frozen(kwargs)
        places.append((args, kwargs))
        return place(*args, **kwargs)

    def recording_plan(*args: Any, **kwargs: Any) -> Any:
        plans.append((args, kwargs))
        return plan(*args, **kwargs)

    # The names the cycle and the eviction planner call, swapped for recording ones.
    setattr(cycle_module, "place", recording_place)  # noqa: B010
    setattr(evictions_module, "plan_preemption", recording_plan)  # noqa: B010
    try:
        replay = Replay(cohorts, 1.0, TAS)
        asyncio.run(replay.run())
    finally:
        setattr(cycle_module, "place", place)  # noqa: B010
        setattr(evictions_module, "plan_preemption", plan)  # noqa: B010
    print(f"replayed: {replay.cycles} cycles, {replay.evictions} evictions")
    return places, plans


def timed(fn: Any, calls: list[Call], repeat: int) -> tuple[list[float], str]:
    seconds, digest = [], ""
    for _ in range(repeat):
        answers = hashlib.sha256()
        started = time.process_time()
        results = [fn(*args, **kwargs) for args, kwargs in calls]
        seconds.append(time.process_time() - started)
        for result in results:
            answers.update(repr(result).encode())
        digest = answers.hexdigest()[:16]
    return seconds, digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cohorts", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    places, plans = record(args.cohorts)
    for name, fn, calls in (
        ("place", placement_module.place, places),
        ("plan_preemption", preemption_module.plan_preemption, plans),
    ):
        if not calls:
            continue
        seconds, digest = timed(fn, calls, args.repeat)
        best, median = min(seconds), statistics.median(seconds)
        print(
            f"{name:16} {len(calls):6} calls  best {best * 1000:8.1f} ms "
            f"({best / len(calls) * 1e6:6.1f} us/call)  median {median * 1000:8.1f} ms  "
            f"answers {digest}"
        )


if __name__ == "__main__":
    main()
