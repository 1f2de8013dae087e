"""HyperNode discovery in `serve`: node labels in, HyperNodes out, kept current.

The pure part (which HyperNodes the labels describe, what to create, update and delete) is
``topogate.cache.hypernodes.discover`` and ``reconcile``; this shell runs it when node labels
change (debounced) and at each type's interval, and writes the plan: creates children before
parents (tier order), sets ``status.nodeCount`` through the status subresource, and never
touches a HyperNode it did not make.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

from topogate.api.objects import labels_changed, meta
from topogate.cache.hypernodes import DiscoveryType, discover, reconcile
from topogate.kube.errors import API_ERRORS, KubeError
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import HYPERNODES, NODES, Obj
from topogate.kube.waits import sleep_or
from topogate.state import ControllerState

log = logging.getLogger("topogate.discovery")

DEBOUNCE_SECONDS = 1.0


@dataclass(slots=True)
class DiscoveryCounts:
    created: int = 0
    updated: int = 0
    deleted: int = 0
    conflicts: int = 0
    refused: int = 0


class HyperNodeDiscovery:
    def __init__(
        self, kube: KubeApi, state: ControllerState, types: Sequence[DiscoveryType]
    ) -> None:
        self.kube = kube
        self.state = state
        self.types = list(types)
        self._changed = asyncio.Event()
        self.rounds = 0
        state.subscribe(NODES, self._on_node)

    def _on_node(self, old: Obj | None, new: Obj | None) -> None:
        if labels_changed(old, new):
            self._changed.set()

    async def run(self) -> None:
        interval = min((t.interval_seconds for t in self.types), default=3600.0)
        self._changed.set()  # a first round at start
        while True:
            await sleep_or(self._changed, interval)
            await asyncio.sleep(DEBOUNCE_SECONDS)  # a relabelled rack is many node events
            self._changed.clear()
            try:
                counts = await self.reconcile_once()
            except API_ERRORS as error:
                log.warning("discovery round failed: %s; retrying", error)
                self._changed.set()
                await asyncio.sleep(5)
                continue
            if counts.refused:
                # Another order of the same writes may pass (one update releases what another
                # claims); look again soon rather than at the next interval.
                self._changed.set()
                await asyncio.sleep(2)
            if counts.created or counts.updated or counts.deleted:
                log.info(
                    "HyperNodes discovered: %d created, %d updated, %d deleted",
                    counts.created,
                    counts.updated,
                    counts.deleted,
                )

    async def reconcile_once(self) -> DiscoveryCounts:
        counts = DiscoveryCounts()
        nodes = self.state.ledger.nodes()
        existing = list(self.state.store.objects(HYPERNODES).values())
        for kind in self.types:
            plan = reconcile(existing, discover(nodes, kind.name, kind.labels), kind.name)
            for name in plan.conflicts:
                log.warning("HyperNode %s exists and was not made by discovery; left alone", name)
            counts.conflicts += len(plan.conflicts)
            # Releases before claims: a node moving between racks leaves its old HyperNode
            # (delete, update) before the new one claims it, or the webhook would refuse.
            for name in plan.delete:
                try:
                    await self.kube.delete(HYPERNODES, name)
                    counts.deleted += 1
                except KubeError as error:
                    if not error.not_found:
                        raise
            for obj in plan.update:
                replaced = await self._write(self.kube.replace(HYPERNODES, obj), obj, counts)
                if replaced is not None:
                    await self._status(replaced, obj)
                    counts.updated += 1
            for obj in plan.create:
                body = {k: v for k, v in obj.items() if k != "status"}
                created = await self._write(self.kube.create(HYPERNODES, body), obj, counts)
                if created is not None:
                    await self._status(created, obj)
                    counts.created += 1
        self.rounds += 1
        return counts

    async def _write(self, call: Awaitable[Obj], obj: Obj, counts: DiscoveryCounts) -> Obj | None:
        """One write; a refusal (the webhook: it would break the tree) skips only this one."""
        try:
            return await call
        except KubeError as error:
            if error.status not in (409, 422):
                raise
            counts.refused += 1
            log.warning("HyperNode %s not written: %s", meta(obj).get("name"), error.message)
            return None

    async def _status(self, current: Obj, desired: Obj) -> None:
        wanted = desired.get("status") or {}
        if (current.get("status") or {}).get("nodeCount") == wanted.get("nodeCount"):
            return
        await self.kube.replace(
            HYPERNODES,
            {**current, "status": {**(current.get("status") or {}), **wanted}},
            subresource="status",
        )
