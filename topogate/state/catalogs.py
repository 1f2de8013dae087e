"""What is parsed from the watched queue objects and kept until one of them changes: the
catalog of queues, cohorts, flavors and topologies, the HyperNode forest, and the nodes per topology
domain. Also the validating webhook's view of them (``webhooks.review.ClusterView``), so a
review in `serve` makes no API call."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from topogate.admission.podsets import Catalog, CatalogBuilder, CatalogChange, catalog_change
from topogate.api.errors import InputError
from topogate.api.hypernodes import HyperNode, parse_hypernode
from topogate.api.kinds import Lookup
from topogate.api.objects import meta
from topogate.cache.hypernodes import HyperNodeForest, build_forest
from topogate.cache.nodes import NodeInfo
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    COHORTS,
    HYPERNODES,
    KAI_TOPOLOGIES,
    KUEUE_COHORTS,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    Obj,
)

from .store import Store

log = logging.getLogger("topogate.state")

# Objects the catalog is parsed from: any change to them parses it again.
CATALOG_INPUTS = frozenset(
    r.key
    for r in (
        CLUSTER_QUEUES,
        COHORTS,
        LOCAL_QUEUES,
        RESOURCE_FLAVORS,
        TOPOLOGIES,
        HYPERNODES,
        KAI_TOPOLOGIES,
        KUEUE_COHORTS,
    )
)


class Catalogs:
    def __init__(self, store: Store, nodes: Callable[[], list[NodeInfo]]) -> None:
        self._store = store
        self._nodes = nodes  # the capacity cache's nodes, read only
        self._forest: HyperNodeForest | None = None
        self._forest_stale = True
        self._hypernodes: dict[str, HyperNode] = {}  # parsed once per event
        self._catalog: Catalog | None = None
        # Each object parsed once while it stays the same: a build after one queue's change
        # parses that queue alone (at a thousand queues, parsing all was seconds of CPU).
        self._builder = CatalogBuilder()
        self.generation = 0  # bumped whenever the catalog may have changed
        # The LocalQueues ("namespace/name") and ClusterQueues whose objects changed since
        # the last build, and per build (the last few) those it took in: what
        # :meth:`change_since` widens the compared change with.
        self._touched: tuple[set[str], set[str]] = (set(), set())
        self._builds: list[tuple[Catalog, frozenset[str], frozenset[str]]] = []
        self._domains: dict[tuple[str, ...], dict[tuple[str, ...], list[str]]] = {}

    def forest(self) -> HyperNodeForest | None:
        """The HyperNode forest over the current nodes; rebuilt only after a HyperNode, or a
        node's name or labels, changed (not on every node status update)."""
        if self._forest_stale:
            self._forest_stale = False
            hypernodes = list(self._hypernodes.values())
            self._forest = build_forest(hypernodes, self._nodes()) if hypernodes else None
        return self._forest

    def catalog(self) -> Catalog:
        """Queues, flavors and topologies, built once per change (not once per cycle) from
        the objects as parsed once each."""
        forest = self.forest()
        if self._catalog is None:
            objects = self._store.objects
            self._catalog, warnings = self._builder.build(
                list(objects(CLUSTER_QUEUES).values()),
                list(objects(LOCAL_QUEUES).values()),
                list(objects(RESOURCE_FLAVORS).values()),
                list(objects(TOPOLOGIES).values()),
                forest,
                list(objects(KAI_TOPOLOGIES).values()),
                self.cohort_objects(),
            )
            for warning in warnings:
                log.warning("%s", warning)
            local, cluster = self._touched
            self._builds.append((self._catalog, frozenset(local), frozenset(cluster)))
            del self._builds[: -self.KEPT_BUILDS]
            local.clear()
            cluster.clear()
        return self._catalog

    KEPT_BUILDS = 16  # a reader further behind translates everything again

    def change_since(self, old: Catalog | None) -> CatalogChange:
        """What changed for translation from ``old`` (a catalog this gave) to the current one:
        what differs between the two (:func:`catalog_change`), and, to be safe, every
        LocalQueue and ClusterQueue whose object changed other than in its status between
        them; everything when ``old`` is too old to know."""
        new = self.catalog()
        change = catalog_change(old, new)
        if change.everything or old is new:
            return change
        # By identity: catalogs compare by value.
        at = next((i for i, (built, _, _) in enumerate(self._builds) if built is old), None)
        if at is None:
            return CatalogChange(True)
        local, cluster = set(change.local_queues), set(change.cluster_queues)
        for _, touched_local, touched_cluster in self._builds[at + 1 :]:
            local |= touched_local
            cluster |= touched_cluster
        return CatalogChange(False, frozenset(local), frozenset(cluster))

    def cohort_objects(self) -> list[Obj]:
        """topogate's Cohorts and Kueue's (v1beta2), one per name: topogate's wins a name both
        hold (the other is named in a warning whenever the catalog is parsed)."""
        objects = self._store.objects
        ours = objects(COHORTS)
        kueue = objects(KUEUE_COHORTS)
        for name in sorted(ours.keys() & kueue.keys()):
            log.warning(
                "ignoring Cohort %s of %s: a %s Cohort has its name",
                name,
                KUEUE_COHORTS.api_version,
                COHORTS.api_version,
            )
        return [*ours.values(), *(c for k, c in kueue.items() if k not in ours)]

    def catalog_for(self, namespace: str, queue: str) -> Catalog | None:
        """The webhook view's catalog: the whole catalog, whatever the namespace and queue
        (they are for the standalone webhook's view, which reads only that queue's objects)."""
        return self.catalog()

    def read_objects(self) -> Lookup:
        """The objects job kinds read (a TrainJob's runtime), as watched: the validating
        webhook's view of them in `serve` (``webhooks.review.ObjectView``)."""
        return self._store.lookup

    def hypernodes(self) -> list[Mapping[str, Any]] | None:
        """The webhook view's HyperNodes, as watched."""
        return list(self._store.objects(HYPERNODES).values())

    def nodes_in_domain(self, levels: Sequence[str], values: Sequence[str]) -> list[str]:
        """Names of the nodes whose labels match ``values`` on ``levels``, sorted; an index per
        level list, dropped when node labels change."""
        depth = tuple(levels[: len(values)])
        index = self._domains.get(depth)
        if index is None:
            index = {}
            for node in sorted(self._nodes(), key=lambda n: n.name):
                if all(level in node.labels for level in depth):  # unlabelled: in no domain
                    path = tuple(node.labels[level] for level in depth)
                    index.setdefault(path, []).append(node.name)
            self._domains[depth] = index
        return index.get(tuple(values[: len(depth)]), [])

    # --- what the watch handlers tell --------------------------------------------------------

    def inputs_changed(self, resource: str = "", obj: Obj | None = None) -> None:
        """A catalog input (:data:`CATALOG_INPUTS`) changed: parse the catalog again.
        ``resource`` and ``obj`` (either version of the object): which one changed."""
        self._catalog = None
        self.generation += 1
        if obj is not None and resource in (LOCAL_QUEUES.key, CLUSTER_QUEUES.key):
            m = meta(obj)
            if resource == LOCAL_QUEUES.key:
                self._touched[0].add(f"{m.get('namespace') or 'default'}/{m.get('name')}")
            else:
                self._touched[1].add(str(m.get("name")))

    def hypernode_changed(self, old: Obj | None, new: Obj | None) -> None:
        # A HyperNode that does not parse is left out (the webhook refuses such objects; one
        # that predates it must not stall every other topology job, as it would in Volcano).
        if old is not None:
            self._hypernodes.pop(str(meta(old).get("name")), None)
        if new is not None:
            try:
                parsed = parse_hypernode(new)
                self._hypernodes[parsed.name] = parsed
            except InputError as error:
                log.warning("ignoring %s", error.describe())
        self._forest_stale = True

    def node_labels_changed(self) -> None:
        """A node came, went or was relabelled: domains and the forest are worked out again."""
        self._forest_stale = True
        self._domains.clear()
        if self._hypernodes:
            self.inputs_changed()  # HyperNode tiers follow node labels
