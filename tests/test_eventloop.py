"""The event loop serve and the webhook server run on (``--event-loop``)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from topogate.kube import eventloop


async def _loop_type() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_auto_runs_on_uvloop_when_it_is_installed() -> None:
    pytest.importorskip("uvloop")
    assert eventloop.run(_loop_type(), "auto").startswith("uvloop")
    assert eventloop.run(_loop_type(), "uvloop").startswith("uvloop")


def test_asyncio_keeps_the_standard_loop() -> None:
    assert eventloop.run(_loop_type(), "asyncio").startswith("asyncio")


def test_without_uvloop_auto_falls_back_and_asking_for_it_is_a_clear_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import fails as if not installed
    assert eventloop.run(_loop_type(), "auto").startswith("asyncio")
    with pytest.raises(SystemExit, match="uvloop is not installed"):
        eventloop.run(_loop_type(), "uvloop")


@pytest.mark.parametrize("command", ["serve", "webhook"])
def test_the_commands_take_the_option(command: str) -> None:
    from topogate.cli import _parser

    extra = ["--cert-dir", "/tmp/x"] if command == "webhook" else []
    words = [command, "--event-loop", "asyncio", *extra]
    assert _parser(words)[0].parse_args(words).event_loop == "asyncio"
    words = [command, "--event-loop", "tokio", *extra]
    with pytest.raises(SystemExit):
        _parser(words)[0].parse_args(words)
