"""Kubernetes' own gangs (`serve --native-gangs`): the PodGroup of an admitted PodSet.

Kubernetes 1.36 serves ``scheduling.k8s.io/v1alpha2`` PodGroups behind feature gates
(``GenericWorkload``, ``GangScheduling``, ``TopologyAwareWorkloadScheduling``); a pod joins one
by ``spec.schedulingGroup.podGroupName``, set at creation (the field is immutable), and
kube-scheduler then binds the group all or nothing inside one domain of its topology key.
topogate names the group of each PodSet after its Workload, so the mutating webhook can set
the field before any admission exists, and writes the group on admission: ``gang.minCount``
the admitted count, the topology key the deepest level all its domains (their nodes' labels) share.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

GROUP = "scheduling.k8s.io"
# Newest first: 1.37 serves v1beta1 (the same fields, as far as topogate uses them).
VERSIONS = ("v1beta1", "v1alpha2")
# The label topogate puts on its PodGroups (whose they are; the owner reference ties them to
# the Workload, and the garbage collector deletes them with it).
MANAGED_LABEL = "topogate.dev/podgroup-of"
_MAX_NAME = 253


def podgroup_name(workload: str, podset: str) -> str:
    """The PodGroup of a Workload's PodSet: ``<workload>-<podset>``, a DNS subdomain (both
    parts are); one too long keeps its head and a hash of the whole."""
    name = f"{workload}-{podset}".lower()
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: _MAX_NAME - 11].rstrip('-.')}-{digest}"


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
    podset: str,
    count: int,
    level: str | None,
) -> dict[str, Any]:
    """The PodGroup of ``podset`` of the admitted ``workload`` (an object with name, namespace
    and uid): a gang of ``count`` pods, inside one domain of ``level`` when one is given."""
    m = workload.get("metadata") or {}
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": count}}}
    if level is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": level}]}
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {
            "name": podgroup_name(str(m.get("name")), podset),
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
