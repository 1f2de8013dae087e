"""topogate/runtime/logs.py: serve's log lines are basicConfig's, character for character,
whatever the moment (its seconds are cached), with exceptions' tracebacks as before."""

from __future__ import annotations

import logging
import re
import subprocess
import sys

from topogate.runtime.logs import FORMAT, Formatter


def _record(created: float, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("bad")
        except ValueError as error:
            exc_info = (type(error), error, error.__traceback__)
    record = logging.LogRecord(
        "topogate.admitter", logging.INFO, __file__, 1, "admitted %s: %s", ("a/b", "x"), exc_info
    )
    record.created = created
    record.msecs = int((created - int(created)) * 1000) + 0.0
    return record


def test_lines_are_the_default_formatters_at_every_moment() -> None:
    ours, default = Formatter(), logging.Formatter(FORMAT)
    # Within a second, across one, back to an earlier one, a DST-free and a leap-day moment.
    moments = [1_795_764_808.899, 1_795_764_808.0, 1_795_764_808.999, 1_795_764_809.001]
    moments += [1_700_000_000.5, 951_782_400.25, 0.0]
    for created in moments:
        assert ours.format(_record(created)) == default.format(_record(created)), created
    assert ours.format(_record(1.5, exc=True)) == default.format(_record(1.5, exc=True))
    assert "ValueError: bad" in ours.format(_record(2.0, exc=True))


def test_a_date_format_asked_for_is_honoured() -> None:
    record = _record(1_795_764_808.5)
    assert Formatter().formatTime(record, "%Y") == logging.Formatter().formatTime(record, "%Y")


def test_serves_configuration_writes_basic_configs_lines() -> None:
    """In a process of its own (configure's switches are global): the same lines on stderr,
    the time stamps' digits aside, an exception's traceback included."""
    script = """
import logging, sys
if sys.argv[1] == "ours":
    from topogate.runtime.logs import configure
    configure(logging.INFO)
else:
    logging.basicConfig(level=logging.INFO, format=sys.argv[2])
log = logging.getLogger("topogate.admitter")
log.debug("hidden %s", 1)
log.info("admitted %s: %s", "a/b", "flavor default")
try:
    raise ValueError("bad")
except ValueError:
    log.exception("failed %s", "a/b")
"""
    lines = {}
    for how in ("ours", "basicConfig"):
        run = subprocess.run(
            [sys.executable, "-c", script, how, FORMAT], capture_output=True, text=True, check=True
        )
        lines[how] = re.sub(r"\d", "0", run.stderr)
    assert lines["ours"] == lines["basicConfig"]
    assert "INFO topogate.admitter: admitted a/b: flavor default" in lines["ours"]
    assert "hidden" not in lines["ours"] and "ValueError: bad" in lines["ours"]
