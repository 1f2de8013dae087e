"""serve's log lines, made cheaply: one INFO line per admission (and per eviction) at a hundred
admissions a second made ``Logger.info`` a visible share of serve's CPU.

The lines are those of ``logging.basicConfig(format=FORMAT)``, to the character; what they
cost less is what nobody reads: the caller's file, line and function (a walk up the stack per
record), the thread, process and multiprocessing names (the format prints none of them), and
the date and time formatted anew for every record (``strftime`` once a second instead).
"""

from __future__ import annotations

import logging
import time

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Formatter(logging.Formatter):
    """The default formatter's ``asctime`` (local time, ``%Y-%m-%d %H:%M:%S,mmm``), its
    seconds formatted once per second."""

    def __init__(self, fmt: str = FORMAT) -> None:
        super().__init__(fmt)
        self._second = -1
        self._text = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if second != self._second:
            # As the default: the record's whole second in local time (a DST change moves
            # the offset only at a whole second, so the cache never spans one).
            self._text = time.strftime(self.default_time_format, self.converter(second))
            self._second = second
        return f"{self._text},{int(record.msecs):03d}"  # logging's default_msec_format


def configure(level: int) -> None:
    """The root logger at ``level``, writing FORMAT's lines to stderr, as basicConfig would."""
    # The records' fields that FORMAT never prints (logging's documented optimisations).
    logging._srcfile = None  # no stack walk for the caller
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler()
    handler.setFormatter(Formatter())
    logging.basicConfig(level=level, handlers=[handler])
