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
