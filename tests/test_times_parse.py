"""topogate/api/times.py: parse_time reads the API server's form with the C parser and
anything else as strictly as before (strptime): the same answer for every input."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from topogate.api.times import TIME_FORMAT, parse_time


def _strict(value: str) -> float | None:
    try:
        return datetime.strptime(value, TIME_FORMAT).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


@pytest.mark.parametrize(
    "value",
    [
        "2026-11-26T22:56:41Z",
        "1970-01-01T00:00:00Z",
        "2026-02-30T22:56:41Z",  # no such day
        "2026-11-26T24:00:00Z",
        "20261126T225641.123Z",  # ISO basic form, 20 characters: not a metav1.Time
        "2026-11-26T22:56:41+00:00",
        "2026-11-26T22:56:41.5Z",
        "2026-1-2T3:4:5Z",  # strptime takes single digits
        "2026-11-26 22:56:41Z",
        "",
    ],
)
def test_the_same_as_strptime(value: str) -> None:
    assert parse_time(value) == _strict(value)


def test_the_api_servers_form_is_utc() -> None:
    assert parse_time("1970-01-01T00:01:40Z") == 100.0
