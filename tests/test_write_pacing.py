"""The admitter's pacing of throttled writes (controllers/admitter.py, WRITES_KEPT): waiting
workloads are still worded while a cycle waits for its writes, and the client's pace is
measured between writes only (not from the clock's zero, nor across an idle spell). Each was
found by a hostile review of the change that brought the pacing in."""

from __future__ import annotations

import asyncio
import contextlib
import math

import pytest

from topogate.controllers import admitter as admitter_module
from topogate.controllers.admitter import Admitter
from topogate.kube.events import EventRecorder
from topogate.kube.resources import WORKLOADS

from .test_parking import _GatedWrites, _let_through
from .test_shells import Harness, workload


async def test_a_workload_arriving_while_writes_wait_gets_its_pending_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """serve's loop: a workload that cannot fit arrives while more than WRITES_KEPT admissions
    wait for their (throttled or slow) writes. decide(describe=True) returns before wording
    anything, yet the loop counts the words as given (``described``, ``owed = False``); while
    the writes stay behind, every later try is deferred the same way, so the workload never
    gets its pending message (nor the gauges their counts). Before e8a3df2..6996be6 the cycle
    ran (it is only 6 of AHEAD=128 ahead) and worded it."""
    monkeypatch.setattr(admitter_module, "DESCRIBE_EVERY", 0.05)
    h = Harness()
    names = [f"w{i}" for i in range(admitter_module.WRITES_KEPT + 2)]
    for name in names:
        h.kube.seed(WORKLOADS, workload(name, count=1, gpus=1))
    h.deliver()
    gated = _GatedWrites(h.kube)  # the API server takes no status write for now
    admitter = Admitter(gated, h.state, h.metrics, EventRecorder(h.kube, "test"))
    assert admitter.decide()
    assert all(h.state.ledger.reserved(f"ml/{n}") for n in names)
    h.kube.seed(WORKLOADS, workload("big", count=1, gpus=100))  # more than the quota
    h.deliver()
    h.state.signals.admit()
    loop = asyncio.create_task(admitter.run())
    try:
        await asyncio.sleep(0.5)  # ten DESCRIBE_EVERY periods
        words = admitter.messages._said.get("ml/big")
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
        gated.gate.release()
        for _ in names:
            gated.gate.release()
    assert words, "ml/big waited 0.5 s with no pending message while 6 writes were out"


async def test_the_write_pace_is_not_measured_from_the_clocks_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first two admission writes that overlap take their gap from ``_last_write = 0.0``,
    i.e. from the clock's zero (time.perf_counter: seconds since boot), so ``_write_gap``
    starts at hours and decays by 0.8 a write: for the first ~60 writes after start (and after
    every idle spell, whose length is counted as a gap too), ``_writes_kept`` falls back to
    WRITES_KEPT and the writer runs dry during slow cycles, which 7bc0730 meant to prevent."""
    h = Harness()
    admitter, _ = h.admitter()
    now = [40_000.0]  # the machine up 11 hours
    admitter.clock = lambda: now[0]

    async def written(*_: object) -> None:
        return None

    monkeypatch.setattr(admitter, "_admit_once", written)
    admitter._ahead = 12  # a cycle admitted 12; the client writes 50 a second
    for _ in range(10):
        now[0] += 0.02
        await admitter._admit(None, None, None, None)  # type: ignore[arg-type]
    admitter._cycle_took = 0.1
    expected = math.ceil((2 * 0.1 + admitter_module.COALESCE_MAX) / 0.02)
    assert admitter._write_gap == pytest.approx(0.02)
    assert admitter._writes_kept() == expected


async def test_an_idle_spell_is_not_taken_for_the_write_pace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Writes at 50 a second, then ten minutes with nothing to write, then a new batch: its
    first write's gap is the idle ten minutes (no write waited through them), so the pace
    jumps to ~120 s a write and ``_writes_kept`` is WRITES_KEPT for the next ~40 writes."""
    h = Harness()
    admitter, _ = h.admitter()
    now = [100.0]
    admitter.clock = lambda: now[0]

    async def written(*_: object) -> None:
        return None

    monkeypatch.setattr(admitter, "_admit_once", written)
    admitter._write_gap = 0.02  # the pace known, 50 a second; the last write left none waiting
    now[0] += 600.0  # idle: no admission waited
    admitter._ahead = 12  # a new cycle's batch
    for _ in range(3):
        now[0] += 0.02
        await admitter._admit(None, None, None, None)  # type: ignore[arg-type]
    admitter._cycle_took = 0.1
    assert admitter._write_gap == pytest.approx(0.02)


async def test_the_loop_sleeps_through_changes_while_its_cycle_is_put_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the admissions decided wait for their writes (the next cycle is put off until
    they catch up), Workloads created meanwhile do not wake a decide each: they would only
    sync the queue to find the cycle put off again. The write that catches up wakes the loop,
    and the cycle admits them."""
    monkeypatch.setattr(admitter_module, "DESCRIBE_EVERY", 60.0)
    h = Harness()
    first = [f"w{i}" for i in range(admitter_module.WRITES_KEPT + 2)]
    for name in first:
        h.kube.seed(WORKLOADS, workload(name, count=1, gpus=1))
    h.deliver()
    gated = _GatedWrites(h.kube)  # the API server takes no status write for now
    admitter = Admitter(gated, h.state, h.metrics, EventRecorder(h.kube, "test"))
    decided: list[bool] = []
    real = admitter.decide

    def counted(describe: bool = True) -> bool:
        decided.append(describe)
        return real(describe)

    monkeypatch.setattr(admitter, "decide", counted)
    h.state.signals.admit()
    loop = asyncio.create_task(admitter.run())
    try:
        await asyncio.sleep(0.1)  # the first cycle (worded) admits them; their writes wait
        assert decided == [True] and all(h.state.ledger.reserved(f"ml/{n}") for n in first)
        h.kube.seed(WORKLOADS, workload("late-0", count=1, gpus=1))
        h.deliver()
        await asyncio.sleep(0.1)  # one decide finds the cycle put off
        assert decided == [True, False] and admitter._behind
        for i in range(1, 11):  # each wakes the loop, none runs a decide
            h.kube.seed(WORKLOADS, workload(f"late-{i}", count=1, gpus=1))
            h.deliver()
            await asyncio.sleep(0.02)
        assert decided == [True, False]
        assert admitter.put_off_wakes >= 10
        await _let_through(gated, len(first))  # written: the pace lets the next cycle run
        for _ in range(100):
            if all(h.state.ledger.reserved(f"ml/late-{i}") for i in range(11)):
                break
            await asyncio.sleep(0.02)
        assert all(h.state.ledger.reserved(f"ml/late-{i}") for i in range(11))
        assert len(decided) == 3
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
        for _ in range(40):
            gated.gate.release()
        await admitter.settle()
