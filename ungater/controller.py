"""The ungater's shell: releases gated pods of admitted workloads onto their domains.

Pod events mark workloads; about once a second (``interval``) every marked workload is
planned with :func:`plan_ungates` and its pods are patched, each with one JSON patch that
checks the gates are unchanged, removes topogate's gate and merges the domain's labels into
the nodeSelector; on a node where the admitter chose GPU sets, the same patch writes the pod's
``topogate.dev/gpu-allocation`` (the next set there no sibling holds, see ``gpus.py``).
Expectations hold a workload back while its patches are unobserved, so a pod is never planned
twice; after a restart the API server's pods are the whole truth (ungated pods carry their
domain in their nodeSelector and their GPUs in that annotation), so nothing is released twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.gpus import ALLOCATION_ANNOTATION, GpuAssignment
from topogate.api.kinds.podgroup import is_native_member
from topogate.api.objects import (
    gpu_assignment_of,
    is_evicted,
    is_finished,
    key_of,
    meta,
    workload_of_pod,
)
from topogate.api.podgroups import podgroup, podgroup_name, same_spec, shared_level
from topogate.api.times import parse_time
from topogate.api.topology_assignment import Assignment, decode
from topogate.kube.errors import API_ERRORS, KubeError
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import JSON_PATCH, NODES, PODS, WORKLOADS, Obj, Resource
from topogate.metrics import Metrics
from topogate.state import ControllerState

from .gpus import gpu_allocations, visible_gpus
from .ranks import Expectations, Ungate, plan_ungates, pod_view

log = logging.getLogger("topogate.ungater")


def _gated(pod: Obj) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(g.get("name") == c.TOPOLOGY_GATE for g in gates)


class Ungater:
    def __init__(
        self,
        kube: KubeApi,
        state: ControllerState,
        metrics: Metrics,
        *,
        interval: float = 1.0,
        max_per_batch: int = 1000,
        concurrency: int = 32,
        podgroups: str | None = None,
    ) -> None:
        self.kube = kube
        self.state = state
        self.metrics = metrics
        self.interval = interval
        self.max_per_batch = max_per_batch
        self._limit = asyncio.Semaphore(concurrency)
        self.expectations = Expectations()
        # `serve --native-gangs`: the scheduling.k8s.io version of the PodGroups written
        # before a Workload's pods are released (None: off), and those known written.
        self.podgroups = podgroups
        self._written: dict[str, set[str]] = {}
        state.subscribe(PODS, self._observe)
        state.subscribe(WORKLOADS, self._on_workload)

    def _observe(self, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        workload = workload_of_pod(obj)
        if workload is None:
            return
        uid = str(meta(obj).get("uid"))
        if uid in self.expectations.uids(workload) and (new is None or not _gated(new)):
            self.expectations.observed(workload, uid)
            if not self.expectations.pending(workload):
                self.state.signals.ungate_workload(workload)

    def _on_workload(self, old: Obj | None, new: Obj | None) -> None:
        if new is None and old is not None:
            self.expectations.forget(key_of(old))
            self._written.pop(key_of(old), None)
        elif new is not None and is_evicted(new) and self._written.get(key_of(new)):
            self.state.signals.ungate_workload(key_of(new))  # its PodGroups go (round)

    async def run(self) -> None:
        signals = self.state.signals
        while True:
            await signals.ungate_event.wait()
            # Batch: events of the next ``interval`` join this round.
            await asyncio.sleep(self.interval)
            batch = signals.take_ungates()
            left = await self.round(sorted(batch))
            for key in left:
                signals.ungate_workload(key)

    async def round(self, workloads: list[str]) -> set[str]:
        """Plan and patch the given workloads; returns those with work left over."""
        budget = self.max_per_batch
        left: set[str] = set()
        patches: list[tuple[str, Obj, Ungate]] = []
        for key in workloads:
            if self.expectations.pending(key):
                continue  # its last patches are not observed yet; the observation requeues
            if self._written.get(key) and not await self._drop_groups_if_evicted(key):
                left.add(key)
                continue
            plan = self.plan(key)
            if plan and not await self._gangs_written(key):
                left.add(key)  # tried again next round: no pod goes out without its group
                continue
            if len(plan) > budget:
                left.add(key)
                plan = plan[:budget]
            budget -= len(plan)
            if plan:
                self.expectations.expect(key, (u.uid for _, u in plan))
                patches.extend((key, pod, ungate) for pod, ungate in plan)
        await asyncio.gather(*(self._patch(key, pod, ungate) for key, pod, ungate in patches))
        return left

    def plan(self, key: str) -> list[tuple[Obj, Ungate]]:
        members = self.state.store.pods_of(key)
        if not any(_gated(p) for p in members):
            # Only gated pods are released: every admission signals a round, and one whose
            # Workload has none (no pods yet, or all released) must cost next to nothing.
            return []
        admission = self.state.ledger.admission_of(key)
        workload = self.state.store.objects(WORKLOADS).get(key)
        if admission is None or (workload is not None and is_finished(workload)):
            return []
        if workload is not None and is_evicted(workload):
            return []  # its pods are going: none is released
        requests = _topology_requests(workload)
        gpus = self._gpus(key, workload)
        visible = visible_gpus(gpus)
        out: list[tuple[Obj, Ungate]] = []
        for index, assignment in enumerate(admission.get("podSetAssignments") or []):
            podset = str(assignment.get("name"))
            pods = [
                p for p in members if (meta(p).get("labels") or {}).get(c.PODSET_LABEL) == podset
            ]
            by_uid = {str(meta(p).get("uid")): p for p in pods}
            topology = assignment.get("topologyAssignment")
            flavor = self._flavor(assignment)
            if not topology:
                # A flavor without topology: release every pod, no domain to write.
                out.extend(
                    (p, flavor(Ungate(meta(p)["name"], str(meta(p).get("uid")), {})))
                    for p in pods
                    if _gated(p)
                )
                continue
            try:
                parsed = decode(topology, f"Workload {key}", _field(index))
            except InputError as error:  # its pods stay gated: no domain to send them to
                log.warning("cannot release pods of PodSet %s: %s", podset, error)
                continue
            request = requests.get(podset, {})
            ungates = plan_ungates(
                parsed.levels,
                parsed.domains,
                [pod_view(p) for p in pods],
                count=int(assignment.get("count") or 0),
                index_label=request.get("podIndexLabel") or c.JOB_COMPLETION_INDEX,
                sub_group_label=request.get("subGroupIndexLabel"),
                sub_group_count=request.get("subGroupCount"),
                expected=self.expectations.uids(key),
            )
            if gpus.get(podset):  # each pod to a node with GPU sets takes the next free one
                given = gpu_allocations(gpus[podset], visible, pods, ungates)
                ungates = [dataclasses.replace(u, gpu_allocation=given.get(u.uid)) for u in ungates]
            out.extend((by_uid[u.uid], flavor(u)) for u in ungates if u.uid in by_uid)
        return out

    async def _gangs_written(self, key: str) -> bool:
        """With native gangs, the Workload's PodGroup (one gang of all its admitted PodSets)
        exists as its admission wants it (written, or a stale one of an earlier admission
        replaced)."""
        if self.podgroups is None:
            return True
        admission = self.state.ledger.admission_of(key)
        workload = self.state.store.objects(WORKLOADS).get(key)
        if admission is None or workload is None:
            return False
        if _own_group(self.state.store.pods_of(key), str(meta(workload).get("name"))):
            return True  # its pods name a PodGroup of their own (a user's): it is theirs
        owner = {**workload, "apiVersion": c.API_VERSION, "kind": "Workload"}
        assignments = admission.get("podSetAssignments") or []
        placed: list[dict[str, str]] = []
        levels: Sequence[str] = ()
        for index, assignment in enumerate(assignments):
            if not assignment.get("topologyAssignment"):
                levels = ()  # a PodSet placed without topology: no domain holds the gang
                break
            try:
                parsed = decode(assignment["topologyAssignment"], f"Workload {key}", _field(index))
            except InputError:
                return False  # its pods stay gated (plan logs why)
            levels = self._placed(assignment, parsed, placed)
        level = shared_level(levels, placed) if levels else None
        count = sum(int(a.get("count") or 0) for a in assignments)
        body = podgroup(self.podgroups, owner, count, level)
        written = self._written.setdefault(key, set())
        mark = json.dumps([body["metadata"]["name"], body["spec"]], sort_keys=True)
        if mark in written:
            return True
        if not await self._write_group(key, body):
            return False
        written.add(mark)
        return True

    def _placed(
        self, assignment: Obj, parsed: Assignment, placed: list[dict[str, str]]
    ) -> Sequence[str]:
        """Add the labels of each assigned domain to ``placed`` and return the levels of the
        flavor's topology. An assignment down to hosts names only the hostname level (as Kueue
        writes it): the levels above come from those nodes' labels."""
        nodes = self.state.store.objects(NODES)
        for domain in parsed.domains:
            labels = dict(zip(parsed.levels, domain.values, strict=True))
            node = nodes.get(domain.values[-1]) if parsed.levels[-1] == c.HOSTNAME_LABEL else None
            placed.append({**((node or {}).get("metadata") or {}).get("labels", {}), **labels})
        levels: Sequence[str] = parsed.levels
        sources = self.state.catalogs.catalog().sources
        for name in set((assignment.get("flavors") or {}).values()):
            flavor = self.state.catalogs.catalog().flavors.get(str(name))
            source = sources.get(flavor.spec.topology_name or "") if flavor else None
            if source is not None and source.kind == "labels":
                levels = source.level_keys
        return levels

    async def _drop_groups_if_evicted(self, key: str) -> bool:
        """An evicted (or preempted) Workload's PodGroups are deleted: its next admission may
        want another count or level, and a group's spec is immutable. False: a delete failed
        (tried again next round)."""
        workload = self.state.store.objects(WORKLOADS).get(key)
        if workload is None or not is_evicted(workload):
            return True
        resource = Resource(self.podgroups or "", "podgroups")
        for mark in sorted(self._written.get(key, ())):
            name = json.loads(mark)[0]
            try:
                await self.kube.delete(resource, name, str(meta(workload).get("namespace")))
            except API_ERRORS as error:
                log.warning("cannot delete PodGroup %s of evicted %s: %s", name, key, error)
                return False
            self._written[key].discard(mark)
        return True

    async def _write_group(self, key: str, body: Obj) -> bool:
        resource = Resource(self.podgroups or "", "podgroups")
        name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        try:
            try:
                await self.kube.create(resource, body, namespace)
                return True
            except KubeError as error:
                if error.status != 409:
                    raise
            found = await self.kube.get(resource, name, namespace)
            if meta(found).get("deletionTimestamp"):
                return False  # an earlier admission's, going once its pods are gone
            if same_spec(found, body):
                return True
            # Its spec is immutable: an earlier admission's group goes, this one comes.
            await self.kube.delete(resource, name, namespace)
            await self.kube.create(resource, body, namespace)
            return True
        except API_ERRORS as error:
            log.warning("cannot write PodGroup %s/%s of %s: %s", namespace, name, key, error)
            return False

    def _flavor(self, assignment: Obj) -> Callable[[Ungate], Ungate]:
        """What an admission's flavors add to each released pod: their node labels (the
        domain's own win) and tolerations, as a started job's templates carry them. A job
        started by topogate has them already; a gated kind's pods (pod groups,
        LeaderWorkerSet) get them here."""
        flavors = self.state.catalogs.catalog().flavors
        labels: dict[str, str] = {}
        tolerations: list[Obj] = []
        for name in sorted(set((assignment.get("flavors") or {}).values())):
            flavor = flavors.get(str(name))
            if flavor is None:  # deleted or invalid: the job sync says so once
                continue
            labels.update(flavor.spec.node_labels)
            tolerations.extend(t.to_wire() for t in flavor.spec.tolerations)

        def add(ungate: Ungate) -> Ungate:
            return dataclasses.replace(
                ungate,
                node_selector={**labels, **ungate.node_selector},
                tolerations=tuple(tolerations),
            )

        return add

    def _gpus(self, key: str, workload: Obj | None) -> GpuAssignment:
        """The GPU sets the admitter chose: held in the capacity cache from admission on
        (also after a restart); the Workload's annotation when not (yet) held."""
        held = self.state.ledger.workload_gpus(key)
        if held is not None:
            return held
        return gpu_assignment_of(workload or {}, key)

    async def _patch(self, key: str, pod: Obj, ungate: Ungate) -> None:
        m = meta(pod)
        spec = pod.get("spec") or {}
        gates = list(spec.get("schedulingGates") or [])
        remaining = [g for g in gates if g.get("name") != c.TOPOLOGY_GATE]
        selector = {**(spec.get("nodeSelector") or {}), **ungate.node_selector}
        patch: list[dict[str, Any]] = [
            {"op": "test", "path": "/spec/schedulingGates", "value": gates},
            {"op": "replace", "path": "/spec/schedulingGates", "value": remaining},
        ]
        if ungate.node_selector:
            patch.append({"op": "add", "path": "/spec/nodeSelector", "value": selector})
        current = list(spec.get("tolerations") or [])
        missing = [dict(t) for t in ungate.tolerations if t not in current]
        if missing:
            patch.append({"op": "add", "path": "/spec/tolerations", "value": current + missing})
        if ungate.gpu_allocation is not None:
            patch.append(_annotation_op(m, ALLOCATION_ANNOTATION, ungate.gpu_allocation))
        try:
            async with self._limit:
                await self.kube.patch(
                    PODS, m["name"], patch, m.get("namespace"), content_type=JSON_PATCH
                )
        except API_ERRORS as error:
            # Gates changed, pod gone, refused or unreachable: forget the expectation and plan
            # again (a pod that is gone needs nothing more).
            log.info("ungating %s/%s failed: %s", m.get("namespace"), m["name"], error)
            self.expectations.observed(key, ungate.uid)
            if not (isinstance(error, KubeError) and error.not_found):
                self.state.signals.ungate_workload(key)
            return
        self.metrics.ungated_pods.inc()
        created = parse_time(m.get("creationTimestamp"))
        if created is not None:
            self.metrics.ungate_seconds.observe(max(time.time() - created, 0.0))


def _annotation_op(m: Obj, key: str, value: str) -> dict[str, Any]:
    """A JSON patch op that sets one annotation (creating the map when the pod has none)."""
    if isinstance(m.get("annotations"), dict):
        escaped = key.replace("~", "~0").replace("/", "~1")
        return {"op": "add", "path": f"/metadata/annotations/{escaped}", "value": value}
    return {"op": "add", "path": "/metadata/annotations", "value": {key: value}}


def _topology_requests(workload: Obj | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for podset in ((workload or {}).get("spec") or {}).get("podSets") or []:
        out[str(podset.get("name"))] = dict(podset.get("topologyRequest") or {})
    return out


def _own_group(pods: Sequence[Obj], workload: str) -> bool:
    """The Workload's pods name a PodGroup other than the one topogate writes for it
    (:func:`podgroup_name`), or are a user's native group's members (whose Workload is named
    after that group): the group is theirs, not written here."""
    for pod in pods:
        if is_native_member(pod):
            return True
        group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
        if group and group != podgroup_name(workload):
            return True
    return False


def _field(index: int) -> str:
    return f"status.admission.podSetAssignments[{index}].topologyAssignment"
