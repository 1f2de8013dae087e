"""Which gated pods to release, and onto which domain: Kueue's TopologyUngater decision.

Pure and synchronous: pod dicts in, plain dataclasses out. The controller around it lists the
pods of one PodSet, asks :func:`plan_ungates`, records the UIDs in :class:`Expectations` and
sends the patches (remove the gate, merge ``Ungate.node_selector``).

Two modes, as in Kueue (``pkg/controller/tas/topology_ungater.go``):

- **rank mode**: every live pod carries a valid index label, so rank ``r`` goes to the domain
  that holds position ``r`` when the assignment is expanded in order;
- **greedy mode** otherwise: already-ungated pods are counted per domain from their
  ``nodeSelector`` and the gated pods, by name, fill what is left, domain after domain.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from topogate.api.constants import JOB_COMPLETION_INDEX, POD_INDEX_OFFSET, TOPOLOGY_GATE
from topogate.api.topology_assignment import AssignedDomain, Assignment

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})


# A domain of an assignment, and the decoded TopologyAssignment of one PodSet (either wire
# form, through ``api.topology_assignment``).
Domain = AssignedDomain
DomainAssignment = Assignment


@dataclass(frozen=True, slots=True)
class PodView:
    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    gated: bool = False  # still carries the topology scheduling gate
    terminated: bool = False  # phase Succeeded or Failed


@dataclass(frozen=True, slots=True)
class Ungate:
    pod: str
    uid: str
    node_selector: dict[str, str]  # level -> value, to merge into the pod's nodeSelector
    gpu_allocation: str | None = None  # topogate.dev/gpu-allocation to write (see gpus.py)
    # The flavor's tolerations the pod lacks (a gated kind's pods were not made from a
    # template topogate marked); tolerations may only be added to a pod, as here.
    tolerations: tuple[Mapping[str, Any], ...] = ()


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def pod_view(obj: Mapping[str, Any]) -> PodView:
    """Read a v1 Pod dict (as the API server returns it)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    gates = spec.get("schedulingGates") or []
    return PodView(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        labels=_str_map(meta.get("labels")),
        annotations=_str_map(meta.get("annotations")),
        node_selector=_str_map(spec.get("nodeSelector")),
        gated=any(isinstance(g, Mapping) and g.get("name") == TOPOLOGY_GATE for g in gates),
        terminated=status.get("phase") in TERMINATED_PHASES,
    )


def _selector(levels: tuple[str, ...], domain: Domain) -> dict[str, str]:
    return dict(zip(levels, domain.values, strict=True))


def _values(levels: tuple[str, ...], node_selector: Mapping[str, str]) -> tuple[str, ...] | None:
    """The pod's domain as written in its nodeSelector; None when a level is missing."""
    values = tuple(node_selector.get(level) for level in levels)
    if any(v is None for v in values):
        return None
    return tuple(v for v in values if v is not None)


def _index(labels: Mapping[str, str], key: str, bound: int, offset: int = 0) -> int | None:
    """A non-negative integer label, less ``offset``, below ``bound``, or None."""
    raw = labels.get(key)
    if raw is None or not raw.isascii() or not raw.isdigit():
        return None
    value = int(raw) - offset
    return value if 0 <= value < bound else None


def _offset(annotations: Mapping[str, str]) -> int:
    """Kueue's pod-index-offset (a LeaderWorkerSet's workers count from 1); 0 when absent
    or not a small non-negative integer."""
    raw = annotations.get(POD_INDEX_OFFSET, "0")
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 10 else 0


def _ranks(
    pods: Sequence[PodView],
    *,
    count: int,
    index_label: str,
    sub_group_label: str | None,
    sub_group_count: int | None,
    size: int,
) -> dict[int, PodView] | None:
    """Rank -> pod for every pod, or None when ranks cannot be used."""
    job_size = count
    if sub_group_label is not None:
        if not sub_group_count or sub_group_count <= 0:
            return None
        job_size = count // sub_group_count
    limit = min(count, size)
    result: dict[int, PodView] = {}
    for pod in pods:
        rank = _index(pod.labels, index_label, job_size, _offset(pod.annotations))
        if rank is None:
            return None
        if sub_group_label is not None:
            job = _index(pod.labels, sub_group_label, sub_group_count or 0)
            if job is None:
                return None
            rank += job * job_size
        if not 0 <= rank < limit or rank in result:
            return None
        result[rank] = pod
    return result


def plan_ungates(
    levels: Sequence[str],
    domains: Sequence[Domain],
    pods: Sequence[PodView],
    *,
    count: int,
    index_label: str | None = JOB_COMPLETION_INDEX,
    sub_group_label: str | None = None,
    sub_group_count: int | None = None,
    expected: Container[str] = (),
) -> list[Ungate]:
    """The gated pods of one PodSet to release now, sorted by pod name.

    ``pods`` are the PodSet's pods; terminated ones are ignored. Pods whose UID is in
    ``expected`` are being ungated already: they are never returned, and they hold a place in
    their domain only when their nodeSelector names one.
    """
    lv = tuple(levels)
    doms = tuple(domains)
    live = [p for p in pods if not p.terminated]
    if not live:
        return []

    # rankToDomainID: the assignment expanded in order.
    rank_domain: list[int] = [i for i, d in enumerate(doms) for _ in range(max(d.count, 0))]

    def settled(pod: PodView) -> bool:
        """Already ungated, or about to be."""
        return not pod.gated or pod.uid in expected

    if index_label is not None:
        ranks = _ranks(
            live,
            count=count,
            index_label=index_label,
            sub_group_label=sub_group_label,
            sub_group_count=sub_group_count,
            size=len(rank_domain),
        )
        if ranks is not None and _ranks_agree(lv, doms, rank_domain, ranks, expected):
            plan = [
                Ungate(pod.name, pod.uid, _selector(lv, doms[rank_domain[rank]]))
                for rank, pod in ranks.items()
                if not settled(pod)
            ]
            return sorted(plan, key=lambda u: (u.pod, u.uid))

    # Greedy mode.
    by_values = {d.values: i for i, d in reversed(list(enumerate(doms)))}
    taken = [0] * len(doms)
    for pod in live:
        if settled(pod):
            values = _values(lv, pod.node_selector)
            slot = by_values.get(values) if values is not None else None
            if slot is not None:
                taken[slot] += 1
    gated = sorted((p for p in live if not settled(p)), key=lambda p: (p.name, p.uid))
    plan = []
    queue = iter(gated)
    for i, domain in enumerate(doms):
        for _ in range(max(domain.count - taken[i], 0)):
            nxt = next(queue, None)
            if nxt is None:
                return plan
            plan.append(Ungate(nxt.name, nxt.uid, _selector(lv, domain)))
    return plan


def _ranks_agree(
    levels: tuple[str, ...],
    domains: tuple[Domain, ...],
    rank_domain: list[int],
    ranks: Mapping[int, PodView],
    expected: Container[str],
) -> bool:
    """Every already-ungated pod sits in the domain of its rank."""
    for rank, pod in ranks.items():
        if pod.gated:
            if pod.uid not in expected:
                continue
            if _values(levels, pod.node_selector) is None:
                continue  # being ungated, nodeSelector not seen yet
        if _values(levels, pod.node_selector) != domains[rank_domain[rank]].values:
            return False
    return True


class Expectations:
    """UIDs whose ungate patch is in flight, per workload (Kueue's ``pkg/util/expectations``).

    While any UID of a workload is pending, the controller requeues instead of planning again.
    """

    def __init__(self) -> None:
        self._uids: dict[str, set[str]] = {}

    def expect(self, key: str, uids: Iterable[str]) -> None:
        new = set(uids)
        if new:
            self._uids.setdefault(key, set()).update(new)

    def observed(self, key: str, uid: str) -> None:
        """The gate is gone, the pod is deleted, or the patch failed or was a no-op."""
        pending = self._uids.get(key)
        if pending is None:
            return
        pending.discard(uid)
        if not pending:
            del self._uids[key]

    def pending(self, key: str) -> bool:
        return key in self._uids

    def uids(self, key: str) -> frozenset[str]:
        return frozenset(self._uids.get(key, ()))

    def forget(self, key: str) -> None:
        """Drop a workload (deleted, or its admission cleared)."""
        self._uids.pop(key, None)
