"""Prometheus metrics of the controller (one registry, so tests can read a fresh one)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


def _latency_buckets() -> tuple[float, ...]:
    return (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.admission_attempts = Counter(
            "topogate_admission_attempts_total",
            "Workloads tried by an admission cycle, by result (admitted or pending).",
            ["result"],
            registry=r,
        )
        self.exact_pass = Counter(
            "topogate_exact_pass_total",
            "Placements where the exact second pass ran, by outcome (found, no-better, "
            "budget: its time ran out and the greedy answer stood, unsupported).",
            ["outcome"],
            registry=r,
        )
        self.admission_cycle_seconds = Histogram(
            "topogate_admission_cycle_seconds",
            "Time of one admission cycle (snapshot, queue order, placement).",
            buckets=_latency_buckets(),
            registry=r,
        )
        self.admission_wait_seconds = Histogram(
            "topogate_admission_wait_seconds",
            "Time from a workload's creation to its admission.",
            ["cluster_queue"],
            buckets=_latency_buckets(),
            registry=r,
        )
        self.pending_workloads = Gauge(
            "topogate_pending_workloads",
            "Workloads waiting for admission, per ClusterQueue.",
            ["cluster_queue"],
            registry=r,
        )
        self.admitted_workloads = Gauge(
            "topogate_admitted_workloads",
            "Admitted workloads holding quota, per ClusterQueue.",
            ["cluster_queue"],
            registry=r,
        )
        self.ungate_seconds = Histogram(
            "topogate_pod_ungate_seconds",
            "Time from a pod's creation to the removal of its topology gate.",
            buckets=_latency_buckets(),
            registry=r,
        )
        self.ungated_pods = Counter(
            "topogate_ungated_pods_total", "Pods released by the ungater.", registry=r
        )
        self.relists = Counter(
            "topogate_watch_relists_total",
            "Full lists of a resource (start, or after 410 Gone).",
            ["resource"],
            registry=r,
        )
        self.events_dropped = Counter(
            "topogate_events_dropped_total",
            "Kubernetes Events not sent because the send queue was full (a burst outran the "
            "API server; events are best effort).",
            registry=r,
        )
        self.leader = Gauge(
            "topogate_leader", "1 while this replica holds the leader Lease.", registry=r
        )
