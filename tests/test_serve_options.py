"""topogate/runtime/serve.py: --pending-status-qps takes a positive, finite number (the
token bucket's burst is int(qps): inf crashed the start with an OverflowError)."""

from __future__ import annotations

import argparse

import pytest

from topogate.runtime.serve import _positive


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "Infinity", "x"])
def test_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        _positive(text)


def test_taken() -> None:
    assert _positive("0.5") == 0.5
    assert _positive("1e6") == 1e6


def test_fair_sharing_is_off_unless_asked() -> None:
    from topogate.runtime.serve import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args([]).fair_sharing is False
    assert parser.parse_args(["--fair-sharing"]).fair_sharing is True


def test_fair_sharing_preemption_strategies(capsys: pytest.CaptureFixture[str]) -> None:
    """Kueue's default is both strategies in order; one or two may be named; anything else
    is refused at the command line, naming the flag and the allowed words."""
    from topogate.runtime.serve import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flag = "--fair-sharing-preemption-strategies"
    assert parser.parse_args([]).fair_sharing_preemption_strategies == (
        "LessThanOrEqualToFinalShare",
        "LessThanInitialShare",
    )
    got = parser.parse_args([flag, "LessThanInitialShare"]).fair_sharing_preemption_strategies
    assert got == ("LessThanInitialShare",)
    for bad in ("LessThanFinal", "LessThanInitialShare,LessThanInitialShare", ""):
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args([flag, bad])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert flag in err and "LessThanOrEqualToFinalShare" in err


def test_serve_runs_with_its_own_collector_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full collection walks every watched object: serve collects its young generation less
    often than Python's default (700) once it runs."""
    import gc
    from typing import Any

    from topogate.kube import eventloop
    from topogate.runtime import serve

    seen: list[tuple[int, int, int]] = []

    def fake_run(main: Any, choice: str = "auto") -> int:
        main.close()  # the controller is not started here
        seen.append(gc.get_threshold())
        return 0

    before = gc.get_threshold()
    # serve runs its loop through eventloop.run (uvloop or asyncio's), not asyncio.run.
    monkeypatch.setattr(eventloop, "run", fake_run)
    try:
        assert serve.run(argparse.Namespace(log_level="info")) == 0
    finally:
        gc.set_threshold(*before)
    assert seen == [serve.GC_THRESHOLDS]
    assert serve.GC_THRESHOLDS[0] > 700
