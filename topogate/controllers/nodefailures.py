"""The node-failure shell: moves an admitted workload's pods off nodes that failed.

A node has failed when it was deleted, or when it has been not Ready for longer than the
grace period (30 s by default, counted from its Ready condition's lastTransitionTime, so a
restart does not start the count again). For every admitted, running workload that holds
capacity or has live pods on such a node, :func:`plan_replacement` looks for room for the lost
pods inside the domain the workload's request confines them to. Then:

- found: the new admission is held (assume, then write), written with the node added to
  ``status.unhealthyNodes``, and the workload's pods on the failed node are deleted; their
  job controller makes new ones, which the ungater releases onto the replacement nodes;
- not found: the workload is evicted (reason ``NodeFailures``, with the message saying which
  pods found no room and why); the job sync suspends its job and requeues it.

Kueue replaces one failed node and evicts on a second; any number is handled here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from topogate import clock
from topogate.admission.cycle import Held
from topogate.admission.exact import EXACT_BUDGET
from topogate.admission.podsets import build_placer, translate
from topogate.admission.replacement import ReplacementPlan, plan_replacement
from topogate.admission.request import PlacementDecision, PlacementRequest
from topogate.api import constants as c
from topogate.api.objects import condition, is_evicted, is_finished, meta, owner_job
from topogate.api.times import parse_time
from topogate.kube.errors import API_ERRORS, KubeError
from topogate.kube.events import EventRecorder
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import NODES, PODS, WORKLOADS, Obj
from topogate.metrics import Metrics
from topogate.state import ControllerState

from .writes import new_condition, write_status

log = logging.getLogger("topogate.nodefailures")

NODE_FAILURE_GRACE = 30.0
NODE_FAILURES = "NodeFailures"  # Kueue's eviction reason
RETRY_SECONDS = 1.0
DEBOUNCE_SECONDS = 0.2


@dataclass
class _Failing:
    since: float  # wall clock: when the node stopped being Ready (or was deleted)
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Affected:
    """An admitted workload with capacity or live pods on failed nodes."""

    key: str
    workload: Obj
    admission: Obj
    nodes: frozenset[str]
    pods: tuple[Obj, ...]  # its live pods bound to those nodes


def _not_ready_since(node: Obj, now: float) -> float | None:
    """When the node stopped being Ready; None while it is Ready. A node with no Ready
    condition has failed already (as in Kueue)."""
    ready = condition(node, "Ready")
    if ready is None:
        return float("-inf")
    if ready.get("status") == "True":
        return None
    since = parse_time(ready.get("lastTransitionTime"))
    return min(since, now) if since is not None else now


def _labels(node: Obj) -> dict[str, str]:
    raw = meta(node).get("labels")
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


class NodeFailures:
    def __init__(
        self,
        kube: KubeApi,
        state: ControllerState,
        metrics: Metrics,
        events: EventRecorder,
        *,
        grace: float = NODE_FAILURE_GRACE,
        exact_budget: float = EXACT_BUDGET,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.state = state
        self.metrics = metrics
        self.events = events
        self.grace = grace
        self.exact_budget = exact_budget
        self.clock = clock
        self._failing: dict[str, _Failing] = {}
        self._wake = asyncio.Event()
        state.subscribe(NODES, self._on_node)
        state.subscribe(WORKLOADS, self._on_workload)

    def _on_node(self, old: Obj | None, new: Obj | None) -> None:
        if new is None:
            if old is not None:
                name = str(meta(old).get("name"))
                self._failing[name] = _Failing(float("-inf"), _labels(old))
                self._wake.set()
            return
        name = str(meta(new).get("name"))
        since = _not_ready_since(new, self.clock())
        if since is None:
            self._failing.pop(name, None)
            return
        known = self._failing.get(name)
        self._failing[name] = _Failing(min(since, known.since) if known else since, _labels(new))
        self._wake.set()

    def _on_workload(self, old: Obj | None, new: Obj | None) -> None:
        if self._failing:  # an admission written just as a node failed is looked at too
            self._wake.set()

    def failed(self) -> dict[str, dict[str, str]]:
        """Failed nodes (past the grace period, or deleted) -> their last labels."""
        now = self.clock()
        return {n: f.labels for n, f in self._failing.items() if f.since + self.grace <= now}

    def _next_deadline(self) -> float | None:
        now = self.clock()
        future = [w for f in self._failing.values() if (w := f.since + self.grace - now) > 0]
        return min(future) if future else None

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._next_deadline())
            await asyncio.sleep(DEBOUNCE_SECONDS)  # one sweep for a burst of events
            self._wake.clear()
            if not await self.sweep():
                await asyncio.sleep(RETRY_SECONDS)
                self._wake.set()

    async def sweep(self) -> bool:
        """Handle every workload hit by a failed node; False when a write must be retried."""
        failed = self.failed()
        if not failed:
            return True
        ok = True
        for affected in self.affected(failed):
            ok = await self._handle(affected, failed) and ok
        return ok

    def affected(self, failed: Mapping[str, Mapping[str, str]]) -> list[Affected]:
        out = []
        for key in sorted(self.state.ledger.held()):
            workload = self.state.store.objects(WORKLOADS).get(key)
            admission = self.state.ledger.admission_of(key)
            if workload is None or admission is None:
                continue
            if is_finished(workload) or is_evicted(workload):
                continue
            nodes = {n for n in self.state.ledger.workload_usage(key) if n in failed}
            pods = tuple(
                p
                for p in self.state.store.pods_of(key)
                if (p.get("spec") or {}).get("nodeName") in failed
                and meta(p).get("deletionTimestamp") is None
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            )
            nodes.update(str((p.get("spec") or {}).get("nodeName")) for p in pods)
            if nodes:
                out.append(Affected(key, workload, admission, frozenset(nodes), pods))
        return out

    # --- one workload ----------------------------------------------------------------------

    def plan(self, affected: Affected, failed: Mapping[str, Mapping[str, str]]) -> ReplacementPlan:
        """The pure decision, on the current snapshot (this workload's usage held)."""
        catalog = self.state.catalogs.catalog()
        translation = translate(affected.workload, affected.key, catalog)
        if translation.pending is None:
            return ReplacementPlan(None, message=f"cannot be placed again: {translation.problem}")
        request = translation.pending.request
        flavor = _flavor_of(affected.admission)
        spec = catalog.flavors.get(flavor)
        name = request.topology or (spec.spec.topology_name if spec is not None else None)
        source = catalog.sources.get(name or "")
        if source is None or source.paths is not None:
            why = "its topology is not a label topology" if source else "its topology is gone"
            return ReplacementPlan(None, message=f"no replacement searched: {why}")
        named = [request.topology] if request.topology is not None else []
        placer = build_placer(
            self.state.ledger.snapshot(), catalog, named, clock.exact_budget(self.exact_budget)
        )

        def place(one: PlacementRequest, held: Held) -> PlacementDecision | None:
            return placer(flavor, one, held)

        bound: dict[str, dict[str, int]] = {}
        for pod in affected.pods:
            podset = str((meta(pod).get("labels") or {}).get(c.PODSET_LABEL))
            node = str((pod.get("spec") or {}).get("nodeName"))
            slot = bound.setdefault(podset, {})
            slot[node] = slot.get(node, 0) + 1
        here = {n: failed[n] for n in affected.nodes}
        return plan_replacement(
            request,
            affected.admission,
            here,
            bound,
            source.level_keys,
            self.state.catalogs.nodes_in_domain,
            place,
        )

    async def _handle(self, affected: Affected, failed: Mapping[str, Mapping[str, str]]) -> bool:
        plan = self.plan(affected, failed)
        unhealthy = _unhealthy(affected.workload, affected.nodes)
        if not plan.fits:
            return await self._evict(affected, unhealthy, plan.message)
        assert plan.admission is not None
        if plan.moves:
            self.state.ledger.reassign(affected.key, plan.admission)
            status = {"admission": plan.admission, "unhealthyNodes": unhealthy}
            try:
                await write_status(self.kube, affected.workload, status)
            except API_ERRORS as error:
                log.info("moving %s off %s failed: %s", affected.key, sorted(affected.nodes), error)
                self.state.ledger.forget_reassignment(affected.key)
                return False
            self.state.ledger.confirm(affected.key)
            moved = "; ".join(m.describe() for m in plan.moves)
            log.info("replaced failed nodes of %s: %s", affected.key, moved)
            self.metrics.admission_attempts.labels("replaced").inc()
            self.events.emit(affected.workload, "NodeReplaced", f"failed node(s): {moved}")
            self.state.signals.ungate_workload(affected.key)
        return await self._delete_pods(affected)

    async def _delete_pods(self, affected: Affected) -> bool:
        """Delete the workload's pods on the failed nodes: their controller replaces them."""
        ok = True
        for pod in affected.pods:
            m = meta(pod)
            try:
                await self.kube.delete(PODS, str(m.get("name")), m.get("namespace"))
            except API_ERRORS as error:
                if isinstance(error, KubeError) and error.not_found:
                    continue
                log.info("deleting pod %s/%s failed: %s", m.get("namespace"), m.get("name"), error)
                ok = False
        return ok

    async def _evict(self, affected: Affected, unhealthy: list[Obj], why: str) -> bool:
        message = f"Workload was evicted after node failures: {why}"
        kept = [
            cond
            for cond in (affected.workload.get("status") or {}).get("conditions") or []
            if isinstance(cond, dict) and cond.get("type") != "Evicted"
        ]
        kept.append(new_condition("Evicted", "True", NODE_FAILURES, message))
        status = {"conditions": kept, "unhealthyNodes": unhealthy}
        try:
            await write_status(self.kube, affected.workload, status)
        except API_ERRORS as error:
            log.info("evicting %s failed: %s", affected.key, error)
            return False
        log.info("evicted %s: %s", affected.key, why)
        self.metrics.admission_attempts.labels("evicted").inc()
        self.events.emit(affected.workload, NODE_FAILURES, message, warning=True)
        owner = owner_job(affected.workload)
        if owner is not None:
            self.state.signals.job(*owner)
        return True


def _flavor_of(admission: Mapping[str, Any]) -> str:
    for assignment in admission.get("podSetAssignments") or []:
        for flavor in (assignment.get("flavors") or {}).values():
            return str(flavor)
    return ""


def _unhealthy(workload: Obj, nodes: frozenset[str]) -> list[Obj]:
    """``status.unhealthyNodes`` with these nodes added (names kept unique, sorted)."""
    listed = (workload.get("status") or {}).get("unhealthyNodes") or []
    names = {str(n.get("name")) for n in listed if isinstance(n, dict) and n.get("name")}
    return [{"name": n} for n in sorted(names | nodes)]
