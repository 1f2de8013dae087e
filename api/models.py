"""Wire types of topogate.dev/v1alpha1 (and the Kueue shapes read as input), as pydantic models.

Field names are snake_case in Python and camelCase on the wire, as in Kubernetes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .constants import API_VERSION, HOSTNAME_LABEL, KUEUE_API_VERSIONS
from .names import label_key_problem


class ApiModel(BaseModel):
    """camelCase on the wire; unknown fields from newer or foreign versions are ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=False
    )

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def _label_key(value: str) -> str:
    problem = label_key_problem(value)
    if problem:
        raise ValueError(problem)
    return value


LabelKey = Annotated[str, AfterValidator(_label_key)]


class ObjectMeta(ApiModel):
    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    creation_timestamp: str | None = None
    resource_version: str | None = None
    owner_references: list[dict[str, Any]] | None = None


def _check_api_version(value: str, kind: str) -> str:
    if value != API_VERSION and value not in KUEUE_API_VERSIONS:
        accepted = ", ".join(sorted({API_VERSION, *KUEUE_API_VERSIONS}))
        raise ValueError(f"{kind} apiVersion {value!r} is not one of {accepted}")
    return value


# --- Topology -----------------------------------------------------------------------------


class TopologyLevel(ApiModel):
    node_label: LabelKey


class TopologySpec(ApiModel):
    levels: list[TopologyLevel] = Field(min_length=1, max_length=16)

    @field_validator("levels")
    @classmethod
    def _levels_are_a_hierarchy(cls, levels: list[TopologyLevel]) -> list[TopologyLevel]:
        labels = [level.node_label for level in levels]
        seen: set[str] = set()
        for label in labels:
            if label in seen:
                raise ValueError(f"level {label!r} appears more than once")
            seen.add(label)
        if HOSTNAME_LABEL in labels[:-1]:
            raise ValueError(f"{HOSTNAME_LABEL} is allowed only as the lowest (last) level")
        return levels


class Topology(ApiModel):
    """Network topology as node-label levels, highest (widest) first."""

    api_version: str = API_VERSION
    kind: Literal["Topology"] = "Topology"
    metadata: ObjectMeta
    spec: TopologySpec

    @field_validator("api_version")
    @classmethod
    def _version(cls, value: str) -> str:
        return _check_api_version(value, "Topology")

    @property
    def level_labels(self) -> list[str]:
        return [level.node_label for level in self.spec.levels]


# --- ResourceFlavor -----------------------------------------------------------------------


class Taint(ApiModel):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Toleration(ApiModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = None
    toleration_seconds: int | None = None

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists must not have a value")
        if not self.key and self.operator not in (None, "Exists"):
            raise ValueError("a toleration with an empty key must use operator Exists")
        return self


class ResourceFlavorSpec(ApiModel):
    node_labels: dict[str, str] = Field(default_factory=dict)
    node_taints: list[Taint] = Field(default_factory=list)
    tolerations: list[Toleration] = Field(default_factory=list)
    topology_name: str | None = None

    @model_validator(mode="after")
    def _topology_needs_labels(self) -> ResourceFlavorSpec:
        # Kueue's rule: a TAS flavor must select its nodes, so they are not shared by accident.
        if self.topology_name and not self.node_labels:
            raise ValueError("nodeLabels must not be empty when topologyName is set")
        return self


class ResourceFlavor(ApiModel):
    api_version: str = API_VERSION
    kind: Literal["ResourceFlavor"] = "ResourceFlavor"
    metadata: ObjectMeta
    spec: ResourceFlavorSpec = Field(default_factory=ResourceFlavorSpec)

    @field_validator("api_version")
    @classmethod
    def _version(cls, value: str) -> str:
        return _check_api_version(value, "ResourceFlavor")


# --- Workload -----------------------------------------------------------------------------


class SliceConstraint(ApiModel):
    topology: LabelKey
    size: int = Field(ge=1)


class PodSetTopologyRequest(ApiModel):
    required: str | None = None
    preferred: str | None = None
    unconstrained: bool | None = None
    pod_index_label: str | None = None
    sub_group_index_label: str | None = None
    sub_group_count: int | None = None
    pod_set_group_name: str | None = None
    pod_set_slice_required_topology: str | None = None
    pod_set_slice_size: int | None = None
    podset_slice_required_topology_constraints: list[SliceConstraint] | None = Field(
        default=None, max_length=3
    )


class PodSet(ApiModel):
    name: str = Field(min_length=1, max_length=63)
    count: int = Field(ge=0)
    template: dict[str, Any] = Field(default_factory=dict)
    topology_request: PodSetTopologyRequest | None = None


class WorkloadSpec(ApiModel):
    pod_sets: list[PodSet] = Field(min_length=1, max_length=8)
    queue_name: str | None = None
    priority: int | None = None

    @field_validator("pod_sets")
    @classmethod
    def _unique_names(cls, pod_sets: list[PodSet]) -> list[PodSet]:
        names = [p.name for p in pod_sets]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"podSet names must be unique; repeated: {', '.join(duplicates)}")
        return pod_sets


class TopologyDomainAssignment(ApiModel):
    values: list[str]
    count: int


class TopologyAssignment(ApiModel):
    levels: list[str]
    domains: list[TopologyDomainAssignment]


class PodSetAssignment(ApiModel):
    name: str
    flavors: dict[str, str] = Field(default_factory=dict)
    resource_usage: dict[str, str] = Field(default_factory=dict)
    count: int
    topology_assignment: TopologyAssignment | None = None


class Admission(ApiModel):
    cluster_queue: str | None = None
    pod_set_assignments: list[PodSetAssignment]


class Condition(ApiModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class WorkloadStatus(ApiModel):
    conditions: list[Condition] = Field(default_factory=list)
    admission: Admission | None = None


class Workload(ApiModel):
    api_version: Literal["topogate.dev/v1alpha1"] = "topogate.dev/v1alpha1"
    kind: Literal["Workload"] = "Workload"
    metadata: ObjectMeta
    spec: WorkloadSpec
    status: WorkloadStatus | None = None
