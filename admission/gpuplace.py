"""GPU sets inside the placement core: per-node counts, the node tie-break and the choice.

The placer (``placement.py``) calls in at three points, and only when the topology's lowest
level is ``kubernetes.io/hostname`` (otherwise kube-scheduler picks the node inside the domain
and topogate cannot tell which GPUs a pod will find):

1. **Counts.** On a node with a bandwidth matrix a pod of ``k`` GPUs counts only as often as
   there are free GPU indices (``free // k``), so two pods never get the same GPU. With a
   minimum (``topogate.dev/gpu-min-bandwidth``) it counts as many pods as there are disjoint
   free sets reaching it, found greedily (each the best of what the earlier ones left): a
   lower bound on the true maximum, which is a set-packing problem. Nodes without a matrix
   cannot prove a minimum for ``k >= 2`` and count zero. Both are reported in the failure
   message in the style of the excluded-nodes summary.
2. **Tie-break.** Among nodes the core's order cannot separate, the one whose best free set of
   ``k`` has the higher bottleneck goes first (a node without a matrix ranks as 0). The key
   sits just before the name, at the node level only: when no node has a matrix it is
   constant and the order is Kueue's.
3. **Choice.** For the pods placed on a node, :func:`joint_sets` picks their GPUs together
   (the best group, split to make the worst pod as good as possible); with a minimum that the
   split misses, the greedy sets that were counted. The sets are handed to the next PodSet
   and to later workloads of the same cycle as taken.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from topogate.api.gpus import GPU_RESOURCE, GpuSets
from topogate.cache.selectors import Exclusions
from topogate.cache.snapshot import BoolArray, ClusterSnapshot, GpuState, IntArray
from topogate.cache.topology import DomainTree

from .gpusets import GpuSet, best_set, greedy_sets, joint_sets
from .request import PlacementDecision, PodSetPlacement, PodSetRequest

FloatArray = npt.NDArray[np.float64]


def gpus_per_pod(request: PodSetRequest) -> int:
    return int(request.requests.get(GPU_RESOURCE, 0))


def _gbps(value: float) -> str:
    return f"{value:g} GB/s"


@dataclass(slots=True)
class GpuExclusions(Exclusions):
    """The excluded-nodes summary plus the nodes a GPU bandwidth minimum ruled out."""

    short: int = 0  # nodes with a matrix and the GPUs, but no set reaching the minimum
    unknown: int = 0  # nodes with the GPUs but no matrix to check the minimum against
    gpus: int = 0
    minimum: float = 0.0

    @property
    def any(self) -> bool:
        base: property = vars(Exclusions)["any"]
        return bool(base.__get__(self) or self.short or self.unknown)

    def describe(self) -> str:
        parts = [Exclusions.describe(self).removesuffix("; excluded: ")]
        if self.short:
            parts.append(
                f"{self.short} node(s) have no free set of {self.gpus} GPUs with a bottleneck "
                f"of at least {_gbps(self.minimum)}"
            )
        if self.unknown:
            parts.append(
                f"{self.unknown} node(s) have no GPU bandwidth matrix to check "
                f"{_gbps(self.minimum)} against"
            )
        return "; ".join(parts)

    @classmethod
    def extend(cls, base: Exclusions, gpus: int, minimum: float) -> GpuExclusions:
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(Exclusions)}
        return cls(**fields, gpus=gpus, minimum=minimum)


class HostnameRequired(ValueError):
    """A GPU minimum on a topology whose lowest level is not the hostname."""


class GpuPlacer:
    """The GPU side of one group placement (a PodSet, or a leader and its workers)."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        tree: DomainTree,
        workers: PodSetRequest,
        leader: PodSetRequest | None,
    ) -> None:
        self.snapshot = snapshot
        self.tree = tree
        self.state: GpuState = snapshot.gpu
        self.requests = {workers.name: workers}
        if leader is not None:
            self.requests[leader.name] = leader
        self.workers = workers
        self.leader = leader
        wants = any(gpus_per_pod(r) for r in self.requests.values())
        has_matrix = bool(len(tree.nodes)) and bool((self.state.code[tree.nodes] >= 0).any())
        if not tree.hostname_lowest:
            for request in self.requests.values():
                if request.gpu_min_bandwidth is not None and gpus_per_pod(request) >= 2:
                    raise HostnameRequired(
                        f"podset {request.name}: a GPU bandwidth minimum needs a topology whose "
                        f"lowest level is kubernetes.io/hostname (this one ends at "
                        f"{tree.level_keys[-1]}; kube-scheduler would pick the node)"
                    )
        self.active = tree.hostname_lowest and wants
        self.matrices = self.active and has_matrix
        self.score: FloatArray = np.zeros(len(tree.nodes))
        self.ranked = False  # some node scored above 0: the tie-break matters
        # GPUs chosen in this group so far (the leader's, before its workers'), per row.
        self.taken: dict[int, set[int]] = {}

    # --- memoised per (matrix, free GPUs): many nodes share both ---------------------------

    def _free(self, row: int, without: Iterable[int] = ()) -> list[int]:
        gone = self.taken.get(row, set()) | set(without)
        return [g for g in self.state.free(row) if g not in gone]

    def _best(self, row: int, free: list[int], k: int) -> float:
        key = ("best", int(self.state.code[row]), tuple(free), k)
        found = self.state.memo.get(key)
        if found is None:
            pair = self.state.pair(row)
            assert pair is not None
            chosen = best_set(pair, free, k)
            found = self.state.memo[key] = 0.0 if chosen is None else chosen.bottleneck
        assert isinstance(found, float)
        return found

    def _greedy(self, row: int, free: list[int], k: int, minimum: float) -> list[tuple[int, ...]]:
        key = ("greedy", int(self.state.code[row]), tuple(free), k, minimum)
        found = self.state.memo.get(key)
        if found is None:
            pair = self.state.pair(row)
            assert pair is not None
            found = self.state.memo[key] = [s.gpus for s in greedy_sets(pair, free, k, minimum)]
        assert isinstance(found, list)
        return found

    def _cap(self, row: int, request: PodSetRequest, without: Iterable[int]) -> int | None:
        """Pods of ``request`` the node's GPUs allow besides ``without``; None: no limit."""
        k = gpus_per_pod(request)
        minimum = request.gpu_min_bandwidth if k >= 2 else None
        if self.state.pair(row) is None:
            return 0 if minimum is not None else None
        free = self._free(row, without)
        if minimum is None:
            return len(free) // k
        return len(self._greedy(row, free, k, minimum))

    # --- 1. counts -----------------------------------------------------------------------

    def counts(
        self, mask: BoolArray, pods: IntArray, exclusions: Exclusions
    ) -> tuple[IntArray, BoolArray, Exclusions]:
        """The workers' per-node counts capped by the GPUs, the mask without the nodes a
        minimum ruled out (so they are not blamed on a resource), and the summary."""
        request = self.workers
        k = gpus_per_pod(request)
        if not self.active or k == 0:
            return pods, mask, exclusions
        minimum = request.gpu_min_bandwidth if k >= 2 else None
        has_matrix = self.state.code[self.tree.nodes] >= 0
        candidates = mask & (pods > 0)
        capped = pods.copy()
        ruled_out = np.zeros_like(mask)
        if minimum is not None:
            # No matrix, no proof: such nodes hold no pod of this PodSet.
            ruled_out = candidates & ~has_matrix
            capped[ruled_out] = 0
        short = 0
        for position in np.flatnonzero(candidates & has_matrix).tolist():
            row = int(self.tree.nodes[position])
            free = self._free(row)
            if minimum is None:
                cap = len(free) // k
            else:
                cap = len(self._greedy(row, free, k, minimum))
                if cap == 0 and len(free) >= k:
                    short += 1
                    ruled_out[position] = True
            capped[position] = min(int(pods[position]), cap)
            if k >= 2 and capped[position] > 0:
                self.score[position] = self._best(row, free, k)
        self.ranked = bool((self.score > 0).any())
        if minimum is None or not ruled_out.any():
            return capped, mask, exclusions
        summary = GpuExclusions.extend(exclusions, k, minimum)
        summary.short, summary.unknown = short, int(ruled_out.sum()) - short
        return capped, mask & ~ruled_out, summary

    def with_leader(self, fits: BoolArray, after: IntArray) -> tuple[BoolArray, IntArray]:
        """A leader fits only where its GPUs do; its workers then count on what it leaves."""
        leader = self.leader
        if not self.active or leader is None:
            return fits, after
        k_leader, k_workers = gpus_per_pod(leader), gpus_per_pod(self.workers)
        if k_leader == 0 and k_workers == 0:
            return fits, after
        fits, after = fits.copy(), after.copy()
        for position in np.flatnonzero(fits).tolist():
            row = int(self.tree.nodes[position])
            lead = self._leader_set(row) if k_leader else ()
            if lead is None:
                fits[position] = False
                continue
            if k_workers:
                cap = self._cap(row, self.workers, without=lead)
                if cap is not None:
                    after[position] = min(int(after[position]), cap)
        return fits, after

    def _leader_set(self, row: int) -> tuple[int, ...] | None:
        """The GPUs the leader would take on ``row`` (as :meth:`attach` will), or None."""
        leader = self.leader
        assert leader is not None
        pair = self.state.pair(row)
        if pair is None:
            if leader.gpu_min_bandwidth is not None and gpus_per_pod(leader) >= 2:
                return None
            return ()
        found = self._joint(row, pair, self._free(row), gpus_per_pod(leader), 1, leader)
        return None if found is None else found[0].gpus

    def _joint(
        self,
        row: int,
        pair: FloatArray,
        free: Sequence[int],
        k: int,
        count: int,
        request: PodSetRequest,
    ) -> tuple[GpuSet, list[GpuSet]] | None:
        """``joint_sets`` for ``count`` pods of ``k`` GPUs, memoised per matrix and free set
        (identical nodes share one answer)."""
        minimum = request.gpu_min_bandwidth if k >= 2 else None
        key = ("joint", int(self.state.code[row]), tuple(free), k, count, minimum)
        if key not in self.state.memo:
            self.state.memo[key] = joint_sets(pair, free, [k] * count, minimum)
        found = self.state.memo[key]
        assert found is None or isinstance(found, tuple)
        return found

    # --- 2. the node tie-break -----------------------------------------------------------

    def rank_key(self, level: int, domains: IntArray) -> FloatArray | None:
        """A lexsort key (smaller first) for domains of ``level``, or None when it is moot."""
        if not self.ranked or level != self.tree.depth - 1:
            return None
        key: FloatArray = -self.score[domains]
        return key

    # --- 3. the choice -------------------------------------------------------------------

    def attach(self, placement: PodSetPlacement, per_node: IntArray) -> PodSetPlacement:
        """The placement with its pods' GPU sets, per node with a matrix."""
        request = self.requests.get(placement.name)
        if not self.matrices or request is None or gpus_per_pod(request) == 0:
            return placement
        k = gpus_per_pod(request)
        sets: dict[str, GpuSets] = {}
        for position in np.flatnonzero(per_node).tolist():
            row = int(self.tree.nodes[position])
            pair = self.state.pair(row)
            if pair is None:
                continue
            count = int(per_node[position])
            found = self._joint(row, pair, self._free(row), k, count, request)
            # The counts promised these GPUs; anything else is a bug, not a user mistake.
            assert found is not None, f"{count} x {k} GPUs do not fit node row {row}"
            sets[self.snapshot.node_names[row]] = tuple(s.gpus for s in found[1])
            self.taken.setdefault(row, set()).update(found[0].gpus)
        if not sets:
            return placement
        return dataclasses.replace(placement, gpu_sets=sets)

    def after(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """``snapshot`` with this group's GPUs taken, for the workload's next PodSet."""
        if not self.taken:
            return snapshot
        return snapshot.with_gpus(self.taken)


def with_visible(placements: Sequence[PodSetPlacement]) -> tuple[PodSetPlacement, ...]:
    """Each placement with, per node, the GPUs all of the workload's pods there hold: what
    ``visibleGPUs`` lists, so NCCL can reach its peers in other containers."""
    per_node: dict[str, set[int]] = {}
    for placement in placements:
        for node, sets in placement.gpu_sets.items():
            per_node.setdefault(node, set()).update(g for one in sets for g in one)
    if not per_node:
        return tuple(placements)
    return tuple(
        dataclasses.replace(
            p, visible_gpus={node: tuple(sorted(per_node[node])) for node in p.gpu_sets}
        )
        if p.gpu_sets
        else p
        for p in placements
    )


def assignment_of(decision: PlacementDecision | None) -> dict[str, dict[str, GpuSets]]:
    """The decision's GPU sets as the Workload annotation holds them."""
    if decision is None:
        return {}
    return {p.name: dict(p.gpu_sets) for p in decision.placements if p.gpu_sets}


def taken_by(decisions: Iterable[PlacementDecision | None]) -> dict[str, set[int]]:
    """GPU indices the decisions hold, per node."""
    out: dict[str, set[int]] = {}
    for decision in decisions:
        for per_node in assignment_of(decision).values():
            for node, sets in per_node.items():
                out.setdefault(node, set()).update(g for one in sets for g in one)
    return out
