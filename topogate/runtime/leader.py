"""Leader election with a coordination.k8s.io/v1 Lease, with client-go's semantics.

One replica holds the Lease and runs the controller; the others stand by and retry every
``retry_period``. A Lease is taken when it does not exist (create; 409 means another replica
won), when it is held by us, when nobody holds it, or when it has expired. Expiry is judged
by our own clock, as in client-go: we remember when we last saw the record change and count
``leaseDurationSeconds`` from then, so skewed clocks between replicas do not matter. Every
write is a PUT carrying the read resourceVersion, so of two replicas racing for the same
record one gets 409 and loses.

The leader renews every ``retry_period``; when no renewal has succeeded for
``renew_deadline`` seconds, or another replica is seen holding the Lease, leadership is lost:
the leading work is cancelled and ``LeadershipLost`` raised, so the process exits and its
Deployment restarts it (as controller-runtime does). When the work ends by itself or is
cancelled (SIGTERM), the Lease is released (holder cleared, duration 1 s: client-go's
ReleaseOnCancel), so a standby takes over at its next retry.

The installed ``kubernetes.aio.leaderelection`` was not used: it refuses periods under one
second, never releases, keeps no leaseTransitions, writes local wall time as UTC, is untyped,
and needs the generated-model client rather than our JSON transport.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from topogate.clock import micro_now
from topogate.kube.errors import KubeError
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import LEASES, Obj
from topogate.metrics import Metrics

log = logging.getLogger("topogate.leader")

# client-go's JitterFactor: a standby waits retry_period * (1 + rand * 1.2) between tries.
JITTER_FACTOR = 1.2


class LeadershipLost(Exception):
    """The Lease could not be renewed in time, or another replica took it."""


class LeaderElector:
    """Elects one leader among replicas sharing ``namespace/name`` (a Lease)."""

    def __init__(
        self,
        kube: KubeApi,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        metrics: Metrics | None = None,
        release_on_cancel: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not identity:
            raise ValueError("identity must not be empty")
        if lease_duration <= renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if renew_deadline <= retry_period:
            raise ValueError("renew_deadline must be greater than retry_period")
        if retry_period <= 0:
            raise ValueError("retry_period must be positive")
        self._kube = kube
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.release_on_cancel = release_on_cancel
        self._metrics = metrics
        self._clock = clock
        self._leading = asyncio.Event()
        # The Lease spec as last read or written, and when (monotonic) it last changed.
        self._observed: Obj | None = None
        self._observed_at = 0.0
        self._standing_by_for: str | None = None
        # When (monotonic) the last successful acquire or renew request was sent.
        self._renewed_at = 0.0
        self._failing = False
        self._set_gauge(0)

    # -- public state ------------------------------------------------------------------

    @property
    def leading(self) -> asyncio.Event:
        """Set while this replica holds the Lease."""
        return self._leading

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    def holds_lease(self) -> bool:
        """Leading, and renewed recently enough that no other replica can have taken the
        Lease: within ``renew_deadline`` of the last renewal sent. Another replica may take it
        only ``lease_duration`` after it saw that renewal, so a write sent now lands with
        ``lease_duration - renew_deadline`` to spare. A leader paused past its deadline (a
        stopped process, a starved loop) fails this before its renew loop even runs."""
        return self.is_leader and self._clock() < self._renewed_at + self.renew_deadline

    @property
    def leader_identity(self) -> str | None:
        """The holder as last observed (None when unknown or released)."""
        holder = (self._observed or {}).get("holderIdentity")
        return str(holder) if holder else None

    # -- the loop ----------------------------------------------------------------------

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Wait to lead, then run ``lead()`` while renewing the Lease.

        Raises ``LeadershipLost`` (after cancelling ``lead()``) when leadership is lost.
        When ``lead()`` returns or raises, or ``run`` is cancelled, the Lease is released and
        the result, exception or cancellation propagates.
        """
        try:
            await self._acquire()
        except asyncio.CancelledError:
            # A create or update may have gone through while its answer was cut off.
            if self.release_on_cancel:
                await self._release_quietly()
            raise

        async def leading() -> None:
            await lead()

        lead_task = asyncio.create_task(leading())
        renew_task = asyncio.create_task(self._renew_loop())
        try:
            await asyncio.wait({lead_task, renew_task}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            await _cancel(renew_task)
            await _cancel(lead_task)
            if self.release_on_cancel:
                await self._release_quietly()
            else:
                self._set_leading(False)
            raise
        if renew_task.done():
            reason = renew_task.result()
            self._set_leading(False)
            log.error("lost leadership of Lease %s/%s: %s", self.namespace, self.name, reason)
            await _cancel(lead_task)
            raise LeadershipLost(reason)
        await _cancel(renew_task)
        await self._release_quietly()
        lead_task.result()  # re-raises what lead() raised

    async def _acquire(self) -> None:
        while True:
            started = self._clock()
            if await self._attempt(self.renew_deadline):
                self._renewed_at = started
                self._set_leading(True)
                log.info("acquired Lease %s/%s as %s", self.namespace, self.name, self.identity)
                return
            holder = self.leader_identity
            if holder and holder != self._standing_by_for:
                self._standing_by_for = holder
                log.info(
                    "standing by: Lease %s/%s is held by %s", self.namespace, self.name, holder
                )
            await asyncio.sleep(self.retry_period * (1 + random.random() * JITTER_FACTOR))

    async def _renew_loop(self) -> str:
        """Renew until leadership is lost; returns why."""
        while True:
            await asyncio.sleep(self.retry_period)
            started = self._clock()
            remaining = self._renewed_at + self.renew_deadline - started
            if remaining <= 0:
                return f"not renewed for {self.renew_deadline:g}s"
            if await self._attempt(remaining):
                # Counted from when the request was sent: the others judge expiry from when
                # they saw the change, which is no earlier.
                self._renewed_at = started
                continue
            holder = self.leader_identity
            if holder and holder != self.identity:
                return f"Lease taken by {holder}"

    async def _attempt(self, limit: float) -> bool:
        """One try to acquire or renew, bounded by ``limit`` seconds; errors count as failure."""
        try:
            async with asyncio.timeout(limit):
                won = await self.try_acquire_or_renew()
        except Exception as error:  # API or transport failures are retried, never fatal
            self._report_failure(error)
            return False
        self._failing = False
        return won

    def _report_failure(self, error: BaseException) -> None:
        level = logging.DEBUG if self._failing else logging.WARNING
        log.log(level, "Lease %s/%s: %s", self.namespace, self.name, str(error) or repr(error))
        self._failing = True

    # -- one step ----------------------------------------------------------------------

    async def try_acquire_or_renew(self) -> bool:
        """client-go's tryAcquireOrRenew: True when we hold the Lease after this call."""
        now = micro_now()
        desired: Obj = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        }
        try:
            lease = await self._kube.get(LEASES, self.name, self.namespace)
        except KubeError as error:
            if not error.not_found:
                raise
            body: Obj = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": desired,
            }
            try:
                created = await self._kube.create(LEASES, body, self.namespace)
            except KubeError as create_error:
                if create_error.conflict:  # another replica created it first
                    return False
                raise
            self._observe(created.get("spec") or {})
            return True

        spec: Obj = lease.get("spec") or {}
        self._observe(spec)
        holder = spec.get("holderIdentity") or ""
        held_by_us = holder == self.identity
        if holder and not held_by_us and self._lease_valid(spec):
            return False

        transitions = int(spec.get("leaseTransitions") or 0)
        if held_by_us:
            desired["acquireTime"] = spec.get("acquireTime") or now
            desired["leaseTransitions"] = transitions
        else:
            desired["leaseTransitions"] = transitions + 1
        lease["spec"] = {**spec, **desired}
        try:
            updated = await self._kube.replace(LEASES, lease)
        except KubeError as error:
            if error.conflict:  # someone wrote in between: lost the race
                return False
            raise
        self._observe(updated.get("spec") or {})
        return True

    def _observe(self, spec: Obj) -> None:
        if spec != self._observed:
            self._observed = dict(spec)
            self._observed_at = self._clock()

    def _lease_valid(self, spec: Obj) -> bool:
        duration = float(spec.get("leaseDurationSeconds") or 0)
        return self._observed_at + duration > self._clock()

    async def release(self) -> bool:
        """Give the Lease up if we hold it (holder cleared, duration 1 s); True when done or
        when it was not ours."""
        self._set_leading(False)
        try:
            lease = await self._kube.get(LEASES, self.name, self.namespace)
        except KubeError as error:
            if error.not_found:
                return True
            raise
        spec: Obj = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            return True
        now = micro_now()
        lease["spec"] = {
            **spec,
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
        }
        try:
            updated = await self._kube.replace(LEASES, lease)
        except KubeError as error:
            if error.conflict:
                return False
            raise
        self._observe(updated.get("spec") or {})
        log.info("released Lease %s/%s", self.namespace, self.name)
        return True

    async def _release_quietly(self) -> None:
        try:
            async with asyncio.timeout(self.renew_deadline):
                if not await self.release():
                    log.warning("could not release Lease %s/%s", self.namespace, self.name)
        except Exception as error:
            log.warning("could not release Lease %s/%s: %s", self.namespace, self.name, error)

    def _set_leading(self, leading: bool) -> None:
        if leading:
            self._leading.set()
            self._standing_by_for = None
        else:
            self._leading.clear()
        self._set_gauge(1 if leading else 0)

    def _set_gauge(self, value: int) -> None:
        if self._metrics is not None:
            self._metrics.leader.set(value)


async def _cancel(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait for it to end; its own outcome is dropped (logged)."""
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled() and task.exception() is not None:
        log.debug("task ended with %r while being cancelled", task.exception())
