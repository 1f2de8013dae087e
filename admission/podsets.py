"""From a Workload to the core's request: the one translator used by ``plan``, the admitter
and the validating webhook.

- :func:`wanted_topology` reads which topology a workload names (KAI's or topogate's key) and
  whether it speaks Volcano's tier words;
- :func:`topology_name` decides the topology it is placed on (named, else its flavor's, else
  the HyperNode forest for tier words), and :func:`queue_topology` asks it for a workload on a
  ClusterQueue: the one recipe the admitter, ``plan`` and the validating webhook share;
- :func:`podset_request` turns a PodSet into a :class:`PodSetRequest`, checking every level
  name against that topology (Kueue's, KAI's and Volcano's words);
- :func:`translate` does all of it for a watched Workload on a ClusterQueue, as the admitter
  needs it, against a :class:`Catalog` of the cluster's queues, flavors and topologies; given
  the job the Workload came from, its errors name the job's own fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import is_
from typing import Any, TypeVar

from topogate.api import constants as c
from topogate.api.annotations import AnnotationError
from topogate.api.errors import InputError
from topogate.api.gpus import min_bandwidth
from topogate.api.jobs import WorkloadSource, workload_from_object
from topogate.api.kinds import job_kind_for
from topogate.api.models import (
    ClusterQueue,
    Cohort,
    PodSet,
    PodSetTopologyRequest,
    ResourceFlavor,
    Topology,
    Workload,
)
from topogate.api.objects import as_mapping, meta
from topogate.api.podspec import Toleration, node_constraints, parse_tolerations, pod_requests
from topogate.api.validation import join, object_name, parse_model
from topogate.api.vocabularies import (
    BALANCED_PLACEMENT,
    KAI_PREFERRED,
    KAI_REQUIRED,
    NETWORK_TOPOLOGY,
    REPLICA_REQUIRED_TOPOLOGY,
    VOLCANO_SOFT,
    VocabularyRequest,
    vocabulary_request,
)
from topogate.cache.hypernodes import HyperNodeForest
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.sources import (
    HYPERNODE_TOPOLOGY,
    TopologySource,
    merge_kai_topologies,
    topology_sources,
)

from .cycle import FlavorTopology, SnapshotPlacer
from .exact import ExactBudget
from .lanes import PendingWorkload
from .quota import CohortSpec, QueueSpec
from .request import Mode, PlacementRequest, PodSetRequest, SliceLayer

_M = TypeVar("_M", ClusterQueue, Cohort, ResourceFlavor, Topology)

# Where a queue has no topology flavor: capacity only, per node (named so it is recognised).
NO_TOPOLOGY = TopologySource("none", "labels", (c.HOSTNAME_LABEL,), (0,))


def annotation_field(template: Mapping[str, Any], path: str, name: str) -> str:
    """The field path of a topology annotation as the user wrote it (``kueue.x-k8s.io/`` or
    ``topogate.dev/``; Kueue's key when neither is present), for messages."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    if name == c.REQUIRED_TOPOLOGY and c.REQUIRED_TOPOLOGY_FROM in annotations:
        return str(annotations[c.REQUIRED_TOPOLOGY_FROM])  # a native PodGroup's key
    for prefix in c.ANNOTATION_PREFIXES:
        if prefix + name in annotations:
            return f"{join(path, 'metadata.annotations')}[{prefix + name}]"
    return f"{join(path, 'metadata.annotations')}[{c.KUEUE_GROUP}/{name}]"


def _vocabulary(podset: PodSet, path: str, where: str) -> VocabularyRequest | None:
    annotations = (podset.template.get("metadata") or {}).get("annotations") or {}
    try:
        return vocabulary_request(
            {str(k): str(v) for k, v in annotations.items()}, join(path, "metadata.annotations")
        )
    except AnnotationError as exc:
        raise InputError("; ".join(exc.problems), where=where) from None


# --- which topology ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WantedTopology:
    """What a workload itself says about its topology."""

    named: str | None  # a topology it names, for all its PodSets
    volcano: bool  # it speaks Volcano's tier words (which default to the HyperNode forest)


def wanted_topology(podsets: Sequence[PodSet], paths: Sequence[str], where: str) -> WantedTopology:
    """Every PodSet that names a topology must name the same: a gang is placed on one."""
    named: dict[str, str] = {}
    volcano = False
    for podset, path in zip(podsets, paths, strict=True):
        vocabulary = _vocabulary(podset, path, where)
        if vocabulary is None:
            continue
        volcano = volcano or vocabulary.volcano is not None
        if vocabulary.topology:
            named.setdefault(vocabulary.topology, path)
    if len(named) > 1:
        listed = ", ".join(f"{name!r} at {path}" for name, path in named.items())
        raise InputError(f"pod sets name different topologies ({listed})", where=where)
    return WantedTopology(next(iter(named), None), volcano)


def topology_name(
    sources: Mapping[str, TopologySource], wanted: WantedTopology, flavor_topology: str | None
) -> str | None:
    """The decision: the topology the workload names, else its flavor's, else the HyperNode
    forest for Volcano's tier words (when there is one), else None."""
    if wanted.named is not None:
        return wanted.named
    if flavor_topology:
        return flavor_topology
    if wanted.volcano and HYPERNODE_TOPOLOGY in sources:
        return HYPERNODE_TOPOLOGY
    return None


# --- one PodSet ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Levels:
    """Level names checked against one topology, with errors naming the annotation."""

    source: TopologySource
    podset: PodSet
    path: str
    where: str

    def resolve(self, value: str, field: str) -> int:
        index = self.source.level_index(value)
        if index is None:
            raise InputError(
                f"{value!r} is not a level of topology {self.source.name!r} "
                f"(levels: {self.source.describe_levels()})",
                where=self.where,
                field=field,
            )
        return index

    def key(self, value: str, annotation: str) -> str:
        """The level key for a Kueue annotation's value."""
        field = annotation_field(self.podset.template, self.path, annotation)
        return self.source.level_keys[self.resolve(value, field)]


def _kueue_request(
    request: PodSetTopologyRequest, levels: _Levels
) -> tuple[Mode, str | None, tuple[SliceLayer, ...]]:
    """(mode, level, slice layers) from Kueue's annotations, slice layers checked in order."""
    mode, level = Mode.UNCONSTRAINED, None
    if request.required:
        mode, level = Mode.REQUIRED, levels.key(request.required, c.REQUIRED_TOPOLOGY)
    elif request.preferred:
        mode, level = Mode.PREFERRED, levels.key(request.preferred, c.PREFERRED_TOPOLOGY)
    slices: tuple[SliceLayer, ...] = ()
    name = c.SLICE_REQUIRED_TOPOLOGY
    if request.podset_slice_required_topology_constraints:
        name = c.SLICE_CONSTRAINTS
        slices = tuple(
            SliceLayer(levels.key(layer.topology, name), layer.size)
            for layer in request.podset_slice_required_topology_constraints
        )
    elif request.pod_set_slice_required_topology and request.pod_set_slice_size:
        slices = (
            SliceLayer(
                levels.key(request.pod_set_slice_required_topology, name),
                request.pod_set_slice_size,
            ),
        )
    order = levels.source.level_keys
    previous = order.index(level) if level else 0
    for i, layer in enumerate(slices):
        index = order.index(layer.level)
        if index < previous or (i > 0 and index == previous):
            raise InputError(
                f"slice level {layer.level!r} must be below "
                f"{'the podset level ' + repr(level) if i == 0 else 'the previous layer'}",
                where=levels.where,
                field=annotation_field(levels.podset.template, levels.path, name),
            )
        previous = index
    return mode, level, slices


def podset_request(podset: PodSet, path: str, source: TopologySource, where: str) -> PodSetRequest:
    """The core's request for one PodSet; level names are checked against ``source``.

    Kueue's annotations name levels; KAI's name levels too (required + preferred: start at the
    preferred level, climb no higher than the required one); Volcano's name tiers (hard: start
    at tier 1, climb no higher than highestTierAllowed; soft: start at tier 1, no limit).
    """
    spec = podset.template.get("spec") or {}
    request = podset.topology_request
    levels = _Levels(source, podset, path, where)
    mode, level, limit = Mode.UNCONSTRAINED, None, None
    slices: tuple[SliceLayer, ...] = ()
    if request is not None:
        mode, level, slices = _kueue_request(request, levels)
    vocabulary = _vocabulary(podset, path, where)
    exclusive = False
    if vocabulary is not None:
        mode, level, limit, replica_slices = _vocabulary_request(vocabulary, levels, mode, level)
        if replica_slices is not None:
            slices, exclusive = replica_slices, True
    return PodSetRequest(
        name=podset.name,
        count=podset.count,
        requests=pod_requests(spec, where, join(path, "spec")),
        mode=mode,
        level=level,
        slices=slices,
        constraints=node_constraints(spec, where, join(path, "spec")),
        group=request.pod_set_group_name if request else None,
        limit=limit,
        exclusive_slices=exclusive,
        balanced=vocabulary is not None and vocabulary.balanced,
        gpu_min_bandwidth=min_bandwidth(podset.template, path, where),
        min_count=podset.min_count if podset.min_count is not None and podset.count else None,
    )


def _vocabulary_request(
    vocabulary: VocabularyRequest, levels: _Levels, mode: Mode, level: str | None
) -> tuple[Mode, str | None, str | None, tuple[SliceLayer, ...] | None]:
    """(mode, level, limit, exclusive replica slices or None) for KAI's and Volcano's words."""
    podset, where = levels.podset, levels.where
    annotations_path = join(levels.path, "metadata.annotations")
    keys = levels.source.level_keys
    try:
        mode, level, limit = _vocabulary_levels(
            vocabulary, levels.source, mode, level, levels.resolve, annotations_path
        )
    except InputError as error:
        raise InputError(error.message, where=where, field=error.field) from None
    replica_slices = None
    if vocabulary.replica_level is not None:
        field = f"{annotations_path}[{REPLICA_REQUIRED_TOPOLOGY}]"
        replica_level = keys[levels.resolve(vocabulary.replica_level, field)]
        request = podset.topology_request
        replicas = (request.sub_group_count if request else None) or 1
        if level is not None and keys.index(replica_level) < keys.index(level):
            raise InputError(
                f"replica level {replica_level!r} must not be above the pod set's level {level!r}",
                where=where,
                field=field,
            )
        replica_slices = (SliceLayer(replica_level, podset.count // replicas),)
    if vocabulary.balanced and mode is not Mode.PREFERRED:
        raise InputError(
            "balanced placement applies to preferred requests only (Kueue's "
            "podset-preferred-topology, KAI's preferred placement or Volcano's tiers)",
            where=where,
            field=f"{annotations_path}[{BALANCED_PLACEMENT}]",
        )
    return mode, level, limit, replica_slices


def _vocabulary_levels(
    vocabulary: VocabularyRequest,
    source: TopologySource,
    mode: Mode,
    level: str | None,
    resolve: Callable[[str, str], int],
    annotations_path: str,
) -> tuple[Mode, str | None, str | None]:
    """(mode, level, limit) for a KAI or Volcano request; Kueue's stay as they are."""
    levels = source.level_keys
    if vocabulary.kai_required or vocabulary.kai_preferred:
        required = preferred = None
        if vocabulary.kai_required:
            required = resolve(vocabulary.kai_required, f"{annotations_path}[{KAI_REQUIRED}]")
        if vocabulary.kai_preferred:
            preferred = resolve(vocabulary.kai_preferred, f"{annotations_path}[{KAI_PREFERRED}]")
        if preferred is None:
            return Mode.REQUIRED, levels[required or 0], None
        if required is None:
            return Mode.PREFERRED, levels[preferred], None
        if preferred < required:
            raise InputError(
                f"the preferred level {levels[preferred]!r} is above the required level "
                f"{levels[required]!r}",
                field=f"{annotations_path}[{KAI_PREFERRED}]",
            )
        if preferred == required:
            return Mode.REQUIRED, levels[required], None
        return Mode.PREFERRED, levels[preferred], levels[required]
    volcano = vocabulary.volcano
    if volcano is None:
        return mode, level, None
    field = f"{annotations_path}[{NETWORK_TOPOLOGY}]"
    start = source.lowest_tier_level()  # Volcano searches tier 1 first
    if volcano.mode == VOLCANO_SOFT:
        return Mode.PREFERRED, levels[start], None
    if volcano.highest_tier_name is not None:
        highest = source.level_index(volcano.highest_tier_name)
        if highest is None:
            # Volcano logs a warning and runs the job unconstrained; we refuse.
            raise InputError(
                f"highestTierName {volcano.highest_tier_name!r} names no tier of topology "
                f"{source.name!r} (levels: {source.describe_levels()})",
                field=field,
            )
    else:
        tier = volcano.highest_tier if volcano.highest_tier is not None else 0
        found = source.level_for_tier(tier)
        if found is None:
            raise InputError(
                f"highestTierAllowed {tier}: topology {source.name!r} has no level at tier "
                f"{tier} or below (levels: {source.describe_levels()})",
                field=field,
            )
        highest = found
    if highest >= start:
        return Mode.REQUIRED, levels[highest], None
    return Mode.PREFERRED, levels[start], levels[highest]


def flavor_tolerations(flavor: ResourceFlavor) -> tuple[Toleration, ...]:
    raw = [t.to_wire() for t in flavor.spec.tolerations]
    return parse_tolerations(raw, f"ResourceFlavor {flavor.metadata.name}", "spec.tolerations")


# --- a watched Workload on its queue --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Catalog:
    """What translation needs to know of the cluster: queues, flavors and topologies, parsed.
    The controller's state keeps one up to date; the standalone webhook reads one per queue."""

    queues: Mapping[str, QueueSpec]
    local_queues: Mapping[str, str | None]  # "namespace/name" -> its ClusterQueue, if named
    flavors: Mapping[str, ResourceFlavor]
    sources: Mapping[str, TopologySource]
    cohorts: Mapping[str, CohortSpec] = field(default_factory=dict)  # Cohort objects

    def cluster_queue(self, namespace: str, local: str | None) -> tuple[str | None, str]:
        """(ClusterQueue, "") for a LocalQueue, or (None, why not)."""
        if not local:
            return None, "the workload names no queue (spec.queueName)"
        key = f"{namespace}/{local}"
        if key not in self.local_queues:
            return None, f"LocalQueue {key} doesn't exist"
        cq = self.local_queues[key]
        return (cq, "") if cq else (None, f"LocalQueue {key} names no queue")

    def flavor_topology(self, cluster_queue: str) -> str | None:
        """The topology of the queue's first flavor that has one (Kueue's TAS flavor)."""
        queue = self.queues.get(cluster_queue)
        for flavor in queue.flavors if queue is not None else ():
            model = self.flavors.get(flavor.flavor)
            if model is not None and model.spec.topology_name:
                return model.spec.topology_name
        return None


@dataclass(frozen=True, slots=True)
class QueueTopology:
    """Which topology a workload gets on a ClusterQueue."""

    wanted: WantedTopology
    flavor_topology: str | None  # the topology of the queue's first flavor that has one
    name: str | None  # the decision (:func:`topology_name`); None: no topology applies
    source: TopologySource | None  # that topology; None as well when the catalog lacks it


def queue_topology(origin: WorkloadSource, catalog: Catalog, cluster_queue: str) -> QueueTopology:
    """Which topology the workload wants on ``cluster_queue``: the one recipe the admitter
    (:func:`translate`), ``plan`` and the validating webhook follow. ``origin`` is the object
    its PodSets were written in (a Job, a JobSet, a Workload), so an error names that object
    and its own fields."""
    wanted = wanted_by(origin)
    flavor_topology = catalog.flavor_topology(cluster_queue)
    name = topology_name(catalog.sources, wanted, flavor_topology)
    source = catalog.sources.get(name) if name else None
    return QueueTopology(wanted, flavor_topology, name, source)


def wanted_by(origin: WorkloadSource) -> WantedTopology:
    """:func:`wanted_topology` of the PodSets ``origin`` holds, errors naming its fields."""
    return wanted_topology(*_written(origin), origin.where)


def podset_requests(origin: WorkloadSource, source: TopologySource) -> tuple[PodSetRequest, ...]:
    """:func:`podset_request` for every PodSet, errors naming ``origin``'s fields."""
    podsets, paths = _written(origin)
    return tuple(
        podset_request(p, path, source, origin.where)
        for p, path in zip(podsets, paths, strict=True)
    )


def _written(origin: WorkloadSource) -> tuple[Sequence[PodSet], list[str]]:
    """The PodSets and where each one's template is in the object they were written in."""
    podsets = origin.workload.spec.pod_sets
    return podsets, [origin.template_paths[p.name] for p in podsets]


@dataclass(frozen=True, slots=True)
class Translation:
    """A Workload as the admission cycle takes it, or why it cannot even be considered."""

    pending: PendingWorkload | None
    problem: str = ""
    # The error behind ``problem`` when the workload itself is wrong (unreadable, PodSets
    # naming different topologies, a level or request its topology cannot take), which plan
    # refuses as invalid input; None when it waits on the cluster (a queue or topology that
    # does not exist, a queue without a topology flavor).
    invalid: InputError | None = None


def translate(
    workload: Mapping[str, Any],
    key: str,
    catalog: Catalog,
    origin: WorkloadSource | None = None,
) -> Translation:
    """A watched Workload (``spec.queueName`` -> LocalQueue -> ClusterQueue) as the core's
    pending workload, read as ``plan`` reads it (Kueue's annotations fill a missing
    topologyRequest); problems (bad template, missing queue or topology) as text.

    ``origin``: the job the Workload was made from, read by ``workload_from_object``; errors
    in its PodSets then name the job's own fields. By default they name the Workload's."""
    m = meta(workload)
    spec = as_mapping(workload.get("spec"))
    cq, problem = catalog.cluster_queue(str(m.get("namespace") or "default"), spec.get("queueName"))
    if cq is None:
        return Translation(None, problem)
    if cq not in catalog.queues:
        return Translation(None, f"ClusterQueue {cq} doesn't exist")
    where = f"Workload {key}"
    try:
        written = origin or replace(workload_from_object(workload), where=where)
        chosen = queue_topology(written, catalog, cq)
    except InputError as error:
        return Translation(None, error.describe(), error)
    if chosen.name is not None and chosen.source is None:
        return Translation(None, f"{where}: topology {chosen.name!r} doesn't exist")
    topology = chosen.source or NO_TOPOLOGY
    try:
        requests = podset_requests(written, topology)
    except InputError as error:
        # Against no topology at all (the queue has none), the queue is at fault.
        return Translation(None, error.describe(), None if topology is NO_TOPOLOGY else error)
    if topology is NO_TOPOLOGY and any(
        r.mode is not Mode.UNCONSTRAINED or r.slices for r in requests
    ):
        return Translation(None, f"ClusterQueue {cq} has no flavor with a topology")
    # The request names a topology only when it is not the flavor's own (the placer then
    # builds that topology's tree over the flavor's nodes).
    named = chosen.name if chosen.wanted.named or not chosen.flavor_topology else None
    return _pending(workload, key, cq, requests, named)


def _pending(
    workload: Mapping[str, Any],
    key: str,
    cq: str,
    requests: tuple[PodSetRequest, ...],
    named: str | None,
) -> Translation:
    """The pending workload: its PodSets' requests with what is the Workload's own."""
    priority = as_mapping(workload.get("spec")).get("priority")
    return Translation(
        PendingWorkload(
            key=key,
            cluster_queue=cq,
            priority=priority
            if isinstance(priority, int) and not isinstance(priority, bool)
            else 0,
            created=str(meta(workload).get("creationTimestamp") or ""),
            request=PlacementRequest(key, requests, named),
        )
    )


# What :func:`translate` made of a Workload's PodSets on a ClusterQueue: the requests and the
# topology the request names.
_Made = tuple[tuple[PodSetRequest, ...], str | None]


class Translations:
    """The PodSets already translated against one catalog, for the next Workload with the same
    PodSets on a ClusterQueue with the same flavor topology (the Workloads of one job template,
    on any of a thousand queues): reading a template's annotations, quantities and node
    constraints cost ten times validating the Workload.

    :meth:`find` gives what :func:`translate` (no ``origin``) would: the Workload is still
    validated as a whole (its metadata and status are its own) and its key, queue, priority and
    creation time are its own; the requests follow from its PodSets, the queue's flavor
    topology (:meth:`Catalog.flavor_topology`: all :func:`translate` reads of the queue once it
    exists) and the catalog's topologies alone. Keyed by that topology and the PodSets'
    ``repr`` (JSON data: equal text, equal data). Only
    translations that succeeded are kept (:meth:`keep`), so every refusal is worded for its
    own Workload; another catalog empties it (:meth:`rebase`: what it changed)."""

    LIMIT = 2048  # (topology, PodSets) kept at most; past it, all are dropped and it refills
    # The PodSets' text kept at most, in characters (a translation is of its size): a count
    # alone would let 2,048 templates near etcd's 1.5 MB limit hold gigabytes.
    BYTES = 64 << 20
    # A larger template is translated each time (one such is rarely a job's many Workloads).
    LARGEST = 1 << 20

    def __init__(self) -> None:
        self._catalog: Catalog | None = None
        self._made: dict[tuple[str | None, str], _Made] = {}
        self._bytes = 0  # the kept PodSets' text, in characters
        self.hits = 0

    def __len__(self) -> int:
        return len(self._made)

    def find(self, workload: Mapping[str, Any], key: str, catalog: Catalog) -> Translation | None:
        """The Workload's translation from PodSets translated before, or None (translate it)."""
        shape = self._shape(workload, catalog)
        made = self._against(catalog).get(shape[1:]) if shape is not None else None
        if made is None or shape is None:
            return None
        try:  # as workload_from_object does first, naming the object the same way
            parse_model(Workload, workload, object_name(workload))
        except InputError as error:
            return Translation(None, error.describe(), error)
        self.hits += 1
        return _pending(workload, key, shape[0], *made)

    def keep(self, workload: Mapping[str, Any], catalog: Catalog, made: Translation) -> None:
        """Keep what :func:`translate` made of the Workload (without ``origin``) for the next."""
        pending = made.pending
        shape = self._shape(workload, catalog) if pending is not None else None
        if pending is None or shape is None or shape[0] != pending.cluster_queue:
            return
        size = len(shape[2])
        if size > self.LARGEST:
            return
        kept = self._against(catalog)
        if len(kept) >= self.LIMIT or self._bytes + size > self.BYTES:
            kept.clear()
            self._bytes = 0
        if shape[1:] not in kept:
            self._bytes += size
        kept[shape[1:]] = (pending.request.podsets, pending.request.topology)

    @property
    def kept_bytes(self) -> int:
        """The kept PodSets' text, in characters."""
        return self._bytes

    def rebase(self, catalog: Catalog, change: CatalogChange) -> None:
        """Go on with ``catalog``, ``change`` from the one translated against. What is kept
        holds while the topologies do; still, what was made on the flavor topologies of the
        ClusterQueues it touched (and of those a changed LocalQueue names), before or after,
        is dropped: a queue's change translates its Workloads afresh, as a first time would."""
        if change.everything or self._catalog is None:
            self._made = {}
            self._bytes = 0
            self._catalog = catalog
            return
        topologies: set[str | None] = set()
        for before in (self._catalog, catalog):
            queues = set(change.cluster_queues)
            queues.update(str(before.local_queues.get(k)) for k in change.local_queues)
            topologies.update(before.flavor_topology(q) for q in queues if q in before.queues)
        for shape in [s for s in self._made if s[0] in topologies]:
            self._bytes -= len(shape[1])
            del self._made[shape]
        self._catalog = catalog

    def _against(self, catalog: Catalog) -> dict[tuple[str | None, str], _Made]:
        if catalog is not self._catalog:
            self._catalog = catalog
            self._made = {}
            self._bytes = 0
        return self._made

    @staticmethod
    def _shape(workload: Mapping[str, Any], catalog: Catalog) -> tuple[str, str | None, str] | None:
        """(ClusterQueue, its flavor topology, the PodSets' text) of a Workload the model alone
        reads, whose queue is in the catalog; None otherwise (translated each time)."""
        kind, api_version = workload.get("kind"), workload.get("apiVersion")
        if kind != "Workload" or api_version != "topogate.dev/v1alpha1":
            return None
        if job_kind_for(api_version, kind) is not None:
            return None
        spec = as_mapping(workload.get("spec"))
        namespace = str(meta(workload).get("namespace") or "default")
        cq, _ = catalog.cluster_queue(namespace, spec.get("queueName"))
        if cq is None or cq not in catalog.queues:
            return None
        return cq, catalog.flavor_topology(cq), repr(spec.get("podSets"))


def build_catalog(
    cluster_queues: Sequence[Mapping[str, Any]],
    local_queues: Sequence[Mapping[str, Any]],
    flavors: Sequence[Mapping[str, Any]],
    topologies: Sequence[Mapping[str, Any]],
    forest: HyperNodeForest | None,
    kai_topologies: Sequence[Mapping[str, Any]] = (),
    cohorts: Sequence[Mapping[str, Any]] = (),
) -> tuple[Catalog, list[str]]:
    """The catalog from watched objects, and one warning per object that does not parse (it
    is left out: the webhook refuses such objects; one that predates it must not stop the rest)
    and per KAI Topology whose name a Topology with other levels holds (it is left out too)."""
    return CatalogBuilder().build(
        cluster_queues, local_queues, flavors, topologies, forest, kai_topologies, cohorts
    )


# A parsed object: the object, its model (None: it does not parse) and the warning then.
_Parsed = tuple[Mapping[str, Any], Any, str]


@dataclass(slots=True)
class _Part:
    """One kind's objects as a build took them: the models parsed (by name), what was made of
    them, the warnings of each step, and per object (by id: each is kept, so its id stays its
    own) its parse and per model what it made."""

    objects: Sequence[Mapping[str, Any]]
    models: dict[str, Any] = field(default_factory=dict)
    made: dict[str, Any] = field(default_factory=dict)
    parse_warnings: list[str] = field(default_factory=list)
    spec_warnings: list[str] = field(default_factory=list)
    parsed: dict[int, _Parsed] = field(default_factory=dict)
    specs: dict[int, _Parsed] = field(default_factory=dict)  # (model, spec, warning)

    @property
    def warnings(self) -> list[str]:
        return [*self.parse_warnings, *self.spec_warnings]


class CatalogBuilder:
    """:func:`build_catalog` that parses each object once while it stays the same object:
    `serve` builds a catalog after every queue object's change, and parsing all of them again
    each time cost seconds while a thousand ClusterQueues were created. A kind whose objects
    are all the same ones as last time is taken whole from the last build, or patched when
    objects were only appended; otherwise only the objects that are not the same as one of
    the last build's are parsed (watched objects are replaced on a change, never mutated).
    What is kept is what the last build read."""

    def __init__(self) -> None:
        self._parts: dict[str, _Part] = {}
        self._topologies: dict[str, Topology] | None = None
        self._forest: HyperNodeForest | None = None
        self._sources: dict[str, TopologySource] = {}

    def build(
        self,
        cluster_queues: Sequence[Mapping[str, Any]],
        local_queues: Sequence[Mapping[str, Any]],
        flavors: Sequence[Mapping[str, Any]],
        topologies: Sequence[Mapping[str, Any]],
        forest: HyperNodeForest | None,
        kai_topologies: Sequence[Mapping[str, Any]] = (),
        cohorts: Sequence[Mapping[str, Any]] = (),
    ) -> tuple[Catalog, list[str]]:
        """What :func:`build_catalog` returns, from the parts parsed before where they hold."""
        kai_tag = f" ({c.KAI_API_VERSION})"
        queues = self._part("ClusterQueue", ClusterQueue, cluster_queues, QueueSpec.from_model)
        tree = self._part("Cohort", Cohort, cohorts, CohortSpec.from_model)
        local = self._part("LocalQueue", None, local_queues)
        kai = self._part("KAI", Topology, kai_topologies, tag=kai_tag)
        own = self._part("Topology", Topology, topologies)
        flavor = self._part("ResourceFlavor", ResourceFlavor, flavors)
        warnings = [*queues.warnings, *tree.warnings, *kai.warnings, *own.warnings]
        merged, clashes = merge_kai_topologies(own.made, kai.made)
        warnings.extend(f"ignoring {clash.describe()}" for clash in clashes.values())
        warnings.extend(flavor.warnings)
        sources = self._sources_of(merged, forest)
        catalog = Catalog(queues.made, local.made, flavor.made, sources, tree.made)
        return catalog, warnings

    def _part(
        self,
        label: str,
        model: type[_M] | None,
        objs: Sequence[Mapping[str, Any]],
        make: Callable[[Any], Any] | None = None,
        tag: str = "",
    ) -> _Part:
        """The kind's part: the last one if its objects are the same; the last one patched
        if they are its objects and more after them (a watch appends what it adds); else made
        again from the last one's parses (``model`` None: LocalQueues, read without one)."""
        last = self._parts.get(label)
        kept = len(last.objects) if last is not None else 0
        if last is not None and kept <= len(objs) and all(map(is_, last.objects, objs)):
            if kept == len(objs):
                return last
            part = self._walk(model, objs, make, tag, last, objs[kept:], label)
        else:
            part = None
        if part is None:
            part = self._walk(model, objs, make, tag, None, objs, label)
            assert part is not None
        self._parts[label] = part
        return part

    def _walk(
        self,
        model: type[_M] | None,
        objs: Sequence[Mapping[str, Any]],
        make: Callable[[Any], Any] | None,
        tag: str,
        base: _Part | None,
        new: Sequence[Mapping[str, Any]],
        label: str,
    ) -> _Part | None:
        """``base`` (None: nothing) with the ``new`` objects after it, as a build from scratch
        makes it; None when one of them has a name ``base`` holds (the name keeps its place
        there, and its warnings would not: walked whole instead)."""
        last = self._parts.get(label)
        if model is None:
            made = dict(base.made) if base is not None else {}
            made.update(_local_queues(new))
            return _Part(objs, made=made)
        part = _Part(objs)
        if base is not None:
            part.models, part.made = dict(base.models), dict(base.made)
            part.parse_warnings = list(base.parse_warnings)
            part.spec_warnings = list(base.spec_warnings)
            part.parsed, part.specs = dict(base.parsed), dict(base.specs)
        old = last.parsed if last is not None else {}
        added: list[tuple[str, Any]] = []
        for obj in new:
            parsed = old.get(id(obj))
            if parsed is None or parsed[0] is not obj:
                parsed = _parse_one(model, obj, meta(obj).get("name"), tag)
            part.parsed[id(obj)] = parsed
            if parsed[1] is None:
                part.parse_warnings.append(parsed[2])
                continue
            name = parsed[1].metadata.name
            if base is not None and name in base.models:
                return None
            if name not in part.models:
                added.append((name, parsed[1]))
            part.models[name] = parsed[1]
        if make is None:
            part.made.update(part.models if base is None else {n: part.models[n] for n, _ in added})
            return part
        specs = last.specs if last is not None else {}
        for name, item in part.models.items() if base is None else added:
            item = part.models[name]  # the last object of a name is the one kept
            spec = specs.get(id(item))
            if spec is None or spec[0] is not item:
                try:  # a quota the cache cannot count (1e400, 10P of cpu): left out
                    spec = (item, make(item), "")
                except ValueError as error:
                    spec = (item, None, f"ignoring {label} {name}: {error}")
            part.specs[id(item)] = spec
            if spec[1] is None:
                part.spec_warnings.append(spec[2])
            else:
                part.made[name] = spec[1]
        return part

    def _sources_of(
        self, merged: dict[str, Topology], forest: HyperNodeForest | None
    ) -> dict[str, TopologySource]:
        """The sources of the last build while its topologies and forest are the same ones
        (their domain trees, kept per node-label filter, stay with them)."""
        last = self._topologies
        same = (
            last is not None
            and forest is self._forest
            and list(last) == list(merged)
            and all(last[name] is topology for name, topology in merged.items())
        )
        if not same:
            self._sources = topology_sources(merged, forest)
            self._topologies, self._forest = merged, forest
        return self._sources


def _local_queues(objs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each LocalQueue's "namespace/name" -> the ClusterQueue it names (None: none)."""
    out: dict[str, Any] = {}
    for obj in objs:
        m = meta(obj)
        target = as_mapping(obj.get("spec")).get("clusterQueue")
        out[f"{m.get('namespace') or 'default'}/{m.get('name')}"] = str(target) if target else None
    return out


def _parse_one(model: type[_M], obj: Mapping[str, Any], name: object, tag: str) -> _Parsed:
    try:
        return obj, parse_model(model, obj, f"{model.__name__} {name}{tag}"), ""
    except InputError as error:  # it names the object
        return obj, None, f"ignoring {error.describe()}"
    except ValueError as error:
        return obj, None, f"ignoring {model.__name__} {name}: {error}"


@dataclass(frozen=True, slots=True)
class CatalogChange:
    """What changed between two catalogs for :func:`translate`: a Workload's translation reads
    its LocalQueue's entry, its ClusterQueue's presence and flavor topology
    (:meth:`Catalog.flavor_topology`) and the topologies; nothing else of the catalog."""

    everything: bool  # the topologies changed (or there was no catalog before)
    local_queues: frozenset[str] = frozenset()  # "namespace/name": added, gone or retargeted
    cluster_queues: frozenset[str] = frozenset()  # added, gone, or another flavor topology


def catalog_change(old: Catalog | None, new: Catalog) -> CatalogChange:
    """What changed from ``old`` to ``new`` (:class:`CatalogChange`); exact, as it compares
    what translation reads."""
    if old is None or (old.sources is not new.sources and old.sources != new.sources):
        return CatalogChange(True)
    if old is new:
        return CatalogChange(False)
    missing = object()
    local: set[str] = set()
    if old.local_queues is not new.local_queues:  # a builder hands on a kind it did not change
        local = {k for k, v in new.local_queues.items() if old.local_queues.get(k, missing) != v}
        local.update(k for k in old.local_queues if k not in new.local_queues)
    if old.queues is new.queues and old.flavors is new.flavors:
        return CatalogChange(False, frozenset(local))

    def topology(catalog: Catalog, flavor: str) -> str | None:
        model = catalog.flavors.get(flavor)
        return (model.spec.topology_name or None) if model is not None else None

    flavors = {f for f in (*old.flavors, *new.flavors) if topology(old, f) != topology(new, f)}
    queues: set[str] = set()
    for name in {*old.queues, *new.queues}:
        before, after = old.queues.get(name), new.queues.get(name)
        if before is after and not (flavors and before is not None):
            continue  # the same spec over the same flavor topologies
        if (before is None) != (after is None) or (
            old.flavor_topology(name) != new.flavor_topology(name)
        ):
            queues.add(name)
    return CatalogChange(False, frozenset(local), frozenset(queues))


def local_queue_key(workload: Mapping[str, Any]) -> str | None:
    """The LocalQueue a Workload names, as :meth:`Catalog.cluster_queue` looks it up
    ("namespace/name"); None when it names none."""
    local = as_mapping(workload.get("spec")).get("queueName")
    if not local:
        return None
    return f"{meta(workload).get('namespace') or 'default'}/{local}"


def build_placer(
    snapshot: ClusterSnapshot,
    catalog: Catalog,
    named: Iterable[str] = (),
    exact: ExactBudget | None = None,
) -> SnapshotPlacer:
    """The placer for one cycle: a tree per flavor (its own topology) and per (flavor,
    topology a job names), over ``snapshot``."""
    own: dict[str, FlavorTopology] = {}
    by_name: dict[tuple[str, str], FlavorTopology] = {}
    sources = catalog.sources
    for name, flavor in catalog.flavors.items():
        tolerations = flavor_tolerations(flavor)
        labels = flavor.spec.node_labels
        source = sources.get(flavor.spec.topology_name or "")
        if source is not None:
            own[name] = FlavorTopology(source.tree(snapshot, labels), source.name, tolerations)
        for topology in named:
            wanted = sources.get(topology)
            if wanted is not None:
                tree = wanted.tree(snapshot, labels)
                by_name[(name, topology)] = FlavorTopology(tree, wanted.name, tolerations)
    return SnapshotPlacer(snapshot, own, by_name, exact)
