"""Wire types of topogate.dev/v1alpha1 (and the Kueue shapes read as input), as pydantic models.

Field names are snake_case in Python and camelCase on the wire, as in Kubernetes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from .constants import API_VERSION, HOSTNAME_LABEL, KAI_API_VERSION, KUEUE_API_VERSIONS
from .errors import InputError
from .names import label_key_problem
from .quantity import QuantityError, parse_quantity, to_units
from .topology_assignment import MAX_SLICES, AssignedDomain, Assignment, decode, encode


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


def _check_api_version(value: str, kind: str, *also: str) -> str:
    if value != API_VERSION and value not in KUEUE_API_VERSIONS and value not in also:
        accepted = ", ".join(sorted({API_VERSION, *KUEUE_API_VERSIONS, *also}))
        raise ValueError(f"{kind} apiVersion {value!r} is not one of {accepted}")
    return value


# --- Topology -----------------------------------------------------------------------------


_LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)


def _cel(*rules: tuple[str, str]) -> dict[str, Any]:
    """CEL rules the API server enforces (x-kubernetes-validations in the generated CRD)."""
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}


class TopologyLevel(ApiModel):
    node_label: LabelKey = Field(
        min_length=1, max_length=316, json_schema_extra={"pattern": _LABEL_KEY_PATTERN}
    )


class TopologySpec(ApiModel):
    levels: list[TopologyLevel] = Field(
        min_length=1,
        max_length=16,
        json_schema_extra=_cel(
            ("self.all(x, self.exists_one(y, y.nodeLabel == x.nodeLabel))", "must be unique"),
            (
                "!self.exists(x, x.nodeLabel == 'kubernetes.io/hostname') || "
                "self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'",
                "the kubernetes.io/hostname label can only be used at the lowest level of topology",
            ),
        ),
    )

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
    """Network topology as node-label levels, highest (widest) first: topogate's, Kueue's or
    KAI-Scheduler's Topology (the three share this shape)."""

    api_version: str = API_VERSION
    kind: Literal["Topology"] = "Topology"
    metadata: ObjectMeta
    spec: TopologySpec

    @field_validator("api_version")
    @classmethod
    def _version(cls, value: str) -> str:
        return _check_api_version(value, "Topology", KAI_API_VERSION)

    @property
    def is_kai(self) -> bool:
        """KAI-Scheduler's own Topology (``kai.scheduler/v1alpha1``)."""
        return self.api_version == KAI_API_VERSION

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
    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "!has(self.topologyName) || (has(self.nodeLabels) && size(self.nodeLabels) > 0)",
                "at least one nodeLabel is required when topology is set",
            ),
            (
                "!has(oldSelf.topologyName) || (has(self.topologyName) && "
                "self.topologyName == oldSelf.topologyName)",
                "topologyName is immutable when topologyName is set",
            ),
        )
    )

    node_labels: dict[LabelKey, str] = Field(default_factory=dict, max_length=8)
    node_taints: list[Taint] = Field(default_factory=list, max_length=8)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=8)
    topology_name: str | None = Field(default=None, max_length=253)

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


# --- ClusterQueue and LocalQueue --------------------------------------------------------


class ResourceQuota(ApiModel):
    """Quota of one resource in one flavor. In a cohort, ``borrowing_limit`` caps what the queue
    may take beyond its nominal quota from the others, and ``lending_limit`` caps how much of
    its nominal quota the others may use (Kueue's fields; unset: no limit). That a lending
    limit stays within the nominal quota is checked by the validating webhook: as a CEL rule on
    quantities it would exceed the API server's cost budget for this schema."""

    name: str = Field(min_length=1)
    nominal_quota: str | int = Field(json_schema_extra={"x-kubernetes-int-or-string": True})
    borrowing_limit: str | int | None = Field(
        default=None, json_schema_extra={"x-kubernetes-int-or-string": True}
    )
    lending_limit: str | int | None = Field(
        default=None, json_schema_extra={"x-kubernetes-int-or-string": True}
    )

    @field_validator("nominal_quota", "borrowing_limit", "lending_limit")
    @classmethod
    def _quantity(cls, value: str | int | None, info: ValidationInfo) -> str | int | None:
        if value is None:
            return None
        try:
            if parse_quantity(value) < 0:
                raise ValueError(f"{value!r} must not be negative")
            # As the cache counts it (millicores for cpu): above int64 is refused here, with
            # its field, rather than by plan without one or never by the webhook.
            to_units(str(info.data.get("name") or ""), value)
        except QuantityError as error:
            raise ValueError(str(error)) from None
        return value

    @model_validator(mode="after")
    def _lending_within_nominal(self) -> ResourceQuota:
        lending = self.lending_limit
        if lending is not None and parse_quantity(lending) > parse_quantity(self.nominal_quota):
            raise ValueError(
                f"lendingLimit {lending!r} of {self.name} must not exceed its nominalQuota "
                f"{self.nominal_quota!r}"
            )
        return self


class FlavorQuotas(ApiModel):
    name: str = Field(min_length=1, max_length=253)
    resources: list[ResourceQuota] = Field(min_length=1, max_length=16)


class ResourceGroup(ApiModel):
    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "self.flavors.all(f, size(f.resources) == size(self.coveredResources) && "
                "f.resources.all(r, r.name in self.coveredResources))",
                "each flavor must list exactly the covered resources",
            )
        )
    )

    covered_resources: list[str] = Field(min_length=1, max_length=16)
    flavors: list[FlavorQuotas] = Field(min_length=1, max_length=16)

    @model_validator(mode="after")
    def _flavors_cover_resources(self) -> ResourceGroup:
        covered = set(self.covered_resources)
        for flavor in self.flavors:
            names = [r.name for r in flavor.resources]
            if set(names) != covered or len(names) != len(covered):
                raise ValueError(
                    f"flavor {flavor.name!r} lists {sorted(names)}; each flavor must list "
                    f"exactly the covered resources {sorted(covered)}"
                )
        return self


def _no_limits_without(groups: Sequence[ResourceGroup], what: str) -> None:
    """Borrowing and lending limits mean nothing without something to borrow from: refused
    (a ClusterQueue without a cohort, a Cohort without a parent), naming the first one."""
    for group in groups:
        for flavor in group.flavors:
            for quota in flavor.resources:
                if quota.borrowing_limit is not None or quota.lending_limit is not None:
                    raise ValueError(
                        f"flavor {flavor.name!r}, resource {quota.name!r}: "
                        f"borrowingLimit and lendingLimit need {what}"
                    )


def _flavors_once(groups: list[ResourceGroup]) -> list[ResourceGroup]:
    names = [f.name for g in groups for f in g.flavors]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"flavors may appear in one resource group only: {', '.join(repeated)}")
    return groups


class BorrowWithinCohort(ApiModel):
    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: int | None = None


class ClusterQueuePreemption(ApiModel):
    """Kueue's ``spec.preemption``: which admitted workloads a pending one may evict."""

    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = "Never"
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = "Never"
    borrow_within_cohort: BorrowWithinCohort | None = None


MAY_STOP_SEARCH = "MayStopSearch"
TRY_NEXT_FLAVOR = "TryNextFlavor"
# Kueue v1beta1's older names of MayStopSearch, still accepted there (and so here).
_OLD_NAMES = {"Borrow": MAY_STOP_SEARCH, "Preempt": MAY_STOP_SEARCH}


def _new_name(value: str) -> str:
    return _OLD_NAMES.get(value, value)


class FlavorFungibility(ApiModel):
    """Kueue's ``spec.flavorFungibility``: whether a workload looks past a flavor where it
    would borrow (``whenCanBorrow``) or preempt (``whenCanPreempt``) before taking it, and,
    once every flavor asks one or the other, which it prefers (``preference``). The v1beta1
    names ``Borrow`` and ``Preempt`` are read as ``MayStopSearch``."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                # Unset fields are Kueue's defaults (this schema writes none).
                "!has(self.preference) || (has(self.whenCanBorrow) && "
                "self.whenCanBorrow == 'TryNextFlavor' && (!has(self.whenCanPreempt) || "
                "self.whenCanPreempt == 'TryNextFlavor'))",
                "preference can only be set when both whenCanBorrow and whenCanPreempt are "
                "TryNextFlavor",
            ),
        )
    )

    when_can_borrow: Annotated[
        Literal["MayStopSearch", "TryNextFlavor", "Borrow"], AfterValidator(_new_name)
    ] = "MayStopSearch"
    when_can_preempt: Annotated[
        Literal["MayStopSearch", "TryNextFlavor", "Preempt"], AfterValidator(_new_name)
    ] = "TryNextFlavor"
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = None

    @model_validator(mode="after")
    def _preference_needs_both_next(self) -> FlavorFungibility:
        if self.preference is not None and (
            self.when_can_borrow != TRY_NEXT_FLAVOR or self.when_can_preempt != TRY_NEXT_FLAVOR
        ):
            raise ValueError(
                f"preference {self.preference} can only be set when both whenCanBorrow and "
                f"whenCanPreempt are TryNextFlavor (they are {self.when_can_borrow} and "
                f"{self.when_can_preempt})"
            )
        return self


class CohortFairSharing(ApiModel):
    """Kueue's ``spec.fairSharing`` of a ClusterQueue or Cohort: its weight in fair sharing
    (``serve --fair-sharing``); unset, 1."""

    weight: str | int | None = Field(
        default=None, json_schema_extra={"x-kubernetes-int-or-string": True}
    )

    @field_validator("weight")
    @classmethod
    def _quantity(cls, value: str | int | None) -> str | int | None:
        if value is None:
            return None
        try:
            if parse_quantity(value) < 0:
                raise ValueError(f"{value!r} must not be negative")
        except QuantityError as error:
            raise ValueError(str(error)) from None
        return value


class ClusterQueueSpec(ApiModel):
    """``cohort`` (Kueue v1beta1) or ``cohortName`` (v1beta2): queues of one cohort lend
    unused quota to each other."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "has(self.cohort) || has(self.cohortName) || self.resourceGroups.all(g, "
                "g.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit) && "
                "!has(r.lendingLimit))))",
                "borrowingLimit and lendingLimit need a cohort",
            ),
            (
                "!has(self.cohort) || !has(self.cohortName) || self.cohort == self.cohortName",
                "cohort and cohortName must agree",
            ),
        )
    )

    queueing_strategy: Literal["StrictFIFO", "BestEffortFIFO"] = "BestEffortFIFO"
    resource_groups: list[ResourceGroup] = Field(default_factory=list, max_length=16)
    namespace_selector: dict[str, Any] | None = None
    cohort: str | None = Field(default=None, min_length=1, max_length=63)
    cohort_name: str | None = Field(default=None, min_length=1, max_length=63)
    preemption: ClusterQueuePreemption | None = None
    fair_sharing: CohortFairSharing | None = None
    flavor_fungibility: FlavorFungibility | None = None

    @property
    def cohort_of(self) -> str | None:
        """The cohort, whichever of Kueue's two field names gives it."""
        return self.cohort_name or self.cohort

    @model_validator(mode="after")
    def _limits_need_a_cohort(self) -> ClusterQueueSpec:
        if self.cohort and self.cohort_name and self.cohort != self.cohort_name:
            raise ValueError(
                f"cohort {self.cohort!r} and cohortName {self.cohort_name!r} must agree"
            )
        if self.cohort_of is None:
            _no_limits_without(self.resource_groups, "a cohort")
        return self

    @field_validator("resource_groups")
    @classmethod
    def _flavors_once(cls, groups: list[ResourceGroup]) -> list[ResourceGroup]:
        return _flavors_once(groups)


def _absent_if_malformed(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A queue's or cohort's status is what controllers report, not what its owner asked for:
    one that does not parse (another controller's, a hand-edited file) is read as absent
    rather than keeping the queue out of every decision."""
    try:
        return handler(value)
    except ValidationError:
        return None


class QueueStatus(ApiModel):
    pending_workloads: int | None = None
    admitted_workloads: int | None = None
    conditions: list[Condition] = Field(default_factory=list)


class FairSharingStatus(ApiModel):
    """Kueue's ``status.fairSharing`` of a ClusterQueue or Cohort, written by `serve
    --fair-sharing`: the weighted dominant resource share, rounded up (the int64 maximum for
    a borrower of weight 0). Not checked when read: a status never keeps its object out."""

    weighted_share: int | None = None


class ClusterQueueStatus(QueueStatus):
    fair_sharing: FairSharingStatus | None = None


class ClusterQueue(ApiModel):
    api_version: Literal["topogate.dev/v1alpha1"] = "topogate.dev/v1alpha1"
    kind: Literal["ClusterQueue"] = "ClusterQueue"
    metadata: ObjectMeta
    spec: ClusterQueueSpec = Field(default_factory=ClusterQueueSpec)
    status: Annotated[ClusterQueueStatus | None, WrapValidator(_absent_if_malformed)] = None


class LocalQueueSpec(ApiModel):
    cluster_queue: str = Field(min_length=1, max_length=253)


class LocalQueue(ApiModel):
    api_version: Literal["topogate.dev/v1alpha1"] = "topogate.dev/v1alpha1"
    kind: Literal["LocalQueue"] = "LocalQueue"
    metadata: ObjectMeta
    spec: LocalQueueSpec
    status: Annotated[QueueStatus | None, WrapValidator(_absent_if_malformed)] = None


class CohortResourceQuota(ResourceQuota):
    """A Cohort's quota of one resource: its lending limit may exceed its own nominal quota,
    since it caps what the whole subtree lends up (Kueue's cohort webhook does not compare
    them)."""

    @model_validator(mode="after")
    def _lending_within_nominal(self) -> CohortResourceQuota:
        return self


class CohortFlavorQuotas(FlavorQuotas):
    resources: list[CohortResourceQuota] = Field(min_length=1, max_length=16)  # type: ignore[assignment]


class CohortResourceGroup(ResourceGroup):
    flavors: list[CohortFlavorQuotas] = Field(min_length=1, max_length=16)  # type: ignore[assignment]


class CohortSpec(ApiModel):
    """A node of the cohort tree (Kueue's v1beta2 Cohort): its parent, if any, and quota it
    holds for its subtree, on top of what its ClusterQueues and child Cohorts lend."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "has(self.parentName) || !has(self.resourceGroups) || self.resourceGroups.all(g, "
                "g.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit) && "
                "!has(r.lendingLimit))))",
                "borrowingLimit and lendingLimit need a parentName",
            ),
        )
    )

    parent_name: str | None = Field(default=None, min_length=1, max_length=253)
    resource_groups: list[CohortResourceGroup] = Field(default_factory=list, max_length=16)
    fair_sharing: CohortFairSharing | None = None

    @model_validator(mode="after")
    def _limits_need_a_parent(self) -> CohortSpec:
        if self.parent_name is None:
            _no_limits_without(self.resource_groups, "a parentName")
        return self

    @field_validator("resource_groups")
    @classmethod
    def _flavors_once(cls, groups: list[CohortResourceGroup]) -> list[CohortResourceGroup]:
        _flavors_once(list(groups))
        return groups


class CohortStatus(ApiModel):
    fair_sharing: FairSharingStatus | None = None


class Cohort(ApiModel):
    """topogate's Cohort, or Kueue's (``kueue.x-k8s.io/v1beta2``): the same shape."""

    api_version: str = API_VERSION
    kind: Literal["Cohort"] = "Cohort"
    metadata: ObjectMeta
    spec: CohortSpec = Field(default_factory=CohortSpec)
    status: Annotated[CohortStatus | None, WrapValidator(_absent_if_malformed)] = None

    @field_validator("api_version")
    @classmethod
    def _version(cls, value: str) -> str:
        return _check_api_version(value, "Cohort")


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
    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "has(self.minCount) ? self.minCount <= self.count : true",
                "minCount should be positive and less or equal to count",
            )
        )
    )

    name: str = Field(min_length=1, max_length=63)
    count: int = Field(ge=0)
    # Kueue's partial admission: as few as this many pods may be admitted when ``count`` does
    # not fit (at most one PodSet of a Workload).
    min_count: int | None = Field(default=None, ge=1)
    template: dict[str, Any] = Field(default_factory=dict)
    topology_request: PodSetTopologyRequest | None = None

    @model_validator(mode="after")
    def _min_within_count(self) -> PodSet:
        if self.min_count is not None and self.min_count > self.count:
            raise ValueError(
                f"minCount ({self.min_count}) should be positive and less or equal to count "
                f"({self.count})"
            )
        return self


# The most PodSets a Workload holds (its CRD's maxItems, as Kueue's v1beta1 Workload).
MAX_PODSETS = 8


class WorkloadSpec(ApiModel):
    pod_sets: list[PodSet] = Field(
        min_length=1,
        max_length=MAX_PODSETS,
        json_schema_extra=_cel(
            (
                "self.filter(p, has(p.minCount)).size() <= 1",
                "at most one podSet can use minCount",
            )
        ),
    )
    queue_name: str | None = None
    priority: int | None = None

    @field_validator("pod_sets")
    @classmethod
    def _unique_names(cls, pod_sets: list[PodSet]) -> list[PodSet]:
        names = [p.name for p in pod_sets]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"podSet names must be unique; repeated: {', '.join(duplicates)}")
        if sum(p.min_count is not None for p in pod_sets) > 1:
            raise ValueError("at most one podSet can use minCount")
        return pod_sets


class TopologyDomainAssignment(ApiModel):
    """One domain of the older ``domains`` form (Kueue v1beta1): read, never written."""

    values: list[str]
    count: int = Field(ge=1)


class TopologyAssignmentSliceLevelIndividualValues(ApiModel):
    prefix: str | None = Field(default=None, max_length=63)
    suffix: str | None = Field(default=None, max_length=63)
    roots: list[Annotated[str, Field(max_length=63)]] = Field(min_length=1, max_length=100_000)


class TopologyAssignmentSliceLevelValues(ApiModel):
    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "has(self.universal) != has(self.individual)",
                "exactly one of the fields in [universal individual] must be set",
            )
        )
    )

    universal: str | None = Field(default=None, max_length=63)
    individual: TopologyAssignmentSliceLevelIndividualValues | None = None


class TopologyAssignmentSlicePodCounts(ApiModel):
    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "has(self.universal) != has(self.individual)",
                "exactly one of the fields in [universal individual] must be set",
            )
        )
    )

    universal: int | None = Field(default=None, ge=1)
    individual: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None, min_length=1, max_length=100_000
    )


class TopologyAssignmentSlice(ApiModel):
    """Consecutive domains of an assignment, each level's values compacted (Kueue v1beta2)."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "!has(self.podCounts.individual) || "
                "size(self.podCounts.individual) == self.domainCount",
                "podCounts.individual must have length equal to domainCount",
            ),
            (
                "self.valuesPerLevel.all(x, !has(x.individual) || "
                "size(x.individual.roots) == self.domainCount)",
                "valuesPerLevel.individual, if set, must have roots of length equal to "
                "domainCount of this TopologyAssignmentSlice",
            ),
        )
    )

    domain_count: int = Field(ge=1)
    values_per_level: list[TopologyAssignmentSliceLevelValues] = Field(min_length=1, max_length=16)
    pod_counts: TopologyAssignmentSlicePodCounts


def _plain(value: Any) -> Any:
    """Wire data for the decoder, also when a caller built the assignment from models."""
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True, exclude_none=True)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


class TopologyAssignment(ApiModel):
    """Where a PodSet's pods go. Written as Kueue v1beta2 ``slices``; the older ``domains``
    form is read too. ``api.topology_assignment`` encodes and decodes both; the check below
    is its decoder, so a malformed slice is refused with the field that is wrong."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "!has(self.slices) || "
                "self.slices.all(x, size(x.valuesPerLevel) == size(self.levels))",
                "valuesPerLevel must have the same length as the number of levels in this "
                "TopologyAssignment",
            ),
            (
                "!has(self.slices) || !has(self.domains)",
                "set either slices or domains, not both",
            ),
        )
    )

    levels: list[Annotated[str, Field(max_length=317)]] = Field(min_length=1, max_length=16)
    slices: list[TopologyAssignmentSlice] | None = Field(default=None, max_length=MAX_SLICES)
    domains: list[TopologyDomainAssignment] | None = None

    @model_validator(mode="before")
    @classmethod
    def _decodes(cls, data: Any) -> Any:
        plain = {k: _plain(v) for k, v in data.items()} if isinstance(data, dict) else data
        try:
            decode(plain)
        except InputError as error:
            raise ValueError(error.describe()) from None
        return data

    @classmethod
    def encoded(
        cls, levels: Sequence[str], domains: Sequence[AssignedDomain]
    ) -> TopologyAssignment:
        """The slices Kueue would write for these domains."""
        return cls.model_validate(encode(levels, domains))

    def decoded(self) -> Assignment:
        return decode(self.to_wire())


class PodSetAssignment(ApiModel):
    name: str
    flavors: dict[str, str] = Field(default_factory=dict)
    resource_usage: dict[str, str] = Field(default_factory=dict)
    count: int
    topology_assignment: TopologyAssignment | None = None


class Admission(ApiModel):
    cluster_queue: str | None = None
    # At most 8, as Kueue and as spec.podSets: the API server bounds the cost of the CEL
    # rules inside each topologyAssignment by it.
    pod_set_assignments: list[PodSetAssignment] = Field(max_length=8)


class Condition(ApiModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class UnhealthyNode(ApiModel):
    name: str


class WorkloadStatus(ApiModel):
    conditions: list[Condition] = Field(default_factory=list)
    admission: Admission | None = None
    # Kueue's field: nodes of the admission that failed (NotReady past the grace period, or
    # deleted); their pods were moved, and the ungater never sends a pod there.
    unhealthy_nodes: list[UnhealthyNode] | None = None


class Workload(ApiModel):
    api_version: Literal["topogate.dev/v1alpha1"] = "topogate.dev/v1alpha1"
    kind: Literal["Workload"] = "Workload"
    metadata: ObjectMeta
    spec: WorkloadSpec
    status: WorkloadStatus | None = None
