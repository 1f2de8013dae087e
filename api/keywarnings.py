"""Warnings for label and annotation keys that topogate would silently ignore.

A key under one of the prefixes topogate reads (``kueue.x-k8s.io/``, ``topogate.dev/``,
``kai.scheduler/``) that no project defines is most likely a typo; a known key put where it is
not read (a Kueue PodSet annotation on the Job instead of its pod template, a queue label as an
annotation) does nothing. Both are said, never guessed at: these are warnings, the object is
still read as it is. ``plan`` prints them on stderr and the validating webhook returns them in
the AdmissionReview (kubectl shows them as ``Warning: ...``).

The known keys are the projects' own (Kueue at ff69552e: ``pkg/controller/constants``,
``apis/kueue``, the job integrations; KAI-Scheduler: its podgrouper and scheduler constants),
so no key either project defines ever warns as unknown. The wording follows the API server's
own field warnings: ``<field path>[<key>]: <what is wrong>``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from . import constants as c
from .kinds import job_kind
from .validation import join
from .vocabularies import (
    BALANCED_PLACEMENT,
    KAI_PREFERRED,
    KAI_REQUIRED,
    KAI_TOPOLOGY,
    NETWORK_TOPOLOGY,
    REPLICA_REQUIRED_TOPOLOGY,
    TOPOLOGY_NAME,
)

KAI_PREFIX = "kai.scheduler/"

# Every label and annotation key Kueue defines (its Go constants, at the pinned commit).
KUEUE_KEYS = frozenset(
    f"{c.KUEUE_GROUP}/{name}"
    for name in (
        "admission",
        "admission-gated-by",
        "auto-generated",
        "cluster-queue-name",
        "component-workload-index",
        "concurrent-admission",
        "concurrent-admission-parent",
        "elastic-job",
        "is-group-workload",
        "job-completions-equal-parallelism",
        "job-min-parallelism",
        "job-owner-gvk",
        "job-owner-name",
        "job-uid",
        "local-queue-name",
        "managed",
        "manager",
        "max-exec-time-seconds",
        "multikueue",
        "multikueue-dispatcher-all-at-once",
        "multikueue-dispatcher-incremental",
        "multikueue-origin",
        "multikueue-origin-uid",
        "multikueue-worker-workload-pod",
        "pod-group-fast-admission",
        "pod-group-name",
        "pod-group-pod-index",
        "pod-group-pod-index-label",
        "pod-group-serving",
        "pod-group-total-count",
        "pod-index-offset",
        "pod-suspending-parent",
        "podset",
        *c.TOPOLOGY_ANNOTATIONS,
        "prebuilt-workload-name",
        "priority-boost",
        "priority-class",
        "provisioning-request",
        "queue-name",
        "raycluster-generation",
        "raycluster-podset-replica-sizes",
        "resource-in-use",
        "retriable-in-group",
        "role-hash",
        "safe-to-forcefully-delete",
        "stopping",
        "topology",
        "workload",
        "workload-allowed-resource-flavors",
        "workload-slice-name",
        "workload-slice-replacement-for",
        "workloadpriorityclass",
    )
)

# KAI-Scheduler's keys (its podgrouper, scheduler and binder constants).
KAI_KEYS = frozenset(
    KAI_PREFIX + name
    for name in (
        "accounting",
        "batch-min-member",
        "last-eviction-timestamp",
        "last-start-timestamp",
        "node-pool",
        "numa-placement-observed",
        "numa-placement-predicted",
        "preemptibility",
        "preemption-delay",
        "queue",
        "segment-size",
        "segment-topology-preferred-placement",
        "segment-topology-required-placement",
        "skip-podgrouper",
        "stale-podgroup-timestamp",
        "staleness-grace-period",
        "subgroup-name",
        "task-priority",
        "top-owner-metadata",
        "topology",
        "topology-preferred-placement",
        "topology-required-placement",
        "type",
    )
)

# topogate's own keys, on jobs, pods, nodes, Workloads and HyperNodes (its scheduling gate
# ``topogate.dev/topology`` is no key: written as one, it is most likely ``topology-name``).
TOPOGATE_KEYS = frozenset(
    {
        *(f"{c.GROUP}/{name}" for name in c.TOPOLOGY_ANNOTATIONS),
        TOPOLOGY_NAME,
        NETWORK_TOPOLOGY,
        REPLICA_REQUIRED_TOPOLOGY,
        BALANCED_PLACEMENT,
        c.QUEUE_LABELS[0],
        c.WORKLOAD_ANNOTATION,
        c.PODSET_LABEL,
        *(
            f"{c.GROUP}/{name}"
            for name in (
                "gpu-bandwidth",
                "gpu-profile",
                "gpu-min-bandwidth",
                "gpu-assignment",
                "gpu-allocation",
                "job-uid",
                "network-topology-source",
                "network-topology-type",
            )
        ),
    }
)

KNOWN_KEYS: dict[str, frozenset[str]] = {
    f"{c.KUEUE_GROUP}/": KUEUE_KEYS,
    f"{c.GROUP}/": TOPOGATE_KEYS,
    KAI_PREFIX: KAI_KEYS,
}

# Where the keys topogate reads are read: pod-template annotations, the object's annotations
# (KAI's, which are read on the template too), and the object's labels (the queue).
_KAI_OBJECT = frozenset({KAI_TOPOLOGY, KAI_REQUIRED, KAI_PREFERRED})
TEMPLATE_ANNOTATIONS = frozenset(
    {
        *(prefix + name for prefix in c.ANNOTATION_PREFIXES for name in c.TOPOLOGY_ANNOTATIONS),
        TOPOLOGY_NAME,
        NETWORK_TOPOLOGY,
        REPLICA_REQUIRED_TOPOLOGY,
        BALANCED_PLACEMENT,
        f"{c.GROUP}/gpu-min-bandwidth",
        *_KAI_OBJECT,
    }
)
OBJECT_LABELS = frozenset(c.QUEUE_LABELS)


@dataclass(frozen=True, slots=True)
class _Place:
    """One metadata block: its field path, and whether it is the object's, a template's or
    both (a Pod is its own template); or neither, between the two (a JobSet's Job templates),
    then with its name and where the pod template's annotations are."""

    path: str  # e.g. "spec.template.metadata"
    meta: Mapping[str, Any]
    on_object: bool
    on_template: bool
    between: str = ""  # e.g. "a Job template"
    pod_annotations: str = ""  # e.g. "spec.replicatedJobs[0].template.spec.template..."


def _as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _places(obj: Mapping[str, Any]) -> Iterator[_Place]:
    meta = _as_map(obj.get("metadata"))
    spec = _as_map(obj.get("spec"))
    if obj.get("kind") == "Pod":
        yield _Place("metadata", meta, True, True)
        return
    yield _Place("metadata", meta, True, False)
    kind = job_kind(obj.get("kind"))
    templates: list[tuple[str, Any]] = []
    if kind is not None:
        templates = kind.template_fields(obj)
    elif obj.get("kind") == "Workload":
        for i, podset in enumerate(_as_list(spec.get("podSets"))):
            templates.append((f"spec.podSets[{i}].template", _as_map(podset).get("template")))
    if kind is not None:
        for path, template, pod_template in kind.between_templates(obj):
            yield _Place(
                join(path, "metadata"),
                _as_map(_as_map(template).get("metadata")),
                False,
                False,
                kind.between_name,
                join(pod_template, "metadata.annotations"),
            )
    for path, template in templates:
        yield _Place(
            join(path, "metadata"), _as_map(_as_map(template).get("metadata")), False, True
        )


def _template_hint(obj: Mapping[str, Any]) -> str:
    kind = job_kind(obj.get("kind"))
    if kind is not None:
        return kind.template_annotations_hint
    if obj.get("kind") == "Workload":
        return "spec.podSets[*].template.metadata.annotations"
    return "spec.template.metadata.annotations"


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions)."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def nearest_key(key: str, known: frozenset[str]) -> str:
    """The known key most like ``key``: by the share of characters in common, in order
    (difflib's ratio), which finds a left-out word (``podset-slice-topology`` ->
    ``podset-slice-required-topology``) where plain edit distance picks a shorter key; then by
    edit distance, then by name."""

    matcher = difflib.SequenceMatcher(None, autojunk=False)
    matcher.set_seq2(key)  # the side difflib caches
    ratios: dict[str, float] = {}
    for candidate in known:
        matcher.set_seq1(candidate)
        ratios[candidate] = matcher.ratio()
    best = max(ratios.values())
    tied = [k for k, ratio in ratios.items() if ratio == best]
    return min(tied, key=lambda k: (edit_distance(key, k), k))


def _prefix(key: str) -> str | None:
    return next((p for p in KNOWN_KEYS if key.startswith(p)), None)


def _misplaced(key: str, field: str, place: _Place, obj: Mapping[str, Any]) -> str | None:
    """Why a known key does nothing where it is, or None if it is read there (or topogate
    does not read it at all)."""
    kind = str(obj.get("kind") or "object")
    if place.between:  # one level above the pod template: nothing is read there
        if key in TEMPLATE_ANNOTATIONS:
            return f"not read on {place.between}; move it to {place.pod_annotations}"
        if key in OBJECT_LABELS:
            return f"not read on {place.between}; move it to the {kind}'s metadata.labels"
        return None
    if not place.on_template and key in TEMPLATE_ANNOTATIONS - _KAI_OBJECT:
        return f"not read on the {kind}; move it to {_template_hint(obj)}"
    if not place.on_object and key in OBJECT_LABELS:
        return f"not read on a pod template; move it to the {kind}'s metadata.labels"
    if field == "labels" and key in TEMPLATE_ANNOTATIONS:
        return f"read from annotations, not labels; move it to {join(place.path, 'annotations')}"
    if field == "annotations" and key in OBJECT_LABELS:
        return f"read from labels, not annotations; move it to {join(place.path, 'labels')}"
    return None


# A nearest key costs a few milliseconds; an object with hundreds of unknown keys must not hold
# the webhook (each one past these is still named, without a suggestion).
MAX_SUGGESTIONS = 32
# The longest key Kubernetes allows (a 253-character prefix, '/', a 63-character name). The
# comparison is quadratic in the key's length: a longer key (which the API server refuses
# anyway, but plan reads files) gets no suggestion, so one 100 KB key cannot cost seconds.
MAX_KEY_LENGTH = 317


# A prefix this much like a known one (difflib's ratio) is a typo of it: kueue.k8s.io,
# kueue.sigs.k8s.io, topogate.io, kai-scheduler; never kubernetes.io (0.59) or x-k8s.io (0.73).
PREFIX_LIKENESS = 0.75
# Names no other project uses: under any prefix, they are meant for the projects topogate reads.
_OWN_NAMES = frozenset(key.split("/", 1)[1] for key in TEMPLATE_ANNOTATIONS)


def _wrong_prefix(key: str) -> str | None:
    """The known key meant by a key under a mistyped prefix (``kueue.k8s.io/...``), or None."""
    prefix, slash, name = key.partition("/")
    if not slash:
        return None
    likeness = {
        known: difflib.SequenceMatcher(None, prefix, known[:-1], autojunk=False).ratio()
        for known in KNOWN_KEYS
    }
    best = max(likeness, key=lambda known: likeness[known])
    if likeness[best] < PREFIX_LIKENESS and name not in _OWN_NAMES:
        return None
    return nearest_key(best + name, KNOWN_KEYS[best])


def key_warnings(obj: Mapping[str, Any]) -> list[str]:
    """One line per unknown or misplaced key of a Job, JobSet, Pod or Workload, in field order.

    Malformed metadata is skipped here (the readers refuse it with the field named).
    """
    warnings: list[str] = []
    suggested = 0
    for place in _places(obj):
        for field in ("labels", "annotations"):
            for key in sorted(str(k) for k in _as_map(place.meta.get(field))):
                prefix = _prefix(key)
                where = f"{join(place.path, field)}[{key}]"
                if prefix is None:
                    meant = None
                    if suggested < MAX_SUGGESTIONS and len(key) <= MAX_KEY_LENGTH:
                        meant = _wrong_prefix(key)
                    if meant is not None:
                        suggested += 1
                        warnings.append(f"{where}: unknown; did you mean {meant}?")
                    continue
                known = KNOWN_KEYS[prefix]
                if key not in known and suggested < MAX_SUGGESTIONS and len(key) <= MAX_KEY_LENGTH:
                    suggested += 1
                    warnings.append(f"{where}: unknown; did you mean {nearest_key(key, known)}?")
                    continue
                if key not in known:
                    warnings.append(f"{where}: unknown")
                    continue
                problem = _misplaced(key, field, place, obj)
                if problem:
                    warnings.append(f"{where}: {problem}")
    return warnings
