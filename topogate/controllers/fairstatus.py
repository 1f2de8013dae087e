"""Fair sharing's status: ``status.fairSharing.weightedShare`` on ClusterQueues and Cohorts
(topogate's, and Kueue's v1beta2 Cohorts read as topogate's), as Kueue's ClusterQueue and
Cohort controllers write it with fair sharing on.

Like the pending messages, a courtesy: written by one task at a bounded rate (serve's
``--pending-status-qps``), each object only when its share differs from what the watch shows,
the newest share winning when several come before its turn. A write is a merge patch of that
one field (the field is ours; nothing else of the status is sent), through the fenced client.
A failed write (the API server unreachable, the Lease lapsed, the object gone) is forgotten
and a cycle asked for, whose shares queue it again; a refused one (a 4xx: RBAC, a schema
without the field) is not tried again until the share changes.

With fair sharing off, a share written before is removed from topogate's objects (as Kueue
removes it); Kueue's Cohorts are left alone then, their status may be Kueue's own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from topogate.api.objects import key_of
from topogate.kube.errors import API_ERRORS, KubeError
from topogate.kube.protocol import KubeApi
from topogate.kube.ratelimit import TokenBucket, courtesy
from topogate.kube.resources import CLUSTER_QUEUES, COHORTS, KUEUE_COHORTS, Obj, Resource
from topogate.state import ControllerState

log = logging.getLogger("topogate.admitter")

Target = tuple[Resource, str]  # (resource, object name)


def written_share(obj: Obj) -> int | None:
    """The ``status.fairSharing.weightedShare`` an object carries, or None."""
    status = obj.get("status")
    fair = status.get("fairSharing") if isinstance(status, Mapping) else None
    share = fair.get("weightedShare") if isinstance(fair, Mapping) else None
    return share if isinstance(share, int) and not isinstance(share, bool) else None


def _refused(error: BaseException) -> bool:
    """An answer of the API server that trying the same write again cannot change (a 4xx
    other than a conflict or too many requests; 404 is the object gone, which the watch
    tells)."""
    return isinstance(error, KubeError) and 400 <= error.status < 500 and error.status != 429


class ShareStatus:
    def __init__(self, kube: KubeApi, state: ControllerState, qps: float) -> None:
        self.kube, self.state = kube, state
        self.limit = TokenBucket(qps, max(1, int(qps)))
        self._said: dict[Target, int | None] = {}  # written, or queued to be (None: removed)
        self._queued: dict[Target, None] = {}  # oldest first
        self._writer: asyncio.Task[None] | None = None
        self.failures = 0  # writes the API server did not take
        self._failing: set[Target] = set()  # logged once until a write succeeds
        # The objects :meth:`clear` has to look at again: those that came, changed or went
        # since it last looked, and those whose write failed (None: all of them). With fair
        # sharing off it runs once a second, and 1,000 ClusterQueues are no reason to walk
        # them all each time.
        self._unchecked: set[Target] | None = None
        for resource in (CLUSTER_QUEUES, COHORTS):
            state.subscribe(resource, self._checker(resource))

    @property
    def writer(self) -> asyncio.Task[None] | None:
        """The task writing queued shares now, if any."""
        return self._writer

    def _target(self, resource: Resource, name: str) -> Obj | None:
        return self.state.store.objects(resource).get(name)

    def update(self, queues: Mapping[str, int], cohorts: Mapping[str, int]) -> None:
        """Queue a write for each ClusterQueue and Cohort object whose share changed (cohorts
        without an object are skipped: there is nothing to write on)."""
        wanted: dict[Target, int | None] = {(CLUSTER_QUEUES, n): s for n, s in queues.items()}
        for name, share in cohorts.items():
            for resource in (COHORTS, KUEUE_COHORTS):  # topogate's wins a shared name
                if self._target(resource, name) is not None:
                    wanted[(resource, name)] = share
                    break
        self._queue(wanted)

    def _checker(self, resource: Resource) -> Callable[[Obj | None, Obj | None], None]:
        def changed(old: Obj | None, new: Obj | None) -> None:
            if self._unchecked is not None:
                self._unchecked.add((resource, key_of(new if new is not None else old or {})))

        return changed

    def clear(self) -> None:
        """Fair sharing off: remove the share from topogate's objects that carry one (those
        that changed since the last call: the others were seen to before)."""
        if self._unchecked is None:
            targets: set[Target] = {
                (resource, name)
                for resource in (CLUSTER_QUEUES, COHORTS)
                for name in self.state.store.objects(resource)
            }
        else:
            targets = self._unchecked
        self._unchecked = set()
        wanted: dict[Target, int | None] = {}
        for target in targets:
            obj = self._target(*target)
            if obj is None:
                self._said.pop(target, None)  # gone: a namesake starts afresh
            elif written_share(obj) is not None or target in self._said:
                wanted[target] = None
        if wanted or self._queued:
            self._queue(wanted)

    def _queue(self, wanted: Mapping[Target, int | None]) -> None:
        for target in [t for t in self._said if self._target(*t) is None]:
            del self._said[target]  # the object is gone: a namesake starts afresh
        for target, share in wanted.items():
            obj = self._target(*target)
            if obj is None or (target in self._said and self._said[target] == share):
                continue
            self._said[target] = share
            if written_share(obj) != share:
                self._queued.setdefault(target, None)
        if self._queued and self._writer is None:
            self._writer = asyncio.create_task(self._write_queued(), name="fair-sharing status")

    async def _write_queued(self) -> None:
        try:
            while self._queued:
                target = next(iter(self._queued))
                del self._queued[target]
                await self.limit.take()
                await self._write(target)
        finally:
            # Cleared in the step that saw the queue empty, so an update right after starts
            # a new writer rather than queueing behind a finished one.
            self._writer = None

    async def _write(self, target: Target) -> None:
        resource, name = target
        if target not in self._said:
            return  # its write failed meanwhile; the next cycle queues it again
        share = self._said[target]
        obj = self._target(resource, name)
        if obj is None or written_share(obj) == share:
            return  # gone meanwhile, or already says so
        fair = None if share is None else {"weightedShare": share}  # null: merge patch removes it
        body = {"status": {"fairSharing": fair}}
        try:
            with courtesy():  # admissions and evictions go first at the client's budget
                await self.kube.patch(resource, name, body, subresource="status")
        except API_ERRORS as error:
            self.failures += 1
            if target not in self._failing:
                self._failing.add(target)
                log.info("fair-sharing status of %s %s not written: %s", resource.key, name, error)
            if _refused(error):
                # Kept as said: the same body would be refused again (RBAC, a schema without
                # the field), and asking a cycle for it would loop at the write rate; a new
                # share is tried afresh.
                return
            if self._said.get(target) == share:
                del self._said[target]
                if self._unchecked is not None:
                    self._unchecked.add(target)  # for clear() to queue it again
                self.state.signals.admit()  # whose shares queue it again
            return
        self._failing.discard(target)
        log.debug("%s %s: weightedShare %s", resource.key, name, share)
