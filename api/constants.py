"""Names on the wire: API group, annotation keys, labels and gates.

Kueue's keys are accepted everywhere topogate's own are, so jobs written for Kueue run unchanged.
"""

from __future__ import annotations

GROUP = "topogate.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

KUEUE_GROUP = "kueue.x-k8s.io"
# Versions of Kueue's Topology/ResourceFlavor shapes that we read as input.
KUEUE_API_VERSIONS = frozenset(f"{KUEUE_GROUP}/{v}" for v in ("v1alpha1", "v1beta1", "v1beta2"))

# KAI-Scheduler's Topology: the same spec.levels[].nodeLabel shape as Kueue's, its own group.
KAI_GROUP = "kai.scheduler"
KAI_API_VERSION = f"{KAI_GROUP}/v1alpha1"

HOSTNAME_LABEL = "kubernetes.io/hostname"

# Pod-template annotations (suffixes; each exists under both prefixes).
REQUIRED_TOPOLOGY = "podset-required-topology"
PREFERRED_TOPOLOGY = "podset-preferred-topology"
UNCONSTRAINED_TOPOLOGY = "podset-unconstrained-topology"
SLICE_REQUIRED_TOPOLOGY = "podset-slice-required-topology"
SLICE_SIZE = "podset-slice-size"
SLICE_CONSTRAINTS = "podset-slice-required-topology-constraints"
GROUP_NAME = "podset-group-name"
TOPOLOGY_ANNOTATIONS = (
    REQUIRED_TOPOLOGY,
    PREFERRED_TOPOLOGY,
    UNCONSTRAINED_TOPOLOGY,
    SLICE_REQUIRED_TOPOLOGY,
    SLICE_SIZE,
    SLICE_CONSTRAINTS,
    GROUP_NAME,
)
ANNOTATION_PREFIXES = (f"{GROUP}/", f"{KUEUE_GROUP}/")
# Written by topogate on a PodSet's template when its required level comes from elsewhere
# (a native PodGroup's topology key): the field to name in messages about that level.
REQUIRED_TOPOLOGY_FROM = f"{GROUP}/required-topology-from"
# Put by the pod webhook on a member of a user's own scheduling.k8s.io PodGroup, which tells it
# apart from a started job's pod that joined the group topogate writes (named as its Workload).
NATIVE_MEMBER_LABEL = f"{GROUP}/native-podgroup-member"

QUEUE_LABELS = (f"{GROUP}/queue-name", f"{KUEUE_GROUP}/queue-name")

TOPOLOGY_GATE = f"{GROUP}/topology"
WORKLOAD_ANNOTATION = f"{GROUP}/workload"
PODSET_LABEL = f"{GROUP}/podset"

JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"

# On a batch/v1 Job's own metadata (Kueue's partial admission): the fewest pods the Job may
# run with when all of them do not fit. Each exists under both prefixes; Kueue's first.
MIN_PARALLELISM_KEYS = (f"{KUEUE_GROUP}/job-min-parallelism", f"{GROUP}/job-min-parallelism")

# Kubernetes' and Kueue's int32 fields (parallelism, replicas, slice sizes, domainCount).
MAX_INT32 = 2**31 - 1

# Kueue's plain pod groups (pkg/controller/jobs/pod): the group a pod belongs to (a label, or
# an annotation under Kueue's WorkloadIdentifierAnnotations), how many pods the group has,
# a role name overriding the hash of the pod's spec, the pod's index within the group (copied
# by the webhook from the label the index-label annotation names), and a member whose failure
# ends the group.
POD_GROUP_NAME = f"{KUEUE_GROUP}/pod-group-name"
POD_GROUP_TOTAL_COUNT = f"{KUEUE_GROUP}/pod-group-total-count"
POD_GROUP_ROLE_HASH = f"{KUEUE_GROUP}/role-hash"
POD_GROUP_POD_INDEX = f"{KUEUE_GROUP}/pod-group-pod-index"
POD_GROUP_POD_INDEX_LABEL = f"{KUEUE_GROUP}/pod-group-pod-index-label"
POD_GROUP_RETRIABLE = f"{KUEUE_GROUP}/retriable-in-group"
# A Workload made for a pod group (Kueue's is-group-workload): it is owned by every pod.
IS_GROUP_WORKLOAD = f"{KUEUE_GROUP}/is-group-workload"
# Subtracted from a pod's index label to give its rank in its PodSet (Kueue's
# PodIndexOffsetAnnotation: a LeaderWorkerSet's workers count from 1, the leader being 0).
POD_INDEX_OFFSET = f"{KUEUE_GROUP}/pod-index-offset"

# LeaderWorkerSet's pod labels and annotations (sigs.k8s.io/lws api/leaderworkerset/v1).
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
