"""List+watch one resource into a local store, as client-go's Reflector does.

A full list (paged) fills the store and gives a resourceVersion; a watch with bookmarks
continues from it. When the watch ends the reflector resumes from the last version it saw
(bookmarks keep that version fresh); a 410 Gone means the version is too old, so it lists
again and reports the difference as changes. Every change reaches ``on_change(old, new)``
synchronously, on the event loop: the controller's state is updated before the next event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from topogate.kube.errors import KubeError
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import Obj, Resource, key_of

log = logging.getLogger("topogate.reflector")

Change = Callable[[Obj | None, Obj | None], None]


class Reflector:
    def __init__(
        self,
        kube: KubeApi,
        resource: Resource,
        on_change: Change,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        optional: bool = False,
        page_size: int = 500,
        on_relist: Callable[[], None] | None = None,
        transform: Callable[[Obj], Obj] | None = None,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.on_change = on_change
        self.optional = optional  # a CRD that may not be installed (JobSet, LWS, HyperNode, KAI)
        self._absent_said = False  # its absence is logged once, not every 30 s
        self.page_size = page_size
        self.on_relist = on_relist
        # Applied to every object before it is stored or handed on: what is kept of 100,000
        # Nodes is most of a controller's memory (client-go's informers have the same hook).
        self.transform = transform
        self._params: dict[str, Any] = {}
        if label_selector:
            self._params["labelSelector"] = label_selector
        if field_selector:
            self._params["fieldSelector"] = field_selector
        self.store: dict[str, Obj] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""

    @property
    def name(self) -> str:
        return self.resource.key

    async def _list(self) -> None:
        items: dict[str, Obj] = {}
        token: str | None = None
        while True:
            page = await self.kube.list(
                self.resource, limit=self.page_size, **{"continue": token}, **self._params
            )
            # List items come without kind and apiVersion; watch events carry them.
            kind = str(page.get("kind") or "").removesuffix("List")
            for item in page.get("items") or []:
                item.setdefault("kind", kind)
                item.setdefault("apiVersion", page.get("apiVersion") or self.resource.api_version)
                items[key_of(item)] = item if self.transform is None else self.transform(item)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                self.resource_version = str(meta.get("resourceVersion") or "")
                break
        if self.on_relist is not None:
            self.on_relist()
        old_store, self.store = self.store, {}
        for key, new in items.items():
            self.store[key] = new
            old = old_store.pop(key, None)
            if old is None or _version(old) != _version(new):
                self._emit(old, new)
        for old in old_store.values():
            self._emit(old, None)

    def _apply(self, event: Obj) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        version = _version(obj)
        if version:
            self.resource_version = version
        if kind == "BOOKMARK":
            return
        if self.transform is not None:
            obj = self.transform(obj)
        key = key_of(obj)
        old = self.store.get(key)
        if kind == "DELETED":
            self.store.pop(key, None)
            self._emit(old if old is not None else obj, None)
        elif kind in ("ADDED", "MODIFIED"):
            self.store[key] = obj
            self._emit(old, obj)

    def _emit(self, old: Obj | None, new: Obj | None) -> None:
        # A handler's bug must not look like a broken watch (the version has moved on).
        try:
            self.on_change(old, new)
        except Exception:
            log.exception("%s: handler failed", self.name)

    async def run(self) -> None:
        """Forever: list, then watch; relist only when the version is gone. Failures back off
        exponentially, and a watch that was healthy (it delivered events, or stayed open for
        ``HEALTHY_SECONDS``) starts the backoff afresh: an API server restart after hours of
        quiet must not inherit the delays of an outage long past."""
        backoff = Backoff()
        need_list = True
        while True:
            started, delivered = time.monotonic(), [0]
            try:
                if need_list:
                    await self._list()
                    need_list = False
                    self.synced.set()
                    started = time.monotonic()
                await self._watch(delivered)
                backoff.gone_in_a_row = 0
                if delivered[0] == 0 and time.monotonic() - started < 1.0:
                    # A server that closes every watch at once must not be hammered.
                    await asyncio.sleep(backoff.next())
                else:
                    backoff.reset()
                continue
            except KubeError as error:
                if _healthy(started, delivered[0]):
                    backoff.reset()
                need_list = await self._after_error(error, backoff) or need_list
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as error:
                if _healthy(started, delivered[0]):
                    backoff.reset()
                delay = backoff.next()
                log.warning("%s: watch broke (%r); retrying in %.1f s", self.name, error, delay)
                await asyncio.sleep(delay)
                need_list = need_list or not self.resource_version

    async def _watch(self, delivered: list[int]) -> None:
        async for event in self.kube.watch(self.resource, self.resource_version, **self._params):
            self._apply(event)
            delivered[0] += 1

    async def _after_error(self, error: KubeError, backoff: Backoff) -> bool:
        """Wait as the error calls for; True when the next attempt must list again."""
        if error.gone:
            # The first 410 after a healthy watch relists at once; 410s in a row back off.
            log.info("%s: watch version too old, listing again", self.name)
            if backoff.gone_in_a_row:
                await asyncio.sleep(backoff.next())
            backoff.gone_in_a_row += 1
            return True
        if error.not_found and self.optional:
            # The CRD is not installed; nothing to follow. Look again later.
            if not self._absent_said:
                self._absent_said = True
                log.info(
                    "%s (%s): not served (its CRD is not installed); not watched, looked for "
                    "again every 30 s",
                    self.name,
                    self.resource.api_version,
                )
            self.synced.set()
            await asyncio.sleep(30)
            return True
        delay = backoff.next()
        log.warning("%s: %s; retrying in %.1f s", self.name, error, delay)
        await asyncio.sleep(delay)
        return False


HEALTHY_SECONDS = 10.0


def _healthy(started: float, delivered: int) -> bool:
    return delivered > 0 or time.monotonic() - started >= HEALTHY_SECONDS


class Backoff:
    """Exponential delays from ``first`` to ``cap`` seconds, and the count of 410s in a row.

    The cap is 5 s, not client-go's 30: a watch that waits out 30 s after the API server is
    back leaves queued jobs waiting as long, and a dozen watches retrying every 5 s during an
    outage cost the server nothing."""

    def __init__(self, first: float = 0.2, cap: float = 5.0) -> None:
        self.first, self.cap = first, cap
        self.delay = first
        self.gone_in_a_row = 0

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.delay * 2, self.cap)
        return delay

    def reset(self) -> None:
        self.delay = self.first
        self.gone_in_a_row = 0


def _version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
