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


def exact_budget(seconds: float = EXACT_BUDGET) -> ExactBudget | None:
    """The second pass's budget per gang on the process's monotonic clock; None when 0 (off)."""
    return ExactBudget(seconds, time.perf_counter) if seconds > 0 else None
