"""The placement core's request and reply types: plain, immutable, no Kubernetes objects."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import repeat

from topogate.api.podspec import NodeConstraints
from topogate.cache.selectors import Exclusions


class Mode(StrEnum):
    REQUIRED = "required"  # the whole PodSet inside one domain of the level
    PREFERRED = "preferred"  # start at the level, climb one level at a time
    UNCONSTRAINED = "unconstrained"  # capacity only, at the lowest level


class Profile(StrEnum):
    BEST_FIT = "BestFit"
    LEAST_FREE_CAPACITY = "LeastFreeCapacity"


class ExactOutcome(StrEnum):
    """What the exact second pass did for a decision (a metric label for the shell)."""

    NOT_RUN = "not-run"  # the greedy answer fit and was already minimal, or budget 0
    FOUND = "found"  # it found a fit the greedy pass missed, or fewer domains
    NO_BETTER = "no-better"  # it proved the greedy answer right (no fit / fewest domains)
    # Its time budget ran out: the greedy answer stands (after a miss of the greedy pass,
    # the joint fit found stands, its preferred groups not moved to the fewest domains).
    BUDGET = "budget"
    UNSUPPORTED = "unsupported"  # GPU sets, balanced, or too large: the greedy answer stands


@dataclass(frozen=True, slots=True)
class SliceLayer:
    """Every run of ``size`` consecutive pods shares one domain of ``level``."""

    level: str
    size: int


@dataclass(frozen=True, slots=True)
class PodSetRequest:
    name: str
    count: int
    requests: Mapping[str, int]  # per pod, in cache units; one "pods" slot is added by the core
    mode: Mode = Mode.UNCONSTRAINED
    # The requested level. None: the lowest level (unconstrained) or, with slices only, the highest.
    level: str | None = None
    slices: tuple[SliceLayer, ...] = ()  # outermost first
    constraints: NodeConstraints = field(default_factory=NodeConstraints)
    group: str | None = None  # leader+workers: two PodSets placed together
    # PREFERRED only: the highest level the search may climb to; the gang must then fit in
    # one domain of it (KAI's required+preferred pair, Volcano's hard highestTierAllowed).
    limit: str | None = None
    # Each slice gets a domain of the slice level to itself (Volcano's HyperJob: one
    # replicated job per domain), instead of sharing a domain when capacity allows.
    exclusive_slices: bool = False
    # PREFERRED only: Kueue's balanced placement, an even split over the fewest domains.
    balanced: bool = False
    # topogate.dev/gpu-min-bandwidth (GB/s): every pod's own GPU set must reach it (hard).
    gpu_min_bandwidth: float | None = None
    # Kueue's partial admission (PodSet minCount): as few as this many pods may be admitted
    # when ``count`` does not fit; None: all or nothing.
    min_count: int | None = None


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    workload: str
    podsets: tuple[PodSetRequest, ...]
    topology: str | None = None  # the topology the job names (KAI), else its flavor's


@dataclass(frozen=True, slots=True)
class DomainCount:
    values: tuple[str, ...]  # as written in the assignment (hostname only, or the full path)
    count: int
    domain: int = -1  # the domain's index at the tree's output level (for reports)

    @classmethod
    def many(
        cls, values: Sequence[tuple[str, ...]], counts: Sequence[int], domains: Sequence[int]
    ) -> tuple[DomainCount, ...]:
        """One per (values, count, domain), built by filling the slots directly from C-level
        ``map`` loops: a frozen dataclass's __init__ goes through object.__setattr__ per
        field, and a plan over thousands of nodes spent more time there than placing pods."""
        if not len(values) == len(counts) == len(domains):
            raise ValueError("DomainCount.many: values, counts and domains differ in length")
        items = list(map(object.__new__, repeat(cls, len(values))))
        slot = cls.__dict__  # the slot descriptors, which a frozen class's setattr bypasses
        for name, column in (("values", values), ("count", counts), ("domain", domains)):
            deque(map(slot[name].__set__, items, column), maxlen=0)
        return tuple(items)


@dataclass(frozen=True, slots=True)
class PodSetPlacement:
    name: str
    levels: tuple[str, ...]  # the assignment's levels, as written in the TopologyAssignment
    domains: tuple[DomainCount, ...]  # sorted by full level path; counts add up to the count
    node_counts: Mapping[str, int]  # pods per node, for holding usage and checking plans
    # Nodes with a GPU bandwidth matrix (hostname-lowest topologies only): one GPU set per
    # pod placed there, and every GPU the workload's pods there hold (their visibleGPUs).
    gpu_sets: Mapping[str, tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    visible_gpus: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PlacementDecision:
    """Either every PodSet is placed (``fits``) or none is and ``message`` says why."""

    fits: bool
    placements: tuple[PodSetPlacement, ...] = ()
    message: str = ""
    podset: str | None = None  # the PodSet that did not fit
    exclusions: Exclusions | None = None
    produced_by: str = "greedy"  # "greedy" (Kueue's pass) or "exact" (the second pass)
    exact: ExactOutcome = ExactOutcome.NOT_RUN
