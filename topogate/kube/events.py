"""Kubernetes events (events.k8s.io/v1) about workloads and jobs, sent in the background.

As client-go's broadcaster: a bounded queue and one sender, so a burst of events (thousands of
workloads told why they wait) is spread over time instead of standing, all at once, in the API
server's queue ahead of admissions; when the queue is full an event is dropped and counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from topogate.clock import micro_now
from topogate.kube.errors import API_ERRORS
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import EVENTS, Obj

log = logging.getLogger("topogate.events")
CONTROLLER = "topogate.dev/controller"
QUEUE_CAPACITY = 1000  # client-go's maxQueuedEvents


class EventRecorder:
    def __init__(
        self,
        kube: KubeApi,
        instance: str,
        capacity: int = QUEUE_CAPACITY,
        on_drop: Callable[[], None] | None = None,
    ) -> None:
        self.kube = kube
        self.instance = instance
        self.capacity = capacity
        self.dropped = 0  # events not sent because the queue was full
        self._on_drop = on_drop  # e.g. a metric's inc
        self._queue: asyncio.Queue[tuple[Obj, str]] = asyncio.Queue(capacity)
        self._sender: asyncio.Task[None] | None = None  # started by the first event

    def emit(self, regarding: Obj, reason: str, note: str, *, warning: bool = False) -> None:
        """Queue an event; failures are logged, never raised (events are best effort)."""
        meta = regarding.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            # client-go's naming: the object's name and a unique hex suffix.
            "metadata": {"name": f"{meta.get('name')}.{time.time_ns():x}", "namespace": namespace},
            "eventTime": micro_now(),
            "reportingController": CONTROLLER,
            "reportingInstance": self.instance[:128],
            "action": reason,
            "reason": reason,
            "type": "Warning" if warning else "Normal",
            "note": note[:1024],
            "regarding": {
                "apiVersion": regarding.get("apiVersion"),
                "kind": regarding.get("kind"),
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
            },
        }
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send_all(), name="events")
        try:
            self._queue.put_nowait((body, namespace))
        except asyncio.QueueFull:
            self.dropped += 1
            if self._on_drop is not None:
                self._on_drop()
            log.debug("event %s about %s dropped: the queue is full", reason, meta.get("name"))

    async def _send_all(self) -> None:
        queue = self._queue
        while True:
            body, namespace = await queue.get()
            try:
                await self.kube.create(EVENTS, body, namespace)
            except API_ERRORS as error:
                log.info("event %s not recorded: %s", body["reason"], error)
            except Exception:  # one odd failure must not leave the rest queued, unsent
                log.exception("event %s not recorded", body["reason"])
            finally:
                queue.task_done()

    async def drain(self, seconds: float | None = None) -> None:
        """Wait until the queued events are sent (at most ``seconds``), then stop sending."""
        if self._sender is None:
            return
        waiting = asyncio.ensure_future(self._queue.join())
        # The sender never ends by itself; should it be cancelled, nothing is left to wait for.
        await asyncio.wait(
            {waiting, self._sender}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
        )
        waiting.cancel()
        self._sender.cancel()
        await asyncio.gather(self._sender, return_exceptions=True)
        self._sender = None
