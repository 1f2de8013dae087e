"""A fake Events API for the recorder's unit tests (test_event_recorder, test_event_senders):
creates that take a while, with what was started, sent and in flight at most."""

from __future__ import annotations

import asyncio

from topogate.kube.ratelimit import TokenBucket
from topogate.kube.resources import Obj, Resource

WORKLOAD = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload"}


class SlowApi:
    """Creates take ``delay`` seconds each (forever when None), after a token of ``budget``
    when given; records the order creates start in and the most in flight at once."""

    def __init__(self, delay: float | None, budget: TokenBucket | None = None) -> None:
        self.delay, self.budget = delay, budget
        self.in_flight = self.most = 0
        self.started: list[str] = []
        self.sent: list[str] = []

    async def create(self, resource: Resource, body: Obj, namespace: str | None = None) -> Obj:
        if self.budget is not None:
            await self.budget.take()
        self.started.append(body["note"])
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(3600 if self.delay is None else self.delay)
        finally:
            self.in_flight -= 1
        self.sent.append(body["note"])
        return body


def about(name: str) -> Obj:
    """A Workload the events are about."""
    return {**WORKLOAD, "metadata": {"name": name, "namespace": "ns", "uid": name}}
