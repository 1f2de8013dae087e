"""The unfinished Workloads and the pending queue.

:class:`WorkloadIndex` splits the unfinished Workloads into waiting (no admission written or
being written) and running (an admission written), keeps the quota each admission holds, and
feeds each reader the keys of the Workloads that changed; it is kept up to date on every
change, so no reader walks every Workload ever seen (finished ones stay in the store).

:class:`PendingQueue` is the pending queue itself: the waiting Workloads translated into
placement requests, in their ClusterQueues' order (the admission cycle's lanes), or with the
reason they cannot be considered. A cycle brings it up to date from its feed, translating only
what changed since the last one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

from topogate.admission.lanes import QueueLanes
from topogate.admission.podsets import (
    Catalog,
    Translation,
    Translations,
    local_queue_key,
    translate,
)
from topogate.admission.quota import Usage, checked_admission, usage_of
from topogate.api.errors import InputError
from topogate.api.objects import meta, only_waiting_words_changed
from topogate.kube.resources import WORKLOADS, Obj

from .catalogs import Catalogs
from .ledger import Ledger
from .store import Store

log = logging.getLogger("topogate.state")


class WorkloadIndex:
    def __init__(self, store: Store, ledger: Ledger) -> None:
        self._workloads = store.objects(WORKLOADS)
        self._store = store
        self._ledger = ledger
        self._waiting: set[str] = set()
        self._running: set[str] = set()
        self._feeds: list[set[str]] = []
        # The quota each unfinished workload with an admission (written or being written)
        # holds, parsed once per change rather than once per cycle.
        self._quota: dict[str, Usage] = {}
        # The admission each quota above was parsed from: most changes to an admitted
        # Workload (our write coming back, its Finished condition, assume then confirm) leave
        # the admission equal, and parsing its quantities again was a visible share of serve's
        # CPU per admission. Compared by value (watch objects are replaced, never mutated).
        self._parsed: dict[str, Obj] = {}

    def waiting(self) -> frozenset[str]:
        """Unfinished workloads with no admission written or being written."""
        return frozenset(self._waiting)

    def is_waiting(self, key: str) -> bool:
        return key in self._waiting

    def running(self) -> frozenset[str]:
        """Unfinished workloads whose admission is written (stored, or written by us)."""
        return frozenset(self._running)

    def quota_of(self, key: str) -> Usage:
        """The quota the workload's admission holds ({} when it holds none)."""
        return self._quota.get(key, {})

    def quota_in_use(self) -> Usage:
        """Quota in use: every admitted (or being admitted), unfinished workload's admission
        whose capacity is held."""
        total: Usage = {}
        for key in self._ledger.held():
            for slot, amounts in self._quota.get(key, {}).items():
                into = total.setdefault(slot, {})
                for resource, amount in amounts.items():
                    into[resource] = into.get(resource, 0) + amount
        return total

    def changes(self) -> set[str]:
        """A feed for one reader: the set fills with the key of every workload that changed or
        started or stopped waiting (the reader empties it as it takes them)."""
        feed = set(self._waiting)
        self._feeds.append(feed)
        return feed

    def classify(self, key: str) -> None:
        """Put a workload in the waiting or running set (or neither) after any change to it
        or to its admission, and tell the feeds."""
        stored = self._workloads.get(key)
        live = stored is not None and not self._store.workload_finished(key, stored)
        running = live and self._ledger.is_written(key)
        waiting = live and not running and not self._ledger.is_assumed(key)
        reserved = self._ledger.reserved_in_place(key) if live else None
        if reserved is None or self._parsed.get(key) != reserved:
            self._quota.pop(key, None)
            self._parsed.pop(key, None)
        if reserved is not None and key not in self._parsed:
            reserved = dict(reserved)  # kept: a copy, as the ledger hands out
            try:
                self._quota[key] = usage_of([checked_admission(reserved)])
                self._parsed[key] = reserved
            except InputError as error:  # counted as no quota; the sets below still move
                log.warning("Workload %s: quota in use not counted: %s", key, error.describe())
        for members, belongs in ((self._running, running), (self._waiting, waiting)):
            if belongs:
                members.add(key)
            else:
                members.discard(key)
        for feed in self._feeds:
            feed.add(key)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A waiting workload as the cycle sees it, translated once per resourceVersion; a
    catalog change that can touch its translation (:class:`CatalogChange`) drops it."""

    version: str
    translation: Translation
    source: Obj  # the version translated: a later one that only says why it waits reuses it
    local_queue: str | None  # the LocalQueue it names ("namespace/name"), if any
    cluster_queue: str | None  # the ClusterQueue that LocalQueue named then, if any


class PendingQueue:
    def __init__(self, store: Store, workloads: WorkloadIndex, catalogs: Catalogs) -> None:
        self._workloads = store.objects(WORKLOADS)
        self._index = workloads
        self._catalogs = catalogs
        self._changes = workloads.changes()
        self._candidates: dict[str, Candidate] = {}
        # The candidates per LocalQueue and per ClusterQueue they name: a catalog change
        # translates again only the Workloads of the queues it touched.
        self._by_local: dict[str, set[str]] = {}
        self._by_cluster: dict[str, set[str]] = {}
        # PodSets translated before: the Workloads of one template are translated once.
        self._translations = Translations()
        self._lanes = QueueLanes()
        self._problems: dict[str, str] = {}
        self._catalog: Catalog | None = None  # the one the candidates were translated against
        self.version = 0  # bumped when a lane or a problem changed (a cycle's input)

    @property
    def lanes(self) -> QueueLanes:
        """The waiting workloads that can be considered, in their queues' order."""
        return self._lanes

    @property
    def problems(self) -> Mapping[str, str]:
        """The waiting workloads that cannot be considered, with the reason."""
        return self._problems

    def holds(self, key: str) -> bool:
        """The workload is in the queue (in a lane, or with a problem)."""
        return self._lanes.get(key) is not None or key in self._problems

    def sync(self) -> list[str]:
        """Bring the queue up to the state: translate what changed since the last sync (and,
        after the catalog changed, the workloads whose translation that can change). Returns
        the keys that stopped waiting."""
        catalog = self._catalogs.catalog()
        if catalog is not self._catalog:
            self._rebase(catalog)
        changed = set(self._changes)
        self._changes.clear()  # in place: the index fills this very set
        left = []
        for key in changed:
            workload = self._workloads.get(key)
            if workload is None or not self._index.is_waiting(key):
                self._forget(key)
                self._drop(key)
                left.append(key)
                continue
            version = str(meta(workload).get("resourceVersion"))
            cached = self._candidates.get(key)
            if cached is None or cached.version != version:
                if cached is not None and only_waiting_words_changed(cached.source, workload):
                    cached = replace(cached, version=version, source=workload)
                else:
                    translation = self._translations.find(workload, key, catalog)
                    if translation is None:
                        translation = translate(workload, key, catalog)
                        self._translations.keep(workload, catalog, translation)
                    self._forget(key)
                    local = local_queue_key(workload)
                    cluster = catalog.local_queues.get(local) if local else None
                    cached = Candidate(version, translation, workload, local, cluster)
                    self._index_candidate(key, cached)
                self._candidates[key] = cached
            self._place(key, cached.translation)
        return left

    def _rebase(self, catalog: Catalog) -> None:
        """Drop the candidates whose translation the new catalog can change, and queue them."""
        change = self._catalogs.change_since(self._catalog)
        self._catalog = catalog
        self._translations.rebase(catalog, change)
        if change.everything:
            touched = set(self._candidates)
        else:
            # A candidate's LocalQueue names the same ClusterQueue as when it was translated
            # unless the LocalQueue changed since, and then it was dropped.
            touched = set()
            for index, queues in (
                (self._by_local, change.local_queues),
                (self._by_cluster, change.cluster_queues),
            ):
                for queue in queues:
                    touched |= index.get(queue) or set()
        for key in touched:
            self._forget(key)
        self._changes |= touched

    def _index_candidate(self, key: str, cached: Candidate) -> None:
        for index, queue in (
            (self._by_local, cached.local_queue),
            (self._by_cluster, cached.cluster_queue),
        ):
            if queue is not None:
                index.setdefault(queue, set()).add(key)

    def _forget(self, key: str) -> None:
        cached = self._candidates.pop(key, None)
        if cached is None:
            return
        for index, queue in (
            (self._by_local, cached.local_queue),
            (self._by_cluster, cached.cluster_queue),
        ):
            keys = index.get(queue) if queue is not None else None
            if keys is not None and queue is not None:
                keys.discard(key)
                if not keys:
                    del index[queue]

    def _drop(self, key: str) -> None:
        if self._lanes.get(key) is not None or key in self._problems:
            self._lanes.discard(key)
            self._problems.pop(key, None)
            self.version += 1

    def _place(self, key: str, translation: Translation) -> None:
        """Put the workload in its lane, or with its problem; counted only when that changed
        (a new version that translates the same changes no cycle's input)."""
        if translation.pending is None:
            if self._problems.get(key) != translation.problem:
                self._lanes.discard(key)
                self._problems[key] = translation.problem
                self.version += 1
        elif self._lanes.get(key) != translation.pending or key in self._problems:
            self._problems.pop(key, None)
            self._lanes.put(translation.pending)
            self.version += 1
