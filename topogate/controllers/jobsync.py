"""The job integration's shell: keeps each queued job and its Workload(s) in step.

Per job of a kind with a suspend switch (Kueue's jobframework reconciler, reduced to what
topogate needs):
- no Workload yet: create it (owned by the job); a queued job that runs without one is
  suspended first;
- Workload admitted, job suspended: unsuspend it with the marks and the gate on its templates;
- job running without an admission (someone unsuspended it): suspend it again;
- job finished: mark the Workload Finished, which releases its quota and capacity.
Per group of a gated kind (``api.kinds.base.Gated``: pod groups, LeaderWorkerSet), whose pods
the webhook gated and marked when they were created:
- no Workload yet: create it once the group is complete (a pod group's pods all exist);
- admitted: nothing to write here, the ungater releases the pods into their domains;
- evicted: delete the group's pods (as Kueue stops a pod group); once none runs, its
  admission is taken back and it waits in its queue again (a controller's new pods are
  gated again by the webhook);
- finished: mark the Workload Finished.
A deleted job's Workload goes with it (owner reference), and its usage is released as soon as
the Workload's deletion is seen.
"""

from __future__ import annotations

import asyncio
import logging

from topogate.admission.integration import (
    admitted_job,
    desired_workload,
    finished,
    gated,
    is_marked,
    is_suspended,
    restored_spec,
    suspend_patch,
    workload_name,
)
from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.kinds import Gated, Referring, job_kind, queue_name
from topogate.api.objects import is_evicted, is_finished, key_of, meta
from topogate.kube.errors import API_ERRORS, KubeError
from topogate.kube.events import EventRecorder
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import JOB_RESOURCES, PODS, WORKLOADS, Obj, Resource
from topogate.state import ControllerState

from .writes import new_condition, write_status

log = logging.getLogger("topogate.jobs")


def _gated(pod: Obj) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, dict) and g.get("name") == c.TOPOLOGY_GATE for g in gates)


def _terminated(pod: Obj) -> bool:
    return ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed")


class JobSync:
    def __init__(
        self,
        kube: KubeApi,
        state: ControllerState,
        events: EventRecorder,
        concurrency: int = 16,
        retry_seconds: float = 1.0,
    ) -> None:
        self.kube = kube
        self.state = state
        self.events = events
        self.retry_seconds = retry_seconds
        self._limit = asyncio.Semaphore(concurrency)
        # (kind, job key) -> resourceVersion whose Workload could not be built (reported once).
        self._invalid: dict[tuple[str, str], str] = {}

    async def run(self) -> None:
        signals = self.state.signals
        while True:
            await signals.jobs_event.wait()
            batch = signals.take_jobs()
            await asyncio.gather(*(self._limited(kind, key) for kind, key in sorted(batch)))

    async def _limited(self, kind: str, key: str) -> None:
        async with self._limit:
            await self.reconcile_logged(kind, key)

    async def reconcile_logged(self, kind: str, key: str) -> None:
        """:meth:`reconcile`; a failed API call is logged and the job tried again (after
        ``retry_seconds``), except a conflict or 404, whose newer version the watch brings."""
        try:
            await self.reconcile(kind, key)
        except API_ERRORS as error:
            if isinstance(error, KubeError) and (error.conflict or error.not_found):
                log.debug("%s %s: %s", kind, key, error)
                return
            log.warning("%s %s: %s", kind, key, error)
            await asyncio.sleep(self.retry_seconds)
            self.state.signals.job(kind, key)

    async def reconcile(self, kind: str, key: str) -> None:
        job = self.state.store.job(kind, key)
        if job is None and isinstance(job_kind(kind), Gated):
            # A pod group whose pods are all gone: keyed by its Workload, which, evicted,
            # waits in its queue again (until the garbage collector takes it with its pods).
            workload = self.state.store.objects(WORKLOADS).get(key)
            held = self.state.ledger.admission_of(key)
            if workload is not None and held is not None and is_evicted(workload):
                await self._requeue(workload)
            return
        if job is None or queue_name(job) is None:
            return
        m = meta(job)
        if m.get("deletionTimestamp"):
            return
        held_by_gate = gated(job)
        if held_by_gate is not None:
            groups = held_by_gate.groups(job)
            for group in groups:
                await self._reconcile_group(held_by_gate, kind, key, job, group)
            await self._delete_surplus(job, set(groups))
            return
        resource = JOB_RESOURCES[kind]
        namespace, name = m.get("namespace") or "default", str(m["name"])
        workload_key = f"{namespace}/{workload_name(kind, name, str(m['uid']))}"
        workload = self.state.store.objects(WORKLOADS).get(workload_key)
        done = finished(job)
        admission = self.state.ledger.admission_of(workload_key)

        if workload is None and admission is None:
            if done:
                return
            if not is_suspended(job):
                await self._suspend(resource, job, None, "it has no admitted Workload yet")
            await self._create_workload(kind, key, job)
            return
        if done:
            if workload is not None and not is_finished(workload):
                await self._finish(workload, done)
            return
        if admission is not None and workload is not None and is_evicted(workload):
            await self._stop_evicted(resource, job, workload)
        elif admission is not None:
            if is_suspended(job) or not is_marked(job):
                await self._start(resource, job, workload_key.split("/", 1)[1], admission)
        elif not is_suspended(job):
            await self._suspend(resource, job, workload, "its Workload is not admitted")
        else:  # waiting: a restore that did not go through is made now
            await self._restore(resource, job, workload)

    async def _reconcile_group(
        self, kind: Gated, kind_name: str, key: str, job: Obj, group: str
    ) -> None:
        """One group of a gated job: its Workload made, finished, or its pods stopped after
        an eviction."""
        workload_key = f"{meta(job).get('namespace') or 'default'}/{group}"
        workload = self.state.store.objects(WORKLOADS).get(workload_key)
        admission = self.state.ledger.admission_of(workload_key)
        pods = self.state.store.pods_of(workload_key)
        done = kind.group_finished(job, pods)
        if workload is None and admission is None:
            waiting = kind.not_ready(job)
            if done or waiting is not None:
                if waiting is not None:
                    log.debug("%s %s: no Workload yet: %s", kind_name, key, waiting)
                return
            await self._create_workload(kind_name, key, job, group)
            return
        if done:
            if workload is not None and not is_finished(workload):
                await self._finish(workload, done)
            return
        if admission is not None and workload is not None and is_evicted(workload):
            await self._stop_group(workload, pods)

    async def _delete_surplus(self, job: Obj, groups: set[str]) -> None:
        """Workloads the job owns for groups it no longer has (a LeaderWorkerSet scaled
        down) are deleted, as Kueue's: their capacity is released once the deletion is seen,
        and the set's controller removes the groups' pods."""
        m = meta(job)
        namespace, uid = m.get("namespace") or "default", m.get("uid")
        for workload in list(self.state.store.objects(WORKLOADS).values()):
            wm = meta(workload)
            if wm.get("namespace") != namespace or wm.get("name") in groups:
                continue
            if wm.get("deletionTimestamp"):
                continue  # going already
            refs = wm.get("ownerReferences") or []
            if not any(r.get("controller") and r.get("uid") == uid for r in refs):
                continue
            try:
                await self.kube.delete(WORKLOADS, str(wm["name"]), namespace)
            except KubeError as error:
                if not error.not_found:
                    raise
            log.info("deleted Workload %s of a group %s no longer has", key_of(workload), m["name"])

    async def _stop_group(self, workload: Obj, pods: list[Obj]) -> None:
        """Kueue's pod group ``Stop``: every released, live pod of the evicted group is
        deleted; the admission is taken back once none runs."""
        for pod in pods:
            m = meta(pod)
            # A gated pod holds nothing and waits for the next admission (Kueue's Stop also
            # leaves a pod alone that is gated or ended).
            if _terminated(pod) or m.get("deletionTimestamp") or _gated(pod):
                continue
            try:
                await self.kube.delete(PODS, str(m["name"]), m.get("namespace"))
            except KubeError as error:
                if not error.not_found:
                    raise
            log.info(
                "deleted pod %s/%s of evicted %s", m.get("namespace"), m["name"], key_of(workload)
            )
        await self._requeue(workload, gated_wait=True)

    async def _restore(self, resource: Resource, job: Obj, workload: Obj | None) -> None:
        """A suspended Job that ran with fewer pods gets its Workload's count back as its
        parallelism (a second write, as Kueue's: a running Job's parallelism is fixed)."""
        spec = restored_spec(job, workload)
        if spec is None:
            return
        m = meta(job)
        body = {"metadata": {"resourceVersion": m.get("resourceVersion")}, "spec": spec}
        await self.kube.patch(resource, m["name"], body, m.get("namespace"))
        log.info("restored the parallelism of %s/%s: %s", m.get("namespace"), m["name"], spec)

    async def _create_workload(
        self, kind: str, key: str, job: Obj, group: str | None = None
    ) -> None:
        version = str(meta(job).get("resourceVersion"))
        registered = job_kind(kind)
        if isinstance(registered, Referring):
            # A refusal over a missing or bad runtime is tried again when that changes.
            for read in registered.references(job):
                found = self.state.store.lookup(*read) or {}
                version += f"/{meta(found).get('resourceVersion')}"
        if self._invalid.get((kind, key)) == version:
            return
        try:
            body = desired_workload(
                job, self.state.store.priority_of, group, lookup=self.state.store.lookup
            )
        except InputError as error:
            self._invalid[(kind, key)] = version
            log.warning("%s %s: %s", kind, key, error.describe())
            kind_of = job_kind(kind)
            target = kind_of.event_target(job) if isinstance(kind_of, Gated) else job
            self.events.emit(target, "InvalidWorkload", error.describe(), warning=True)
            return
        self._invalid.pop((kind, key), None)
        try:
            await self.kube.create(WORKLOADS, body, body["metadata"]["namespace"])
        except KubeError as error:
            if not error.conflict:
                raise
            return
        log.info(
            "created Workload %s/%s for %s %s",
            body["metadata"]["namespace"],
            body["metadata"]["name"],
            kind,
            key,
        )

    async def _suspend(self, resource: Resource, job: Obj, workload: Obj | None, why: str) -> None:
        """Suspend the job; then a partially admitted Job gets its full parallelism back."""
        m = meta(job)
        suspend = {
            "metadata": {"resourceVersion": m.get("resourceVersion")},
            **suspend_patch(job),
        }
        job = await self.kube.patch(resource, m["name"], suspend, m.get("namespace"))
        await self._restore(resource, job, workload)
        log.info("suspended %s %s/%s: %s", job.get("kind"), m.get("namespace"), m["name"], why)

    async def _start(self, resource: Resource, job: Obj, workload: str, admission: Obj) -> None:
        flavors = self.state.catalogs.catalog().flavors
        selectors: dict[str, dict[str, str]] = {}
        tolerations: dict[str, list[Obj]] = {}
        for assignment in admission.get("podSetAssignments") or []:
            podset = str(assignment.get("name"))
            selector: dict[str, str] = {}
            for name in sorted(set((assignment.get("flavors") or {}).values())):
                flavor = flavors.get(str(name))
                if flavor is None:  # deleted, or not valid: the job runs without its labels
                    log.warning(
                        "%s: ResourceFlavor %s of its admission is missing or invalid; "
                        "starting without its node labels and tolerations",
                        workload,
                        name,
                    )
                    continue
                selector.update(flavor.spec.node_labels)
                tolerations.setdefault(podset, []).extend(
                    t.to_wire() for t in flavor.spec.tolerations
                )
            selectors[podset] = selector
        counts = {
            str(a.get("name")): int(a["count"])
            for a in admission.get("podSetAssignments") or []
            if isinstance(a.get("count"), int)
        }
        body = admitted_job(job, workload, selectors, tolerations, counts)
        await self.kube.replace(resource, body)
        m = meta(job)
        log.info("started %s %s/%s", job.get("kind"), m.get("namespace"), m["name"])
        self.events.emit(
            job,
            "Started",
            f"admitted as Workload {workload}; pods are gated "
            "until the ungater gives each its domain",
        )

    async def _stop_evicted(self, resource: Resource, job: Obj, workload: Obj) -> None:
        """An evicted workload's job is suspended (its controller deletes the pods); once no
        pod of it runs, its admission is taken back and it waits in its queue again."""
        if not is_suspended(job):
            await self._suspend(resource, job, workload, "its Workload was evicted")
            return
        await self._restore(resource, job, workload)
        await self._requeue(workload)

    async def _requeue(self, workload: Obj, gated_wait: bool = False) -> None:
        """Take an evicted Workload's admission back once none of its pods runs (with
        ``gated_wait``, a pod still gated does not count: a group's controller may have made
        it again already)."""
        running = [
            p
            for p in self.state.store.pods_of(key_of(workload))
            if not self._gone(p) and not (gated_wait and _gated(p))
        ]
        if running:
            return  # the pods' deletion events bring it back here
        conditions = [
            c
            for c in (workload.get("status") or {}).get("conditions") or []
            if c.get("type") not in ("QuotaReserved", "Admitted")
        ]
        message = "evicted; its pods are gone and it waits for admission again"
        conditions.append(new_condition("QuotaReserved", "False", "Evicted", message))
        conditions.append(new_condition("Admitted", "False", "Evicted", message))
        await write_status(self.kube, workload, {"admission": None, "conditions": conditions})
        log.info("workload %s requeued after eviction", key_of(workload))

    def _gone(self, pod: Obj) -> bool:
        """Ended, or being deleted on a lost node (no kubelet there will confirm its end; the
        node is not schedulable, so its capacity cannot be given twice)."""
        if _terminated(pod):
            return True
        node = (pod.get("spec") or {}).get("nodeName")
        deleting = meta(pod).get("deletionTimestamp") is not None
        return deleting and isinstance(node, str) and self.state.ledger.node_lost(node)

    async def _finish(self, workload: Obj, outcome: str) -> None:
        m = meta(workload)
        conditions = [
            c
            for c in (workload.get("status") or {}).get("conditions") or []
            if c.get("type") != "Finished"
        ]
        conditions.append(new_condition("Finished", "True", outcome, f"the job {outcome.lower()}"))
        await write_status(self.kube, workload, {"conditions": conditions}, guarded=False)
        log.info("workload %s/%s finished: %s", m.get("namespace"), m["name"], outcome)
