"""Ray (ray.io/v1): RayCluster and RayJob, both suspended through ``spec.suspend``, as Kueue's
``pkg/controller/jobs/raycluster`` and ``pkg/controller/jobs/rayjob``.

PodSets, as Kueue builds them: ``head`` (1 pod, ``headGroupSpec.template``), then one per
worker group in spec order, named after its ``groupName`` lower-cased, with replicas
(default 1) x ``numOfHosts`` pods (a queued cluster does not autoscale, so ``replicas`` must
lie within ``minReplicas`` and ``maxReplicas``, or KubeRay would run another count); with GCS
fault tolerance the head also counts KubeRay's Redis cleanup Job. A RayJob has its
``rayClusterSpec``'s PodSets, then ``submitter`` (1 pod) when it submits through a Kubernetes
Job (``submissionMode: K8sJobMode``, the default): its ``submitterPodTemplate``, or KubeRay's
default submitter when it has none; in ``SidecarMode`` the head PodSet counts the submitter
container KubeRay adds to the head pod.

Refused, as Kueue's webhooks refuse them: ``enableInTreeAutoscaling`` (Kueue allows it only
as an elastic job, which topogate does not implement), a worker group called ``head``, more
PodSets than a Workload holds, two groups of one PodSet name; a RayJob on an existing cluster
(``clusterSelector``) that also brings a ``rayClusterSpec``, one with neither, or one that
keeps its cluster when it finishes (``shutdownAfterJobFinishes`` false: the cluster would
hold its quota). A RayJob with only a ``clusterSelector`` is left alone (Kueue skips it): it
runs on a cluster admitted on its own. A RayCluster a RayJob made is its RayJob's (the
registry's ``queue_name``).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

from ..constants import MAX_INT32
from ..errors import InputError
from ..models import MAX_PODSETS, PodSet
from ..quantity import QuantityError, parse_quantity
from .base import Obj, Suspendable, as_map
from .reading import count, inherit, mapping, object_topology, podset

HEAD, SUBMITTER = "head", "submitter"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
K8S_JOB_MODE, SIDECAR_MODE = "K8sJobMode", "SidecarMode"
# KubeRay's Redis cleanup Job, run when GCS fault tolerance is on (the annotation, or
# spec.gcsFaultToleranceOptions): Kueue counts its requests on the head.
FT_ANNOTATION = "ray.io/ft-enabled"
REDIS_CLEANUP_REQUESTS = {"cpu": "200m", "memory": "256Mi"}
# KubeRay's submitter container (controllers/ray/utils: SubmitterContainerName) and the
# resources it gives it when the RayJob names none (common/job.go), as Kueue counts them.
SUBMITTER_CONTAINER = "ray-job-submitter"
SUBMITTER_RESOURCES: Obj = {
    "limits": {"cpu": "1", "memory": "1Gi"},
    "requests": {"cpu": "500m", "memory": "200Mi"},
}


def _template(group: Mapping[str, Any], where: str, path: str) -> Mapping[str, Any]:
    return mapping(group.get("template"), where, f"{path}.template")


def cluster_podsets(
    obj: Mapping[str, Any], spec: Mapping[str, Any], where: str, base: str
) -> list[tuple[PodSet, str]]:
    """The PodSets of a RayClusterSpec found at ``base`` (``spec`` of a RayCluster,
    ``spec.rayClusterSpec`` of a RayJob): head, then each worker group in order."""
    if spec.get("enableInTreeAutoscaling") is True:
        raise InputError(
            "Invalid value: true: a queued Ray cluster runs with the pods it was admitted "
            "with; set it to false and fix each worker group's replicas (Kueue allows "
            "autoscaling only for elastic jobs, which topogate does not admit)",
            where=where,
            field=f"{base}.enableInTreeAutoscaling",
        )
    inherited = object_topology(obj, where)
    head_path = f"{base}.headGroupSpec"
    head = mapping(spec.get("headGroupSpec"), where, head_path)
    path = f"{head_path}.template"
    template = inherit(_template(head, where, head_path), inherited, where, path)
    if _fault_tolerant(obj, spec):
        template = _with_redis_cleanup(template, where, path)
    out = [(podset(HEAD, 1, template, where, path), path)]
    groups = spec.get("workerGroupSpecs")
    if groups is None:
        groups = []
    if not isinstance(groups, list):
        raise InputError("must be a list", where=where, field=f"{base}.workerGroupSpecs")
    if len(groups) + 1 > MAX_PODSETS:
        raise InputError(
            f"Too many: {len(groups) + 1}: must have at most {MAX_PODSETS} items (the head "
            "and each worker group are a PodSet of one Workload)",
            where=where,
            field=f"{base}.workerGroupSpecs",
        )
    seen = {HEAD}
    for i, raw in enumerate(groups):
        group_path = f"{base}.workerGroupSpecs[{i}]"
        group = mapping(raw, where, group_path)
        name = _group_name(group, seen, where, group_path)
        seen.add(name)
        pods = _group_pods(group, where, group_path)
        path = f"{group_path}.template"
        template = inherit(_template(group, where, group_path), inherited, where, path)
        out.append((podset(name, pods, template, where, path), path))
    return out


def _group_name(group: Mapping[str, Any], seen: set[str], where: str, path: str) -> str:
    """A worker group's PodSet name: its ``groupName`` lower-cased, as Kueue names it (a
    PodSetReference), neither the head's nor another group's."""
    name = group.get("groupName")
    if not isinstance(name, str) or not name:
        raise InputError("is required", where=where, field=f"{path}.groupName")
    if name == HEAD:
        raise InputError(
            f'Forbidden: "{HEAD}" is reserved for the head group',
            where=where,
            field=f"{path}.groupName",
        )
    lower = name.lower()
    if len(lower) > 63 or DNS_LABEL.fullmatch(lower) is None:
        raise InputError(
            f"Invalid value: {name!r}: lower-cased, it names a PodSet, which must be a DNS "
            "label (at most 63 of a-z, 0-9 and '-', alphanumeric at both ends)",
            where=where,
            field=f"{path}.groupName",
        )
    if lower in seen:
        raise InputError(
            f"Duplicate value: {name!r}: each worker group is a PodSet named {lower!r} (the "
            "group name, lower-cased)",
            where=where,
            field=f"{path}.groupName",
        )
    return lower


def _group_pods(group: Mapping[str, Any], where: str, path: str) -> int:
    """A worker group's pods as Kueue counts them: replicas (1 when absent) x numOfHosts."""
    pods = count(group.get("replicas"), where, f"{path}.replicas")
    low = count(group.get("minReplicas"), where, f"{path}.minReplicas", 0)
    high = count(group.get("maxReplicas"), where, f"{path}.maxReplicas", MAX_INT32)
    if not low <= pods <= high:
        # KubeRay runs replicas clamped to [minReplicas, maxReplicas]; Kueue counts
        # replicas alone, and pods beyond the count would wait for ever.
        raise InputError(
            f"Invalid value: {pods}: must be within minReplicas {low} and maxReplicas "
            f"{high}, or KubeRay runs {min(max(pods, low), high)} where the Workload counts "
            f"{pods} (a queued cluster runs exactly replicas)",
            where=where,
            field=f"{path}.replicas",
        )
    hosts = count(group.get("numOfHosts"), where, f"{path}.numOfHosts")
    return pods * hosts if hosts > 1 else pods  # a replica is a group of numOfHosts pods


def _fault_tolerant(obj: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """KubeRay's IsGCSFaultToleranceEnabled, on the object's own annotations (a RayJob's,
    which KubeRay copies to its cluster)."""
    annotations = as_map(as_map(obj.get("metadata")).get("annotations"))
    enabled = str(annotations.get(FT_ANNOTATION, "")).lower() == "true"
    return enabled or spec.get("gcsFaultToleranceOptions") is not None


def _with_redis_cleanup(template: Mapping[str, Any], where: str, path: str) -> Obj:
    """The head template with its Ray container (the first) asking at least what KubeRay's
    Redis cleanup Job asks, as Kueue counts it (the larger of the two, per resource)."""
    out = copy.deepcopy(dict(template))
    containers = as_map(out.get("spec")).get("containers")
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
        raise InputError(
            "Required value: the head needs its Ray container (the first) to count the Redis "
            "cleanup of GCS fault tolerance on",
            where=where,
            field=f"{path}.spec.containers",
        )
    resources = containers[0].setdefault("resources", {})
    requests = resources.get("requests")
    requests = dict(requests) if isinstance(requests, Mapping) else {}
    for name, least in REDIS_CLEANUP_REQUESTS.items():
        try:
            smaller = name not in requests or parse_quantity(requests[name]) < parse_quantity(least)
        except QuantityError as error:
            raise InputError(
                str(error), where=where, field=f"{path}.spec.containers[0].resources.requests"
            ) from None
        if smaller:
            requests[name] = least
    resources["requests"] = requests
    return out


def cluster_templates(spec: Obj) -> list[tuple[str, Obj]]:
    """(PodSet name, pod template) of a RayClusterSpec, as references into ``spec``."""
    out = [(HEAD, spec.setdefault("headGroupSpec", {}).setdefault("template", {}))]
    for group in spec.get("workerGroupSpecs") or []:
        out.append((str(group.get("groupName")).lower(), group.setdefault("template", {})))
    return out


def cluster_fields(spec: Mapping[str, Any], base: str) -> list[tuple[str, Any]]:
    """(field path, value) of each pod template of a RayClusterSpec, tolerant of any shape."""
    out = [(f"{base}.headGroupSpec.template", as_map(spec.get("headGroupSpec")).get("template"))]
    groups = spec.get("workerGroupSpecs")
    for i, group in enumerate(groups if isinstance(groups, list) else []):
        out.append((f"{base}.workerGroupSpecs[{i}].template", as_map(group).get("template")))
    return out


class RayClusterKind(Suspendable):
    kind = "RayCluster"
    group = "ray.io"
    version = "v1"
    plural = "rayclusters"
    template_pattern = "spec.{headGroupSpec,workerGroupSpecs[*]}.template"

    def podsets(self, obj: Mapping[str, Any], where: str) -> list[tuple[PodSet, str]]:
        return cluster_podsets(obj, mapping(obj.get("spec"), where, "spec"), where, "spec")

    def pod_templates(self, job: Obj) -> list[tuple[str, Obj]]:
        return cluster_templates(job.setdefault("spec", {}))

    def template_fields(self, obj: Mapping[str, Any]) -> list[tuple[str, Any]]:
        return cluster_fields(as_map(obj.get("spec")), "spec")

    def finished(self, job: Mapping[str, Any]) -> str | None:
        """Never, as Kueue's: a RayCluster serves until it is deleted (a failed one keeps
        its admission until then)."""
        return None


class RayJobKind(Suspendable):
    kind = "RayJob"
    group = "ray.io"
    version = "v1"
    plural = "rayjobs"
    template_pattern = (
        "spec.{rayClusterSpec.headGroupSpec.template,rayClusterSpec.workerGroupSpecs[*].template,"
        "submitterPodTemplate}"
    )

    def skipped(self, obj: Mapping[str, Any]) -> bool:
        """Kueue's RayJob ``Skip``: a RayJob that runs on an existing cluster (only a
        ``clusterSelector``) uses that cluster's admission and is not queued itself."""
        spec = as_map(obj.get("spec"))
        return bool(spec.get("clusterSelector")) and spec.get("rayClusterSpec") is None

    @staticmethod
    def _mode(spec: Mapping[str, Any]) -> str:
        return str(spec.get("submissionMode") or K8S_JOB_MODE)  # the CRD's default

    def podsets(self, obj: Mapping[str, Any], where: str) -> list[tuple[PodSet, str]]:
        spec = mapping(obj.get("spec"), where, "spec")
        if spec.get("clusterSelector") and spec.get("rayClusterSpec") is not None:
            raise InputError(
                "Invalid value: a queued RayJob brings its own cluster (spec.rayClusterSpec) "
                "and may not also select an existing one; drop one of the two",
                where=where,
                field="spec.clusterSelector",
            )
        if spec.get("rayClusterSpec") is None:
            raise InputError(
                "Required value: a queued RayJob needs the cluster it runs on (or a "
                "spec.clusterSelector to run on an existing cluster, which is not queued)",
                where=where,
                field="spec.rayClusterSpec",
            )
        shutdown = spec.get("shutdownAfterJobFinishes", False)
        if shutdown is not True:
            raise InputError(
                f"Invalid value: {json.dumps(shutdown)}: a queued RayJob must delete its "
                "cluster when it finishes (set it to true), or the cluster would keep its quota",
                where=where,
                field="spec.shutdownAfterJobFinishes",
            )
        base = "spec.rayClusterSpec"
        cluster = mapping(spec.get("rayClusterSpec"), where, base)
        out = cluster_podsets(obj, cluster, where, base)
        mode = self._mode(spec)
        if mode == SIDECAR_MODE:
            # KubeRay adds the submitter to the head pod, with its default resources.
            head, path = out[0]
            found = as_map(head.template.get("spec")).get("containers")
            if found is not None and not isinstance(found, list):
                raise InputError("must be a list", where=where, field=f"{path}.spec.containers")
            containers = list(found or [])
            containers.append(
                {"name": SUBMITTER_CONTAINER, "resources": copy.deepcopy(SUBMITTER_RESOURCES)}
            )
            template = copy.deepcopy(head.template)
            template.setdefault("spec", {})["containers"] = containers
            head.template = template
        if mode == K8S_JOB_MODE:
            path = "spec.submitterPodTemplate"
            given = spec.get("submitterPodTemplate")
            submitter = (
                mapping(given, where, path)
                if given is not None
                else self._default_submitter(cluster)
            )
            submitter = inherit(submitter, object_topology(obj, where), where, path)
            out.append((podset(SUBMITTER, 1, submitter, where, path), path))
        return out

    @staticmethod
    def _default_submitter(cluster: Mapping[str, Any]) -> Obj:
        """KubeRay's submitter pod when the RayJob names none: the head's image (defensive
        against version skew, as KubeRay says), its default resources, never restarted."""
        head = as_map(as_map(as_map(cluster.get("headGroupSpec")).get("template")).get("spec"))
        containers = head.get("containers")
        first = as_map(containers[0]) if isinstance(containers, list) and containers else {}
        resources = copy.deepcopy(SUBMITTER_RESOURCES)
        container: Obj = {"name": SUBMITTER_CONTAINER, "resources": resources}
        if first.get("image"):
            container["image"] = first["image"]
        return {"spec": {"containers": [container], "restartPolicy": "Never"}}

    def pod_templates(self, job: Obj) -> list[tuple[str, Obj]]:
        spec = job.setdefault("spec", {})
        cluster = spec.setdefault("rayClusterSpec", {})
        out = cluster_templates(cluster)
        if self._mode(spec) == K8S_JOB_MODE:
            # Started with KubeRay's default submitter written out (as Kueue does), so that
            # the submitter's pod carries the marks.
            if spec.get("submitterPodTemplate") is None:
                spec["submitterPodTemplate"] = self._default_submitter(cluster)
            out.append((SUBMITTER, spec["submitterPodTemplate"]))
        return out

    def template_fields(self, obj: Mapping[str, Any]) -> list[tuple[str, Any]]:
        spec = as_map(obj.get("spec"))
        out = cluster_fields(as_map(spec.get("rayClusterSpec")), "spec.rayClusterSpec")
        if self._mode(spec) == K8S_JOB_MODE:
            out.append(("spec.submitterPodTemplate", spec.get("submitterPodTemplate")))
        return out

    def finished(self, job: Mapping[str, Any]) -> str | None:
        """As Kueue's: done once ``jobDeploymentStatus`` is ``Complete`` or ``Failed``;
        succeeded only when the Ray job itself says ``SUCCEEDED`` (a deployment that
        completes a failed Ray job has failed)."""
        status = as_map(job.get("status"))
        if status.get("jobDeploymentStatus") not in ("Complete", "Failed"):
            return None
        return "Succeeded" if status.get("jobStatus") == "SUCCEEDED" else "Failed"


RAYCLUSTER = RayClusterKind()
RAYJOB = RayJobKind()
