"""Kubernetes events (events.k8s.io/v1) about workloads and jobs, sent in the background.

A bounded queue and a few senders, so a burst of events (thousands of workloads told why they
wait) is spread over time instead of standing, all at once, in the API server's queue ahead of
admissions; when the queue is full an event is dropped and counted. One sender (the default)
sends one event at a time, in order, as client-go's legacy broadcaster (tools/record); serve
runs ``SERVE_SENDERS``: client-go's events.k8s.io broadcaster (tools/events, Kueue's) sends
each event from a goroutine of its own, bounded only by its client's rate limit, and one
sender waiting a round trip per event (longer on a busy event loop) sent a tenth of a burst.
Events are sent in the order they were emitted, but with several senders one may be stored
before the one emitted just ahead of it: each carries its own ``eventTime``, by which
``kubectl`` orders them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from topogate.clock import event_time
from topogate.kube.errors import API_ERRORS
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import EVENTS, Obj

log = logging.getLogger("topogate.events")
CONTROLLER = "topogate.dev/controller"
QUEUE_CAPACITY = 1000  # client-go's maxQueuedEvents
# Requests in flight at once for serve's recorder: enough to keep its client's rate limit busy
# at 300/s with a round trip of tens of milliseconds on a loaded event loop, few enough that
# a slow API server sees a handful of event creates, not a thousand.
SERVE_SENDERS = 16


class EventRecorder:
    def __init__(
        self,
        kube: KubeApi,
        instance: str,
        capacity: int = QUEUE_CAPACITY,
        on_drop: Callable[[], None] | None = None,
        senders: int = 1,
    ) -> None:
        if senders < 1:
            raise ValueError(f"an event recorder needs at least one sender, not {senders}")
        self.kube = kube
        self.instance = instance
        self.capacity = capacity
        self.dropped = 0  # events never sent: the queue was full, or an exit left them queued
        self._on_drop = on_drop  # e.g. a metric's inc
        self._queue: asyncio.Queue[tuple[Obj, str]] = asyncio.Queue(capacity)
        self.senders = senders  # events in flight at most
        self._running: set[asyncio.Task[None]] = set()  # started by the first event

    def emit(self, regarding: Obj, reason: str, note: str, *, warning: bool = False) -> None:
        """Queue an event; failures are logged, never raised (events are best effort)."""
        meta = regarding.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        nanos, moment = event_time()
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            # client-go's naming: the object's name and a unique hex suffix.
            "metadata": {"name": f"{meta.get('name')}.{nanos:x}", "namespace": namespace},
            "eventTime": moment,
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
        if len(self._running) < self.senders:
            self._start()
        try:
            self._queue.put_nowait((body, namespace))
        except asyncio.QueueFull:
            self._drop()
            log.debug("event %s about %s dropped: the queue is full", reason, meta.get("name"))

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        while len(self._running) < self.senders:
            task = loop.create_task(self._send_all(), name="events")
            self._running.add(task)
            task.add_done_callback(self._running.discard)

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
        """Wait until the queued events are sent (at most ``seconds``), then stop sending;
        those still queued then are dropped and counted."""
        senders = set(self._running)
        if not senders:
            return
        waiting = asyncio.ensure_future(self._queue.join())
        # The senders never end by themselves; should one be cancelled, the queue may never
        # empty, so that ends the wait too.
        await asyncio.wait(
            {waiting, *senders}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
        )
        waiting.cancel()
        for sender in senders:
            sender.cancel()
        await asyncio.gather(waiting, *senders, return_exceptions=True)
        self._running.difference_update(senders)
        # What the wait left queued is never sent (the process exits): dropped, and counted.
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()
            self._drop()

    def _drop(self) -> None:
        self.dropped += 1
        if self._on_drop is not None:
            self._on_drop()
