"""The interface every job kind implements, and the capabilities a kind may add.

A kind is what Kueue calls an integration (``pkg/controller/jobframework``: ``GenericJob`` and
its optional interfaces). topogate asks four things of every kind, and everything else only
of the kinds that can do it:

- :class:`JobKind` (mandatory): who it is (group, version, kind, plural); its PodSets, read
  from the object with every bad field named (Kueue's ``PodSets``); its pod templates, to
  mark when it starts and to find keys in for the key warnings; when it finished (Kueue's
  ``Finished``, with a default). Optionally, the pod labels that give a pod's index
  (:attr:`JobKind.pod_index_label`) and its PodSet (:attr:`JobKind.pod_podset_label`).
- :class:`Suspendable`: a kind with a suspend switch (batch/v1 Job, JobSet, Kubeflow's
  TrainJob, RayJob and RayCluster have ``spec.suspend``; Kubeflow's v1 PyTorchJob and MPIJob
  have ``spec.runPolicy.suspend``): the webhook suspends it when it is created, the job sync
  suspends it when it runs without an admission, and starts it by writing it back
  unsuspended with every pod template marked (Kueue's ``IsSuspended``, ``Suspend``,
  ``RunWithPodSetsInfo``).
- :class:`Gated`: a kind WITHOUT a suspend switch (plain pod groups, LeaderWorkerSet): its
  pods are held back by topogate's scheduling gate, which the pod webhook puts on every pod
  of the kind when it is created, as Kueue gates pod groups. It runs as one gang (one
  Workload) per group of pods; admission is the ungater releasing the group's pods into their
  domains, eviction is deleting them (their controller, if any, makes them again, gated),
  and the group waits in its queue again (Kueue's pod group ``Stop``).
- :class:`Referring`: a kind whose PodSets are read from another object too (a Kubeflow
  TrainJob's from the training runtime it names): it declares the kinds it reads
  (:attr:`Referring.reads`), and reads its PodSets through a read-only lookup the caller
  hands it (``serve``: its watched copies; ``plan``: the cluster files), as Kueue's
  integration reads the runtime with its client.
- :class:`PartialAdmission`: a kind whose PodSets may run with fewer pods than they ask
  (Kueue's partial admission; today the batch/v1 Job's ``job-min-parallelism``): the
  ``minCount``, the count it runs with when admitted, and the count it gets back when it is
  suspended again (Kueue's ``RestorePodSetsInfo``).

Every method here is pure: it reads plain dicts (the objects as the API server sends them)
and returns new dicts or patches; the shells send them. Nothing here does I/O.

Several PodSets and co-location: :meth:`JobKind.podsets` returns one PodSet per group of
identical pods, in the order Kueue's integration builds them (a leader before its workers,
a JobSet's replicated jobs in spec order). Pods that must share a domain (LeaderWorkerSet's
leader with its workers) say so with the Kueue ``podset-group-name`` annotation on both
templates, which :func:`reading.podset` reads into the request; pods replicated as whole
units (a JobSet's child Jobs, LeaderWorkerSet's groups) pass :class:`reading.Replicas` so
that ranks are unit index x pods per unit + pod index.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .. import constants as c
from ..constants import QUEUE_LABELS
from ..models import PodSet

Obj = dict[str, Any]
JsonPatch = list[dict[str, Any]]


def as_map(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one (objects may be malformed)."""
    return value if isinstance(value, Mapping) else {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The object's own annotations, tolerant of malformed metadata. (``api.objects`` has the
    same reader, but it imports this package for the registry.)"""
    meta = obj.get("metadata")
    return as_map(meta.get("annotations")) if isinstance(meta, dict) else {}


def queue_name(obj: Mapping[str, Any]) -> str | None:
    """The queue a job is submitted to (topogate's or Kueue's label), or None; tolerant of
    malformed metadata, since webhooks see objects before any schema does."""
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not isinstance(labels, Mapping):
        return None
    for key in QUEUE_LABELS:
        value = labels.get(key)
        if value:
            return str(value)
    return None


@dataclass(frozen=True, slots=True)
class PodSetsInfo:
    """What an admission gives a job when it starts, per PodSet name (Kueue's
    ``podset.PodSetInfo``, for all PodSets at once)."""

    workload: str  # the Workload's name, written on every pod template
    node_selectors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    tolerations: Mapping[str, list[Obj]] = field(default_factory=dict)
    counts: Mapping[str, int] = field(default_factory=dict)  # pods admitted (partial admission)


class JobKind(ABC):
    """One kind of job topogate admits. Subclass it, set the class attributes, implement the
    three abstract methods, add the capabilities the kind has, and register one instance in
    ``api/kinds/__init__.py``.

    Methods receive objects of this kind (the registry matched them); they must not assume
    a well-formed object unless they say so.
    """

    kind: ClassVar[str]  # "Job"
    group: ClassVar[str]  # "batch"; "" for the core group
    version: ClassVar[str]  # "v1"
    plural: ClassVar[str]  # "jobs": the API resource, which the reflectors watch
    # A CustomResourceDefinition a cluster may lack (its reflector waits until it exists);
    # False for kinds every API server serves.
    custom_resource: ClassVar[bool] = True
    # Where the pod templates sit, for messages: the field path of one, with ``[*]`` for a
    # list (``spec.replicatedJobs[*].template.spec.template``).
    template_pattern: ClassVar[str]
    # The pod label holding a pod's index within its PodSet (Kueue's PodIndexLabel), by which
    # the ungater ranks pods onto domains; None when the kind's pods carry no index.
    pod_index_label: ClassVar[str | None] = None
    # The label this kind's own controller puts on the pods it makes, naming their PodSet,
    # when it has one; the webhook reads it from a pod that lacks topogate's PodSet label.
    pod_podset_label: ClassVar[str | None] = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """The object is of this kind and version."""
        return obj.get("kind") == self.kind and obj.get("apiVersion") == self.api_version

    @property
    def template_annotations_hint(self) -> str:
        """Where topology annotations are read on this kind, for a misplaced key's warning."""
        return f"{self.template_pattern}.metadata.annotations"

    @abstractmethod
    def podsets(self, obj: Mapping[str, Any], where: str) -> list[tuple[PodSet, str]]:
        """(PodSet, field path of its pod template) for each PodSet, in Kueue's order.

        Reads with :mod:`reading` so that a bad field raises InputError naming it
        (``where`` is the object, for messages). The topology request comes from each
        template's annotations (:func:`reading.podset`); the object's own KAI annotations
        are inherited by every template (:func:`reading.inherit`). ``minCount`` is
        :class:`PartialAdmission`'s, not set here.
        """

    @abstractmethod
    def pod_templates(self, job: Obj) -> list[tuple[str, Obj]]:
        """(PodSet name, pod template) pairs: references into ``job``, created where absent,
        so callers may mutate them (a job is started by marking them). Called only on an
        object whose PodSets were read (it has the shape :meth:`podsets` checks)."""

    @abstractmethod
    def template_fields(self, obj: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """(field path, value found there) of every pod template, for the key warnings:
        read-only and tolerant (a value may be missing or of any type; the path is said
        anyway)."""

    def priority_class_names(self, job: Obj) -> list[str]:
        """The PriorityClass names the job asks for, first match first (Kueue's
        ``PriorityClass``): by default each pod template's ``priorityClassName``. Reads a
        copy; ``job`` is not changed."""
        names = []
        for _, template in self.pod_templates(copy.deepcopy(job)):
            name = as_map(template.get("spec")).get("priorityClassName")
            if name:
                names.append(str(name))
        return names

    # What ``between_templates`` holds, for a warning ("a Job template").
    between_name = ""

    def between_templates(self, obj: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
        """(field path, value found there, path of the pod template inside) of every template
        between the object and its pod templates, where no key is read (a JobSet's Job
        templates): for the key warnings, read-only and tolerant. None by default."""
        return []

    def finished(self, job: Mapping[str, Any]) -> str | None:
        """ "Succeeded" or "Failed" once the job is done, else None (Kueue's ``Finished``).

        By default the conditions batch/v1 Job and JobSet write (``Complete`` or
        ``Completed``, ``Failed``) and JobSet's ``terminalState``; a kind whose status says
        it otherwise overrides this."""
        status = job.get("status") or {}
        for condition in status.get("conditions") or []:
            if condition.get("status") != "True":
                continue
            if condition.get("type") in ("Complete", "Completed"):
                return "Succeeded"
            if condition.get("type") == "Failed":
                return "Failed"
        terminal = status.get("terminalState")
        if terminal in ("Completed", "Failed"):
            return "Succeeded" if terminal == "Completed" else "Failed"
        return None

    def skipped(self, obj: Mapping[str, Any]) -> bool:
        """The object is not queued though it carries a queue label (Kueue's ``Skip``: a
        RayJob on an existing cluster); never by default."""
        return False

    def is_marked(self, job: Obj) -> bool:
        """Every pod template already carries topogate's PodSet label (topogate started it).
        Reads only: the templates are looked for on a copy."""
        for _, template in self.pod_templates(copy.deepcopy(job)):
            labels = (template.get("metadata") or {}).get("labels") or {}
            if c.PODSET_LABEL not in labels:
                return False
        return True

    def mark_templates(self, job: Obj, info: PodSetsInfo) -> None:
        """Mark every pod template of ``job`` in place: the PodSet label, the Workload
        annotation, topogate's scheduling gate (no pod schedules before the ungater gives it
        a domain), and the flavor's node labels and tolerations joined to the template's (as
        Kueue does when it starts a job). Marking twice changes nothing."""
        for podset, template in self.pod_templates(job):
            meta = template.setdefault("metadata", {})
            meta.setdefault("labels", {})[c.PODSET_LABEL] = podset
            meta.setdefault("annotations", {})[c.WORKLOAD_ANNOTATION] = info.workload
            spec = template.setdefault("spec", {})
            gates = spec.setdefault("schedulingGates", [])
            if not any(g.get("name") == c.TOPOLOGY_GATE for g in gates):
                gates.append({"name": c.TOPOLOGY_GATE})
            selector = info.node_selectors.get(podset)
            if selector:
                spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **selector}
            merged = list(spec.get("tolerations") or [])
            for toleration in info.tolerations.get(podset, []):
                if toleration not in merged:
                    merged.append(toleration)
            if merged:
                spec["tolerations"] = merged


class Suspendable(JobKind):
    """A kind held back by ``spec.suspend``: suspended while it waits for admission, started
    by writing it back unsuspended with its templates marked.

    The defaults fit any kind whose ``spec.suspend`` stops it and whose controller makes its
    pods only while it is unsuspended. A kind whose switch sits elsewhere overrides
    :meth:`is_suspended`, :meth:`suspend_patch`, :meth:`suspend_on_create` and
    :meth:`started`; one whose admitted counts change the object (partial admission)
    overrides :meth:`run_with_counts`."""

    def is_suspended(self, job: Mapping[str, Any]) -> bool:
        return bool((job.get("spec") or {}).get("suspend"))

    def suspend_patch(self, job: Mapping[str, Any]) -> Obj:
        """The merge patch that stops the job (Kueue's ``Suspend``). It holds no
        ``metadata``: the shell adds its resourceVersion guard there."""
        return {"spec": {"suspend": True}}

    def suspend_on_create(self, obj: Mapping[str, Any]) -> JsonPatch:
        """The JSON patch the mutating webhook answers a queued job's creation with, so that
        nothing runs before topogate has placed the whole gang; empty when it is suspended
        already (or has no spec, which the API server refuses)."""
        spec = obj.get("spec")
        if not isinstance(spec, dict) or spec.get("suspend") is True:
            return []
        return [{"op": "add", "path": "/spec/suspend", "value": True}]

    def run_with_counts(self, job: Obj, counts: Mapping[str, int]) -> None:
        """Give ``job`` (a copy being started) the admitted pod counts, in place; by default
        the kind runs its PodSets whole and nothing changes."""

    def started(self, job: Obj, info: PodSetsInfo) -> Obj:
        """The job as it must be written when its Workload is admitted (Kueue's
        ``RunWithPodSetsInfo``): unsuspended, run with the admitted counts, and every pod
        template marked (:meth:`mark_templates`). ``job`` is not changed."""
        out = copy.deepcopy(job)
        out["spec"]["suspend"] = False
        self.run_with_counts(out, info.counts)
        self.mark_templates(out, info)
        return out


# (kind, namespace or None when cluster-scoped, name) -> the object as the API server has
# it, or None when there is no such object.
Lookup = Callable[[str, str | None, str], Mapping[str, Any] | None]


def no_lookup(kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
    """The lookup of a caller that holds no other object: every one is missing."""
    return None


@dataclass(frozen=True, slots=True)
class ReadKind:
    """Another kind of object a :class:`Referring` kind reads (not a job: never queued)."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


class Referring(ABC):
    """A kind whose PodSets depend on another object (a TrainJob's on its training runtime).
    A kind adds it next to :class:`JobKind`; its :meth:`JobKind.podsets` reads with
    :func:`no_lookup` (every such object missing), callers that hold the objects call
    :meth:`podsets_with`."""

    # The kinds it reads, which `serve` watches (as optional CRDs) and `plan` reads from the
    # cluster files.
    reads: ClassVar[tuple[ReadKind, ...]]

    @abstractmethod
    def podsets_with(
        self, obj: Mapping[str, Any], where: str, lookup: Lookup
    ) -> list[tuple[PodSet, str]]:
        """:meth:`JobKind.podsets`, with the other objects found through ``lookup``; a
        missing one is an InputError naming the field that refers to it."""

    @abstractmethod
    def references(self, job: Mapping[str, Any]) -> list[tuple[str, str | None, str]]:
        """(kind, namespace or None, name) of each object ``job`` reads; tolerant (a
        malformed reference is none): a change of one may let the job's Workload be made."""


class PartialAdmission(ABC):
    """A kind whose PodSets may be admitted with fewer pods than they ask (Kueue's partial
    admission). A kind adds it next to :class:`JobKind`; it sets ``minCount`` on the PodSets
    it read, and says how a running job's size may change."""

    @abstractmethod
    def accepts_partial(self, job: Mapping[str, Any]) -> bool:
        """This object asks for partial admission: its size follows the admission."""

    @abstractmethod
    def set_min_counts(
        self, obj: Mapping[str, Any], podsets: list[PodSet], where: str, check_range: bool
    ) -> None:
        """Set each PodSet's ``min_count`` from the object (InputError names a bad value).
        Without ``check_range`` (an update that keeps the setting) an out-of-range value
        is not refused, as Kueue's webhook checks it only when it changes."""

    @abstractmethod
    def min_count_changed(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        """An update changes what :meth:`set_min_counts` reads."""

    @abstractmethod
    def check_running_update(
        self, old: Mapping[str, Any], new: Mapping[str, Any], where: str
    ) -> None:
        """Raise InputError when an update changes the size of a running job that accepts
        partial admission (it may change only while suspended)."""

    @abstractmethod
    def restored_spec(
        self, job: Mapping[str, Any], workload: Mapping[str, Any] | None
    ) -> Obj | None:
        """The spec merge patch that gives a suspended job the full size its Workload asks
        for, or None when nothing is to restore (Kueue's ``RestorePodSetsInfo``)."""


@dataclass(frozen=True, slots=True)
class PodMarks:
    """What the pod webhook writes on a pod of a :class:`Gated` kind when it is created: the
    Workload of its group, its PodSet, and labels to add (a pod-group index)."""

    workload: str
    podset: str
    labels: Mapping[str, str] = field(default_factory=dict)


class Gated(JobKind):
    """A kind without a suspend switch, held back by topogate's scheduling gate on its pods.

    The object runs as one gang per group (:meth:`groups`: the Workload names). Its pods are
    marked with their group's Workload and PodSet when they are created (:meth:`pod_marks`,
    from the pod alone: a webhook sees nothing else), so the ungater finds them once the
    Workload is admitted. :meth:`podsets` is read from :meth:`group_source`."""

    # Its object is composed by the controller's state from the pods (a plain pod group),
    # not watched as an API resource.
    composed: ClassVar[bool] = False

    def create_patch(self, obj: Mapping[str, Any]) -> JsonPatch:
        """The JSON patch the mutating webhook answers a queued object's creation with (the
        marks its pod templates need); empty by default."""
        return []

    @abstractmethod
    def groups(self, job: Mapping[str, Any]) -> list[str]:
        """The name of each Workload the object runs as (one per group of pods)."""

    def group_source(self, job: Mapping[str, Any], workload: str) -> Mapping[str, Any]:
        """The object the PodSets of the group ``workload`` are read from; by default the
        object itself (every group alike)."""
        return job

    def not_ready(self, job: Mapping[str, Any]) -> str | None:
        """Why no Workload can be made yet (a pod group still missing pods), or None."""
        return None

    @abstractmethod
    def pod_marks(self, pod: Mapping[str, Any]) -> PodMarks | None:
        """The marks of a pod of this kind (None: not one of its pods, or not yet
        recognisable)."""

    @abstractmethod
    def pod_owner(self, pod: Mapping[str, Any]) -> str | None:
        """namespace/name of the object a marked pod belongs to (None: not this kind's)."""

    def owner_references(self, job: Mapping[str, Any]) -> list[Obj]:
        """Who owns the group's Workload: by default the object, as its controller."""
        m = as_map(job.get("metadata"))
        return [
            {
                "apiVersion": self.api_version,
                "kind": self.kind,
                "name": m.get("name"),
                "uid": m.get("uid"),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]

    def check_update(self, old: Mapping[str, Any], new: Mapping[str, Any], where: str) -> None:
        """Raise InputError when an update changes what the group's Workloads were made from
        (their PodSets are not made again); by default anything may change."""

    def event_target(self, job: Obj) -> Obj:
        """The object Events about the job are about: by default the object itself."""
        return job

    def group_finished(self, job: Mapping[str, Any], pods: list[Obj]) -> str | None:
        """ "Succeeded" or "Failed" once the group of ``pods`` is done; by default never (a
        serving kind runs until it is deleted)."""
        return None

    def finished(self, job: Mapping[str, Any]) -> str | None:
        return None
