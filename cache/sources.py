"""Where a topology's levels come from: node labels (a Kueue Topology) or a HyperNode forest.

A ``TopologySource`` names its levels, highest first, and knows which Volcano tier each
level is, so one job vocabulary (Kueue level keys, KAI level names, Volcano tiers and tier
names) resolves against either kind. Both build the same ``DomainTree`` for the core.

Tiers on label topologies follow Volcano's label discoverer: the level just above
``kubernetes.io/hostname`` (or the lowest level, when hostname is not one) is tier 1, the
next one up tier 2, and so on; the hostname level is tier 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from topogate.api.constants import HOSTNAME_LABEL, KAI_API_VERSION
from topogate.api.errors import InputError
from topogate.api.models import Topology

from .snapshot import ClusterSnapshot
from .topology import DomainTree

# The name under which the HyperNode forest is offered as a topology (ResourceFlavor
# spec.topologyName, kai.scheduler/topology), unless a Topology object takes the name.
HYPERNODE_TOPOLOGY = "hypernodes"


class Forest(Protocol):
    """What a HyperNode forest offers a source (see ``topogate.cache.hypernodes``)."""

    @property
    def level_keys(self) -> tuple[str, ...]: ...

    @property
    def tiers(self) -> tuple[int, ...]: ...

    @property
    def level_aliases(self) -> Mapping[str, int]: ...

    @property
    def paths(self) -> Mapping[str, tuple[str, ...]]: ...


def _label_tiers(levels: Sequence[str]) -> tuple[int, ...]:
    hostname_last = bool(levels) and levels[-1] == HOSTNAME_LABEL
    above = len(levels) - (1 if hostname_last else 0)
    tiers = [above - i for i in range(above)]
    if hostname_last:
        tiers.append(0)
    return tuple(tiers)


@dataclass(frozen=True, slots=True)
class TopologySource:
    name: str
    kind: str  # "labels" | "hypernodes"
    level_keys: tuple[str, ...]  # highest first, as assignments and annotations name them
    tiers: tuple[int, ...]  # the Volcano tier of each level
    aliases: Mapping[str, int] = field(default_factory=dict)  # other names of a level
    paths: Mapping[str, tuple[str, ...]] | None = None  # per node; None: from node labels
    # The last tree per node-label filter, with the label columns and node names it was built
    # over: a snapshot that differs only in usage, or in nodes' other columns, shares them, so
    # the tree is the same (a cycle runs on a new snapshot after every admission).
    _trees: dict[tuple[tuple[str, str], ...], tuple[object, object, DomainTree]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def from_topology(cls, topology: Topology) -> TopologySource:
        levels = tuple(topology.level_labels)
        return cls(topology.metadata.name, "labels", levels, _label_tiers(levels))

    @classmethod
    def from_forest(cls, forest: Forest, name: str = HYPERNODE_TOPOLOGY) -> TopologySource:
        return cls(
            name,
            "hypernodes",
            tuple(forest.level_keys),
            tuple(forest.tiers),
            dict(forest.level_aliases),
            dict(forest.paths),
        )

    def level_index(self, name: str) -> int | None:
        """The level a job names: a level key, or (HyperNodes) a tier name or ``tier-<n>``."""
        if name in self.level_keys:
            return self.level_keys.index(name)
        return self.aliases.get(name)

    def level_for_tier(self, tier: int) -> int | None:
        """The highest level whose tier is at most ``tier`` (tiers may skip numbers)."""
        for index, level_tier in enumerate(self.tiers):
            if level_tier <= tier:
                return index
        return None

    def lowest_tier_level(self) -> int:
        """Tier 1's level, or the lowest level above the nodes: where Volcano starts a search."""
        candidates = [i for i, t in enumerate(self.tiers) if t >= 1]
        return candidates[-1] if candidates else len(self.level_keys) - 1

    def describe_levels(self) -> str:
        return ", ".join(
            f"{key} (tier {tier})" for key, tier in zip(self.level_keys, self.tiers, strict=True)
        )

    def tree(
        self, snapshot: ClusterSnapshot, node_labels: Mapping[str, str] | None = None
    ) -> DomainTree:
        """The domain tree over the snapshot's nodes (those matching ``node_labels``)."""
        key = tuple(sorted((node_labels or {}).items()))
        # The label columns the tree is made of: a node change elsewhere (a taint, another
        # label) leaves them the same objects, so the tree is kept.
        used = [*(self.level_keys if self.paths is None else ()), *(k for k, _ in key)]
        columns = tuple(snapshot.labels.get(k) for k in used)
        found = self._trees.get(key)
        if (
            found is not None
            and found[1] is snapshot.node_names
            and isinstance(found[0], tuple)
            and len(found[0]) == len(columns)
            and all(a is b for a, b in zip(found[0], columns, strict=True))
        ):
            return found[2]
        tree = self._build_tree(snapshot, node_labels)
        self._trees[key] = (columns, snapshot.node_names, tree)
        return tree

    def _build_tree(
        self, snapshot: ClusterSnapshot, node_labels: Mapping[str, str] | None
    ) -> DomainTree:
        if self.paths is None:
            return DomainTree.from_labels(snapshot, self.level_keys, node_labels)
        paths = self.paths
        if node_labels:
            member = np.ones(snapshot.node_count, dtype=np.bool_)
            for key, value in node_labels.items():
                column = snapshot.label(key)
                member &= column.codes == column.code(value)
            paths = {
                name: path
                for name, path in paths.items()
                if name in snapshot.node_index and member[snapshot.node_index[name]]
            }
        return DomainTree.from_paths(snapshot, self.level_keys, paths)


def merge_kai_topologies(
    topologies: Mapping[str, Topology], kai: Mapping[str, Topology]
) -> tuple[dict[str, Topology], dict[str, InputError]]:
    """Kueue's (or topogate's) Topologies and KAI-Scheduler's in one namespace of names, and
    an error for each name both kinds use with different levels (by that name).

    The same name with the same levels is one topology: KAI's upgrade copies each Kueue
    Topology into a KAI Topology of that name. With different levels the name keeps its Kueue
    Topology (ResourceFlavors name it); ``plan`` refuses such input, ``serve`` warns.
    """
    merged = dict(topologies)
    clashes: dict[str, InputError] = {}
    for name, topology in kai.items():
        other = merged.get(name)
        if other is None:
            merged[name] = topology
        elif other.level_labels != topology.level_labels:
            clashes[name] = InputError(
                f"levels [{', '.join(topology.level_labels)}] differ from those of the "
                f"{other.api_version} Topology of the same name "
                f"[{', '.join(other.level_labels)}]; "
                "one name must mean one topology: rename one, or give both the same levels",
                where=f"Topology {name} ({KAI_API_VERSION})",
                field="spec.levels",
            )
    return merged, clashes


def topology_sources(
    topologies: Mapping[str, Topology], forest: Forest | None = None
) -> dict[str, TopologySource]:
    """Every topology by name; the HyperNode forest as ``hypernodes`` unless that is taken."""
    out = {name: TopologySource.from_topology(t) for name, t in topologies.items()}
    if forest is not None and forest.level_keys and HYPERNODE_TOPOLOGY not in out:
        out[HYPERNODE_TOPOLOGY] = TopologySource.from_forest(forest)
    return out
