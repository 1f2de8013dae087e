"""The API client's token bucket and its defaults."""

from __future__ import annotations

import asyncio
import time

import pytest

from topogate.kube.client import DEFAULT_BURST, DEFAULT_QPS, Kube
from topogate.kube.ratelimit import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_is_taken_at_once_then_one_token_per_interval() -> None:
    clock = Clock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.try_take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.try_take() == pytest.approx(0.1)
    clock.now += 0.1
    assert bucket.try_take() == 0.0
    clock.now += 10  # idle: back to the burst, never more
    assert [bucket.try_take() for _ in range(4)][-1] == pytest.approx(0.1)


async def test_waiters_are_spread_at_the_rate() -> None:
    bucket = TokenBucket(qps=100, burst=1)
    started = time.monotonic()
    await asyncio.gather(*(bucket.take() for _ in range(6)))
    assert time.monotonic() - started >= 0.05 - 0.005  # 5 waits of 10 ms after the first


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        TokenBucket(qps=0, burst=1)


async def test_the_session_ignores_proxy_settings_unless_asked() -> None:
    from kubernetes.aio.client.configuration import Configuration

    configuration = Configuration(host="https://127.0.0.1:1")
    kube = Kube(configuration)
    assert kube._session.trust_env is False
    assert (DEFAULT_QPS, DEFAULT_BURST) == (300.0, 500)  # Kueue's
    asked = Kube(Configuration(host="https://127.0.0.1:1"), trust_env=True)
    assert asked._session.trust_env is True
    await kube.close()
    await asked.close()
