"""The admitter's pending messages: why each waiting Workload waits, written to its
QuotaReserved=False/Pending condition (with a warning Event) when the words changed.

The messages are a courtesy: few are written at a time and at a bounded rate
(``--pending-status-qps``), and at the client's budget they let the admissions and evictions
waiting for it go first (``ratelimit.courtesy``), so they never stand ahead of them. Each
Workload's message is written only when it changed, never twice; a message still queued when
newer words come is replaced by them (the latest wins).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from topogate.api.objects import condition
from topogate.kube.errors import API_ERRORS
from topogate.kube.events import EventRecorder
from topogate.kube.protocol import KubeApi
from topogate.kube.ratelimit import TokenBucket, checked_before_send, courtesy
from topogate.kube.resources import WORKLOADS, Obj
from topogate.state import ControllerState

from .writes import NewestCopies, new_condition, write_status

log = logging.getLogger("topogate.admitter")

PENDING = "Pending"
PENDING_WRITE_CONCURRENCY = 2
PENDING_WRITES_PER_SECOND = 20.0  # serve's --pending-status-qps


class PendingMessages:
    def __init__(
        self,
        kube: KubeApi,
        state: ControllerState,
        events: EventRecorder,
        copies: NewestCopies,
        qps: float = PENDING_WRITES_PER_SECOND,
    ) -> None:
        self.kube, self.state, self.events, self.copies = kube, state, events, copies
        self.limit = TokenBucket(qps, max(1, int(qps)))
        # Per Workload, the message written or being written.
        self._said: dict[str, str] = {}
        # Workloads whose message is to be written, oldest first, taken by a few describers
        # (which end when it is empty); a write says the newest message in ``_said`` when its
        # turn comes (latest wins). They are not chained with admissions: both are guarded by
        # the version read, so a race costs a 409 and never a lost write, and an admission
        # never waits behind them.
        self._to_describe: dict[str, Obj] = {}  # key -> the version the cycle saw
        self._describers: set[asyncio.Task[None]] = set()
        self._sending: dict[str, asyncio.Task[None]] = {}  # those being written
        # Of those, the ones whose request has left (past the client's budget): an admission
        # waits for these alone, not for one still yielding its turn (up to a second).
        self._out: set[str] = set()
        # Called with a Workload's key whenever :meth:`has_work` may have turned false for it.
        self.on_idle: Callable[[str], None] = _nothing

    @property
    def describers(self) -> frozenset[asyncio.Task[None]]:
        """The tasks writing queued messages now."""
        return frozenset(self._describers)

    def queued(self) -> int:
        """How many Workloads' messages wait for a describer."""
        return len(self._to_describe)

    def sending(self, key: str) -> asyncio.Task[None] | None:
        """The write of the Workload's message whose request is out, if any (one still
        waiting for its turn sees the admission when the turn comes, and is not sent)."""
        return self._sending.get(key) if key in self._out else None

    def has_work(self, key: str) -> bool:
        """A message for the Workload is queued or being sent."""
        return key in self._to_describe or key in self._sending

    def drop(self, key: str) -> None:
        """The Workload no longer waits (admitted, finished or gone): no words for it."""
        self._said.pop(key, None)

    def update(self, messages: Mapping[str, str]) -> None:
        """Queue a write for each message that changed (the newest wins when its turn comes)."""
        workloads = self.state.store.objects(WORKLOADS)
        for key, message in messages.items():
            if self._said.get(key) == message:
                continue  # written, or queued to be
            seen = workloads[key]
            if _says(self.copies.current(key, seen), message):
                # Older words queued, not yet sent: taken back (once sent, they are kept, so
                # the next wording sees the Workload say them and puts this back).
                if key in self._said and key not in self._sending:
                    self._said[key] = message
                continue
            self._said[key] = message  # a queued write takes the newest message
            self._to_describe.setdefault(key, seen)
        while self._to_describe and len(self._describers) < PENDING_WRITE_CONCURRENCY:
            task = asyncio.create_task(self._describe(), name="pending messages")
            self._describers.add(task)
            task.add_done_callback(self._describers.discard)

    async def _describe(self) -> None:
        """Write queued pending messages, oldest first, until none is left."""
        try:
            while self._to_describe:
                key = next(iter(self._to_describe))
                seen = self._to_describe.pop(key)
                self.on_idle(key)
                if self._said.get(key) is None or self.state.ledger.reserved(key) is not None:
                    continue  # admitted or gone meanwhile: no token spent on it
                # The other describer may be writing this Workload's older message: write
                # after it, over the version it returns (not beside it: a 409, and the newer
                # message left unwritten until some later change brought a cycle).
                while (earlier := self._sending.get(key)) is not None:
                    await asyncio.gather(earlier, return_exceptions=True)
                await self.limit.take()
                task = asyncio.create_task(self._write(key, seen), name=f"pending {key}")
                self._sending[key] = task
                try:
                    await task
                except Exception:  # API errors are handled inside; anything else is a bug
                    log.exception("writing the pending message of %s failed", key)
                finally:
                    if self._sending.get(key) is task:
                        del self._sending[key]
                        self.on_idle(key)
        finally:
            # Out of the count in the same step as the queue was seen empty: the done
            # callback runs a loop iteration later, and a cycle in between would queue a
            # message for describers that are gone (stranded until the next wording).
            self._describers.discard(asyncio.current_task())

    async def _write(self, key: str, seen: Obj) -> None:
        message = self._said.get(key)
        workload = self.copies.current(key, seen)
        if (
            message is None
            or self.state.ledger.reserved(key) is not None
            or _says(workload, message)
        ):
            return  # admitted or gone meanwhile, or already says so
        # A merge patch replaces the whole list: keep the other conditions (Evicted, ...).
        others = [
            c
            for c in (workload.get("status") or {}).get("conditions") or []
            if isinstance(c, dict) and c.get("type") != "QuotaReserved"
        ]
        reserved = new_condition("QuotaReserved", "False", PENDING, message)
        status = {"conditions": [*others, reserved]}

        def leaving() -> None:
            if key in self._out:
                return  # checked once, as it left
            if self.state.ledger.reserved(key) is not None:
                raise _Admitted  # while it waited for its turn: the admission is written
            self._out.add(key)

        try:
            # Admissions and evictions go first at the client's budget (a second at most).
            with courtesy(), checked_before_send(leaving):
                written = await write_status(self.kube, workload, status)
            self.copies.returned(key, written)
        except _Admitted:
            return
        except API_ERRORS as error:
            log.debug("pending status of %s not written: %s", key, error)
            if self._said.get(key) == message:
                del self._said[key]  # the next wording writes it again
                self.state.signals.admit()  # and comes without waiting for another change
            return
        finally:
            self._out.discard(key)
        self.events.emit(workload, PENDING, message, warning=True)


class _Admitted(Exception):
    """The Workload was admitted while its message waited for its turn: not sent."""


def _nothing(key: str) -> None:
    pass


def _says(workload: Obj, message: str) -> bool:
    """The Workload already waits with this message."""
    current = condition(workload, "QuotaReserved")
    return (
        current is not None
        and current.get("status") == "False"
        and current.get("reason") == PENDING
        and current.get("message") == message
    )
