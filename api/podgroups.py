"""Kubernetes' own gangs (`serve --native-gangs`): the PodGroup of an admitted PodSet.

Kubernetes 1.36 serves ``scheduling.k8s.io/v1alpha2`` PodGroups behind feature gates
(``GenericWorkload``, ``GangScheduling``, ``TopologyAwareWorkloadScheduling``); a pod joins one
by ``spec.schedulingGroup.podGroupName``, set at creation (the field is immutable), and
kube-scheduler then binds the group all or nothing inside one domain of its topology key.
topogate writes one group per admitted Workload (every PodSet's pods: a JobSet or a leader with
its workers binds as one gang), named as the Workload so the mutating webhook can set the field
before any admission exists: ``gang.minCount`` the admitted count of all its PodSets, the
topology key the deepest level all their domains (their nodes' labels) share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .times import parse_time

GROUP = "scheduling.k8s.io"
# Newest first: 1.37 serves v1beta1 (the same fields, as far as topogate uses them).
VERSIONS = ("v1beta1", "v1alpha2")
# The label topogate puts on its PodGroups (whose they are; the owner reference ties them to
# the Workload, and the garbage collector deletes them with it).
MANAGED_LABEL = "topogate.dev/podgroup-of"
_MAX_NAME = 253


def podgroup_name(workload: str) -> str:
    """The PodGroup of a Workload: one gang of all its PodSets, named as the Workload (a DNS
    subdomain already), so the webhook can name it from a pod's marks alone."""
    return workload.lower()


def shared_level(levels: Sequence[str], placed: Sequence[Mapping[str, str]]) -> str | None:
    """The deepest of ``levels`` (node-label keys, highest first) whose value every placed
    domain (its labels) has and shares: the scheduler's topology key for the group, one
    domain of it holding every pod; None when none is shared."""
    shared: str | None = None
    for level in levels:
        values = {labels.get(level) for labels in placed}
        if len(values) != 1 or None in values:
            break
        shared = level
    return shared


def podgroup(
    api_version: str,
    workload: Mapping[str, Any],
    count: int,
    level: str | None,
) -> dict[str, Any]:
    """The PodGroup of the admitted ``workload`` (an object with name, namespace and uid): a
    gang of ``count`` pods (all its PodSets'), inside one domain of ``level`` when given."""
    m = workload.get("metadata") or {}
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": count}}}
    if level is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": level}]}
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {
            "name": podgroup_name(str(m.get("name"))),
            "namespace": m.get("namespace") or "default",
            "labels": {MANAGED_LABEL: str(m.get("name"))[:63].rstrip("-_.")},
            "ownerReferences": [
                {
                    "apiVersion": str(workload.get("apiVersion")),
                    "kind": str(workload.get("kind") or "Workload"),
                    "name": str(m.get("name")),
                    "uid": str(m.get("uid")),
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": spec,
    }


def same_spec(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the PodGroup found has the policy and constraint wanted (its spec is immutable:
    a stale one, of an earlier admission, is replaced)."""
    have, want = current.get("spec") or {}, wanted["spec"]
    return bool(
        have.get("schedulingPolicy") == want["schedulingPolicy"]
        and (have.get("schedulingConstraints") or {}).get("topology")
        == (want.get("schedulingConstraints") or {}).get("topology")
    )


# --- a gang kube-scheduler cannot bind (`serve`'s gang-failure shell) ----------------------

SCHEDULED = "PodGroupScheduled"  # the PodGroup's condition kube-scheduler writes


@dataclass(frozen=True, slots=True)
class StuckGang:
    """A PodSet whose native gang kube-scheduler has tried and not bound: every pod of it
    released, none bound, each marked unschedulable."""

    podset: str
    group: str  # the PodGroup its pods name
    pods: int
    since: float  # the latest of its pods' unschedulable transitions (POSIX seconds)
    reason: str  # the scheduler's message on one of its pods


def _unschedulable(pod: Mapping[str, Any]) -> tuple[float, str] | None:
    """(since, message) of a pod kube-scheduler marked unschedulable, else None."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (
            isinstance(cond, dict)
            and cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            since = parse_time(cond.get("lastTransitionTime"))
            return (since if since is not None else 0.0), str(cond.get("message") or "")
    return None


def stuck_gangs(
    pods: Sequence[Mapping[str, Any]], counts: Mapping[str, int], gate: str, podset_label: str
) -> list[StuckGang]:
    """The PodSets (``counts``: admitted pods per PodSet) of an admitted Workload whose gang
    kube-scheduler has not bound: at least the admitted count of live pods, every one joined
    to a PodGroup, released (no ``gate``), unbound and unschedulable. A PodSet with one pod
    bound is not a gang that failed to bind (a replaced pod is its job's business)."""
    by_podset: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        podset = str(((pod.get("metadata") or {}).get("labels") or {}).get(podset_label))
        by_podset.setdefault(podset, []).append(pod)
    out: list[StuckGang] = []
    for podset, count in sorted(counts.items()):
        members = by_podset.get(podset, [])
        if count <= 0 or len(members) < count:
            continue
        marks = []
        for pod in members:
            spec = pod.get("spec") or {}
            gates = [
                g.get("name") for g in spec.get("schedulingGates") or [] if isinstance(g, dict)
            ]
            mark = _unschedulable(pod)
            if spec.get("nodeName") or not spec.get("schedulingGroup") or gate in gates or not mark:
                break
            marks.append(mark)
        else:
            since, reason = max(marks)
            group = str(
                ((members[0].get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
            )
            out.append(StuckGang(podset, group, len(members), since, reason))
    return out


def scheduler_reason(group: Mapping[str, Any] | None) -> str | None:
    """The message of a PodGroup's ``PodGroupScheduled=False`` condition, if it has one."""
    for cond in ((group or {}).get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and (cond.get("type"), cond.get("status")) == (
            SCHEDULED,
            "False",
        ):
            return str(cond.get("message") or cond.get("reason") or "")
    return None


def domain_name(
    levels: Sequence[str],
    domains: Sequence[Sequence[str]],
    level: str | None,
    node_labels: Callable[[str], Mapping[str, str]],
) -> str:
    """The assigned domain in words: ``<level>=<value>`` when every assigned domain (its
    values per level; an assignment down to hosts ends in the hostname, whose node's labels
    give the levels above) has one value at ``level``; else the domains listed."""
    values: set[str | None] = set()
    for domain in domains:
        labels = dict(zip(levels, domain, strict=False))
        if level is not None and level not in labels and domain:
            labels = {**node_labels(domain[-1]), **labels}
        values.add(labels.get(level) if level is not None else None)
    if level is not None and len(values) == 1 and None not in values:
        return f"{level}={values.pop()}"
    return ", ".join("/".join(d) for d in domains) or "no domain"
