"""Kubernetes time formats: metav1.Time (seconds) and metav1.MicroTime, always UTC. Pure: the
clock is read in ``topogate.clock``."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def metav1_time(moment: datetime) -> str:
    """A metav1.Time: ``2026-01-02T03:04:05Z`` (``topogate.clock.now`` reads the clock)."""
    return moment.astimezone(UTC).strftime(TIME_FORMAT)


def micro_time(moment: datetime) -> str:
    """A metav1.MicroTime: ``2026-01-02T03:04:05.123456Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> float | None:
    """A metav1.Time as a POSIX timestamp; None when absent or malformed."""
    if not isinstance(value, str):
        return None
    if (
        len(value) == 20
        and value[4] + value[7] + value[10] + value[13] + value[16] + value[19] == "--T::Z"
    ):
        # The form the API server writes, read by the C parser (strptime cost a visible
        # share of serve's CPU per admission); anything else goes the strict way below.
        with contextlib.suppress(ValueError):
            return datetime.fromisoformat(value).timestamp()
    try:
        return datetime.strptime(value, TIME_FORMAT).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None
