"""Kubeflow's v1 job kinds, suspended through ``spec.runPolicy.suspend``: PyTorchJob
(kubeflow.org/v1, the training-operator) and MPIJob (kubeflow.org/v2beta1, the mpi-operator).
Kueue's equivalents are ``pkg/controller/jobs/kubeflow`` (its ``kubeflowjob`` package shared by
every v1 kind) and ``pkg/controller/jobs/mpijob``.

As Kueue builds them: one PodSet per replica type present in the replica specs map, in the
kind's fixed order (PyTorchJob: Master then Worker; MPIJob: Launcher then Worker), named by the
lower-cased type (``master``, ``worker``, ``launcher``), of ``replicas`` pods (1 when unset).
Topology annotations are read from each replica's pod template; a pod's rank in its PodSet is
the ``training.kubeflow.org/replica-index`` label both operators put on it (the mpi-operator
puts none on a launcher that is not also a worker: a PodSet of one pod needs no rank). A pod's
PodSet is its ``replica-type`` label (training-operator) or ``job-role`` label (mpi-operator
v2, which writes no replica-type). Finished is the ``Succeeded`` or ``Failed`` condition.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from ..constants import POD_INDEX_OFFSET
from ..errors import InputError
from ..models import PodSet
from .base import JsonPatch, Obj, PodSetsInfo, Suspendable, as_map
from .reading import count, inherit, mapping, object_topology, podset

# Both operators label each pod with its index in its replica type; the training-operator
# names the type (lower-cased) in replica-type, the mpi-operator in job-role.
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"


class KubeflowJobKind(Suspendable):
    """A Kubeflow job with a map of replica specs under ``spec.<replica_specs>`` and its
    suspend switch under ``spec.runPolicy``."""

    replica_specs: ClassVar[str]  # "pytorchReplicaSpecs"
    replica_types: ClassVar[tuple[str, ...]]  # ("Master", "Worker"): Kueue's order
    # Refuse other keys in the map: as the operator's own webhook does (training-operator);
    # False where nothing refuses them and Kueue leaves them out of the PodSets (MPIJob).
    refuse_other_types: ClassVar[bool] = True
    pod_index_label = REPLICA_INDEX_LABEL
    pod_podset_label = REPLICA_TYPE_LABEL  # lower-cased type: the PodSet's name

    def _path(self, replica_type: str) -> str:
        return f"spec.{self.replica_specs}[{replica_type}].template"

    def _present(self, specs: Mapping[str, Any]) -> list[str]:
        """The replica types the object has, in Kueue's order (an absent or null one has no
        PodSet)."""
        return [t for t in self.replica_types if specs.get(t) is not None]

    def podsets(self, obj: Mapping[str, Any], where: str) -> list[tuple[PodSet, str]]:
        spec = mapping(obj.get("spec"), where, "spec")
        specs_path = f"spec.{self.replica_specs}"
        specs = mapping(spec.get(self.replica_specs), where, specs_path)
        supported = ", ".join(self.replica_types)
        for key in specs if self.refuse_other_types else ():
            if key not in self.replica_types:
                # As the operator's own webhook: the map keys are the replica types, spelled
                # exactly (a "master" would get no pods from the operator).
                raise InputError(
                    f"Unsupported value: {key!r}: supported values: {supported}",
                    where=where,
                    field=f"{specs_path}[{key}]",
                )
        present = self._present(specs)
        if not present:
            raise InputError(f"must have one of {supported}", where=where, field=specs_path)
        inherited = object_topology(obj, where)
        out = []
        for replica_type in present:
            base = f"{specs_path}[{replica_type}]"
            replica = mapping(specs[replica_type], where, base)
            path = self._path(replica_type)
            template = mapping(replica.get("template"), where, path)
            template = inherit(template, inherited, where, path)
            pods = count(replica.get("replicas"), where, f"{base}.replicas")
            out.append((podset(replica_type.lower(), pods, template, where, path), path))
        return out

    def pod_templates(self, job: Obj) -> list[tuple[str, Obj]]:
        specs = job.setdefault("spec", {}).setdefault(self.replica_specs, {})
        return [(t.lower(), specs[t].setdefault("template", {})) for t in self._present(specs)]

    def template_fields(self, obj: Mapping[str, Any]) -> list[tuple[str, Any]]:
        specs = as_map(as_map(obj.get("spec")).get(self.replica_specs))
        return [(self._path(t), as_map(specs.get(t)).get("template")) for t in self._present(specs)]

    def priority_class_names(self, job: Obj) -> list[str]:
        """Kueue's Kubeflow ``PriorityClass``: ``runPolicy.schedulingPolicy.priorityClass``,
        then the templates' in replica type order."""
        policy = as_map(as_map(as_map(job.get("spec")).get("runPolicy")).get("schedulingPolicy"))
        first = [str(policy["priorityClass"])] if policy.get("priorityClass") else []
        return [*first, *super().priority_class_names(job)]

    # --- suspend: spec.runPolicy.suspend -----------------------------------------------------

    def is_suspended(self, job: Mapping[str, Any]) -> bool:
        return bool(as_map(as_map(job.get("spec")).get("runPolicy")).get("suspend"))

    def suspend_patch(self, job: Mapping[str, Any]) -> Obj:
        return {"spec": {"runPolicy": {"suspend": True}}}

    def suspend_on_create(self, obj: Mapping[str, Any]) -> JsonPatch:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return []
        policy = spec.get("runPolicy")
        if policy is None:
            return [{"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}]
        if not isinstance(policy, dict) or policy.get("suspend") is True:
            return []  # a malformed runPolicy is the API server's to refuse
        return [{"op": "add", "path": "/spec/runPolicy/suspend", "value": True}]

    def started(self, job: Obj, info: PodSetsInfo) -> Obj:
        out = copy.deepcopy(job)
        out["spec"].setdefault("runPolicy", {})["suspend"] = False
        self.run_with_counts(out, info.counts)
        self.mark_templates(out, info)
        return out

    def finished(self, job: Mapping[str, Any]) -> str | None:
        """Kueue's ``Finished`` for Kubeflow jobs: the ``Succeeded`` or ``Failed``
        condition."""
        for condition in as_map(job.get("status")).get("conditions") or []:
            if not isinstance(condition, Mapping) or condition.get("status") != "True":
                continue
            if condition.get("type") in ("Succeeded", "Failed"):
                return str(condition["type"])
        return None


class PyTorchJobKind(KubeflowJobKind):
    kind = "PyTorchJob"
    group = "kubeflow.org"
    version = "v1"
    plural = "pytorchjobs"
    replica_specs = "pytorchReplicaSpecs"
    replica_types = ("Master", "Worker")
    template_pattern = "spec.pytorchReplicaSpecs[*].template"


class MPIJobKind(KubeflowJobKind):
    """MPIJob v2beta1: ``launcher`` then ``worker``. With ``runLauncherAsWorker`` the
    operator numbers the workers from 1 (the launcher is rank 0), so the webhook writes
    Kueue's ``pod-index-offset: "1"`` on the worker template, as Kueue's MPIJob webhook does.
    Kueue leaves it off when the launcher template names a PodSet group, because its ungater
    then offsets the larger PodSet of the group by the smaller's count; topogate's ungater
    ranks each PodSet alone, so the offset is written in that case too (as for
    LeaderWorkerSet's workers), or workers 1..n would fall back to name order."""

    kind = "MPIJob"
    group = "kubeflow.org"
    version = "v2beta1"
    plural = "mpijobs"
    replica_specs = "mpiReplicaSpecs"
    replica_types = ("Launcher", "Worker")
    # Kueue's MPIJob tests admit one with an "Extra" replica spec: it has no PodSet.
    refuse_other_types = False
    template_pattern = "spec.mpiReplicaSpecs[*].template"
    pod_podset_label = JOB_ROLE_LABEL  # "launcher" or "worker"

    def suspend_on_create(self, obj: Mapping[str, Any]) -> JsonPatch:
        return [*super().suspend_on_create(obj), *self._worker_offset(obj)]

    def _worker_offset(self, obj: Mapping[str, Any]) -> JsonPatch:
        spec = as_map(obj.get("spec"))
        if spec.get("runLauncherAsWorker") is not True:
            return []
        specs = as_map(spec.get(self.replica_specs))
        launcher, worker = specs.get("Launcher"), specs.get("Worker")
        if not isinstance(launcher, dict) or not isinstance(worker, dict):
            return []
        template = worker.get("template")
        if not isinstance(template, dict):
            return []
        meta = template.get("metadata")
        base = f"/spec/{self.replica_specs}/Worker/template"
        offset = {POD_INDEX_OFFSET: "1"}
        if not isinstance(meta, dict):
            value = {"annotations": offset}
            return [{"op": "add", "path": f"{base}/metadata", "value": value}]
        if not isinstance(meta.get("annotations"), dict):
            return [{"op": "add", "path": f"{base}/metadata/annotations", "value": offset}]
        key = POD_INDEX_OFFSET.replace("~", "~0").replace("/", "~1")
        return [{"op": "add", "path": f"{base}/metadata/annotations/{key}", "value": "1"}]


PYTORCHJOB = PyTorchJobKind()
MPIJOB = MPIJobKind()
