"""LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): one Workload per group (a leader and its
workers), as Kueue's ``pkg/controller/jobs/leaderworkerset``. It has no suspend switch: its
pods are gated by the pod webhook and released by the ungater once their group is admitted.

PodSets, as Kueue builds them: with a ``leaderTemplate``, ``leader`` (1 pod) then ``worker``
(size - 1 pods, from the ``workerTemplate``); without one, ``main`` (size pods). A pod's rank
in its PodSet is its ``worker-index`` label (workers count from 1 when there is a leader: the
webhook writes Kueue's ``pod-index-offset: "1"`` on the worker template). Leader and workers
share one domain when both templates carry the same ``podset-group-name`` and topology.

The Workload of group ``i`` is ``leaderworkerset-<name>-<i>-<hash>``: as Kueue's, except that
the hash is of the name and index, not the object's uid, which the pod webhook (naming the
Workload on each pod) cannot know.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from ..constants import (
    LWS_GROUP_INDEX,
    LWS_NAME_LABEL,
    LWS_WORKER_INDEX,
    POD_INDEX_OFFSET,
    PODSET_LABEL,
    QUEUE_LABELS,
)
from ..errors import InputError
from ..models import PodSet
from .base import Gated, JsonPatch, Obj, PodMarks, as_map, queue_name
from .reading import count, inherit, mapping, object_topology, podset

LEADER, WORKER, MAIN = "leader", "worker", "main"
LEADER_PATH = "spec.leaderWorkerTemplate.leaderTemplate"
WORKER_PATH = "spec.leaderWorkerTemplate.workerTemplate"
# Kueue's sanity bound on spec.replicas: one Workload per replica.
MAX_REPLICAS = 1_000_000


def group_workload_name(name: str, index: int | str) -> str:
    """The Workload of group ``index`` of the LeaderWorkerSet ``name`` (63 characters at most:
    it is also a label value)."""
    digest = hashlib.sha256(f"LeaderWorkerSet\n{name}\n{index}".encode()).hexdigest()[:5]
    return f"leaderworkerset-{name}-{index}"[:57].rstrip(".-") + f"-{digest}"


class LeaderWorkerSetKind(Gated):
    kind = "LeaderWorkerSet"
    group = "leaderworkerset.x-k8s.io"
    version = "v1"
    plural = "leaderworkersets"
    template_pattern = "spec.leaderWorkerTemplate.{leaderTemplate,workerTemplate}"
    pod_index_label = LWS_WORKER_INDEX

    def podsets(self, obj: Mapping[str, Any], where: str) -> list[tuple[PodSet, str]]:
        spec = mapping(obj.get("spec"), where, "spec")
        replicas = count(spec.get("replicas"), where, "spec.replicas")
        if replicas > MAX_REPLICAS:
            raise InputError(
                f"Invalid value: {replicas}: must be at most {MAX_REPLICAS} (one Workload each)",
                where=where,
                field="spec.replicas",
            )
        lwt = mapping(spec.get("leaderWorkerTemplate"), where, "spec.leaderWorkerTemplate")
        size = count(lwt.get("size"), where, "spec.leaderWorkerTemplate.size")
        if size < 1:
            raise InputError(
                "Invalid value: 0: must be at least 1",
                where=where,
                field="spec.leaderWorkerTemplate.size",
            )
        inherited = object_topology(obj, where)
        worker = mapping(lwt.get("workerTemplate"), where, WORKER_PATH)
        worker = inherit(worker, inherited, where, WORKER_PATH)
        out: list[tuple[PodSet, str]] = []
        if lwt.get("leaderTemplate") is None:
            return [(podset(MAIN, size, worker, where, WORKER_PATH), WORKER_PATH)]
        leader = mapping(lwt.get("leaderTemplate"), where, LEADER_PATH)
        leader = inherit(leader, inherited, where, LEADER_PATH)
        out.append((podset(LEADER, 1, leader, where, LEADER_PATH), LEADER_PATH))
        out.append((podset(WORKER, size - 1, worker, where, WORKER_PATH), WORKER_PATH))
        return out

    def pod_templates(self, job: Obj) -> list[tuple[str, Obj]]:
        lwt = job.setdefault("spec", {}).setdefault("leaderWorkerTemplate", {})
        worker = lwt.setdefault("workerTemplate", {})
        if lwt.get("leaderTemplate") is None:
            return [(MAIN, worker)]
        return [(LEADER, lwt["leaderTemplate"]), (WORKER, worker)]

    def template_fields(self, obj: Mapping[str, Any]) -> list[tuple[str, Any]]:
        lwt = as_map(as_map(obj.get("spec")).get("leaderWorkerTemplate"))
        out = [(LEADER_PATH, lwt.get("leaderTemplate"))] if "leaderTemplate" in lwt else []
        return [*out, (WORKER_PATH, lwt.get("workerTemplate"))]

    # --- gated -------------------------------------------------------------------------------

    def create_patch(self, obj: Mapping[str, Any]) -> JsonPatch:
        """As Kueue's LeaderWorkerSet webhook: each template gets the queue label (so that
        its pods are recognised as queued) and topogate's PodSet label (so that the pod
        webhook knows a leader from a worker); with a leader, the worker template counts
        its ranks from 1. The shape is checked by the validating webhook; a template that
        is not an object is left alone."""
        queue = queue_name(obj)
        lwt = as_map(as_map(obj.get("spec")).get("leaderWorkerTemplate"))
        if queue is None or not isinstance(lwt.get("workerTemplate"), dict):
            return []
        marked = copy.deepcopy(dict(lwt))
        job: Obj = {"spec": {"leaderWorkerTemplate": marked}}
        if "leaderTemplate" in marked and not isinstance(marked["leaderTemplate"], dict):
            return []
        labels_of_obj = as_map(as_map(obj.get("metadata")).get("labels"))
        queue_key = next(k for k in QUEUE_LABELS if labels_of_obj.get(k))
        for name, template in self.pod_templates(job):
            meta = template.setdefault("metadata", {})
            if not isinstance(meta.get("labels"), dict):
                meta["labels"] = {}
            meta["labels"][PODSET_LABEL] = name
            meta["labels"][queue_key] = queue
            if name == WORKER:
                if not isinstance(meta.get("annotations"), dict):
                    meta["annotations"] = {}
                meta["annotations"].setdefault(POD_INDEX_OFFSET, "1")
        if marked == lwt:
            return []
        return [{"op": "add", "path": "/spec/leaderWorkerTemplate", "value": marked}]

    def check_update(self, old: Mapping[str, Any], new: Mapping[str, Any], where: str) -> None:
        """As Kueue's LeaderWorkerSet webhook (with LWSImmutableGroupSize): a queued set's
        templates and group size are immutable; its Workloads hold the PodSets made from
        them, and a new template's pods would lack the marks that gate them."""
        before = as_map(as_map(old.get("spec")).get("leaderWorkerTemplate"))
        after = as_map(as_map(new.get("spec")).get("leaderWorkerTemplate"))
        for name, path in (
            ("leaderTemplate", LEADER_PATH),
            ("workerTemplate", WORKER_PATH),
            ("size", "spec.leaderWorkerTemplate.size"),
        ):
            if before.get(name, 1 if name == "size" else None) != after.get(
                name, 1 if name == "size" else None
            ):
                raise InputError(
                    "Invalid value: field is immutable while the LeaderWorkerSet is queued",
                    where=where,
                    field=path,
                )

    def groups(self, job: Mapping[str, Any]) -> list[str]:
        spec = as_map(job.get("spec"))
        replicas = spec.get("replicas", 1)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            return []
        name = str(as_map(job.get("metadata")).get("name"))
        return [group_workload_name(name, i) for i in range(min(replicas, MAX_REPLICAS))]

    def pod_marks(self, pod: Mapping[str, Any]) -> PodMarks | None:
        meta = as_map(pod.get("metadata"))
        labels = as_map(meta.get("labels"))
        name, podset_name = labels.get(LWS_NAME_LABEL), labels.get(PODSET_LABEL)
        if not name or not podset_name:
            return None
        index = labels.get(LWS_GROUP_INDEX)
        if index is None and labels.get(LWS_WORKER_INDEX) == "0":
            # A leader, before LeaderWorkerSet's own webhook labelled it: its group is the
            # ordinal of its StatefulSet pod name, as that webhook reads it.
            found = re.fullmatch(r".*-([0-9]+)", str(meta.get("name") or ""))
            index = found.group(1) if found else None
        if index is None or not str(index).isdigit():
            return None
        return PodMarks(group_workload_name(str(name), int(index)), str(podset_name))

    def pod_owner(self, pod: Mapping[str, Any]) -> str | None:
        meta = as_map(pod.get("metadata"))
        name = as_map(meta.get("labels")).get(LWS_NAME_LABEL)
        if not name:
            return None
        return f"{meta.get('namespace') or 'default'}/{name}"


LEADERWORKERSET = LeaderWorkerSetKind()
