"""Kubernetes events (events.k8s.io/v1) about workloads and jobs, sent in the background."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from topogate.api.times import micro_time
from topogate.kube.errors import API_ERRORS
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import EVENTS, Obj

log = logging.getLogger("topogate.events")
CONTROLLER = "topogate.dev/controller"


class EventRecorder:
    def __init__(self, kube: KubeApi, instance: str) -> None:
        self.kube = kube
        self.instance = instance
        self._tasks: set[asyncio.Task[Any]] = set()

    def emit(self, regarding: Obj, reason: str, note: str, *, warning: bool = False) -> None:
        """Queue an event; failures are logged, never raised (events are best effort)."""
        meta = regarding.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            # client-go's naming: the object's name and a unique hex suffix.
            "metadata": {"name": f"{meta.get('name')}.{time.time_ns():x}", "namespace": namespace},
            "eventTime": micro_time(),
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
        task = asyncio.get_running_loop().create_task(self._send(body, namespace))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, body: Obj, namespace: str) -> None:
        try:
            await self.kube.create(EVENTS, body, namespace)
        except API_ERRORS as error:
            log.info("event %s not recorded: %s", body["reason"], error)

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
