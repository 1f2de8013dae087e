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
