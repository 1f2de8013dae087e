"""The admitter's shell: runs an admission cycle when something changed and writes the outcome.

A cycle reads the controller's state (queues, flavors, topologies, pending and admitted
workloads, the capacity cache), calls the pure :func:`admission_cycle` and then writes, per
workload: ``status.admission`` with the topology assignment and the conditions QuotaReserved
and Admitted, or QuotaReserved=False/Pending with the reason. The job is unsuspended only
after its admission is written (by the job sync, which the written status wakes).

Cycles run when the world changed (a workload arrived or finished, a node or queue changed, a
pod left its node), never on a timer: nothing that cannot change the outcome triggers one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.gpus import ASSIGNMENT_ANNOTATION, Assignment, assignment_text
from topogate.api.jobs import workload_from_object
from topogate.api.models import (
    Admission,
    ClusterQueue,
    Condition,
    ResourceFlavor,
    Topology,
)
from topogate.api.podspec import pod_requests
from topogate.api.quantity import to_units
from topogate.api.times import now, parse_time
from topogate.api.validation import parse_model
from topogate.cache.nodes import PODS as POD_SLOT
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.sources import HYPERNODE_TOPOLOGY, TopologySource, topology_sources
from topogate.events import EventRecorder
from topogate.kubeapi import (
    CLUSTER_QUEUES,
    HYPERNODES,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
    Kube,
    KubeError,
    Obj,
    key_of,
)
from topogate.metrics import Metrics
from topogate.planner import (
    flavor_tolerations,
    podset_request,
    requested_topology,
    uses_volcano_tiers,
)
from topogate.world import (
    World,
    condition,
    gpu_assignment_of,
    is_admitted,
    is_finished,
    meta,
    owner_job,
)

from .assignments import node_usage, pod_set_assignments
from .gpuplace import assignment_of
from .queues import (
    Admitted,
    FlavorTopology,
    PendingWorkload,
    QueueSpec,
    SnapshotPlacer,
    Usage,
    admission_cycle,
)
from .request import Mode, PlacementRequest

log = logging.getLogger("topogate.admitter")

# Where a queue has no topology flavor: capacity only, per node (named so it is recognised).
NO_TOPOLOGY = TopologySource("none", "labels", (c.HOSTNAME_LABEL,), (0,))

PENDING = "Pending"


def _cond(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return Condition(
        type=kind,
        status="True" if status == "True" else "False",
        reason=reason,
        message=message,
        last_transition_time=now(),
    ).to_wire()


@dataclass(frozen=True, slots=True)
class Candidate:
    """A pending workload as the cycle sees it, parsed once per resourceVersion."""

    version: str
    pending: PendingWorkload | None
    problem: str  # why it cannot even be considered (bad template, missing queue), or ""


class Admitter:
    def __init__(
        self,
        kube: Kube,
        world: World,
        metrics: Metrics,
        events: EventRecorder,
        write_concurrency: int = 16,
    ) -> None:
        self.kube = kube
        self.world = world
        self.metrics = metrics
        self.events = events
        self._writes = asyncio.Semaphore(write_concurrency)
        self._candidates: dict[str, Candidate] = {}
        # Admissions this process wrote, until the watch shows them (the ungater and the job
        # sync read these so they never wait on the watch).
        self.written: dict[str, Obj] = {}
        self.cycles = 0
        world.hold_usage = self.hold_from_status
        world.listeners.setdefault(WORKLOADS.plural, []).append(self._forget_written)
        # A parsed candidate depends on queues, flavors and topologies, not only on its own
        # version: any change to those parses every waiting workload again.
        for resource in (CLUSTER_QUEUES, LOCAL_QUEUES, RESOURCE_FLAVORS, TOPOLOGIES, HYPERNODES):
            world.listeners.setdefault(resource.plural, []).append(self._forget_candidates)
        self._forest: object = None  # the forest the cached candidates were parsed against

    def _forget_candidates(self, old: Obj | None, new: Obj | None) -> None:
        self._candidates.clear()

    def _forget_written(self, old: Obj | None, new: Obj | None) -> None:
        """Our admission is visible in the store now (or the workload is gone)."""
        if new is None and old is not None:
            self.written.pop(key_of(old), None)
            self._candidates.pop(key_of(old), None)
        elif new is not None and (is_admitted(new) or is_finished(new)):
            self.written.pop(key_of(new), None)

    # --- reading the world ---------------------------------------------------------------

    def admission_of(self, key: str) -> Obj | None:
        workload = self.world.store(WORKLOADS).get(key)
        if workload is not None and is_admitted(workload):
            return dict(workload["status"]["admission"])
        return self.written.get(key)

    def _models(
        self,
    ) -> tuple[dict[str, QueueSpec], dict[str, ResourceFlavor], dict[str, TopologySource]]:
        queues: dict[str, QueueSpec] = {}
        for obj in self.world.store(CLUSTER_QUEUES).values():
            try:
                queue = parse_model(ClusterQueue, obj, f"ClusterQueue {meta(obj).get('name')}")
                queues[queue.metadata.name] = QueueSpec.from_model(queue)
            except (InputError, ValueError) as error:
                log.warning("ignoring ClusterQueue %s: %s", meta(obj).get("name"), error)
        flavors: dict[str, ResourceFlavor] = {}
        for obj in self.world.store(RESOURCE_FLAVORS).values():
            try:
                flavor = parse_model(ResourceFlavor, obj, f"ResourceFlavor {meta(obj).get('name')}")
                flavors[flavor.metadata.name] = flavor
            except InputError as error:
                log.warning("ignoring %s", error.describe())
        topologies: dict[str, Topology] = {}
        for obj in self.world.store(TOPOLOGIES).values():
            try:
                topology = parse_model(Topology, obj, f"Topology {meta(obj).get('name')}")
                topologies[topology.metadata.name] = topology
            except InputError as error:
                log.warning("ignoring %s", error.describe())
        forest = self.world.forest()
        if forest is not self._forest:  # node labels changed the HyperNode tiers
            self._forest = forest
            self._candidates.clear()
        return queues, flavors, topology_sources(topologies, forest)

    def _cluster_queue(self, workload: Obj) -> tuple[str | None, str]:
        m = meta(workload)
        local = (workload.get("spec") or {}).get("queueName")
        if not local:
            return None, "the workload names no queue (spec.queueName)"
        namespace = m.get("namespace") or "default"
        lq = self.world.store(LOCAL_QUEUES).get(f"{namespace}/{local}")
        if lq is None:
            return None, f"LocalQueue {namespace}/{local} doesn't exist"
        cq = (lq.get("spec") or {}).get("clusterQueue")
        return (str(cq), "") if cq else (None, f"LocalQueue {namespace}/{local} names no queue")

    def _candidate(
        self,
        workload: Obj,
        queues: Mapping[str, QueueSpec],
        flavors: Mapping[str, ResourceFlavor],
        sources: Mapping[str, TopologySource],
    ) -> Candidate:
        key = key_of(workload)
        cq, problem = self._cluster_queue(workload)
        version = f"{meta(workload).get('resourceVersion')}/{cq}"
        cached = self._candidates.get(key)
        if cached is not None and cached.version == version:
            return cached
        if cq is None:
            candidate = Candidate(version, None, problem)
        else:
            candidate = self._parse_candidate(key, version, cq, workload, queues, flavors, sources)
        self._candidates[key] = candidate
        return candidate

    def _parse_candidate(
        self,
        key: str,
        version: str,
        cq: str,
        workload: Obj,
        queues: Mapping[str, QueueSpec],
        flavors: Mapping[str, ResourceFlavor],
        sources: Mapping[str, TopologySource],
    ) -> Candidate:
        queue = queues.get(cq)
        if queue is None:
            return Candidate(version, None, f"ClusterQueue {cq} doesn't exist")
        where = f"Workload {key}"
        try:
            # As `plan` reads it: Kueue's annotations fill a missing topologyRequest.
            source = workload_from_object(workload)
            podsets = source.workload.spec.pod_sets
            paths = [source.template_paths[p.name] for p in podsets]
            named = requested_topology(podsets, paths, where)
            flavor_topology = None
            for flavor in queue.flavors:
                model = flavors.get(flavor.flavor)
                if model is not None and model.spec.topology_name:
                    flavor_topology = model.spec.topology_name
                    break
            if (
                named is None
                and flavor_topology is None
                and uses_volcano_tiers(podsets, paths, where)
            ):
                named = HYPERNODE_TOPOLOGY if HYPERNODE_TOPOLOGY in sources else None
            wanted = named or flavor_topology
            topology = sources.get(wanted) if wanted else NO_TOPOLOGY
            if topology is None:
                return Candidate(version, None, f"{where}: topology {wanted!r} doesn't exist")
            requests = tuple(
                podset_request(p, path, topology, where)
                for p, path in zip(podsets, paths, strict=True)
            )
        except InputError as error:
            return Candidate(version, None, error.describe())
        if topology is NO_TOPOLOGY and any(
            r.mode is not Mode.UNCONSTRAINED or r.slices for r in requests
        ):
            return Candidate(version, None, f"ClusterQueue {cq} has no flavor with a topology")
        pending = PendingWorkload(
            key=key,
            cluster_queue=cq,
            priority=int((workload.get("spec") or {}).get("priority") or 0),
            created=str(meta(workload).get("creationTimestamp") or ""),
            request=PlacementRequest(key, requests, named),
        )
        return Candidate(version, pending, "")

    def _usage(self) -> Usage:
        """Quota in use, from every admitted, unfinished workload's status (or our writes)."""
        usage: Usage = {}
        for key, workload in self.world.store(WORKLOADS).items():
            if is_finished(workload):
                continue
            admission = self.admission_of(key)
            if not admission:
                continue
            cq = str(admission.get("clusterQueue") or "")
            for assignment in admission.get("podSetAssignments") or []:
                flavors = assignment.get("flavors") or {}
                for resource, amount in (assignment.get("resourceUsage") or {}).items():
                    slot = usage.setdefault((cq, str(flavors.get(resource, ""))), {})
                    slot[resource] = slot.get(resource, 0) + to_units(resource, str(amount))
        return usage

    def _flavor_topologies(
        self,
        snapshot: ClusterSnapshot,
        flavors: Mapping[str, ResourceFlavor],
        sources: Mapping[str, TopologySource],
        named: set[str],
    ) -> SnapshotPlacer:
        """Trees per flavor (its own topology) and per (flavor, topology a job names)."""
        own: dict[str, FlavorTopology] = {}
        by_name: dict[tuple[str, str], FlavorTopology] = {}
        for name, flavor in flavors.items():
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
        return SnapshotPlacer(snapshot, own, by_name)

    # --- holding usage -------------------------------------------------------------------

    def hold_from_status(self, workload: Obj) -> None:
        """Hold an admitted workload's usage from its status (after a restart)."""
        key = key_of(workload)
        admission = (workload.get("status") or {}).get("admission") or {}
        templates = {
            p.get("name"): p.get("template") or {}
            for p in (workload.get("spec") or {}).get("podSets") or []
        }
        snapshot = self.world.capacity.snapshot()
        per_node: dict[str, dict[str, int]] = {}
        for assignment in admission.get("podSetAssignments") or []:
            topo = assignment.get("topologyAssignment")
            if not topo:
                continue
            spec = (templates.get(assignment.get("name")) or {}).get("spec") or {}
            try:
                requests = {**pod_requests(spec, f"Workload {key}"), POD_SLOT: 1}
            except InputError:
                continue
            levels = list(topo.get("levels") or [])
            for domain in topo.get("domains") or []:
                values = [str(v) for v in domain.get("values") or []]
                for node, count in _spread(snapshot, levels, values, int(domain["count"])):
                    slot = per_node.setdefault(node, {})
                    for name, amount in requests.items():
                        slot[name] = slot.get(name, 0) + amount * count
        self.world.hold(key, per_node)
        self.world.capacity.set_workload_gpus(key, gpu_assignment_of(workload, key))

    # --- the loop ------------------------------------------------------------------------

    async def run(self) -> None:
        event = self.world.signals.admit_event
        while True:
            await event.wait()
            await asyncio.sleep(0.05)  # coalesce a burst of changes into one cycle
            event.clear()
            await self.cycle()

    async def cycle(self) -> None:
        started = time.perf_counter()
        queues, flavors, sources = self._models()
        workloads = self.world.store(WORKLOADS)
        pending: list[PendingWorkload] = []
        problems: dict[str, str] = {}
        waiting: dict[str, Obj] = {}
        for key, workload in workloads.items():
            if is_finished(workload) or self.admission_of(key) is not None:
                continue
            waiting[key] = workload
            candidate = self._candidate(workload, queues, flavors, sources)
            if candidate.pending is None:
                problems[key] = candidate.problem
            else:
                pending.append(candidate.pending)
        for stale in set(self._candidates) - set(waiting):
            del self._candidates[stale]
        if not waiting:
            self._gauges(queues, [])
            return
        snapshot = self.world.capacity.snapshot()
        named = {p.request.topology for p in pending if p.request.topology is not None}
        placer = self._flavor_topologies(snapshot, flavors, sources, named)
        result = admission_cycle(queues, pending, self._usage(), placer)
        self.metrics.admission_cycle_seconds.observe(time.perf_counter() - started)
        self.cycles += 1
        requests = {p.key: p.request for p in pending}
        jobs = [self._admit(waiting[a.key], a, requests[a.key]) for a in result.admitted]
        jobs += [self._wait(waiting[k], m) for k, m in {**problems, **result.pending}.items()]
        await asyncio.gather(*jobs)
        admitted = {a.key for a in result.admitted}
        self._gauges(queues, [p for p in pending if p.key not in admitted])

    def _gauges(self, queues: Mapping[str, QueueSpec], still: list[PendingWorkload]) -> None:
        counts = dict.fromkeys(queues, 0)
        for workload in still:
            counts[workload.cluster_queue] = counts.get(workload.cluster_queue, 0) + 1
        for name, count in counts.items():
            self.metrics.pending_workloads.labels(name).set(count)
        held = dict.fromkeys(queues, 0)
        for key in self.world.held:
            admission = self.admission_of(key) or {}
            cq = str(admission.get("clusterQueue") or "")
            held[cq] = held.get(cq, 0) + 1
        for name, count in held.items():
            self.metrics.admitted_workloads.labels(name).set(count)

    # --- writing outcomes ----------------------------------------------------------------

    async def _admit(
        self,
        workload: Obj,
        admitted: Admitted,
        request: PlacementRequest,
    ) -> None:
        key = admitted.key
        admission = _admission(admitted, request)
        message = f"admitted by ClusterQueue {admitted.cluster_queue} on flavor {admitted.flavor}"
        status = {
            "admission": admission,
            "conditions": [
                _cond("QuotaReserved", "True", "QuotaReserved", f"Quota reserved: {message}"),
                _cond("Admitted", "True", "Admitted", f"The workload is {message}"),
            ],
        }
        # Hold the capacity before the write, so a cycle meanwhile cannot give it away.
        per_node = node_usage(request, admitted.decision)
        self.world.hold(key, per_node)
        gpus = assignment_of(admitted.decision)
        self.world.capacity.set_workload_gpus(key, gpus)  # the ungater reads them here
        self.written[key] = admission
        m = meta(workload)
        try:
            async with self._writes:
                if gpus:  # first: an admission is never seen without its GPU sets
                    workload = await write_gpu_assignment(self.kube, workload, gpus)
                await write_status(self.kube, workload, status)
        except KubeError as error:
            # Not admitted after all (changed or deleted meanwhile): give the capacity back.
            log.info("admitting %s failed: %s", key, error)
            self.written.pop(key, None)
            self.world.release(key)
            self.metrics.admission_attempts.labels("conflict").inc()
            self.world.signals.admit()
            return
        self.metrics.admission_attempts.labels("admitted").inc()
        created = parse_time(m.get("creationTimestamp"))
        if created is not None:
            self.metrics.admission_wait_seconds.labels(admitted.cluster_queue).observe(
                max(time.time() - created, 0.0)
            )
        log.info("admitted %s: %s", key, _describe(admission))
        self.events.emit(workload, "Admitted", f"{message}; {_describe(admission)}")
        owner = owner_job(workload)
        if owner is not None:
            self.world.signals.job(*owner)
        self.world.signals.ungate_workload(key)

    async def _wait(self, workload: Obj, message: str) -> None:
        self.metrics.admission_attempts.labels("pending").inc()
        current = condition(workload, "QuotaReserved")
        if (
            current is not None
            and current.get("status") == "False"
            and current.get("reason") == PENDING
            and current.get("message") == message
        ):
            return
        status = {"conditions": [_cond("QuotaReserved", "False", PENDING, message)]}
        try:
            async with self._writes:
                await write_status(self.kube, workload, status)
        except KubeError as error:
            log.debug("pending status of %s not written: %s", key_of(workload), error)
            return
        self.events.emit(workload, PENDING, message, warning=True)


async def write_status(kube: Kube, workload: Obj, status: Obj, *, guarded: bool = True) -> None:
    """Merge-patch a Workload's status; ``guarded``: only over the version we read."""
    m = meta(workload)
    body: Obj = {"status": status}
    if guarded:
        body["metadata"] = {"resourceVersion": m.get("resourceVersion")}
    await kube.patch(WORKLOADS, m["name"], body, m.get("namespace"), subresource="status")


async def write_gpu_assignment(kube: Kube, workload: Obj, gpus: Assignment) -> Obj:
    """Record the chosen GPU sets on the Workload (annotation), over the version we read;
    returns the Workload as written, whose version guards the status write after it."""
    m = meta(workload)
    body: Obj = {
        "metadata": {
            "resourceVersion": m.get("resourceVersion"),
            "annotations": {ASSIGNMENT_ANNOTATION: assignment_text(gpus)},
        }
    }
    return await kube.patch(WORKLOADS, m["name"], body, m.get("namespace"))


def _admission(admitted: Admitted, request: PlacementRequest) -> Obj:
    assignments = pod_set_assignments(request, admitted.decision, admitted.flavor)
    return Admission(
        cluster_queue=admitted.cluster_queue, pod_set_assignments=assignments
    ).to_wire()


def _spread(
    snapshot: ClusterSnapshot, levels: list[str], values: list[str], count: int
) -> list[tuple[str, int]]:
    """Nodes for ``count`` pods of a domain known only by its level values (restart path).

    With a hostname level the node is exact; above it, pods are spread over the domain's nodes
    in name order, one per node per round (the scheduler picks within the domain anyway).
    """
    if levels and levels[-1] == c.HOSTNAME_LABEL and values:
        return [(values[-1], count)]
    mask = np.ones(snapshot.node_count, dtype=bool)
    for level, value in zip(levels, values, strict=False):
        column = snapshot.label(level)
        mask &= column.codes == column.code(value)
    nodes = sorted(snapshot.node_names[i] for i in np.flatnonzero(mask))
    if not nodes:
        return []
    share, extra = divmod(count, len(nodes))
    return [(n, share + (1 if i < extra else 0)) for i, n in enumerate(nodes) if share or i < extra]


def _describe(admission: Obj) -> str:
    parts = []
    for assignment in admission.get("podSetAssignments") or []:
        topo = assignment.get("topologyAssignment") or {}
        domains = ", ".join(
            f"{'/'.join(d['values'])} x{d['count']}" for d in topo.get("domains") or []
        )
        parts.append(f"{assignment['name']}: {domains or 'no topology'}")
    return "; ".join(parts)
