"""Checks every admission of the side-by-side bench as the runner's watch shows it: a controller
that admits past its quota or breaks a topology request would otherwise show up as speed.

The watch delivers one resource's events in resourceVersion order, so the state built from it is
a state the API server really held. Each Workload that holds an admission (``status.admission``
set, not Finished) counts; each new admission is checked against:

- the ClusterQueue's quota: usage at most nominal + borrowingLimit, per flavor and resource;
- the cohort: what its queues use beyond their guaranteed part (nominal - lendingLimit) at most
  what they lend (their lendable parts together);
- the nodes: what the admitted pods ask of each node at most its allocatable;
- the topology request of each pod set (topogate's annotations, or Kueue's ``topologyRequest``
  field): required (all pods in one domain of that level) and slice-required (every slice of
  ``podset-slice-size`` pods in one domain of that level, so each domain holds a multiple of
  the slice size); the pods placed add up to the pods admitted.

A violation of a queue's or cohort's quota names the Workloads that held quota there at that
moment (the message lists the first ``SHOWN``; ``details`` keeps them all), so a sitting that
broke one can be read without its logs.

Quantities are in milli-units (CPU) or units (everything else), as integers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from topogate.api.quantity import parse_quantity
from topogate.api.topology_assignment import decode

KUEUE = "kueue.x-k8s.io"
REQUIRED = f"{KUEUE}/podset-required-topology"
SLICE_REQUIRED = f"{KUEUE}/podset-slice-required-topology"
SLICE_SIZE = f"{KUEUE}/podset-slice-size"
HOSTNAME = "kubernetes.io/hostname"
SHOWN = 12  # holders named in a violation's message

Obj = dict[str, Any]


def milli(value: Any) -> int:
    """A Kubernetes quantity in thousandths (exact for the CPU values of the scenarios)."""
    return round(parse_quantity(str(value)) * 1000)


@dataclass(frozen=True)
class Quota:
    nominal: int
    borrowing: int | None  # None: unlimited within the cohort
    lending: int | None  # None: all of nominal is lendable


@dataclass
class Held:
    queue: str
    usage: dict[tuple[str, str], int]  # (flavor, resource) -> milli
    nodes: dict[str, dict[str, int]]  # node -> resource -> milli


@dataclass
class Checker:
    """Feed it the cluster's objects, then every Workload event; ``violations`` lists what broke."""

    quotas: dict[str, dict[tuple[str, str], Quota]] = field(default_factory=dict)
    cohort_of: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, dict[str, int]] = field(default_factory=dict)
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    by_hostname: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    held: dict[str, Held] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    checked: int = 0
    # Admissions whose nodes cannot be told apart: hostname labels shared by several nodes
    # (Kueue's generator names every rack's nodes node-0..node-63) in an assignment that
    # gives the hostname level only. Their quota is checked, their placement is not.
    unplaceable: int = 0
    # Per violation of a queue's or cohort's quota: its message and every holder there then.
    details: list[dict[str, Any]] = field(default_factory=list)
    # Every Workload seen, and those seen Finished: whether a sitting ran to its end.
    seen: set[str] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)

    # --- the cluster ---------------------------------------------------------------------

    def add_cluster_queue(self, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        spec = obj.get("spec") or {}
        self.cohort_of[name] = str(spec.get("cohort") or spec.get("cohortName") or "")
        quotas: dict[tuple[str, str], Quota] = {}
        for group in spec.get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for res in flavor.get("resources") or []:
                    borrowing, lending = res.get("borrowingLimit"), res.get("lendingLimit")
                    quotas[(flavor["name"], res["name"])] = Quota(
                        milli(res["nominalQuota"]),
                        None if borrowing is None else milli(borrowing),
                        None if lending is None else milli(lending),
                    )
        self.quotas[name] = quotas

    def add_node(self, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        allocatable = (obj.get("status") or {}).get("allocatable") or {}
        self.allocatable[name] = {k: milli(v) for k, v in allocatable.items()}
        self.node_labels[name] = dict(obj["metadata"].get("labels") or {})
        self.by_hostname[self.node_labels[name].get(HOSTNAME, name)].append(name)

    # --- the Workloads -------------------------------------------------------------------

    def observe(self, obj: Obj | None, key: str) -> None:
        """One watch event's object (None: deleted)."""
        if obj is not None:
            self.seen.add(key)
            if _finished(obj):
                self.finished.add(key)
        holds = obj is not None and _holds(obj)
        if not holds:
            self.held.pop(key, None)
            return
        assert obj is not None
        if key in self.held:
            return  # the same admission, another status change
        self.checked += 1
        try:
            held = self._held(obj)
        except (KeyError, TypeError, ValueError) as error:
            self.violations.append(f"{key}: admission unreadable: {error!r}")
            return
        self.held[key] = held
        self._check_queue(key, held.queue)
        self._check_nodes(key, held)

    def _held(self, obj: Obj) -> Held:
        admission = obj["status"]["admission"]
        queue = admission["clusterQueue"]
        podsets = {p["name"]: p for p in obj["spec"]["podSets"]}
        usage: dict[tuple[str, str], int] = defaultdict(int)
        nodes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        key = f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
        for assignment in admission.get("podSetAssignments") or []:
            podset = podsets[assignment["name"]]
            count = int(assignment.get("count", podset["count"]))
            per_pod = _pod_requests(podset)
            flavors = assignment.get("flavors") or {}
            for resource, amount in per_pod.items():
                flavor = flavors.get(resource)
                if flavor is None:
                    self.violations.append(f"{key}: no flavor assigned for {resource}")
                    continue
                usage[(flavor, resource)] += amount * count
            topology = assignment.get("topologyAssignment")
            if topology is None:
                continue
            decoded = decode(topology)
            if HOSTNAME in decoded.levels and any(
                len(self.by_hostname.get(d.values[decoded.levels.index(HOSTNAME)], [])) > 1
                for d in decoded.domains
            ):
                self.unplaceable += 1
                continue
            placed = sum(d.count for d in decoded.domains)
            if placed != count:
                self.violations.append(f"{key}: {placed} pods placed for {count} admitted")
            self._check_topology(key, podset, decoded.levels, decoded.domains)
            for domain in decoded.domains:
                node = self._node_of(decoded.levels, domain.values)
                if node is None:
                    self.violations.append(f"{key}: domain {domain.values} names no node")
                    continue
                for resource, amount in per_pod.items():
                    nodes[node][resource] += amount * domain.count
        return Held(queue, dict(usage), {n: dict(r) for n, r in nodes.items()})

    def _node_of(self, levels: tuple[str, ...], values: tuple[str, ...]) -> str | None:
        if HOSTNAME in levels:
            nodes = self.by_hostname.get(values[levels.index(HOSTNAME)], [])
            return nodes[0] if len(nodes) == 1 else None
        return None

    def _level_value(self, levels: tuple[str, ...], values: tuple[str, ...], level: str) -> str:
        if level in levels:
            return values[levels.index(level)]
        node = self._node_of(levels, values)
        if node is None:
            raise ValueError(f"level {level} not in {levels} and no node to read it from")
        return self.node_labels[node].get(level, "")

    def _check_topology(self, key: str, podset: Obj, levels: tuple[str, ...], domains: Any) -> None:
        annotations = (podset.get("template", {}).get("metadata") or {}).get("annotations") or {}
        # Kueue's Workloads carry the request in the pod set's topologyRequest field.
        request = podset.get("topologyRequest") or {}
        required = request.get("required") or annotations.get(REQUIRED)
        if required:
            seen = {self._level_value(levels, d.values, required) for d in domains}
            if len(seen) != 1:
                self.violations.append(
                    f"{key}: required in one {required}, placed in {sorted(seen)}"
                )
        slice_level = request.get("podSetSliceRequiredTopology") or annotations.get(SLICE_REQUIRED)
        if slice_level:
            size = int(request.get("podSetSliceSize") or annotations.get(SLICE_SIZE, "1"))
            per_domain: dict[str, int] = defaultdict(int)
            for d in domains:
                per_domain[self._level_value(levels, d.values, slice_level)] += d.count
            broken = {v: n for v, n in per_domain.items() if n % size}
            if broken:
                self.violations.append(
                    f"{key}: slices of {size} pods per {slice_level}, but {dict(broken)}"
                )

    def _check_queue(self, key: str, queue: str) -> None:
        quotas = self.quotas.get(queue)
        if quotas is None:
            self.violations.append(f"{key}: admitted by unknown ClusterQueue {queue}")
            return
        used = self._usage_of([queue])[queue]
        for what, amount in used.items():
            quota = quotas.get(what)
            if quota is None:
                self.violations.append(f"{key}: {queue} has no quota for {what}")
                continue
            if quota.borrowing is not None and amount > quota.nominal + quota.borrowing:
                self._violated(
                    f"{key}: {queue} uses {amount}m of {what}, over nominal {quota.nominal}m "
                    f"+ borrowingLimit {quota.borrowing}m",
                    [queue],
                    what,
                )
        cohort = self.cohort_of.get(queue, "")
        members = [q for q, c in self.cohort_of.items() if c == cohort] if cohort else [queue]
        usage = self._usage_of(members)
        resources = {what for q in members for what in self.quotas[q]}
        for what in resources:
            beyond = lendable = 0
            for member in members:
                quota = self.quotas[member].get(what, Quota(0, None, 0))
                lend = quota.nominal if quota.lending is None else min(quota.lending, quota.nominal)
                guaranteed = quota.nominal - lend
                beyond += max(0, usage[member].get(what, 0) - guaranteed)
                lendable += lend
            if beyond > lendable:
                self._violated(
                    f"{key}: cohort {cohort or queue} uses {beyond}m of {what} beyond its queues' "
                    f"guaranteed quota, {lendable}m lendable",
                    members,
                    what,
                )

    def _violated(self, message: str, queues: list[str], what: tuple[str, str]) -> None:
        """A quota violation, with the Workloads holding ``what`` in ``queues`` right now."""
        wanted = set(queues)
        holders = {
            key: {"queue": held.queue, "milli": held.usage[what]}
            for key, held in sorted(self.held.items())
            if held.queue in wanted and held.usage.get(what)
        }
        shown = ", ".join(
            f"{key} ({h['queue']} {h['milli']}m)" for key, h in list(holders.items())[:SHOWN]
        )
        more = f" and {len(holders) - SHOWN} more" if len(holders) > SHOWN else ""
        message += f"; held by {len(holders)}: {shown}{more}"
        self.violations.append(message)
        self.details.append({"violation": message, "resource": "/".join(what), "holders": holders})

    def _usage_of(self, queues: list[str]) -> dict[str, dict[tuple[str, str], int]]:
        wanted = set(queues)
        out: dict[str, dict[tuple[str, str], int]] = {q: defaultdict(int) for q in queues}
        for held in self.held.values():
            if held.queue in wanted:
                for what, amount in held.usage.items():
                    out[held.queue][what] += amount
        return out

    def _check_nodes(self, key: str, new: Held) -> None:
        for node in new.nodes:
            total: dict[str, int] = defaultdict(int)
            for held in self.held.values():
                for resource, amount in held.nodes.get(node, {}).items():
                    total[resource] += amount
            for resource, amount in total.items():
                capacity = self.allocatable[node].get(resource, 0)
                if amount > capacity:
                    self.violations.append(
                        f"{key}: node {node} holds {amount}m of {resource}, allocatable {capacity}m"
                    )


def _finished(obj: Obj) -> bool:
    return any(
        c.get("type") == "Finished" and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def _holds(obj: Obj) -> bool:
    status = obj.get("status") or {}
    return bool(status.get("admission")) and not _finished(obj)


def _pod_requests(podset: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for container in podset["template"]["spec"].get("containers") or []:
        for resource, value in ((container.get("resources") or {}).get("requests") or {}).items():
            out[resource] += milli(value)
    return dict(out)
