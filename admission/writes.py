"""Writing a Workload's outcome: its status (conditions, admission) and its GPU sets. Shared by
the admitter and the job sync, the two shells that write Workloads."""

from __future__ import annotations

from typing import Any, Literal

from topogate.api.gpus import ASSIGNMENT_ANNOTATION, GpuAssignment, assignment_text
from topogate.api.models import Condition
from topogate.api.objects import meta
from topogate.clock import now
from topogate.kube.protocol import KubeApi
from topogate.kube.resources import WORKLOADS, Obj


def new_condition(
    kind: str, status: Literal["True", "False"], reason: str, message: str
) -> dict[str, Any]:
    """A condition as written, with its transition time now."""
    return Condition(
        type=kind, status=status, reason=reason, message=message, last_transition_time=now()
    ).to_wire()


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
