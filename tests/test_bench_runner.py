"""The side-by-side bench's runner (hack/bench_kueue_scenario.py): a finish timer started by
an admission that was evicted and admitted again is void, as Kueue's runner resets the time on
re-admission; the new admission's own timer finishes the Workload."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from topogate.kube.resources import WORKLOADS
from topogate.testing.fakekube import FakeKube

Obj = dict[str, Any]


def _module() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "hack/bench_kueue_scenario.py"
    spec = importlib.util.spec_from_file_location("bench_kueue_scenario", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_kueue_scenario", module)
    spec.loader.exec_module(module)
    return module


bench = sys.modules.get("bench_kueue_scenario") or _module()


def _workload(*conditions: tuple[str, str]) -> Obj:
    return {
        "apiVersion": WORKLOADS.api_version,
        "kind": "Workload",
        "metadata": {
            "name": "w",
            "namespace": "ns",
            "labels": {"bench/class": "small", "bench/runtime-ms": "400"},
        },
        "spec": {"podSets": []},
        "status": {
            "conditions": [
                {"type": kind, "status": status, "reason": "Test", "message": ""}
                for kind, status in conditions
            ]
        },
    }


def _finished(kube: FakeKube) -> bool:
    stored = kube.stored(WORKLOADS, "w", "ns")
    assert stored is not None
    return any(
        c["type"] == "Finished" and c["status"] == "True" for c in stored["status"]["conditions"]
    )


def test_a_timer_of_an_admission_since_evicted_does_not_finish_the_new_admission() -> None:
    async def run() -> None:
        kube = FakeKube()
        kube.seed(WORKLOADS, _workload())
        state = bench.Run()
        recorder = asyncio.create_task(bench.record(kube, state, 1))
        await asyncio.sleep(0.05)
        kube.seed(WORKLOADS, _workload(("Admitted", "True")))  # first timer: due at +0.4 s
        await asyncio.sleep(0.05)
        kube.seed(WORKLOADS, _workload(("Admitted", "False"), ("Evicted", "True")))
        await asyncio.sleep(0.1)
        kube.seed(WORKLOADS, _workload(("Admitted", "True")))  # second timer: due at +0.4 s
        await asyncio.sleep(0.3)  # the first timer has fired, the second has not
        assert state.stale_timers == 1
        assert not _finished(kube), "the evicted admission's timer finished the new one"
        await asyncio.wait_for(recorder, timeout=5)  # the second timer finishes it
        assert _finished(kube)
        assert state.records["ns/w"].admissions == 3

    asyncio.run(run())


def test_a_controller_that_died_ends_the_sitting_with_its_log(tmp_path: Path) -> None:
    """serve exiting mid-scenario stops the sitting at its next 10 s check, naming the exit
    code and quoting its log (it waited out the 30-minute timeout, printing "admitted 0")."""
    import subprocess

    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["sh", "-c", "echo 'cannot bind :8080'; exit 3"], stdout=out)
        proc.wait(timeout=10)
    why = bench._exited(proc, log)()
    assert why is not None and "exit code 3" in why and "cannot bind :8080" in why

    async def forever() -> None:
        await asyncio.sleep(3600)

    async def reporter() -> None:
        raise bench.ControllerStopped("the controller stopped")

    async def main() -> None:
        waiting = asyncio.create_task(forever())
        try:
            await asyncio.wait_for(bench._first(waiting, asyncio.create_task(reporter())), 5)
        finally:
            waiting.cancel()

    with pytest.raises(bench.ControllerStopped, match="the controller stopped"):
        asyncio.run(main())
