"""The API resources the controller reads and writes, and how to address them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

from topogate.api.constants import API_VERSION, KAI_API_VERSION, KAI_GROUP, KUEUE_GROUP
from topogate.api.kinds import JOB, JOB_KINDS, READ_KINDS, JobKind
from topogate.api.objects import Obj, key_of

__all__ = ["JSON_PATCH", "MERGE_PATCH", "Obj", "Resource", "key_of"]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource: ``Resource("batch/v1", "jobs")``; the core group is ``"v1"``."""

    api_version: str
    plural: str
    namespaced: bool = True
    # The name it is kept and logged under, where two groups share a plural (``topologies``
    # of topogate and of KAI-Scheduler); the plural otherwise.
    store_key: str = ""

    @property
    def key(self) -> str:
        return self.store_key or self.plural

    @classmethod
    def of(cls, kind: JobKind) -> Resource:
        return cls(kind.api_version, kind.plural)

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        root = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        parts = [root]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{_quoted(namespace)}")
        parts.append(self.plural)
        if name:
            parts.append(_quoted(name))
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


# What quote() leaves as it is: the names the API server takes (DNS labels and subdomains,
# Events' "name.hex") are all of it, and quoting each again cost more than the rest of a path.
_UNQUOTED = re.compile(r"[A-Za-z0-9._~-]+").fullmatch


def _quoted(name: str) -> str:
    return name if _UNQUOTED(name) else quote(name, safe="")


NODES = Resource("v1", "nodes", namespaced=False)
PODS = Resource("v1", "pods")
EVENTS = Resource("events.k8s.io/v1", "events")
LEASES = Resource("coordination.k8s.io/v1", "leases")
PRIORITY_CLASSES = Resource("scheduling.k8s.io/v1", "priorityclasses", namespaced=False)
# The webhook server's writes: the shared CA's Secret and the webhook configurations.
SECRETS = Resource("v1", "secrets")
MUTATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", namespaced=False
)
VALIDATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", namespaced=False
)
WORKLOADS = Resource(API_VERSION, "workloads")
CLUSTER_QUEUES = Resource(API_VERSION, "clusterqueues", namespaced=False)
LOCAL_QUEUES = Resource(API_VERSION, "localqueues")
RESOURCE_FLAVORS = Resource(API_VERSION, "resourceflavors", namespaced=False)
TOPOLOGIES = Resource(API_VERSION, "topologies", namespaced=False)
# The cohort tree's inner nodes; a cluster whose CRDs predate them lacks the kind (optional).
COHORTS = Resource(API_VERSION, "cohorts", namespaced=False)
# Kueue's Cohorts (v1beta2, the only version that has them), read as topogate's own: a
# cluster without Kueue's CRDs lacks the kind (optional).
KUEUE_COHORTS = Resource(
    f"{KUEUE_GROUP}/v1beta2", "cohorts", namespaced=False, store_key=f"cohorts.{KUEUE_GROUP}"
)
HYPERNODES = Resource("topology.volcano.sh/v1alpha1", "hypernodes", namespaced=False)
KAI_TOPOLOGIES = Resource(
    KAI_API_VERSION, "topologies", namespaced=False, store_key=f"topologies.{KAI_GROUP}"
)
# Kubernetes' own PodGroups (`serve --native-gangs`): kept under one key whichever version
# the API server serves (discovered at start).
NATIVE_PODGROUPS_KEY = "podgroups.scheduling.k8s.io"


def native_podgroups(api_version: str) -> Resource:
    return Resource(api_version, "podgroups", store_key=NATIVE_PODGROUPS_KEY)


# One resource per registered job kind (api/kinds), by kind name.
JOB_RESOURCES: dict[str, Resource] = {k.kind: Resource.of(k) for k in JOB_KINDS}
# Those served by a CRD a cluster may lack (JobSet's): followed once it exists.
JOB_CRD_RESOURCES = tuple(JOB_RESOURCES[k.kind] for k in JOB_KINDS if k.custom_resource)
JOBS = JOB_RESOURCES[JOB.kind]
# The other objects kinds read (a TrainJob's runtimes), by kind name: CRDs a cluster may lack.
READ_RESOURCES: dict[str, Resource] = {
    r.kind: Resource(r.api_version, r.plural, namespaced=r.namespaced) for r in READ_KINDS
}
