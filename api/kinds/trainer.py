"""Kubeflow Trainer v2's TrainJob (trainer.kubeflow.org/v1alpha1), suspended through
``spec.suspend``, as Kueue's ``pkg/controller/jobs/trainjob``.

A TrainJob holds no pod template of its own: the trainer builds a JobSet from the
ClusterTrainingRuntime or TrainingRuntime named by ``spec.runtimeRef`` (kind defaults to
ClusterTrainingRuntime). Its PodSets are that JobSet's, as Kueue reads them: one per
replicated job of the runtime's ``spec.template``, in order, named after it, of ``replicas``
(default 1) x the pods of one child Job. The pods of a child Job are its ``parallelism``
(default 1), except for the trainer's own job (template label
``trainer.kubeflow.org/trainjob-ancestor-step: trainer``) under an ``mlPolicy``: its
``numNodes`` (default 1), overridden by the TrainJob's ``spec.trainer.numNodes``; with an
MPI policy the job called ``node`` takes ``numNodes`` instead (one less with
``runLauncherAsNode``). ``spec.trainer.resourcesPerNode`` replaces the requests of the
trainer job's container ``node``. The TrainJob's own ``spec.runtimePatches`` are applied to
the pod templates (labels, annotations, nodeSelector, tolerations, affinity, scheduling
gates), so topology annotations are read from the runtime's pod templates or from a patch.

Admission reaches the pods as Kueue's does, through the TrainJob: topogate's runtime patch
(manager ``topogate.dev/manager``) gets one entry per PodSet with the PodSet label, the
Workload annotation, the scheduling gate, and the flavor's node labels and tolerations,
written with ``spec.suspend: false`` in one update (the trainer allows patches to change
while the TrainJob is suspended before or after the update). The JobSet's pods carry the
JobSet labels by which the ungater ranks them (job index x pods per job + completion
index). A runtime that does not exist is refused by the webhook and leaves the TrainJob
without a Workload (Kueue's webhook refuses it, its reconciler retries), naming
``spec.runtimeRef``. Finished is the ``Complete`` or ``Failed`` condition.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ..constants import JOB_COMPLETION_INDEX, JOBSET_JOB_INDEX
from ..errors import InputError
from ..models import PodSet
from .base import (
    Lookup,
    Obj,
    PodSetsInfo,
    ReadKind,
    Referring,
    Suspendable,
    as_map,
    no_lookup,
)
from .reading import Replicas, count, inherit, mapping, object_topology, podset

GROUP = "trainer.kubeflow.org"
CLUSTER_TRAINING_RUNTIME = ReadKind(
    "ClusterTrainingRuntime", GROUP, "v1alpha1", "clustertrainingruntimes", namespaced=False
)
TRAINING_RUNTIME = ReadKind("TrainingRuntime", GROUP, "v1alpha1", "trainingruntimes", True)
RUNTIMES = {k.kind: k for k in (CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME)}
# topogate's entry in spec.runtimePatches (a list keyed by manager; Kueue's is
# kueue.x-k8s.io/manager). Read for the marks only, never for the PodSets.
MANAGER = "topogate.dev/manager"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_ANCESTOR = "trainer"
NODE = "node"  # the trainer's job and container name (constants.Node)
PATCH_TEMPLATE = "trainingRuntimeSpec.template.spec.replicatedJobs"
POD_TEMPLATE = "template.spec.template"
ML_SOURCES = ("torch", "mpi", "jax", "xgboost", "flux")


def _patches(job: Mapping[str, Any]) -> list[Any]:
    patches = as_map(job.get("spec")).get("runtimePatches")
    return patches if isinstance(patches, list) else []


def _replicated(patch: Any) -> list[Any]:
    """A runtime patch's replicated job entries (tolerant of any shape)."""
    spec = as_map(as_map(as_map(as_map(patch).get("trainingRuntimeSpec")).get("template")))
    jobs = as_map(spec.get("spec")).get("replicatedJobs")
    return jobs if isinstance(jobs, list) else []


def _merge_pod_template(base: Mapping[str, Any], patch: Mapping[str, Any]) -> Obj:
    """``base`` with a pod template patch applied as the trainer's strategic merge does, for
    what placement reads: maps merged, scheduling gates merged by name, tolerations and
    affinity replaced (the core API gives them no merge key)."""
    out = copy.deepcopy(dict(base))
    meta = as_map(patch.get("metadata"))
    out_meta = dict(as_map(out.get("metadata")))
    for key in ("labels", "annotations"):
        if isinstance(meta.get(key), Mapping):
            out_meta[key] = {**as_map(out_meta.get(key)), **meta[key]}
    out["metadata"] = out_meta
    spec = as_map(patch.get("spec"))
    out_spec = dict(as_map(out.get("spec")))
    if isinstance(spec.get("nodeSelector"), Mapping):
        out_spec["nodeSelector"] = {**as_map(out_spec.get("nodeSelector")), **spec["nodeSelector"]}
    for key in ("tolerations", "affinity"):
        if spec.get(key) is not None:
            out_spec[key] = copy.deepcopy(spec[key])
    gates = spec.get("schedulingGates")
    if isinstance(gates, list):
        merged = [g for g in out_spec.get("schedulingGates") or [] if g not in gates]
        out_spec["schedulingGates"] = [*merged, *copy.deepcopy(gates)]
    out["spec"] = out_spec
    return out


class TrainJobKind(Suspendable, Referring):
    kind = "TrainJob"
    group = GROUP
    version = "v1alpha1"
    plural = "trainjobs"
    template_pattern = f"spec.runtimePatches[*].{PATCH_TEMPLATE}[*].{POD_TEMPLATE}"
    # The trainer makes a JobSet: its pods carry the JobSet's labels.
    pod_index_label = JOB_COMPLETION_INDEX
    pod_podset_label = "jobset.sigs.k8s.io/replicatedjob-name"
    reads = (CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME)

    @property
    def template_annotations_hint(self) -> str:
        return (
            "the runtime's spec.template.spec.replicatedJobs[*].template.spec.template"
            ".metadata.annotations (or a spec.runtimePatches entry's)"
        )

    def runtime_ref(self, obj: Mapping[str, Any], where: str) -> tuple[ReadKind, str | None, str]:
        """The runtime's kind, namespace (None: cluster-scoped) and name."""
        spec = mapping(obj.get("spec"), where, "spec")
        ref = mapping(spec.get("runtimeRef"), where, "spec.runtimeRef")
        name = ref.get("name")
        if not isinstance(name, str) or not name:
            raise InputError("is required", where=where, field="spec.runtimeRef.name")
        group = ref.get("apiGroup") or GROUP
        kind = ref.get("kind") or CLUSTER_TRAINING_RUNTIME.kind
        if group != GROUP or kind not in RUNTIMES:
            field = "spec.runtimeRef.apiGroup" if group != GROUP else "spec.runtimeRef.kind"
            raise InputError(
                f"Unsupported value: {group}/{kind}: supported values: "
                + ", ".join(f"{GROUP}/{k}" for k in RUNTIMES),
                where=where,
                field=field,
            )
        read = RUNTIMES[kind]
        namespace = as_map(obj.get("metadata")).get("namespace") or "default"
        return read, str(namespace) if read.namespaced else None, name

    def references(self, job: Mapping[str, Any]) -> list[tuple[str, str | None, str]]:
        try:
            read, namespace, name = self.runtime_ref(job, "")
        except InputError:
            return []
        return [(read.kind, namespace, name)]

    def podsets(self, obj: Mapping[str, Any], where: str) -> list[tuple[PodSet, str]]:
        return self.podsets_with(obj, where, no_lookup)

    def podsets_with(
        self, obj: Mapping[str, Any], where: str, lookup: Lookup
    ) -> list[tuple[PodSet, str]]:
        read, namespace, name = self.runtime_ref(obj, where)
        runtime = lookup(read.kind, namespace, name)
        if runtime is None:
            scope = f" in namespace {namespace!r}" if namespace else ""
            raise InputError(
                f"{read.kind} {name!r} not found{scope}: a TrainJob's PodSets are read from "
                "its runtime's JobSet template; create the runtime first",
                where=where,
                field="spec.runtimeRef",
            )
        spec = mapping(obj.get("spec"), where, "spec")
        trainer = mapping(spec.get("trainer"), where, "spec.trainer", required=False)
        num_nodes = None
        if trainer.get("numNodes") is not None:
            num_nodes = count(trainer["numNodes"], where, "spec.trainer.numNodes")
        prefix = f"{read.kind} {name}: "
        rspec = mapping(runtime.get("spec"), where, f"{prefix}spec")
        policy = rspec.get("mlPolicy")
        ml = None if policy is None else mapping(policy, where, f"{prefix}spec.mlPolicy")
        source = next((s for s in ML_SOURCES if ml is not None and ml.get(s) is not None), None)
        base = f"{prefix}spec.template.spec.replicatedJobs"
        template = mapping(rspec.get("template"), where, f"{prefix}spec.template")
        jobs = mapping(template.get("spec"), where, f"{prefix}spec.template.spec").get(
            "replicatedJobs"
        )
        if not isinstance(jobs, list) or not jobs:
            raise InputError("must be a non-empty list", where=where, field=base)
        inherited = object_topology(obj, where)
        trainer_seen = False
        out = []
        for i, raw in enumerate(jobs):
            path = f"{base}[{i}]"
            rjob = mapping(raw, where, path)
            job_name = rjob.get("name")
            if not isinstance(job_name, str) or not job_name:
                raise InputError("is required", where=where, field=f"{path}.name")
            job_template = mapping(rjob.get("template"), where, f"{path}.template")
            job_spec = mapping(job_template.get("spec"), where, f"{path}.template.spec")
            pod_path = f"{path}.{POD_TEMPLATE}"
            pod_template: Mapping[str, Any] = mapping(job_spec.get("template"), where, pod_path)
            labels = as_map(as_map(job_template.get("metadata")).get("labels"))
            pods = count(job_spec.get("parallelism"), where, f"{path}.template.spec.parallelism")
            trainer_job = labels.get(ANCESTOR_LABEL) == TRAINER_ANCESTOR
            # The TrainJob's numNodes goes to the first trainer job only (the trainer's
            # FindPodSetByAncestor); the runtime's numNodes to every one.
            first_trainer = trainer_job and not trainer_seen
            trainer_seen = trainer_seen or trainer_job
            if trainer_job and ml is not None:
                pods = count(ml.get("numNodes"), where, f"{prefix}spec.mlPolicy.numNodes")
                if trainer.get("resourcesPerNode") is not None:
                    pod_template = _with_node_resources(pod_template, trainer["resourcesPerNode"])
            if num_nodes is not None:
                if source == "mpi" and job_name == NODE:
                    as_node = as_map(as_map(ml).get("mpi")).get("runLauncherAsNode") is True
                    pods = max(num_nodes - 1, 1) if as_node else num_nodes
                elif source != "mpi" and first_trainer:
                    pods = num_nodes
            for patch in _patches(obj):
                if as_map(patch).get("manager") == MANAGER:
                    continue  # topogate's marks, not the user's request
                for entry in _replicated(patch):
                    if as_map(entry).get("name") == job_name:
                        pod_patch = as_map(as_map(as_map(entry).get("template")).get("spec"))
                        pod_template = _merge_pod_template(
                            pod_template, as_map(pod_patch.get("template"))
                        )
            pod_template = inherit(pod_template, inherited, where, pod_path)
            replicas = count(rjob.get("replicas"), where, f"{path}.replicas")
            units = Replicas(replicas, JOBSET_JOB_INDEX)
            out.append(
                (podset(job_name, replicas * pods, pod_template, where, pod_path, units), pod_path)
            )
        return out

    # --- the marks: topogate's runtime patch --------------------------------------------------

    def _ours(self, job: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return next((p for p in _patches(job) if as_map(p).get("manager") == MANAGER), None)

    def pod_templates(self, job: Obj) -> list[tuple[str, Obj]]:
        """The pod templates of topogate's runtime patch, one per PodSet once it started."""
        ours = self._ours(job)
        out = []
        for entry in _replicated(ours) if isinstance(ours, dict) else []:
            if isinstance(entry, dict):
                spec = entry.setdefault("template", {}).setdefault("spec", {})
                out.append((str(entry.get("name")), spec.setdefault("template", {})))
        return out

    def template_fields(self, obj: Mapping[str, Any]) -> list[tuple[str, Any]]:
        out = []
        for k, patch in enumerate(_patches(obj)):
            for j, entry in enumerate(_replicated(patch)):
                pod = as_map(as_map(as_map(entry).get("template")).get("spec")).get("template")
                path = f"spec.runtimePatches[{k}].{PATCH_TEMPLATE}[{j}].{POD_TEMPLATE}"
                out.append((path, pod))
        return out

    def is_marked(self, job: Obj) -> bool:
        return bool(self.pod_templates(copy.deepcopy(job))) and super().is_marked(job)

    def started(self, job: Obj, info: PodSetsInfo) -> Obj:
        """Unsuspended with topogate's runtime patch written afresh: one entry per admitted
        PodSet (``info.node_selectors`` has one per PodSet of the admission), so an earlier
        admission's node labels do not linger."""
        out = copy.deepcopy(job)
        out["spec"]["suspend"] = False
        patches = out["spec"].get("runtimePatches")
        if not isinstance(patches, list):
            patches = out["spec"]["runtimePatches"] = []
        ours = self._ours(out)
        if not isinstance(ours, dict):
            ours = {"manager": MANAGER}
            patches.append(ours)
        entries = [{"name": name} for name in info.node_selectors]
        ours["trainingRuntimeSpec"] = {"template": {"spec": {"replicatedJobs": entries}}}
        self.mark_templates(out, info)
        return out

    def priority_class_names(self, job: Obj) -> list[str]:
        """None from the TrainJob itself: its pod templates are its runtime's (the job sync
        reads their priorityClassName from the PodSets)."""
        return []

    def finished(self, job: Mapping[str, Any]) -> str | None:
        """Kueue's: the ``Complete`` or ``Failed`` condition."""
        for condition in as_map(job.get("status")).get("conditions") or []:
            if not isinstance(condition, Mapping) or condition.get("status") != "True":
                continue
            if condition.get("type") == "Complete":
                return "Succeeded"
            if condition.get("type") == "Failed":
                return "Failed"
        return None


def _with_node_resources(template: Mapping[str, Any], resources: Any) -> Obj:
    """The template with the container ``node``'s resources replaced (resourcesPerNode)."""
    out = copy.deepcopy(dict(template))
    for container in as_map(out.get("spec")).get("containers") or []:
        if isinstance(container, dict) and container.get("name") == NODE:
            container["resources"] = copy.deepcopy(resources)
            break
    return out


TRAINJOB = TrainJobKind()
