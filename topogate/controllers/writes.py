"""Writing a Workload's outcome: its status (conditions, admission) and its GPU sets, and the
newest copy known of each Workload written. Shared by the shells that write Workloads (the
admitter and its pending messages, the job sync, node failures, evictions)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from topogate.api.gpus import ASSIGNMENT_ANNOTATION, GpuAssignment, assignment_text
from topogate.api.objects import meta
from topogate.clock import now
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import WORKLOADS, Obj


def new_condition(
    kind: str, status: Literal["True", "False"], reason: str, message: str
) -> dict[str, Any]:
    """A condition as written, with its transition time now: the wire form of
    :class:`Condition`, built directly (three per admission; the model's validation and dump
    of arguments typed here cost more than the rest of the status)."""
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now(),
    }


async def write_status(kube: KubeApi, workload: Obj, status: Obj, *, guarded: bool = True) -> Obj:
    """Merge-patch a Workload's status; ``guarded``: only over the version we read. Returns
    the Workload as written."""
    m = meta(workload)
    body: Obj = {"status": status}
    if guarded:
        body["metadata"] = {"resourceVersion": m.get("resourceVersion")}
    return await kube.patch(WORKLOADS, m["name"], body, m.get("namespace"), subresource="status")


async def write_gpu_assignment(kube: KubeApi, workload: Obj, gpus: GpuAssignment) -> Obj:
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


class NewestCopies:
    """Per Workload, the newest copy known to a shell that writes it: as a cycle saw it, as
    the watch holds it now, or as the shell's last write returned it (the watch may not have
    brought that write back yet). Each write builds on, and is guarded by, this copy."""

    def __init__(self, stored: Mapping[str, Obj]) -> None:
        self._stored = stored
        self._returned: dict[str, Obj] = {}

    def current(self, key: str, seen: Obj) -> Obj:
        candidates = [seen, self._stored.get(key), self._returned.get(key)]
        return max((c for c in candidates if c is not None), key=_version)

    def returned(self, key: str, written: Obj) -> None:
        """Keep the Workload as a write returned it."""
        self._returned[key] = written

    def drop(self, key: str) -> None:
        self._returned.pop(key, None)


def _version(workload: Obj) -> int:
    """resourceVersion as a number, to pick the newest copy (-1 when it is not one)."""
    value = meta(workload).get("resourceVersion")
    try:
        return int(str(value))
    except ValueError:
        return -1
