"""The machine's clocks, read here so the pure core never reads one.

Kubernetes timestamps for writes and Events, and the exact second pass's budget (the core
measures its search against the clock it is handed: ``ExactBudget``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from topogate.admission.exact import EXACT_BUDGET, ExactBudget
from topogate.api.times import metav1_time, micro_time


def now() -> str:
    """A metav1.Time for now: ``2026-01-02T03:04:05Z``."""
    return metav1_time(datetime.now(UTC))


def micro_now() -> str:
    """A metav1.MicroTime for now: ``2026-01-02T03:04:05.123456Z``."""
    return micro_time(datetime.now(UTC))


class _Seconds:
    """The last whole second formatted (``%Y-%m-%dT%H:%M:%S``, UTC): Events come hundreds a
    second, and ``strftime`` per Event was most of building one."""

    second = -1
    text = ""


def event_time() -> tuple[int, str]:
    """Now, from one read of the clock: nanoseconds since the epoch (an Event's unique name
    suffix) and the same moment as a metav1.MicroTime (its ``eventTime``)."""
    nanos = time.time_ns()
    second, rest = divmod(nanos, 1_000_000_000)
    if second != _Seconds.second:
        _Seconds.text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _Seconds.second = second
    return nanos, f"{_Seconds.text}.{rest // 1000:06d}Z"


def exact_budget(seconds: float = EXACT_BUDGET) -> ExactBudget | None:
    """The second pass's budget per gang on the process's monotonic clock; None when 0 (off)."""
    return ExactBudget(seconds, time.perf_counter) if seconds > 0 else None
