"""The domain tree of one topology over a snapshot's nodes, as flat arrays per level.

Domains are keyed by their full path of level values, so rack-1 under block-1 and rack-1 under
block-2 are two racks. The tree always ends in single nodes: when the topology's lowest level
is not ``kubernetes.io/hostname`` (or two nodes share a hostname value) an internal node level
is appended below it, so capacity is counted per node and never from summed allocatable.

The arrays do not care how the tree was described: ``from_labels`` reads label levels and
``from_paths`` takes a tree given explicitly (a HyperNode tree, for instance); both end in the
same ``DomainTree`` and feed the same core.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from topogate.api.constants import HOSTNAME_LABEL

from .snapshot import ClusterSnapshot, CodeArray, IntArray


def _rank(order: npt.NDArray[np.intp]) -> IntArray:
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    return rank


class DomainTree:
    """Levels 0..depth-1, highest first; the last level holds exactly one node per domain.

    Invariant: at the last level, domain ``i`` is the node ``nodes[i]`` (a snapshot row).
    """

    __slots__ = (
        "_children",
        "child_order",
        "child_start",
        "derived",
        "level_keys",
        "lexrank",
        "member_domain",
        "nodes",
        "parent",
        "topology_depth",
        "value_code",
        "value_table",
    )

    def __init__(
        self,
        level_keys: list[str],
        nodes: IntArray,
        member_domain: list[CodeArray],
        parent: list[CodeArray],
        value_code: list[CodeArray],
        value_table: list[list[str]],
    ) -> None:
        self.level_keys = level_keys
        self.topology_depth = len(level_keys)
        self.nodes = nodes
        self.member_domain = member_domain
        self.parent = parent
        self.value_code = value_code
        self.value_table = value_table
        self.lexrank = self._lexranks()
        # What the placement core derives from the tree on first use and reuses on every
        # later call (the tree never changes): keyed by the deriving module's own name.
        self.derived: dict[str, object] = {}
        self.child_order: list[CodeArray] = []
        self.child_start: list[IntArray] = []
        for level in range(self.depth - 1):
            below = parent[level + 1]
            self.child_order.append(np.argsort(below, kind="stable").astype(np.int32))
            counts = np.bincount(below, minlength=self.size(level))
            self.child_start.append(np.concatenate(([0], np.cumsum(counts))).astype(np.int64))

    @property
    def depth(self) -> int:
        return len(self.member_domain)

    @property
    def node_level(self) -> int:
        return self.depth - 1

    @property
    def output_level(self) -> int:
        """The lowest topology level: assignments are written at this level."""
        return self.topology_depth - 1

    @property
    def hostname_lowest(self) -> bool:
        return self.level_keys[-1] == HOSTNAME_LABEL

    def size(self, level: int) -> int:
        return len(self.value_code[level])

    def children(self, level: int, domain: int) -> CodeArray:
        start = self.child_start[level]
        return self.child_order[level][start[domain] : start[domain + 1]]

    def value(self, level: int, domain: int) -> str:
        return self.value_table[level][int(self.value_code[level][domain])]

    def path(self, level: int, domain: int) -> tuple[str, ...]:
        values = []
        for current in range(level, -1, -1):
            values.append(self.value(current, domain))
            domain = int(self.parent[current][domain])
        return tuple(reversed(values))

    def values(self, level: int, domains: IntArray) -> list[str]:
        """``value`` of many domains at once (a plan's output writes thousands)."""
        table = self.value_table[level]
        return [table[code] for code in self.value_code[level][domains].tolist()]

    def value_tuples(self, level: int, domains: IntArray) -> list[tuple[str]]:
        """``(value,)`` of many domains: an assignment's values at a hostname level."""
        key = f"value-tuples-{level}"
        table = self.derived.get(key)
        if not isinstance(table, np.ndarray):
            table = np.empty(len(self.value_table[level]), dtype=object)
            table[:] = [(value,) for value in self.value_table[level]]
            self.derived[key] = table
        tuples: list[tuple[str]] = table[self.value_code[level][domains]].tolist()
        return tuples

    def node_names(self, names: list[str], positions: IntArray) -> list[str]:
        """``names[nodes[p]]`` for many positions ``p``: ``names`` is a snapshot's node names
        (a list shared by the snapshot and its copies), kept as an array per tree."""
        kept = self.derived.get("node-names")
        if not (isinstance(kept, tuple) and kept[0] is names):
            kept = (names, np.array(names, dtype=object)[self.nodes])
            self.derived["node-names"] = kept
        picked: list[str] = kept[1][positions].tolist()
        return picked

    def warm(self, names: list[str]) -> None:
        """Derive now the tables a placement's output derives on first use (the snapshot's
        node names in the tree's order; the hostname level's values as tuples), so the
        first Workload does not build them: each has an entry per node."""
        none = np.empty(0, dtype=np.int64)
        self.node_names(names, none)
        if self.hostname_lowest:
            self.value_tuples(self.output_level, none)

    def paths(self, level: int, domains: IntArray) -> list[tuple[str, ...]]:
        """``path`` of many domains at once."""
        columns = []
        current = np.asarray(domains, dtype=np.int64)
        for at in range(level, -1, -1):
            columns.append(self.values(at, current))
            current = self.parent[at][current].astype(np.int64) if at else current
        return list(zip(*reversed(columns), strict=True))

    def find(self, path: Sequence[str]) -> int | None:
        """The domain at level len(path)-1 with this full path, if any (slow; for tests/tools)."""
        level = len(path) - 1
        for domain in range(self.size(level)):
            if self.path(level, domain) == tuple(path):
                return domain
        return None

    def _lexranks(self) -> list[IntArray]:
        ranks: list[IntArray] = []
        for level in range(self.depth):
            table = np.array(self.value_table[level], dtype=np.str_)
            value_rank = _rank(np.argsort(table, kind="stable"))[self.value_code[level]]
            if level == 0:
                ranks.append(_rank(np.argsort(value_rank, kind="stable")))
            else:
                parent_rank = ranks[level - 1][self.parent[level]]
                ranks.append(_rank(np.lexsort((value_rank, parent_rank))))
        return ranks

    @classmethod
    def from_labels(
        cls,
        snapshot: ClusterSnapshot,
        level_keys: Sequence[str],
        node_labels: Mapping[str, str] | None = None,
    ) -> DomainTree:
        """The tree over nodes that match ``node_labels`` and carry every level label."""
        member = np.ones(snapshot.node_count, dtype=np.bool_)
        for key, value in (node_labels or {}).items():
            column = snapshot.label(key)
            member &= column.codes == column.code(value)
        columns = [snapshot.label(key) for key in level_keys]
        for column in columns:
            member &= column.codes >= 0
        nodes = np.flatnonzero(member).astype(np.int64)
        return cls._build(
            snapshot,
            level_keys,
            nodes,
            [column.codes[nodes].astype(np.int64) for column in columns],
            [column.values for column in columns],
        )

    @classmethod
    def from_paths(
        cls,
        snapshot: ClusterSnapshot,
        level_keys: Sequence[str],
        paths: Mapping[str, Sequence[str]],
    ) -> DomainTree:
        """The tree given explicitly: each node's domain names, highest level first.

        This is how a topology that is not written as node labels (a HyperNode tree) feeds
        the same core. Every path has one name per level; a source of uneven depth decides
        how to fill the levels a branch lacks before calling this. Unknown nodes are ignored.
        """
        nodes = np.array(
            sorted(snapshot.node_index[name] for name in paths if name in snapshot.node_index),
            dtype=np.int64,
        )
        tables: list[list[str]] = [[] for _ in level_keys]
        lookups: list[dict[str, int]] = [{} for _ in level_keys]
        codes = np.zeros((len(level_keys), len(nodes)), dtype=np.int64)
        for i, row in enumerate(nodes.tolist()):
            path = paths[snapshot.node_names[row]]
            if len(path) != len(level_keys):
                raise ValueError(
                    f"node {snapshot.node_names[row]!r}: path {list(path)} does not have one "
                    f"name per level ({len(level_keys)})"
                )
            for level, name in enumerate(path):
                code = lookups[level].get(name)
                if code is None:
                    code = lookups[level][name] = len(tables[level])
                    tables[level].append(name)
                codes[level, i] = code
        return cls._build(snapshot, level_keys, nodes, list(codes), tables)

    @classmethod
    def _build(
        cls,
        snapshot: ClusterSnapshot,
        level_keys: Sequence[str],
        nodes: IntArray,
        codes_per_level: list[IntArray],
        tables: list[list[str]],
    ) -> DomainTree:
        member_domain: list[CodeArray] = []
        parent: list[CodeArray] = []
        value_code: list[CodeArray] = []
        value_table: list[list[str]] = []
        above = np.zeros(len(nodes), dtype=np.int64)
        for codes, table in zip(codes_per_level, tables, strict=True):
            width = max(len(table), 1)
            # A domain is its parent plus its own value: rack-1 in two blocks is two racks.
            keys, inverse = np.unique(above * width + codes, return_inverse=True)
            member_domain.append(inverse.astype(np.int32))
            parent.append((keys // width).astype(np.int32))
            value_code.append((keys % width).astype(np.int32))
            value_table.append(table)
            above = inverse.astype(np.int64)
        one_node_per_leaf = len(nodes) == 0 or len(value_code[-1]) == len(nodes)
        if level_keys[-1] == HOSTNAME_LABEL and one_node_per_leaf:
            # The hostname level is the node level: order nodes like its domains, so that
            # node-level domain i is tree.nodes[i] (the invariant the core relies on).
            order = np.argsort(member_domain[-1], kind="stable")
            nodes = nodes[order]
            member_domain = [m[order] for m in member_domain]
        else:
            member_domain.append(np.arange(len(nodes), dtype=np.int32))
            parent.append(member_domain[-2].copy())
            value_code.append(np.arange(len(nodes), dtype=np.int32))
            value_table.append([snapshot.node_names[i] for i in nodes])
        return cls(list(level_keys), nodes, member_domain, parent, value_code, value_table)
