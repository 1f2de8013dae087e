"""The job integration's shell: keeps each queued Job/JobSet and its Workload in step.

Per job (Kueue's jobframework reconciler, reduced to what topogate needs):
- no Workload yet: create it (owned by the job); a queued job that runs without one is
  suspended first;
- Workload admitted, job suspended: unsuspend it with the marks and the gate on its templates;
- job running without an admission (someone unsuspended it): suspend it again;
- job finished: mark the Workload Finished, which releases its quota and capacity.
A deleted job's Workload goes with it (owner reference), and its usage is released as soon as
the Workload's deletion is seen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from topogate.api.errors import InputError
from topogate.events import EventRecorder
from topogate.kubeapi import (
    JOBS,
    JOBSETS,
    PRIORITY_CLASSES,
    RESOURCE_FLAVORS,
    WORKLOADS,
    Kube,
    KubeError,
    Obj,
    Resource,
)
from topogate.world import World, is_finished, meta

from .admitter import Admitter, _cond, write_status
from .integration import (
    admitted_job,
    desired_workload,
    finished,
    is_marked,
    is_suspended,
    queue_name,
    workload_name,
)

log = logging.getLogger("topogate.jobs")

RESOURCES: Mapping[str, Resource] = {"Job": JOBS, "JobSet": JOBSETS}


class JobSync:
    def __init__(
        self,
        kube: Kube,
        world: World,
        admitter: Admitter,
        events: EventRecorder,
        concurrency: int = 16,
    ) -> None:
        self.kube = kube
        self.world = world
        self.admitter = admitter
        self.events = events
        self._limit = asyncio.Semaphore(concurrency)
        # (kind, job key) -> resourceVersion whose Workload could not be built (reported once).
        self._invalid: dict[tuple[str, str], str] = {}

    async def run(self) -> None:
        signals = self.world.signals
        while True:
            await signals.jobs_event.wait()
            signals.jobs_event.clear()
            batch, signals.jobs = signals.jobs, set()
            await asyncio.gather(*(self._guarded(kind, key) for kind, key in sorted(batch)))

    async def _guarded(self, kind: str, key: str) -> None:
        async with self._limit:
            try:
                await self.reconcile(kind, key)
            except KubeError as error:
                if error.conflict or error.not_found:
                    # A newer version is on its way through the watch; it triggers again.
                    log.debug("%s %s: %s", kind, key, error)
                else:
                    log.warning("%s %s: %s", kind, key, error)
                    await asyncio.sleep(1)
                    self.world.signals.job(kind, key)

    def _priority(self, name: str) -> int | None:
        obj = self.world.store(PRIORITY_CLASSES).get(name)
        if obj is None:
            return None
        value = obj.get("value")
        return int(value) if isinstance(value, int) else None

    async def reconcile(self, kind: str, key: str) -> None:
        resource = RESOURCES[kind]
        job = self.world.store(resource).get(key)
        if job is None or queue_name(job) is None:
            return
        m = meta(job)
        if m.get("deletionTimestamp"):
            return
        namespace, name = m.get("namespace") or "default", str(m["name"])
        workload_key = f"{namespace}/{workload_name(kind, name, str(m['uid']))}"
        workload = self.world.store(WORKLOADS).get(workload_key)
        done = finished(job)
        admission = self.admitter.admission_of(workload_key)

        if workload is None and admission is None:
            if done:
                return
            if not is_suspended(job):
                await self._suspend(resource, job, "it has no admitted Workload yet")
            await self._create_workload(kind, key, job)
            return
        if done:
            if workload is not None and not is_finished(workload):
                await self._finish(workload, done)
            return
        if admission is not None:
            if is_suspended(job) or not is_marked(job):
                await self._start(resource, job, workload_key.split("/", 1)[1], admission)
        elif not is_suspended(job):
            await self._suspend(resource, job, "its Workload is not admitted")

    async def _create_workload(self, kind: str, key: str, job: Obj) -> None:
        version = str(meta(job).get("resourceVersion"))
        if self._invalid.get((kind, key)) == version:
            return
        try:
            body = desired_workload(job, self._priority)
        except InputError as error:
            self._invalid[(kind, key)] = version
            log.warning("%s %s: %s", kind, key, error.describe())
            self.events.emit(job, "InvalidWorkload", error.describe(), warning=True)
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

    async def _suspend(self, resource: Resource, job: Obj, why: str) -> None:
        m = meta(job)
        await self.kube.patch(
            resource,
            m["name"],
            {"metadata": {"resourceVersion": m.get("resourceVersion")}, "spec": {"suspend": True}},
            m.get("namespace"),
        )
        log.info("suspended %s %s/%s: %s", job.get("kind"), m.get("namespace"), m["name"], why)

    async def _start(self, resource: Resource, job: Obj, workload: str, admission: Obj) -> None:
        flavors = self.world.store(RESOURCE_FLAVORS)
        selectors: dict[str, dict[str, str]] = {}
        tolerations: dict[str, list[Obj]] = {}
        for assignment in admission.get("podSetAssignments") or []:
            podset = str(assignment.get("name"))
            selector: dict[str, str] = {}
            for flavor in sorted(set((assignment.get("flavors") or {}).values())):
                spec = (flavors.get(str(flavor)) or {}).get("spec") or {}
                selector.update(spec.get("nodeLabels") or {})
                tolerations.setdefault(podset, []).extend(spec.get("tolerations") or [])
            selectors[podset] = selector
        body = admitted_job(job, workload, selectors, tolerations)
        await self.kube.replace(resource, body)
        m = meta(job)
        log.info("started %s %s/%s", job.get("kind"), m.get("namespace"), m["name"])
        self.events.emit(
            job,
            "Started",
            f"admitted as Workload {workload}; pods are gated "
            "until the ungater gives each its domain",
        )

    async def _finish(self, workload: Obj, outcome: str) -> None:
        m = meta(workload)
        conditions = [
            c
            for c in (workload.get("status") or {}).get("conditions") or []
            if c.get("type") != "Finished"
        ]
        conditions.append(_cond("Finished", "True", outcome, f"the job {outcome.lower()}"))
        await write_status(self.kube, workload, {"conditions": conditions}, guarded=False)
        log.info("workload %s/%s finished: %s", m.get("namespace"), m["name"], outcome)
