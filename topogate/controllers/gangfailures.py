"""The gang-failure shell (`serve --native-gangs`): evicts an admitted Workload whose native
gang kube-scheduler cannot bind in the domain topogate chose.

topogate admits a gang onto capacity it sees; kube-scheduler then binds the PodGroup all or
nothing. When the two disagree (a pod of another scheduler took a node between admission and
binding, a node was cordoned), the group's pods stay unbound, each marked ``PodScheduled=False``
(``Unschedulable``), and the group says ``PodGroupScheduled=False``. Once every pod of a PodSet
has been so for ``grace`` seconds (counted from the latest pod's transition), the Workload is
evicted (``Evicted``, reason ``GangUnschedulable``, and an event), with a message naming the
domain and the scheduler's reason, read from the PodGroup's condition. The job sync then stops
its job and requeues it; the ungater deletes its PodGroups; the next admission sees the
domain's capacity as it is now (the other pod is in the capacity cache), so it goes elsewhere
or waits.

Pods are the trigger (they are watched already); the PodGroup is read only to word the message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

from topogate.api import constants as c
from topogate.api.errors import InputError
from topogate.api.objects import is_evicted, is_finished, meta, owner_job, workload_of_pod
from topogate.api.podgroups import (
    StuckGang,
    domain_name,
    scheduler_reason,
    stuck_gangs,
)
from topogate.api.topology_assignment import decode
from topogate.kube.errors import API_ERRORS
from topogate.kube.events import EventRecorder
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import NODES, PODS, WORKLOADS, Obj, Resource
from topogate.metrics import Metrics
from topogate.state import ControllerState

from .writes import new_condition, write_status

log = logging.getLogger("topogate.gangfailures")

GANG_GRACE = 60.0
GANG_UNSCHEDULABLE = "GangUnschedulable"  # topogate's eviction reason (Kueue has none for this)
RETRY_SECONDS = 1.0  # first wait after a failed eviction write; doubled per failure
RETRY_MAX_SECONDS = 60.0


class GangFailures:
    def __init__(
        self,
        kube: KubeApi,
        state: ControllerState,
        metrics: Metrics,
        events: EventRecorder,
        *,
        grace: float = GANG_GRACE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.state = state
        self.metrics = metrics
        self.events = events
        self.grace = grace
        self.clock = clock
        # The scheduling.k8s.io version of the PodGroups (`serve --native-gangs`; None: off,
        # and no pod joins a group, so nothing is watched).
        self.podgroups: str | None = None
        self._watched: set[str] = set()  # Workloads with a pod kube-scheduler could not bind
        # Workloads whose eviction write failed: (failures so far, when to try again). A
        # write refused for good (RBAC, a webhook) would otherwise be re-sent every second.
        self._retry: dict[str, tuple[int, float]] = {}
        self._wake = asyncio.Event()
        state.subscribe(PODS, self._on_pod)

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        if self.podgroups is None or new is None:
            return
        spec = new.get("spec") or {}
        if spec.get("schedulingGroup") and not spec.get("nodeName"):
            key = workload_of_pod(new)
            if key is not None:
                self._watched.add(key)
                self._wake.set()

    async def run(self) -> None:
        timeout: float | None = None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()
            timeout = await self.sweep()

    async def sweep(self) -> float | None:
        """Evict every watched Workload whose gang has been unschedulable past the grace;
        returns the seconds until the next one would be (None: none is waiting)."""
        now = self.clock()
        waits: list[float] = []
        for key in sorted(self._watched):
            stuck = self.stuck(key)
            if not stuck:
                self._watched.discard(key)  # a pod event brings it back
                continue
            due = max(g.since for g in stuck) + self.grace
            failures, retry_at = self._retry.get(key, (0, due))
            due = max(due, retry_at)
            if due > now:
                waits.append(due - now)
            elif await self._evict(key, stuck):
                self._watched.discard(key)
                self._retry.pop(key, None)
            else:
                delay = min(RETRY_SECONDS * 2**failures, RETRY_MAX_SECONDS)
                self._retry[key] = (failures + 1, now + delay)
                waits.append(delay)
        for key in [k for k in self._retry if k not in self._watched]:
            del self._retry[key]  # no longer stuck: a new failure starts from the first wait
        return min(waits) if waits else None

    def stuck(self, key: str) -> list[StuckGang]:
        """The gangs of an admitted, running Workload that kube-scheduler has not bound."""
        workload = self.state.store.objects(WORKLOADS).get(key)
        admission = self.state.ledger.admission_of(key)
        if workload is None or admission is None or is_finished(workload) or is_evicted(workload):
            return []
        counts = {
            str(a.get("name")): int(a.get("count") or 0)
            for a in admission.get("podSetAssignments") or []
        }
        pods = self.state.store.pods_of(key)
        return stuck_gangs(pods, counts, c.TOPOLOGY_GATE, c.PODSET_LABEL)

    async def _describe(self, workload: Obj, gang: StuckGang) -> str:
        """One gang's failure in words: its domain and kube-scheduler's reason (the PodGroup's
        condition; the pod's own message when the group cannot be read)."""
        m = meta(workload)
        name = gang.group
        group: Obj | None = None
        try:
            group = await self.kube.get(
                Resource(self.podgroups or "", "podgroups"), name, m.get("namespace")
            )
        except API_ERRORS as error:
            log.info("cannot read PodGroup %s/%s: %s", m.get("namespace"), name, error)
        topology = ((group or {}).get("spec") or {}).get("schedulingConstraints") or {}
        keys = [t.get("key") for t in topology.get("topology") or [] if isinstance(t, dict)]
        domain = self._domain(workload, gang.podset, str(keys[0]) if keys else None)
        reason = scheduler_reason(group) or gang.reason or "no reason given"
        return (
            f"kube-scheduler cannot bind PodGroup {name} ({gang.pods} pods of PodSet "
            f"{gang.podset}) in {domain}: {reason}"
        )

    def _domain(self, workload: Obj, podset: str, level: str | None) -> str:
        key = f"{meta(workload).get('namespace')}/{meta(workload).get('name')}"
        admission = self.state.ledger.admission_of(key) or {}
        nodes = self.state.store.objects(NODES)

        def labels(node: str) -> Mapping[str, str]:
            return dict(meta(nodes.get(node) or {}).get("labels") or {})

        for assignment in admission.get("podSetAssignments") or []:
            if assignment.get("name") != podset or not assignment.get("topologyAssignment"):
                continue
            try:
                parsed = decode(assignment["topologyAssignment"], f"Workload {key}")
            except InputError:
                break
            return domain_name(parsed.levels, [d.values for d in parsed.domains], level, labels)
        return "its assigned nodes"

    async def _evict(self, key: str, stuck: list[StuckGang]) -> bool:
        workload = self.state.store.objects(WORKLOADS).get(key)
        if workload is None:
            return True
        why = "; ".join([await self._describe(workload, g) for g in stuck])
        message = f"Workload was evicted: {why}"
        kept = [
            cond
            for cond in (workload.get("status") or {}).get("conditions") or []
            if isinstance(cond, dict) and cond.get("type") != "Evicted"
        ]
        kept.append(new_condition("Evicted", "True", GANG_UNSCHEDULABLE, message))
        try:
            await write_status(self.kube, workload, {"conditions": kept})
        except API_ERRORS as error:
            log.info("evicting %s failed: %s", key, error)
            return False
        log.info("evicted %s: %s", key, why)
        self.metrics.admission_attempts.labels("evicted").inc()
        self.events.emit(workload, GANG_UNSCHEDULABLE, message, warning=True)
        owner = owner_job(workload)
        if owner is not None:
            self.state.signals.job(*owner)
        return True
