"""Kubernetes time formats: metav1.Time (seconds) and metav1.MicroTime, always UTC. Pure: the
clock is read in ``topogate.clock``."""

from __future__ import annotations

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
    try:
        return datetime.strptime(value, TIME_FORMAT).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None
