"""Kueue's own TAS scheduler performance scenario, run on `topogate serve` (and, with
--kueue-checkout, on Kueue's minimal controller in the same sitting); prints figures.

The scenario is Kueue's test/performance/scheduler/configs/tas/generator.yaml: 1 block x 10
racks x 64 nodes (96 CPU each); per cohort 6 ClusterQueues (20 CPU nominal, borrowing limit
100, reclaimWithinCohort Any, withinClusterQueue LowerPriority), each with 500 Workloads in
nine sets: small (2 pods x 500m, every 100 ms, runs 200 ms), medium (4 x 1250m, 500 ms, 500 ms)
and large (8 x 2500m, 1,200 ms, 1 s), each required in a rack, preferred in a rack, or in
rack slices ("balanced": slices of 1, 2 or 4 pods, each slice in one rack). As Kueue's runner
does, each set creates its Workloads one after the other with the interval before each; a
Workload admitted is marked Finished once its running time has passed since admission, and
an evicted one is requeued (the job controller's part). Time to admission is measured as
Kueue's recorder measures it: Admitted's lastTransitionTime minus creationTimestamp.

    .venv/bin/python hack/bench_kueue_scenario.py [--cohorts 5]
        [--kueue-checkout DIR --kueue-bin DIR]

--cohorts 1 is a quick run (3,000 Workloads); Kueue's is 5 (15,000). The Kueue side runs
hack/kueue_side.sh with the same config and the same cohort count: Kueue's runner and
minimalkueue from --kueue-bin (built by you from that checkout's test/performance/scheduler;
this repository carries no recipe that builds another project's code), the CRDs from the
checkout.

Pod churn (topogate side): --pods-per-node N binds N running pods (1 CPU each, not
topogate's) to every node before `serve` starts, and --churn P replaces P% of them every
--churn-interval seconds while the scenario runs (delete, create on a random node), so the
capacity cache, the pod watch and the cycles run under churn.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import random
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from topogate.kube.client import Kube
from topogate.kube.errors import KubeError
from topogate.kube.resources import PODS, WORKLOADS, Obj, Resource
from topogate.testing.controlplane import ControlPlane
from topogate.testing.localcluster import create_all, install_crds, serving

ROOT = Path(__file__).resolve().parent.parent
BLOCK, RACK, HOST = (
    "cloud.provider.com/topology-block",
    "cloud.provider.com/topology-rack",
    "kubernetes.io/hostname",
)
FLAVOR, GROUP_LABEL = "tas-flavor", "tas-node-group"
KUEUE = "kueue.x-k8s.io"

# (class, count, creation interval ms, runtime ms, priority, cpu per pod, pods, constraint,
# slice size): Kueue's TAS generator config, per ClusterQueue.
SETS = [
    ("small-required-rack", 120, 100, 200, 50, "500m", 2, "required", 0),
    ("small-preferred-rack", 120, 100, 200, 50, "500m", 2, "preferred", 0),
    ("small-balanced-rack", 110, 100, 200, 50, "500m", 2, "balanced", 1),
    ("medium-required-rack", 34, 500, 500, 100, "1250m", 4, "required", 0),
    ("medium-preferred-rack", 33, 500, 500, 100, "1250m", 4, "preferred", 0),
    ("medium-balanced-rack", 33, 500, 500, 100, "1250m", 4, "balanced", 2),
    ("large-required-rack", 17, 1200, 1000, 200, "2500m", 8, "required", 0),
    ("large-preferred-rack", 17, 1200, 1000, 200, "2500m", 8, "preferred", 0),
    ("large-balanced-rack", 16, 1200, 1000, 200, "2500m", 8, "balanced", 4),
]
QUEUES_PER_COHORT, RACKS, NODES_PER_RACK = 6, 10, 64
CHURN_NAMESPACE = "churn"


@dataclass
class Record:
    cls: str
    created: float = 0.0  # our clock, when the create returned
    admitted_seen: float | None = None  # our clock, when the watch showed it admitted
    admission_ms: int | None = None  # Kueue's measure: condition time - creationTimestamp
    finished: bool = False
    running: bool = False  # admitted, and its finish is scheduled
    evictions: int = 0


@dataclass
class Churn:
    """Pods bound to the nodes, and what replacing them took."""

    percent: float = 0.0
    interval: float = 1.0
    pods: dict[str, str] = field(default_factory=dict)  # pod name -> node
    replaced: int = 0
    rounds: list[float] = field(default_factory=list)  # seconds per round
    made: int = 0  # pods created so far (for names)


@dataclass
class Run:
    records: dict[str, Record] = field(default_factory=dict)
    admissions: list[float] = field(default_factory=list)  # our clock, per admission seen
    latest: dict[str, Obj] = field(default_factory=dict)  # key -> the last version watched
    finish_rtt: list[float] = field(default_factory=list)  # seconds per Finished write
    late: list[float] = field(default_factory=list)  # seconds a finish woke after its time
    started: float = 0.0
    generated: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)


# --- the objects ----------------------------------------------------------------------------


def cluster_objects(cohorts: int, racks: int = RACKS, per_rack: int = NODES_PER_RACK) -> list[Obj]:
    nodes = []
    for rack in range(racks):
        for index in range(per_rack):
            name = f"b0-r{rack}-n{index}"
            resources = {"cpu": "96", "memory": "256Gi", "pods": "110"}
            labels = {BLOCK: "b0", RACK: f"r{rack}", HOST: name, GROUP_LABEL: FLAVOR}
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": labels},
                    "status": {
                        "allocatable": resources,
                        "capacity": resources,
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
            )
    objs: list[Obj] = [
        *nodes,
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": "default-topology"},
            "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]},
        },
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ResourceFlavor",
            "metadata": {"name": FLAVOR},
            "spec": {"nodeLabels": {GROUP_LABEL: FLAVOR}, "topologyName": "default-topology"},
        },
    ]
    for cohort in range(cohorts):
        for queue in range(QUEUES_PER_COHORT):
            objs.extend(_queue(queue_name(cohort, queue), f"cohort-{cohort}"))
    return objs


def queue_name(cohort: int, queue: int) -> str:
    return f"cq-0-{queue}-cohort-{cohort}"  # as Kueue's generator names them


def _queue(name: str, cohort: str) -> list[Obj]:
    quota = {"name": "cpu", "nominalQuota": "20", "borrowingLimit": "100"}
    return [
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "cohort": cohort,
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": FLAVOR, "resources": [quota]}],
                    }
                ],
                "preemption": {
                    "reclaimWithinCohort": "Any",
                    "withinClusterQueue": "LowerPriority",
                },
            },
        },
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": name},
            "spec": {"clusterQueue": name},
        },
    ]


def workload(name: str, namespace: str, spec: tuple[Any, ...]) -> Obj:
    cls, _, _, runtime, priority, cpu, pods, constraint, slice_size = spec
    annotations = {
        "required": {f"{KUEUE}/podset-required-topology": RACK},
        "preferred": {f"{KUEUE}/podset-preferred-topology": RACK},
        "balanced": {
            f"{KUEUE}/podset-slice-required-topology": RACK,
            f"{KUEUE}/podset-slice-size": str(slice_size),
        },
    }[constraint]
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}
    return {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"bench/class": cls, "bench/runtime-ms": str(runtime)},
        },
        "spec": {
            "queueName": namespace,
            "priority": priority,
            "podSets": [
                {
                    "name": "main",
                    "count": pods,
                    "template": {
                        "metadata": {"annotations": annotations},
                        "spec": {"containers": [container]},
                    },
                }
            ],
        },
    }


# --- the runner's parts: generator, recorder, finisher ----------------------------------------


def counted(fraction: float) -> list[tuple[Any, ...]]:
    """The sets with their counts scaled (1.0: Kueue's)."""
    return [(s[0], max(1, round(s[1] * fraction)), *s[2:]) for s in SETS]


async def generate(kube: Kube, run: Run, cohorts: int, sets: list[tuple[Any, ...]]) -> None:
    async def one_set(namespace: str, index: int, spec: tuple[Any, ...]) -> None:
        cls, count, interval = spec[0], spec[1], spec[2]
        for i in range(count):
            await asyncio.sleep(interval / 1000)
            name = f"{cls}-{index}-{i}-0"
            await kube.create(WORKLOADS, workload(name, namespace, spec), namespace)
            run.records[f"{namespace}/{name}"] = Record(cls, time.monotonic())

    await asyncio.gather(
        *(
            one_set(queue_name(c, q), i, spec)
            for c in range(cohorts)
            for q in range(QUEUES_PER_COHORT)
            for i, spec in enumerate(sets)
        )
    )
    run.generated.set()


def _condition(obj: Obj, kind: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _ts(value: str) -> float:
    return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


async def record(kube: Kube, run: Run, total: int) -> None:
    """Watch Workloads: note admissions, finish them after their running time, requeue the
    evicted (the job controller's part), until all are finished."""
    timers: set[asyncio.Task[None]] = set()
    seen_version = (await kube.list(WORKLOADS))["metadata"]["resourceVersion"]
    finished = 0
    while finished < total:
        async for event in kube.watch(WORKLOADS, seen_version, timeout_seconds=60):
            obj = event["object"]
            seen_version = obj["metadata"].get("resourceVersion", seen_version)
            if event["type"] not in ("ADDED", "MODIFIED"):
                continue
            key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
            run.latest[key] = obj
            rec = run.records.get(key)
            if rec is None:
                rec = run.records.setdefault(key, Record(obj["metadata"]["labels"]["bench/class"]))
            admitted = _condition(obj, "Admitted")
            evicted = _condition(obj, "Evicted")
            is_admitted = bool(admitted and admitted["status"] == "True")
            if _condition(obj, "Finished") and not rec.finished:
                rec.finished = True
                finished += 1
            elif evicted and evicted["status"] == "True" and obj["status"].get("admission"):
                if rec.running:
                    rec.running = False
                    rec.evictions += 1
                timers.add(asyncio.create_task(requeue(kube, obj)))
            elif is_admitted and admitted is not None and not rec.running:
                # As Kueue's recorder: each admission sets the time (the last one counts).
                rec.running = True
                rec.admitted_seen = time.monotonic()
                run.admissions.append(rec.admitted_seen)
                created = _ts(obj["metadata"]["creationTimestamp"])
                rec.admission_ms = int((_ts(admitted["lastTransitionTime"]) - created) * 1000)
                runtime = int(obj["metadata"]["labels"]["bench/runtime-ms"]) / 1000
                timers.add(asyncio.create_task(finish(kube, run, key, runtime)))
            elif not is_admitted:
                rec.running = False
            if finished >= total:
                break
    run.done.set()
    for task in timers:
        task.cancel()


def _new_condition(kind: str, status: str, reason: str, message: str) -> Obj:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }


async def finish(kube: Kube, run: Run, key: str, after: float) -> None:
    """Mark the Workload Finished ``after`` seconds, as Kueue's runner does: from the watched
    version (its informer cache), guarded by that resourceVersion; a conflict reads it afresh."""
    due = time.monotonic() + after
    await asyncio.sleep(after)
    run.late.append(time.monotonic() - due)
    current = run.latest[key]
    for _attempt in range(5):
        admitted, evicted = _condition(current, "Admitted"), _condition(current, "Evicted")
        if (
            not admitted
            or admitted["status"] != "True"
            or (evicted and evicted["status"] == "True")
        ):
            return  # evicted meanwhile: requeued, it runs again when admitted again
        m = current["metadata"]
        conditions = [c for c in current["status"]["conditions"] if c["type"] != "Finished"]
        conditions.append(_new_condition("Finished", "True", "ByTest", "By test runner"))
        body = {
            "metadata": {"resourceVersion": m["resourceVersion"]},
            "status": {"conditions": conditions},
        }
        try:
            sent = time.monotonic()
            await kube.patch(WORKLOADS, m["name"], body, m["namespace"], subresource="status")
            run.finish_rtt.append(time.monotonic() - sent)
            return
        except KubeError as error:
            if error.status != 409:
                raise
        current = await kube.get(WORKLOADS, m["name"], m["namespace"])


async def requeue(kube: Kube, obj: Obj) -> None:
    m = obj["metadata"]
    conditions = [
        c for c in obj["status"]["conditions"] if c["type"] not in ("QuotaReserved", "Admitted")
    ]
    conditions.append(_new_condition("QuotaReserved", "False", "Pending", "Evicted by the runner"))
    conditions.append(_new_condition("Admitted", "False", "Evicted", "Evicted by the runner"))
    body = {
        "metadata": {"resourceVersion": m["resourceVersion"]},
        "status": {"admission": None, "conditions": conditions},
    }
    with contextlib.suppress(KubeError):  # a newer version: the watch brings it back
        await kube.patch(WORKLOADS, m["name"], body, m["namespace"], subresource="status")


# --- pod churn --------------------------------------------------------------------------------


def churn_pod(name: str, node: str) -> Obj:
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": CHURN_NAMESPACE},
        "spec": {"nodeName": node, "containers": [container]},
    }


async def bind_pods(kubeconfig: Path, nodes: list[str], per_node: int, churn: Churn) -> None:
    """``per_node`` pods on every node, bound at creation (no scheduler, no kubelet)."""
    kube = await Kube.connect(str(kubeconfig), qps=None)
    limit = asyncio.Semaphore(32)

    async def one(node: str) -> None:
        async with limit:
            name = f"p{churn.made}"
            churn.made += 1
            await kube.create(PODS, churn_pod(name, node), CHURN_NAMESPACE)
            churn.pods[name] = node

    try:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CHURN_NAMESPACE}}
        await kube.create(Resource("v1", "namespaces", namespaced=False), namespace)
        await asyncio.gather(*(one(node) for node in nodes for _ in range(per_node)))
    finally:
        await kube.close()


async def churn_pods(kube: Kube, run: Run, churn: Churn, nodes: list[str]) -> None:
    """Every interval, replace ``percent``% of the pods (delete at once, create on a random
    node) until the scenario is done."""
    rng = random.Random(0)
    limit = asyncio.Semaphore(32)

    async def replace(name: str) -> None:
        async with limit:
            path = PODS.path(CHURN_NAMESPACE, name)
            with contextlib.suppress(KubeError):
                await kube.request("DELETE", path, {"gracePeriodSeconds": 0})
            new, churn.made = f"p{churn.made}", churn.made + 1
            node = rng.choice(nodes)
            await kube.create(PODS, churn_pod(new, node), CHURN_NAMESPACE)
            churn.pods[new] = node

    while not run.done.is_set():
        started = time.monotonic()
        count = max(1, round(len(churn.pods) * churn.percent / 100))
        victims = rng.sample(sorted(churn.pods), count)
        for name in victims:
            del churn.pods[name]
        await asyncio.gather(*(replace(name) for name in victims))
        churn.replaced += count
        churn.rounds.append(time.monotonic() - started)
        await asyncio.sleep(max(0.0, churn.interval - (time.monotonic() - started)))


# --- serve's own figures --------------------------------------------------------------------


_REQUEST_LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def api_requests(metrics: str) -> Counter[str]:
    """The API server's requests by verb, resource and subresource (reads and watches too)."""
    counts: Counter[str] = Counter()
    for line in metrics.splitlines():
        match = _REQUEST_LINE.match(line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        what = f"{labels.get('verb', '?')} {labels.get('resource', '?')}"
        if labels.get("subresource"):
            what += f"/{labels['subresource']}"
        counts[what] += int(float(match["value"]))
    return counts


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, clock ticks


def proc_peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for name in ("topogate_admission_cycle_seconds_count", "topogate_admission_cycle_seconds_sum"):
        match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
        out[name] = float(match.group(1)) if match else 0.0
    return out


def ports(log: Path, deadline: float) -> tuple[int, int]:
    """serve's probe and metrics ports, from its first line."""
    while time.monotonic() < deadline:
        match = re.search(r"probes and metrics on :(\d+) :(\d+)", log.read_text())
        if match:
            return int(match.group(1)), int(match.group(2))
        time.sleep(0.2)
    raise SystemExit(f"serve did not start: {log.read_text()[-2000:]}")


def wait_ready(port: int, deadline: float) -> None:
    """Until /readyz says the caches are synced and this replica leads."""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as reply:
                if reply.status == 200 and not reply.read().startswith(b"standby"):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("serve did not become ready")


# --- the report -----------------------------------------------------------------------------


def class_table(run: Run) -> dict[str, dict[str, float]]:
    by_class: dict[str, list[int]] = defaultdict(list)
    for rec in run.records.values():
        if rec.admission_ms is not None:
            by_class[rec.cls].append(rec.admission_ms)
    table = {}
    for cls in [s[0] for s in SETS]:
        values = sorted(by_class.get(cls, []))
        if values:
            table[cls] = {
                "mean": statistics.fmean(values),
                "p50": values[len(values) // 2],
                "p90": values[int(len(values) * 0.9) - 1],
                "n": len(values),
            }
    return table


def _quantile(values: list[float], q: float) -> float:
    return sorted(values)[int(q * (len(values) - 1))] if values else 0.0


def evictions_by_class(run: Run) -> dict[str, int]:
    """Preemptions (reclaim within the cohort, lower priority in the queue) by victim class."""
    counts: Counter[str] = Counter()
    for rec in run.records.values():
        counts[rec.cls] += rec.evictions
    return {cls: n for cls, n in counts.items() if n}


def stalls(run: Run, until: float) -> tuple[list[int], int]:
    """Admissions per 10 s window, and the windows with none while work was waiting."""
    windows = Counter(int((t - run.started) // 10) for t in run.admissions)
    count = int((until - run.started) // 10) + 1
    per_window = [windows.get(i, 0) for i in range(count)]
    admitted_by: list[int] = []
    total = 0
    for value in per_window:
        total += value
        admitted_by.append(total)
    created = sorted(r.created for r in run.records.values())
    zero = 0
    for i, value in enumerate(per_window):
        waiting = sum(1 for c in created if c - run.started < (i + 1) * 10) - admitted_by[i]
        if value == 0 and waiting > 0:
            zero += 1
    return per_window, zero


async def drive(
    plane: ControlPlane, cohorts: int, fraction: float, churn: Churn, nodes: list[str]
) -> Run:
    kube = await Kube.connect(str(plane.kubeconfig), qps=None)
    run = Run(started=time.monotonic())
    sets = counted(fraction)
    total = cohorts * QUEUES_PER_COHORT * sum(s[1] for s in sets)

    async def progress() -> None:
        while True:
            await asyncio.sleep(10)
            admitted = sum(1 for r in run.records.values() if r.admitted_seen is not None)
            done = sum(1 for r in run.records.values() if r.finished)
            print(
                f"  {time.monotonic() - run.started:5.0f} s: created {len(run.records)}/{total}, "
                f"admitted {admitted}, finished {done}",
                file=sys.stderr,
                flush=True,
            )

    reporter = asyncio.create_task(progress())
    churner = None
    try:
        recorder = asyncio.create_task(record(kube, run, total))
        await asyncio.sleep(0.5)  # the watch is open before the first create
        if churn.percent > 0 and churn.pods:
            churner = asyncio.create_task(churn_pods(kube, run, churn, nodes))
        await generate(kube, run, cohorts, sets)
        await asyncio.wait_for(recorder, 3600)
        if churner is not None:
            await churner  # ends after its round once the scenario is done
    finally:
        reporter.cancel()
        if churner is not None:
            churner.cancel()
        await kube.close()
    return run


def topogate_side(
    directory: Path,
    cohorts: int,
    fraction: float,
    racks: int,
    per_rack: int,
    churn: Churn,
    pods_per_node: int = 0,
) -> dict[str, Any]:
    plane = ControlPlane.start(directory / "plane", scheduler=False)
    try:
        install_crds(plane.kubeconfig)
        objs = cluster_objects(cohorts, racks, per_rack)
        create_all(plane.kubeconfig, objs)
        nodes = [o["metadata"]["name"] for o in objs if o["kind"] == "Node"]
        if pods_per_node:
            asyncio.run(bind_pods(plane.kubeconfig, nodes, pods_per_node, churn))
        log = directory / "serve.log"
        launched = time.monotonic()
        with serving(
            plane.kubeconfig, log, extra=["--lease-duration=60", "--renew-deadline=45"]
        ) as proc:
            probes, port = ports(log, time.monotonic() + 60)
            wait_ready(probes, time.monotonic() + 600)
            ready = time.monotonic() - launched
            cpu0 = proc_cpu(proc.pid)
            others0 = {n: proc_cpu(pid) for n, pid in plane.pids.items()}
            self0 = resource.getrusage(resource.RUSAGE_SELF)
            requests0 = api_requests(plane.metrics_text())
            before = scrape(port)
            started = time.monotonic()
            run = asyncio.run(drive(plane, cohorts, fraction, churn, nodes))
            wall = time.monotonic() - started
            after = scrape(port)
            cpu = proc_cpu(proc.pid) - cpu0
            self1 = resource.getrusage(resource.RUSAGE_SELF)
            requests = api_requests(plane.metrics_text()) - requests0
            # Where the machine's two cores went: a loaded API server slows both sides' writes.
            others = {n: proc_cpu(pid) - others0[n] for n, pid in plane.pids.items()}
            others["bench (runner)"] = (self1.ru_utime + self1.ru_stime) - (
                self0.ru_utime + self0.ru_stime
            )
            rss = proc_peak_rss_mb(proc.pid)
        per_window, zero = stalls(run, run.started + wall)
        cycles = (
            after["topogate_admission_cycle_seconds_count"]
            - before["topogate_admission_cycle_seconds_count"]
        )
        cycle_sum = (
            after["topogate_admission_cycle_seconds_sum"]
            - before["topogate_admission_cycle_seconds_sum"]
        )
        first_created = min((r.created for r in run.records.values()), default=0.0)
        return {
            "nodes": racks * per_rack,
            "ready": ready,
            "first_admission": min(run.admissions, default=first_created) - first_created,
            "wall": wall,
            "cpu": cpu,
            "cpu_others": others,
            "api_requests": dict(requests.most_common()),
            "rss": rss,
            "classes": class_table(run),
            "evictions": evictions_by_class(run),
            "runner": {
                "finish_write_p50_ms": 1000 * _quantile(run.finish_rtt, 0.5),
                "finish_write_p90_ms": 1000 * _quantile(run.finish_rtt, 0.9),
                "timer_late_p50_ms": 1000 * _quantile(run.late, 0.5),
                "timer_late_p90_ms": 1000 * _quantile(run.late, 0.9),
            },
            "cycles": cycles,
            "cycle_mean_ms": 1000 * cycle_sum / cycles if cycles else 0.0,
            "per_window": per_window,
            "zero_windows": zero,
            "pods": len(churn.pods),
            "churn": {
                "percent": churn.percent,
                "interval": churn.interval,
                "replaced": churn.replaced,
                "rounds": len(churn.rounds),
                "round_p50": sorted(churn.rounds)[len(churn.rounds) // 2] if churn.rounds else 0,
                "round_max": max(churn.rounds, default=0.0),
            },
        }
    finally:
        plane.stop()


def kueue_side(
    checkout: Path, binaries: Path, directory: Path, cohorts: int, fraction: float
) -> dict[str, Any]:
    config = yaml.safe_load(
        (checkout / "test/performance/scheduler/configs/tas/generator.yaml").read_text()
    )
    config["cohorts"][0]["count"] = cohorts
    for queues in config["cohorts"][0]["queuesSets"]:
        for workloads in queues["workloadsSets"]:
            workloads["count"] = max(1, round(workloads["count"] * fraction))
    path = directory / "generator.yaml"
    path.write_text(yaml.safe_dump(config))
    out = directory / "kueue"
    started = time.monotonic()
    subprocess.run(
        ["bash", str(ROOT / "hack/kueue_side.sh"), "run", str(checkout), str(path), str(out)],
        env={**os.environ, "KUEUE_BIN": str(binaries)},
        check=True,
        stdout=open(directory / "kueue-runner.log", "wb"),  # noqa: SIM115 - the child's
        stderr=subprocess.STDOUT,
    )
    wall = time.monotonic() - started
    summary = yaml.safe_load((out / "summary.yaml").read_text())
    stats = yaml.safe_load((out / "minimalkueue.stats.yaml").read_text())
    classes = {
        name: {"mean": float(values["averageTimeToAdmissionMs"]), "n": values.get("count", 0)}
        for name, values in (summary.get("workloadClasses") or {}).items()
    }
    cpu = (float(stats.get("userMs", 0)) + float(stats.get("sysMs", 0))) / 1000
    return {
        "wall": float(stats.get("wallMs", wall * 1000)) / 1000,
        "cpu": cpu,
        "rss": float(stats.get("maxrss", 0)) / 1024,
        "classes": classes,
        "raw": {"summary": summary, "stats": stats},
    }


def speed_marker() -> float:
    """Milliseconds of a fixed CPU-bound loop, the median of 5: printed around each side, so a
    reader sees when the machine itself ran slower (these 2-core machines drift by minutes)."""
    times = []
    for _ in range(5):
        started = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i * i % 7
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def report(ours: dict[str, Any], theirs: dict[str, Any] | None) -> None:
    print(
        f"topogate serve: wall {ours['wall']:.0f} s, CPU {ours['cpu']:.1f} s, "
        f"peak RSS {ours['rss']:.0f} MB"
    )
    print(
        f"  {ours['nodes']} nodes: ready (caches synced, leading) {ours['ready']:.1f} s after "
        f"start; first admission {ours['first_admission'] * 1000:.0f} ms after the first create"
    )
    print(f"  cycles {ours['cycles']:.0f}, mean {ours['cycle_mean_ms']:.1f} ms")
    marker = ours["speed_marker_ms"]
    print(f"  machine speed marker before and after this side: {marker[0]:.0f}, {marker[1]:.0f} ms")
    others = ", ".join(f"{name} {cpu:.1f} s" for name, cpu in ours["cpu_others"].items())
    print(f"  CPU of the rest on this side: {others}")
    top = list(ours["api_requests"].items())[:8]
    print("  API requests: " + ", ".join(f"{what} {count}" for what, count in top))
    churn = ours["churn"]
    if churn["rounds"]:
        print(
            f"  pod churn: {ours['pods']} bound pods, {churn['percent']:g}% replaced every "
            f"{churn['interval']:g} s: {churn['replaced']} replaced in {churn['rounds']} rounds "
            f"(a round took {churn['round_p50']:.2f} s median, {churn['round_max']:.2f} s max)"
        )
    print(f"  admissions per 10 s: {ours['per_window']}")
    print(f"  evictions by victim class: {ours['evictions'] or 'none'}")
    r = ours["runner"]
    print(
        f"  the runner's Finished write took {r['finish_write_p50_ms']:.0f} ms median, "
        f"{r['finish_write_p90_ms']:.0f} ms p90; its timers woke {r['timer_late_p50_ms']:.0f} ms "
        f"late median, {r['timer_late_p90_ms']:.0f} ms p90 (the API server's and the runner's "
        "share of each gang's turnaround)"
    )
    print(f"  10 s windows with no admission while work waited: {ours['zero_windows']}")
    if theirs is not None:
        print(
            f"Kueue minimalkueue: wall {theirs['wall']:.0f} s, CPU {theirs['cpu']:.1f} s, "
            f"peak RSS {theirs['rss']:.0f} MB"
        )
        marker = theirs["speed_marker_ms"]
        print(f"  machine speed marker before and after: {marker[0]:.0f}, {marker[1]:.0f} ms")
        print(f"  CPU ratio topogate/Kueue: {ours['cpu'] / theirs['cpu']:.2f}")
    print(
        f"{'class':24} {'topogate mean ms':>17} {'p50':>7} {'p90':>7}"
        + (f" {'Kueue mean ms':>14} {'ratio':>6}" if theirs else "")
    )
    for cls in [s[0] for s in SETS]:
        row = ours["classes"].get(cls)
        if row is None:
            continue
        line = f"{cls:24} {row['mean']:17.0f} {row['p50']:7.0f} {row['p90']:7.0f}"
        if theirs and cls in theirs["classes"]:
            k = theirs["classes"][cls]["mean"]
            line += f" {k:14.0f} {row['mean'] / k if k else float('nan'):6.2f}"
        print(line)


def main() -> None:
    # A SIGTERM (timeout(1), Ctrl-C's cousin) unwinds, so the control plane is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cohorts", type=int, default=5, help="5: Kueue's 15,000 Workloads")
    parser.add_argument(
        "--fraction", type=float, default=1.0, help="scale each set's count (1: Kueue's)"
    )
    parser.add_argument("--kueue-checkout", type=Path, help="also run Kueue's side from here")
    parser.add_argument(
        "--kueue-bin", type=Path, help="Kueue's runner and minimalkueue, built from that checkout"
    )
    parser.add_argument("--racks", type=int, default=RACKS, help="topogate side: racks")
    parser.add_argument(
        "--nodes-per-rack", type=int, default=NODES_PER_RACK, help="topogate side: nodes per rack"
    )
    parser.add_argument(
        "--pods-per-node", type=int, default=0, help="topogate side: running pods bound per node"
    )
    parser.add_argument(
        "--churn",
        type=float,
        default=0.0,
        help="topogate side: %% of those pods replaced per round",
    )
    parser.add_argument(
        "--churn-interval", type=float, default=1.0, help="seconds between churn rounds"
    )
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    if (args.kueue_checkout is None) != (args.kueue_bin is None):
        parser.error("--kueue-checkout and --kueue-bin go together")
    with tempfile.TemporaryDirectory() as tmp:
        theirs = None
        if args.kueue_checkout is not None:
            checkout, binaries = args.kueue_checkout.resolve(), args.kueue_bin.resolve()
            before = speed_marker()
            theirs = kueue_side(checkout, binaries, Path(tmp), args.cohorts, args.fraction)
            theirs["speed_marker_ms"] = (before, speed_marker())
        churn = Churn(args.churn, args.churn_interval)
        before = speed_marker()
        ours = topogate_side(
            Path(tmp),
            args.cohorts,
            args.fraction,
            args.racks,
            args.nodes_per_rack,
            churn,
            args.pods_per_node,
        )
        ours["speed_marker_ms"] = (before, speed_marker())
        report(ours, theirs)
        if args.json:
            args.json.write_text(
                json.dumps({"topogate": ours, "kueue": theirs}, indent=2, default=str)
            )


if __name__ == "__main__":
    main()
