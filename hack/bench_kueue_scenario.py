"""Kueue's own TAS scheduler performance scenario side by side: `topogate serve` and Kueue's
minimal controller (its test/performance/scheduler runner and minimalkueue, built by
hack/kueue/build.sh) at the same client budget, one after the other in one sitting; prints
figures and writes them to hack/results/issue25-bench/<scenario>-<budget>-<timestamp>.json.

    .venv/bin/python hack/bench_kueue_scenario.py [--cohorts 5] [--budget 50/100] [--kueue]

(--budget twice, e.g. --budget 50/100 --budget 300/500: both budgets' pairs in one sitting.)

The scenario is Kueue's test/performance/scheduler/configs/tas/generator.yaml: 1 block x 10
racks x 64 nodes (96 CPU each); per cohort 6 ClusterQueues (20 CPU nominal, borrowing limit
100, reclaimWithinCohort Any, withinClusterQueue LowerPriority), each with 500 Workloads in
nine sets: small (2 pods x 500m, every 100 ms, runs 200 ms), medium (4 x 1250m, 500 ms, 500 ms)
and large (8 x 2500m, 1,200 ms, 1 s), each required in a rack, preferred in a rack, or in
rack slices ("balanced": slices of 1, 2 or 4 pods, each slice in one rack). --cohorts 1 is a
quick run (3,000 Workloads); Kueue's is 5 (15,000).

Both sides as Kueue's runner runs them:
- the controller starts at the moment the generator starts (nodes, Topology, flavor, queues,
  then each set's Workloads one after the other with the interval before each); its CPU and
  peak RSS are its whole process's, counted from its start;
- client budget: --budget QPS/BURST for both controllers. Kueue's minimalkueue hard-codes
  50/100 (its benchmark's budget); hack/kueue/build.sh also builds minimalkueue-qps300-burst500,
  the same source with those two constants set to Kueue's deployed default, for --budget 300/500;
- the runner marks an admitted Workload Finished once its running time has passed since the
  admission was seen, and requeues an evicted one (the job controller's part); a Workload
  evicted and admitted again gets a new timer (the old one is void), as Kueue's runner resets
  the admission time;
- time to admission as Kueue's recorder computes it: from the runner's first watch event of
  the Workload to its watch event that shows it admitted (the last admission counts), in whole
  milliseconds; a class's mean is over all its Workloads, one never admitted counting 0 ms, in
  integer division.

On topogate's side every admission is checked as the watch shows it (hack/bench_invariants.py:
quota, borrowing and lending limits over the cohort, node capacity, required rack and rack
slices; Kueue's through the same checker); a violation fails the sitting (exit 1, the results
file still written, each quota violation naming the Workloads that held quota there). A sitting
is void when Kueue's runner failed or stopped before every Workload was created and finished,
its recorder has fewer Workloads than were created, minimalkueue died, or serve died: it is
refused (exit 1) with its file written marked "void" (why), no ratios, and serve's side not run
after a void Kueue side. A void or violated sitting's logs (the runner's, minimalkueue's,
serve's) are kept gzipped in ~/.cache/topogate/bench-logs/<file stem>/ ("logs"). API requests
by verb and resource are the API server's apiserver_request_total over the sitting (each side
has its own API server); on topogate's side the runner counts its own, so the controller's
share is the difference. The machine's load (uptime) and a CPU speed marker are recorded
around each side: on a shared machine the figures are loaded-machine figures.

Pod churn (topogate side only): --pods-per-node N binds N running pods (1 CPU each, not
topogate's) to every node before `serve` starts, and --churn P replaces P% of them every
--churn-interval seconds while the scenario runs (delete, create on a random node).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import csv
import datetime as dt
import gzip
import json
import os
import random
import re
import resource
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from topogate.kube.client import Kube
from topogate.kube.errors import KubeError
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    NODES,
    PODS,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
    Obj,
    Resource,
)
from topogate.testing.controlplane import ControlPlane
from topogate.testing.localcluster import create_all, install_crds, serving

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_invariants import Checker

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "hack/results/issue25-bench"
BLOCK, RACK, HOST = (
    "cloud.provider.com/topology-block",
    "cloud.provider.com/topology-rack",
    "kubernetes.io/hostname",
)
FLAVOR, GROUP_LABEL = "tas-flavor", "tas-node-group"
KUEUE = "kueue.x-k8s.io"
# Client budgets Kueue's side can run at: the minimalkueue binary of each (hack/kueue/build.sh).
KUEUE_BINARIES = {(50, 100): "minimalkueue", (300, 500): "minimalkueue-qps300-burst500"}
NAMESPACES = Resource("v1", "namespaces", namespaced=False)
BY_KIND = {
    "Node": NODES,
    "Topology": TOPOLOGIES,
    "ResourceFlavor": RESOURCE_FLAVORS,
    "ClusterQueue": CLUSTER_QUEUES,
    "Namespace": NAMESPACES,
    "LocalQueue": LOCAL_QUEUES,
}

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
# Kueue's release that first ships each scenario's generator config (configs/large-scale came
# after v0.17.0); --kueue-version overrides.
KUEUE_VERSIONS = {"tas": "v0.17.0", "large-scale": "v0.19.0"}
LARGE_SCALE_CONFIG = "test/performance/scheduler/configs/large-scale/generator.yaml"
TAS_CONFIG = "test/performance/scheduler/configs/tas/generator.yaml"


@dataclass(frozen=True)
class Scenario:
    """What differs between Kueue's scenarios: the sets (SETS' shape), the queues, the flavor."""

    name: str
    sets: list[tuple[Any, ...]]
    queues_per_cohort: int
    nominal: str
    borrowing: str
    flavor: str
    topology: bool  # nodes and a Topology (tas); quota only, no nodes (large-scale)
    preemption: tuple[str, str] = ("Any", "LowerPriority")  # reclaimWithinCohort, withinCQ


TAS = Scenario("tas", SETS, QUEUES_PER_COHORT, "20", "100", FLAVOR, True)


def large_scale(config: dict[str, Any]) -> Scenario:
    """Kueue's configs/large-scale generator config as a Scenario: one cohort set of one queue
    set, each workloads set of one-pod workloads asking `request` CPU; its flavor is the
    generator's default, "rf", with no node labels and no topology."""
    cohorts = config["cohorts"]
    if len(cohorts) != 1 or len(cohorts[0]["queuesSets"]) != 1 or config.get("topology"):
        raise SystemExit("large-scale generator config: expected one cohort set of one queue set")
    queues = cohorts[0]["queuesSets"][0]
    sets: list[tuple[Any, ...]] = []
    for wl_set in queues["workloadsSets"]:
        if len(wl_set["workloads"]) != 1:
            raise SystemExit("large-scale generator config: one workload per workloads set")
        wl = wl_set["workloads"][0]
        sets.append(
            (
                wl["className"],
                int(wl_set["count"]),
                int(wl_set["creationIntervalMs"]),
                int(wl["runtimeMs"]),
                int(wl["priority"]),
                str(wl["request"]),
                int(wl.get("podCount") or 1),
                "none",
                0,
            )
        )
    return Scenario(
        "large-scale",
        sets,
        int(queues["count"]),
        str(queues["nominalQuota"]),
        str(queues["borrowingLimit"]),
        (config.get("resourceFlavor") or {}).get("name", "rf"),
        False,
        (queues["reclaimWithinCohort"], queues["withinClusterQueue"]),
    )


def large_scale_config(version: str, kueue: Path | None = None) -> dict[str, Any]:
    """The module's configs/large-scale/generator.yaml: from hack/kueue/build.sh's source copy,
    else from the Go module cache (`go mod download` puts it there)."""
    candidates = [kueue / "src" / LARGE_SCALE_CONFIG] if kueue else []
    gomodcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True)
    if gomodcache.returncode == 0 and gomodcache.stdout.strip():
        module = Path(gomodcache.stdout.strip()) / f"sigs.k8s.io/kueue@{version}"
        candidates.append(module / LARGE_SCALE_CONFIG)
    for path in candidates:
        if path.is_file():
            loaded: dict[str, Any] = yaml.safe_load(path.read_text())
            return loaded
    raise SystemExit(
        f"no {LARGE_SCALE_CONFIG} for Kueue {version} (tried {', '.join(map(str, candidates))}); "
        f"`go mod download sigs.k8s.io/kueue@{version}` or hack/kueue/build.sh fetches it"
    )


@dataclass
class Record:
    """One Workload as the runner saw it (Kueue's recorder's WLState, plus the timer's)."""

    cls: str
    first_seen: float  # our clock: the first watch event (Kueue's FirstEventTime)
    tta_ms: int = 0  # the last admission seen minus first_seen; 0 while never admitted
    admitted: bool = False  # the last event showed it admitted
    evicted: bool = False  # the last event showed it evicted
    finished: bool = False
    admissions: int = 0  # each admission seen starts a timer; a stale one sees a newer count
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
    created: list[float] = field(default_factory=list)  # our clock, per Workload created
    admissions: list[float] = field(default_factory=list)  # our clock, per admission seen
    latest: dict[str, Obj] = field(default_factory=dict)  # key -> the last version watched
    finish_rtt: list[float] = field(default_factory=list)  # seconds per Finished write
    late: list[float] = field(default_factory=list)  # seconds a finish woke after its time
    stale_timers: int = 0  # timers of an admission since evicted (void, as Kueue's runner)
    requests: Counter[str] = field(default_factory=Counter)  # the runner's own, as the API's
    requeuing: set[str] = field(default_factory=set)
    checker: Checker = field(default_factory=Checker)
    started: float = 0.0
    done: asyncio.Event = field(default_factory=asyncio.Event)


# --- the objects ----------------------------------------------------------------------------


def cluster_objects(
    cohorts: int, racks: int = RACKS, per_rack: int = NODES_PER_RACK, scenario: Scenario = TAS
) -> list[Obj]:
    if not scenario.topology:  # quota only: no nodes, a flavor without labels or topology
        flavor = {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ResourceFlavor",
            "metadata": {"name": scenario.flavor},
            "spec": {},
        }
        queues = [
            obj
            for cohort in range(cohorts)
            for queue in range(scenario.queues_per_cohort)
            for obj in _queue(queue_name(cohort, queue), f"cohort-{cohort}", scenario)
        ]
        return [flavor, *queues]
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


def _queue(name: str, cohort: str, scenario: Scenario = TAS) -> list[Obj]:
    quota = {"name": "cpu", "nominalQuota": scenario.nominal, "borrowingLimit": scenario.borrowing}
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
                        "flavors": [{"name": scenario.flavor, "resources": [quota]}],
                    }
                ],
                "preemption": {
                    "reclaimWithinCohort": scenario.preemption[0],
                    "withinClusterQueue": scenario.preemption[1],
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
        "none": {},  # large-scale: quota only
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


def counted(fraction: float, sets: list[tuple[Any, ...]] = SETS) -> list[tuple[Any, ...]]:
    """The sets with their counts (Workloads per queue) scaled, at least 1 (1.0: Kueue's)."""
    return [(s[0], max(1, round(s[1] * fraction)), *s[2:]) for s in sets]


async def create(kube: Kube, run: Run, obj: Obj) -> None:
    resource = WORKLOADS if obj["kind"] == "Workload" else BY_KIND[obj["kind"]]
    namespace = obj["metadata"].get("namespace")
    await kube.create(resource, obj, namespace)
    run.requests[f"POST {resource.plural}"] += 1


async def generate(
    kube: Kube,
    run: Run,
    objs: list[Obj],
    cohorts: int,
    sets: list[tuple[Any, ...]],
    nodes_made: bool = False,
    queues: int = QUEUES_PER_COHORT,
) -> None:
    """As Kueue's generator: the nodes, the Topology and the flavor, then every queue at
    once, each followed by its sets' Workloads, each set one after the other."""
    limit = asyncio.Semaphore(32)

    async def limited(obj: Obj) -> None:
        async with limit:
            await create(kube, run, obj)

    nodes = [] if nodes_made else [o for o in objs if o["kind"] == "Node"]
    await asyncio.gather(*(limited(o) for o in nodes))
    for obj in objs:
        if obj["kind"] in ("Topology", "ResourceFlavor"):
            await create(kube, run, obj)

    async def one_set(namespace: str, index: int, spec: tuple[Any, ...]) -> None:
        cls, count, interval = spec[0], spec[1], spec[2]
        for i in range(count):
            await asyncio.sleep(interval / 1000)
            await create(kube, run, workload(f"{cls}-{index}-{i}-0", namespace, spec))
            run.created.append(time.monotonic())

    async def one_queue(name: str) -> None:
        for obj in objs:  # ClusterQueue, Namespace, LocalQueue
            if obj["metadata"]["name"] == name:
                await create(kube, run, obj)
        await asyncio.gather(*(one_set(name, i, spec) for i, spec in enumerate(sets)))

    await asyncio.gather(
        *(one_queue(queue_name(c, q)) for c in range(cohorts) for q in range(queues))
    )


def _condition(obj: Obj, kind: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _true(obj: Obj, kind: str) -> bool:
    cond = _condition(obj, kind)
    return bool(cond and cond.get("status") == "True")


async def record(kube: Kube, run: Run, total: int) -> None:
    """Watch Workloads as Kueue's runner does: record each one's states, check every admission,
    finish the admitted after their running time, requeue the evicted, until all are
    finished. A watch too old to resume (410) lists afresh and goes on from there."""
    timers: set[asyncio.Task[None]] = set()
    finished = 0

    def handle(kind: str, obj: Obj) -> None:
        nonlocal finished
        now = time.monotonic()
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        if kind == "DELETED":
            run.checker.observe(None, key)
            return
        run.latest[key] = obj
        run.checker.observe(obj, key)
        rec = run.records.get(key)
        if rec is None:
            rec = run.records[key] = Record(obj["metadata"]["labels"]["bench/class"], now)
        admitted, evicted = _true(obj, "Admitted"), _true(obj, "Evicted")
        if _true(obj, "Finished") and not rec.finished:
            rec.finished = True
            finished += 1
        if evicted and not rec.evicted:
            rec.evictions += 1
        if evicted and obj["status"].get("admission") and key not in run.requeuing:
            run.requeuing.add(key)
            timers.add(asyncio.create_task(requeue(kube, run, obj)))
        if admitted and not rec.admitted:
            # As Kueue's recorder: each admission sets the time (the last one counts).
            rec.tta_ms = int((now - rec.first_seen) * 1000)
            rec.admissions += 1
            run.admissions.append(now)
            runtime = int(obj["metadata"]["labels"]["bench/runtime-ms"]) / 1000
            timers.add(asyncio.create_task(finish(kube, run, key, rec.admissions, runtime)))
        elif not admitted and rec.admitted:
            rec.admissions += 1  # its timer is void: a new admission starts its own
        rec.admitted, rec.evicted = admitted, evicted

    async def relist() -> str:
        listing = await kube.list(WORKLOADS)
        run.requests["LIST workloads"] += 1
        for item in listing["items"]:
            handle("MODIFIED", item)
        return str(listing["metadata"]["resourceVersion"])

    seen_version = await relist()
    while finished < total:
        run.requests["WATCH workloads"] += 1
        try:
            async for event in kube.watch(WORKLOADS, seen_version, timeout_seconds=60):
                obj = event["object"]
                seen_version = obj["metadata"].get("resourceVersion", seen_version)
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):  # not BOOKMARK
                    handle(event["type"], obj)
                if finished >= total:
                    break
        except KubeError as error:
            if error.status != 410:
                raise
            seen_version = await relist()
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


async def finish(kube: Kube, run: Run, key: str, admission: int, after: float) -> None:
    """Mark the Workload Finished ``after`` seconds after its admission number ``admission``
    was seen, as Kueue's runner does: from the watched version (its informer cache), guarded
    by that resourceVersion; a conflict reads it afresh. A timer whose admission ended
    (evicted meanwhile, perhaps admitted again) does nothing: the new admission has its own."""
    due = time.monotonic() + after
    await asyncio.sleep(after)
    run.late.append(time.monotonic() - due)
    current = run.latest[key]
    for _attempt in range(5):
        if run.records[key].admissions != admission:
            run.stale_timers += 1
            return
        if not _true(current, "Admitted") or _true(current, "Evicted"):
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
            run.requests["PATCH workloads/status"] += 1
            await kube.patch(WORKLOADS, m["name"], body, m["namespace"], subresource="status")
            run.finish_rtt.append(time.monotonic() - sent)
            return
        except KubeError as error:
            if error.status != 409:
                raise
        run.requests["GET workloads"] += 1
        current = await kube.get(WORKLOADS, m["name"], m["namespace"])


async def requeue(kube: Kube, run: Run, obj: Obj) -> None:
    """The job controller's part on eviction: take the admission back (Kueue's runner
    unsets the quota reservation)."""
    m = obj["metadata"]
    key = f"{m['namespace']}/{m['name']}"
    conditions = [
        c for c in obj["status"]["conditions"] if c["type"] not in ("QuotaReserved", "Admitted")
    ]
    conditions.append(_new_condition("QuotaReserved", "False", "Pending", "Evicted by the runner"))
    conditions.append(_new_condition("Admitted", "False", "Evicted", "Evicted by the runner"))
    body = {
        "metadata": {"resourceVersion": m["resourceVersion"]},
        "status": {"admission": None, "conditions": conditions},
    }
    try:
        run.requests["PATCH workloads/status"] += 1
        with contextlib.suppress(KubeError):  # a newer version: the watch brings it back
            await kube.patch(WORKLOADS, m["name"], body, m["namespace"], subresource="status")
    finally:
        run.requeuing.discard(key)


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
    for name in (
        "topogate_admission_cycle_seconds_count",
        "topogate_admission_cycle_seconds_sum",
        "topogate_events_dropped_total",  # Events the recorder's queue could not hold
    ):
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


# --- the sides ------------------------------------------------------------------------------


def class_table(run: Run, sets: list[tuple[Any, ...]] = SETS) -> dict[str, dict[str, int]]:
    """Per class, as Kueue's recorder summarises: count of all Workloads seen, mean time to
    admission over all of them (0 ms for one never admitted) in integer division; and for
    reading, p50/p90 over the admitted ones and how many never were."""
    by_class: dict[str, list[Record]] = defaultdict(list)
    for rec in run.records.values():
        by_class[rec.cls].append(rec)
    table = {}
    for cls in [s[0] for s in sets]:
        records = by_class.get(cls, [])
        if not records:
            continue
        admitted = sorted(r.tta_ms for r in records if r.admissions)
        table[cls] = {
            "mean": sum(r.tta_ms for r in records) // len(records),
            "p50": admitted[len(admitted) // 2] if admitted else 0,
            "p90": admitted[max(0, int(len(admitted) * 0.9) - 1)] if admitted else 0,
            "n": len(records),
            "unadmitted": len(records) - len(admitted),
            "evictions": sum(r.evictions for r in records),
        }
    return table


def _quantile(values: list[float], q: float) -> float:
    return sorted(values)[int(q * (len(values) - 1))] if values else 0.0


def stalls(run: Run, until: float) -> tuple[list[int], int]:
    """Admissions per 10 s window, and the windows with none while work was waiting."""
    windows = Counter(int((t - run.started) // 10) for t in run.admissions)
    count = int((until - run.started) // 10) + 1
    per_window = [windows.get(i, 0) for i in range(count)]
    created = Counter(int((t - run.started) // 10) for t in run.created)
    zero = made = admitted = 0
    for i, value in enumerate(per_window):
        made += created.get(i, 0)
        admitted += value
        if value == 0 and made - admitted > 0:
            zero += 1
    return per_window, zero


async def drive(
    plane: ControlPlane,
    objs: list[Obj],
    cohorts: int,
    fraction: float,
    churn: Churn,
    seconds: float,
    nodes_made: bool = False,
    scenario: Scenario = TAS,
    exited: Callable[[], str | None] = lambda: None,
) -> Run:
    """Create the scenario's Workloads and finish each at its runtime, until all are done
    (or ``seconds``); ``exited`` says why the controller has stopped (None: it runs), checked
    every 10 s so a controller that died ends the sitting at once, not at its timeout."""
    kube = await Kube.connect(str(plane.kubeconfig), qps=None)
    run = Run(started=time.monotonic())
    for obj in objs:
        if obj["kind"] == "ClusterQueue":
            run.checker.add_cluster_queue(obj)
        elif obj["kind"] == "Node":
            run.checker.add_node(obj)
    sets = counted(fraction, scenario.sets)
    total = cohorts * scenario.queues_per_cohort * sum(s[1] for s in sets)
    nodes = [o["metadata"]["name"] for o in objs if o["kind"] == "Node"]

    async def progress() -> None:
        while True:
            await asyncio.sleep(10)
            why = exited()
            if why is not None:
                raise ControllerStopped(f"the controller stopped during the scenario: {why}")
            admitted = sum(1 for r in run.records.values() if r.admissions)
            done = sum(1 for r in run.records.values() if r.finished)
            print(
                f"  {time.monotonic() - run.started:5.0f} s: created {len(run.created)}/{total}, "
                f"admitted {admitted}, finished {done}, violations {len(run.checker.violations)}",
                file=sys.stderr,
                flush=True,
            )

    reporter = asyncio.create_task(progress())
    churner = None
    try:
        recorder = asyncio.create_task(record(kube, run, total))
        await asyncio.sleep(0.2)  # the watch is open before the first create
        if churn.percent > 0 and churn.pods:
            churner = asyncio.create_task(churn_pods(kube, run, churn, nodes))
        await generate(kube, run, objs, cohorts, sets, nodes_made, scenario.queues_per_cohort)
        # Ends with the recorder (every Workload finished), at the timeout, or when the
        # controller stopped (the reporter's ControllerStopped).
        await asyncio.wait_for(_first(recorder, reporter), seconds)
        if churner is not None:
            await churner  # ends after its round once the scenario is done
    finally:
        reporter.cancel()
        if churner is not None:
            churner.cancel()
        await kube.close()
    return run


class ControllerStopped(RuntimeError):
    """The controller's process exited while the scenario ran."""


async def _first(*tasks: asyncio.Task[None]) -> None:
    """Wait for the first of ``tasks`` to end, and raise what it raised."""
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        task.result()


def _exited(proc: subprocess.Popen[bytes], log: Path) -> Callable[[], str | None]:
    def why() -> str | None:
        if proc.poll() is None:
            return None
        tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
        return f"exit code {proc.returncode}; the end of {log}:\n" + "\n".join(tail)

    return why


def topogate_side(
    directory: Path,
    cohorts: int,
    fraction: float,
    budget: tuple[int, int],
    churn: Churn,
    timeout: float,
    racks: int = RACKS,
    per_rack: int = NODES_PER_RACK,
    pods_per_node: int = 0,
    scenario: Scenario = TAS,
) -> dict[str, Any]:
    plane = ControlPlane.start(directory / "plane", scheduler=False)
    try:
        install_crds(plane.kubeconfig)  # as envtest does before Kueue's runner starts
        wait_served(plane, time.monotonic() + 120)
        objs = cluster_objects(cohorts, racks, per_rack, scenario)
        nodes = [o["metadata"]["name"] for o in objs if o["kind"] == "Node"]
        if pods_per_node:  # the nodes and their pods before serve starts: the churn's base
            create_all(plane.kubeconfig, [o for o in objs if o["kind"] == "Node"])
            asyncio.run(bind_pods(plane.kubeconfig, nodes, pods_per_node, churn))
        log = directory / "serve.log"
        others0 = {n: proc_cpu(pid) for n, pid in plane.pids.items()}
        self0 = resource.getrusage(resource.RUSAGE_SELF)
        requests0 = api_requests(plane.metrics_text())
        qps, burst = budget
        extra = [
            "--lease-duration=60",
            "--renew-deadline=45",
            f"--kube-api-qps={qps}",
            f"--kube-api-burst={burst}",
        ]
        with serving(plane.kubeconfig, log, extra=extra) as proc:
            # serve starts as the generator starts, as Kueue's runner starts minimalkueue.
            started = time.monotonic()
            # serve dying raises ControllerStopped: the sitting is void (its log is kept).
            run = asyncio.run(
                drive(
                    plane,
                    objs,
                    cohorts,
                    fraction,
                    churn,
                    timeout,
                    nodes_made=pods_per_node > 0,
                    scenario=scenario,
                    exited=_exited(proc, log),
                )
            )
            wall = time.monotonic() - started
            cpu = proc_cpu(proc.pid)  # the whole process, from its start
            rss = proc_peak_rss_mb(proc.pid)
            _, port = ports(log, time.monotonic() + 10)
            after = scrape(port)
            self1 = resource.getrusage(resource.RUSAGE_SELF)
            requests = api_requests(plane.metrics_text()) - requests0
            # Where the machine's two cores went: a loaded API server slows both sides' writes.
            others = {n: proc_cpu(pid) - others0[n] for n, pid in plane.pids.items()}
            others["runner"] = (self1.ru_utime + self1.ru_stime) - (self0.ru_utime + self0.ru_stime)
        per_window, zero = stalls(run, run.started + wall)
        cycles = after["topogate_admission_cycle_seconds_count"]
        cycle_sum = after["topogate_admission_cycle_seconds_sum"]
        first_created = min(run.created, default=0.0)
        controller = requests - run.requests
        return {
            "nodes": racks * per_rack if scenario.topology else 0,
            "first_admission": min(run.admissions, default=first_created) - first_created,
            "wall": wall,
            "cpu": cpu,
            "rss": rss,
            "cpu_others": others,
            "api_requests": dict(requests.most_common()),
            "api_requests_runner": dict(run.requests.most_common()),
            "api_requests_controller": dict(controller.most_common()),
            "classes": class_table(run, scenario.sets),
            "invariants": {
                "admissions_checked": run.checker.checked,
                "violations": run.checker.violations,
                "violation_holders": run.checker.details,
            },
            "runner": {
                "finish_write_p50_ms": 1000 * _quantile(run.finish_rtt, 0.5),
                "finish_write_p90_ms": 1000 * _quantile(run.finish_rtt, 0.9),
                "timer_late_p50_ms": 1000 * _quantile(run.late, 0.5),
                "timer_late_p90_ms": 1000 * _quantile(run.late, 0.9),
                "stale_timers": run.stale_timers,
            },
            "cycles": cycles,
            "events_dropped": after["topogate_events_dropped_total"],
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


def wait_served(plane: ControlPlane, deadline: float) -> None:
    """Until every kind the scenario uses is served (envtest waits for its CRDs as well)."""
    kinds = [WORKLOADS, *BY_KIND.values()]
    while True:
        try:
            for kind in kinds:
                plane.request("GET", kind.path(None) + "?limit=1")
            return
        except (OSError, ValueError) as error:
            if time.monotonic() > deadline:
                raise SystemExit(f"the scenario's kinds are not served: {error}") from None
            time.sleep(0.5)


def kueue_dir(version: str = KUEUE_VERSIONS["tas"]) -> Path:
    """Kueue's runner, minimalkueue (both budgets) and source, built or found in the cache."""
    out = subprocess.run(
        ["bash", str(ROOT / "hack/kueue/build.sh")],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "KUEUE_VERSION": version},
    )
    return Path(out.stdout.strip().splitlines()[-1])


def _descendants(pid: int) -> dict[int, str]:
    """The process's descendants: pid -> command name."""
    children: dict[int, list[int]] = defaultdict(list)
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        children[int(rest.split()[1])].append(int(entry.name))
        names[int(entry.name)] = name
    out: dict[int, str] = {}
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        out[child] = names[child]
        todo.extend(children.get(child, []))
    return out


def _kubeconfig_get(kubeconfig: Path, path: str, scratch: Path) -> str:
    """GET ``path`` from the API server of an envtest kubeconfig (client certificate or token)."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a local throwaway API server
    headers = {}
    if "client-certificate-data" in user:
        cert, key = scratch / "client.crt", scratch / "client.key"
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        context.load_cert_chain(cert, key)
    if user.get("token"):
        headers["Authorization"] = f"Bearer {user['token']}"
    request = urllib.request.Request(cluster["server"].rstrip("/") + path, headers=headers)
    with urllib.request.urlopen(request, timeout=10, context=context) as answer:
        return str(answer.read().decode())


# --- a whole sitting or a void one ---------------------------------------------------------


@dataclass(frozen=True)
class RunnerEnd:
    """What Kueue's runner left behind: enough to tell a whole sitting from one cut short."""

    code: int  # the runner's exit code
    expected: int  # Workloads its generator config makes
    created: int  # Workloads the check's watch saw on its API server
    recorded: int | None  # rows of its recorder's wlStates.csv (None: not written)
    finished: int  # Workloads finished, by its recorder's rows or by the check's watch
    minimal_died: bool  # minimalkueue ended without the runner stopping it


def expected_workloads(config: dict[str, Any]) -> int:
    """Workloads a Kueue generator config makes (cohorts x queues x workloads sets' counts)."""
    return sum(
        int(cohort.get("count", 1))
        * int(queues.get("count", 1))
        * sum(int(wl_set.get("count", 1)) for wl_set in queues.get("workloadsSets") or [])
        for cohort in config.get("cohorts") or []
        for queues in cohort.get("queuesSets") or []
    )


def _csv_rows(path: Path) -> list[dict[str, str]] | None:
    if not path.is_file():
        return None
    with open(path) as rows:
        return list(csv.DictReader(rows))


def _yaml_or_empty(path: Path) -> dict[str, Any]:
    """A YAML file the runner writes at its end (absent when it failed: no figures)."""
    if not path.is_file():
        return {}
    loaded = yaml.safe_load(path.read_text())
    return loaded if isinstance(loaded, dict) else {}


def minimalkueue_died(runner_log: str) -> bool:
    """The runner logs "Stop the command" as it stops minimalkueue and "Cmd ended" when the
    process ends: an end with no stop before it is minimalkueue dying on its own."""
    ended = runner_log.find("Cmd ended")
    stopped = runner_log.find("Stop the command")
    return ended >= 0 and not 0 <= stopped < ended


def runner_end(
    code: int,
    expected: int,
    checker: Checker,
    wl_states: Path,
    runner_log: str,
    timed_out: bool = False,
) -> RunnerEnd:
    rows = _csv_rows(wl_states)
    finished = set(checker.finished)
    # A Finished event the recorder dropped (its channel full) leaves 0 ms to finish: the
    # check's watch, which saw it, counts it too.
    for row in rows or []:
        if int(row.get("ms to finish") or 0) > 0:
            finished.add(f"{row['namespace']}/{row['name']}")
    return RunnerEnd(
        code=code,
        expected=expected,
        created=len(checker.seen),
        recorded=None if rows is None else len(rows),
        finished=len(finished),
        minimal_died=minimalkueue_died(runner_log) and not timed_out,
    )


def void_reasons(end: RunnerEnd) -> list[str]:
    """Why Kueue's side of a sitting is not a measurement (empty: it is): the runner failed,
    stopped before every Workload was created and finished, its recorder missed Workloads
    the API server had, or minimalkueue died. Its figures would then be a fraction of the
    scenario's, and a ratio against them says nothing."""
    reasons = []
    if end.code != 0:
        reasons.append(f"Kueue's runner exited with code {end.code}")
    if end.minimal_died:
        reasons.append("minimalkueue ended before the runner stopped it (it died)")
    if end.recorded is None:
        reasons.append("the runner wrote no wlStates.csv (no per-Workload record)")
    elif end.recorded < end.expected:
        reasons.append(
            f"the runner's recorder has {end.recorded} of the {end.expected} Workloads "
            "(it stopped before all were created and finished)"
        )
    if end.created < end.expected:
        reasons.append(f"{end.created} of the {end.expected} Workloads were created")
    if end.recorded is not None and end.recorded < end.created:
        reasons.append(
            f"the recorder's {end.recorded} Workloads are short of the {end.created} created"
        )
    if end.finished < end.expected:
        reasons.append(f"{end.finished} of the {end.expected} Workloads finished")
    return reasons


def keep_logs(stem: str, files: list[Path], root: Path | None = None) -> Path:
    """The sitting's logs, gzipped, in ``root``/``stem`` (default ~/.cache/topogate/bench-logs,
    outside the repository): the temporary directory holding them goes with the sitting."""
    target = (root or Path.home() / ".cache/topogate/bench-logs") / stem
    target.mkdir(parents=True, exist_ok=True)
    for path in files:
        if path.is_file():
            with open(path, "rb") as source, gzip.open(target / f"{path.name}.gz", "wb") as sink:
                shutil.copyfileobj(source, sink)
    return target


def sitting_logs(directory: Path) -> list[Path]:
    """The runner's log, minimalkueue's (the runner writes them to its output directory)
    and serve's, as a sitting's temporary directory holds them."""
    return [
        directory / "kueue-runner.log",
        *sorted((directory / "kueue").glob("*.log")),
        directory / "serve.log",
    ]


KUEUE_WORKLOADS = Resource("kueue.x-k8s.io/v1beta2", "workloads")
KUEUE_CLUSTER_QUEUES = Resource("kueue.x-k8s.io/v1beta2", "clusterqueues", namespaced=False)


async def check_kueue(kubeconfig: Path, stop: threading.Event, checker: Checker) -> None:
    """Kueue's admissions through the same checker, from a watch on its API server: its nodes
    (all made before the first queue) when the first admission comes, all ClusterQueues when
    an admission first names one not yet read."""
    kube = await Kube.connect(str(kubeconfig), qps=None)
    nodes_listed = False  # once: large-scale has no nodes, an empty list must not be re-read

    async def prepare(obj: Obj) -> None:
        nonlocal nodes_listed
        admission = (obj.get("status") or {}).get("admission")
        key = f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
        if admission and key not in checker.held:
            if not nodes_listed and not checker.allocatable:
                for node in (await kube.list(NODES))["items"]:
                    checker.add_node(node)
                nodes_listed = True
            queue = admission.get("clusterQueue")
            if queue and queue not in checker.quotas:
                # Every ClusterQueue there is, not only the one named: a cohort's lendable
                # quota is its members' together, and with a member missing a valid borrow
                # looks like a violation (large-scale: 100 queues a cohort).
                for item in (await kube.list(KUEUE_CLUSTER_QUEUES))["items"]:
                    checker.add_cluster_queue(item)

    try:
        listing = await kube.list(KUEUE_WORKLOADS)
        for item in listing["items"]:  # a restart after an error: the state as it is now
            await prepare(item)
            checker.observe(item, f"{item['metadata']['namespace']}/{item['metadata']['name']}")
        version = listing["metadata"]["resourceVersion"]
        while not stop.is_set():
            async for event in kube.watch(KUEUE_WORKLOADS, version, timeout_seconds=5):
                obj = event["object"]
                version = obj["metadata"].get("resourceVersion", version)
                if event["type"] not in ("ADDED", "MODIFIED", "DELETED"):  # a BOOKMARK
                    continue
                key = f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
                if event["type"] == "DELETED":
                    checker.observe(None, key)
                    continue
                await prepare(obj)
                checker.observe(obj, key)
                if stop.is_set():
                    break
    finally:
        await kube.close()


def kueue_side(
    kueue: Path,
    directory: Path,
    cohorts: int,
    fraction: float,
    budget: tuple[int, int],
    timeout: float,
    scenario: Scenario = TAS,
) -> dict[str, Any]:
    checkout = kueue / "src"
    binary = KUEUE_BINARIES[budget]
    config_path = LARGE_SCALE_CONFIG if scenario.name == "large-scale" else TAS_CONFIG
    config = yaml.safe_load((checkout / config_path).read_text())
    if scenario.name == "large-scale" and large_scale(config) != scenario:
        raise SystemExit(f"{checkout / config_path} is not the scenario topogate's side runs")
    config["cohorts"][0]["count"] = cohorts
    for queues in config["cohorts"][0]["queuesSets"]:
        for workloads in queues["workloadsSets"]:
            workloads["count"] = max(1, round(workloads["count"] * fraction))
    path = directory / "generator.yaml"
    path.write_text(yaml.safe_dump(config))
    out = directory / "kueue"
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=directory))
    # The runner stops its API server before it exits: sample the API server's counters and
    # the processes' CPU every 2 s, the last sample stands for the end.
    sample: dict[str, Any] = {"requests": Counter(), "cpu": {}}
    stop = threading.Event()
    started = time.monotonic()
    with open(directory / "kueue-runner.log", "wb") as log:
        proc = subprocess.Popen(
            ["bash", str(ROOT / "hack/kueue_side.sh"), "run", str(path), str(out), binary],
            env={
                **os.environ,
                "KUEUE_DIR": str(kueue),
                # As Kueue's Makefile: TAS controllers for tas only.
                "KUEUE_TAS": "true" if scenario.topology else "false",
            },
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def sampler() -> None:
            while not stop.wait(2):
                cpu: dict[str, float] = {}
                for pid, name in _descendants(proc.pid).items():
                    with contextlib.suppress(OSError, ValueError, IndexError):
                        cpu[name] = cpu.get(name, 0.0) + proc_cpu(pid)
                # A process that has exited keeps its last figure (the runner stops its API
                # server before the last sample).
                for name, value in cpu.items():
                    sample["cpu"][name] = max(value, sample["cpu"].get(name, 0.0))
                if (out / "kubeconfig").exists():
                    # From when the API server is up with its CRDs, as on topogate's side.
                    sample.setdefault("cpu0", cpu)
                    try:
                        text = _kubeconfig_get(out / "kubeconfig", "/metrics", scratch)
                        sample["requests"] = api_requests(text)
                    except (OSError, ValueError, KeyError, ssl.SSLError) as error:
                        sample["error"] = repr(error)

        checker = Checker()
        checking: list[BaseException] = []

        def check() -> None:
            deadline = time.monotonic() + 300
            while not (out / "kubeconfig").exists():
                if stop.wait(0.2) or time.monotonic() > deadline:
                    return
            # Until the runner ends: an error (its API server not answering yet, a watch too
            # old) restarts the check from a fresh list, and is counted.
            while not stop.is_set():
                try:
                    asyncio.run(check_kueue(out / "kubeconfig", stop, checker))
                except (OSError, KubeError, TimeoutError, ValueError, KeyError) as error:
                    if not stop.is_set():  # the runner stops its API server as it ends
                        checking.append(error)
                        stop.wait(1)

        thread = threading.Thread(target=sampler, daemon=True)
        thread.start()
        checker_thread = threading.Thread(target=check, daemon=True)
        checker_thread.start()
        timed_out = False
        try:
            code = proc.wait(timeout + 120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            timed_out = True
            try:
                code = proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                code = proc.wait(30)
        finally:
            stop.set()
            thread.join()
            checker_thread.join(30)
    wall = time.monotonic() - started
    runner_log = (directory / "kueue-runner.log").read_text(errors="replace")
    end = runner_end(
        code, expected_workloads(config), checker, out / "wlStates.csv", runner_log, timed_out
    )
    void = void_reasons(end)
    if timed_out:
        void.insert(0, f"Kueue's runner did not end within {timeout + 120:.0f} s")
    if void:
        print("Kueue's side is void: " + "; ".join(void), file=sys.stderr)
        if code != 0:
            print(runner_log[-3000:], file=sys.stderr)
    summary = _yaml_or_empty(out / "summary.yaml")
    stats = _yaml_or_empty(out / f"{binary}.stats.yaml")
    classes: dict[str, dict[str, Any]] = {}
    for name, values in (summary.get("workloadClasses") or {}).items():
        classes[name] = {
            "mean": float(values["averageTimeToAdmissionMs"]),
            "n": values.get("count", 0),
            "evictions": values.get("totalEvictions", 0),
        }
    # Per Workload (its wlStates.csv): p50/p90 over the admitted, and how many never were.
    per_class: dict[str, list[int]] = defaultdict(list)
    for state in _csv_rows(out / "wlStates.csv") or []:
        per_class[state["class name"]].append(int(state["ms to admitted"]))
    for name, values in per_class.items():
        admitted = sorted(v for v in values if v > 0)
        row = classes.setdefault(name, {"mean": 0.0, "n": len(values)})
        row["unadmitted"] = len(values) - len(admitted)
        row["p50"] = admitted[len(admitted) // 2] if admitted else 0
        row["p90"] = admitted[max(0, int(len(admitted) * 0.9) - 1)] if admitted else 0
    cpu = (float(stats.get("userMs", 0)) + float(stats.get("sysMs", 0))) / 1000
    # The budget minimalkueue says it runs at (its log's "K8S Client" line): proof of the build.
    said = None
    for log_file in out.glob(f"{binary}.*.log"):
        match = re.search(r'K8S Client.*"qps": ([0-9.]+), "burst": ([0-9]+)', log_file.read_text())
        if match:
            said = [float(match[1]), int(match[2])]
    if said != [float(budget[0]), budget[1]] and not void:  # a void side may not have said
        raise SystemExit(f"{binary} says its client budget is {said}, not {budget}")
    cpu0 = sample.get("cpu0", {})
    others = {
        name: value - cpu0.get(name, 0.0)
        for name, value in sample["cpu"].items()
        if not name.startswith("minimalkueue")
    }
    return {
        "void": void,  # why these figures are not the sitting's (empty: they are)
        "runner_end": {
            "exit_code": end.code,
            "expected": end.expected,
            "created": end.created,
            "recorded": end.recorded,
            "finished": end.finished,
            "minimalkueue_died": end.minimal_died,
        },
        "binary": binary,
        "client_budget_logged": said,
        "wall": float(stats.get("wallMs", wall * 1000)) / 1000,
        "cpu": cpu,
        "rss": float(stats.get("maxrss", 0)) / 1024,
        "cpu_others": others,
        "api_requests": dict(sample["requests"].most_common()),
        "classes": classes,
        "dropped_workload_events": summary.get("droppedWorkloadEvents", 0),
        "invariants": {
            "admissions_checked": checker.checked,
            "placement_unverifiable": checker.unplaceable,
            "violations": checker.violations,
            "violation_holders": checker.details,
            "checker_restarts": [repr(error) for error in checking],
        },
        "metrics_error": sample.get("error"),
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


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


# --- the report -----------------------------------------------------------------------------


def _requests_line(requests: dict[str, int], top: int = 8) -> str:
    total = sum(requests.values())
    shown = ", ".join(f"{what} {count}" for what, count in list(requests.items())[:top])
    return f"{total} ({shown})"


def report(result: dict[str, Any], sets: list[tuple[Any, ...]] = SETS) -> None:
    ours, theirs = result["topogate"], result["kueue"]
    qps, burst = result["budget"]
    print(
        f"scenario {result['scenario']}, {result['workloads']} Workloads, client budget "
        f"QPS {qps} / burst {burst} on both sides; {result['uptime_before']}"
    )
    print("  (a shared machine: loaded-machine figures; compare within a sitting)")
    print(
        f"topogate serve: wall {ours['wall']:.0f} s, CPU {ours['cpu']:.1f} s (whole process), "
        f"peak RSS {ours['rss']:.0f} MB"
    )
    print(
        f"  first admission {ours['first_admission'] * 1000:.0f} ms after the first create; "
        f"cycles {ours['cycles']:.0f}, mean {ours['cycle_mean_ms']:.1f} ms"
    )
    marker = ours["speed_marker_ms"]
    print(f"  machine speed marker before and after this side: {marker[0]:.0f}, {marker[1]:.0f} ms")
    others = ", ".join(f"{name} {cpu:.1f} s" for name, cpu in ours["cpu_others"].items())
    print(f"  CPU of the rest on this side: {others}")
    print("  API requests: " + _requests_line(ours["api_requests"]))
    print("    of them serve's: " + _requests_line(ours["api_requests_controller"]))
    inv = ours["invariants"]
    print(
        f"  invariants: {inv['admissions_checked']} admissions checked, "
        f"{len(inv['violations'])} violations"
    )
    for line in inv["violations"][:10]:
        print(f"    {line}")
    churn = ours["churn"]
    if churn["rounds"]:
        print(
            f"  pod churn: {ours['pods']} bound pods, {churn['percent']:g}% replaced every "
            f"{churn['interval']:g} s: {churn['replaced']} replaced in {churn['rounds']} rounds "
            f"(a round took {churn['round_p50']:.2f} s median, {churn['round_max']:.2f} s max)"
        )
    print(f"  admissions per 10 s: {ours['per_window']}")
    r = ours["runner"]
    print(
        f"  the runner's Finished write took {r['finish_write_p50_ms']:.0f} ms median, "
        f"{r['finish_write_p90_ms']:.0f} ms p90; its timers woke {r['timer_late_p50_ms']:.0f} ms "
        f"late median, {r['timer_late_p90_ms']:.0f} ms p90; {r['stale_timers']} stale timers "
        "voided (evicted, admitted again)"
    )
    print(f"  10 s windows with no admission while work waited: {ours['zero_windows']}")
    if theirs is not None:
        print(
            f"Kueue {theirs['binary']}: wall {theirs['wall']:.0f} s, CPU {theirs['cpu']:.1f} s "
            f"(whole process), peak RSS {theirs['rss']:.0f} MB; dropped workload events "
            f"{theirs['dropped_workload_events']}"
        )
        marker = theirs["speed_marker_ms"]
        print(f"  machine speed marker before and after: {marker[0]:.0f}, {marker[1]:.0f} ms")
        others = ", ".join(f"{name} {cpu:.1f} s" for name, cpu in theirs["cpu_others"].items())
        print(
            f"  CPU of the rest on this side (from its API server's start, 2 s samples): {others}"
        )
        inv = theirs["invariants"]
        print(
            f"  invariants: {inv['admissions_checked']} admissions checked (placement of "
            f"{inv['placement_unverifiable']} not verifiable: shared hostname labels), "
            f"{len(inv['violations'])} violations; the check restarted "
            f"{len(inv['checker_restarts'])} times"
        )
        for line in inv["violations"][:10]:
            print(f"    {line}")
        print("  API requests (its runner's included): " + _requests_line(theirs["api_requests"]))
        ratios = result["ratios"]
        print(
            f"  ratios topogate/Kueue: controller CPU {ratios['cpu']:.2f}, API server CPU "
            f"{ratios['apiserver_cpu']:.2f}, API requests {ratios['api_requests']:.2f}, "
            f"peak RSS {ratios['rss']:.2f}"
        )
    print(
        f"{'class':24} {'topogate mean ms':>17} {'p50':>7} {'p90':>7} {'unadm':>5}"
        + (f" {'Kueue mean ms':>14} {'p50':>7} {'unadm':>5} {'ratio':>6}" if theirs else "")
    )
    for cls in [s[0] for s in sets]:
        row = ours["classes"].get(cls)
        if row is None:
            continue
        line = (
            f"{cls:24} {row['mean']:17.0f} {row['p50']:7.0f} {row['p90']:7.0f} "
            f"{row['unadmitted']:5.0f}"
        )
        if theirs and cls in theirs["classes"]:
            k = theirs["classes"][cls]
            ratio = result["ratios"]["classes"].get(cls, float("nan"))
            line += (
                f" {k['mean']:14.0f} {k.get('p50', 0):7.0f} {k.get('unadmitted', 0):5.0f}"
                f" {ratio:6.2f}"
            )
        print(line)


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    def ratio(a: float, b: float) -> float:
        return a / b if b else float("nan")

    return {
        "cpu": ratio(ours["cpu"], theirs["cpu"]),
        "rss": ratio(ours["rss"], theirs["rss"]),
        "apiserver_cpu": ratio(
            ours["cpu_others"].get("kube-apiserver", 0.0),
            theirs["cpu_others"].get("kube-apiserver", 0.0),
        ),
        "api_requests": ratio(
            sum(ours["api_requests"].values()), sum(theirs["api_requests"].values())
        ),
        "classes": {
            cls: ratio(row["mean"], theirs["classes"][cls]["mean"])
            for cls, row in ours["classes"].items()
            if cls in theirs["classes"]
        },
    }


def parse_budget(text: str) -> tuple[int, int]:
    try:
        qps, burst = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--budget {text!r}: QPS/BURST, e.g. 50/100") from None
    if qps <= 0 or burst <= 0:
        raise argparse.ArgumentTypeError(f"--budget {text!r}: both must be positive")
    return qps, burst


def commit() -> str:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip()


def sitting(
    args: argparse.Namespace,
    budget: tuple[int, int],
    scenario: Scenario,
    version: str,
    cohorts: int,
    fraction: float,
) -> dict[str, Any]:
    """One pair at one client budget: Kueue's side first (with --kueue), then topogate's;
    prints the figures, writes the pair's file and returns its result."""
    sets = counted(fraction, scenario.sets)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    workloads = cohorts * scenario.queues_per_cohort * sum(s[1] for s in sets)
    if scenario is TAS:
        name = f"tas-c{cohorts}" + (f"-f{fraction:g}" if fraction != 1 else "")
    else:
        name = f"large-scale-c{cohorts}" + (f"-s{fraction:g}" if fraction != 1 else "")
    result: dict[str, Any] = {
        "scenario": name,
        "kueue_release": version,  # of the generator config (and Kueue's side with --kueue)
        "workloads_per_queue": {s[0]: s[1] for s in sets},
        "workloads": workloads,
        "budget": list(budget),
        "started": stamp,
        "commit": commit(),
        "command": " ".join(sys.argv),
        "uptime_before": uptime(),
        "kueue": None,
        "topogate": None,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    qps, burst = budget
    # The file names the scenario and, for large-scale, the Kueue release it comes from.
    release = "" if scenario is TAS else f"-kueue-{version}"
    path = args.results / f"{result['scenario']}{release}-{qps}-{burst}-{stamp}.json"
    with tempfile.TemporaryDirectory() as tmp:
        if args.kueue:
            kueue = (args.kueue_dir or kueue_dir(version)).resolve()
            result["kueue_version"] = kueue.name
            before = speed_marker()
            theirs = kueue_side(kueue, Path(tmp), cohorts, fraction, budget, args.timeout, scenario)
            theirs["speed_marker_ms"] = (before, speed_marker())
            theirs["uptime_after"] = uptime()
            result["kueue"] = theirs
            if theirs["void"]:
                # No pair to compare with: serve's side is not run (the machine is spared).
                result["void"] = "Kueue's side: " + "; ".join(theirs["void"])
        if "void" not in result:
            churn = Churn(args.churn, args.churn_interval)
            before = speed_marker()
            try:
                ours = topogate_side(
                    Path(tmp),
                    cohorts,
                    fraction,
                    budget,
                    churn,
                    args.timeout,
                    args.racks,
                    args.nodes_per_rack,
                    args.pods_per_node,
                    scenario,
                )
                ours["speed_marker_ms"] = (before, speed_marker())
                result["topogate"] = ours
            except ControllerStopped as stopped:
                result["void"] = f"serve's side: {stopped}"
        if "void" in result or violations(result):
            result["logs"] = str(keep_logs(path.stem, sitting_logs(Path(tmp))))
    result["uptime_after"] = uptime()
    if "void" in result:
        print(f"the sitting is void, no figures: {result['void']}", file=sys.stderr)
    else:
        if result["kueue"] is not None:
            result["ratios"] = ratios(result["topogate"], result["kueue"])
        report(result, scenario.sets)
    if "logs" in result:
        print(f"logs kept in {result['logs']}")
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"written to {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return result


def violations(result: dict[str, Any]) -> int:
    """Invariant violations on both sides of a sitting's result."""
    return sum(
        len(result[side]["invariants"]["violations"])
        for side in ("topogate", "kueue")
        if result.get(side) is not None
    )


def main() -> None:
    # A SIGTERM (timeout(1), Ctrl-C's cousin) unwinds, so the control plane is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenario",
        choices=["tas", "large-scale"],
        default="tas",
        help="Kueue's configs/tas (default) or configs/large-scale (1,000 queues, quota only)",
    )
    parser.add_argument(
        "--cohorts",
        type=int,
        help="tas: 5 (default), Kueue's 15,000 Workloads; large-scale: 10 (default), 1,000 queues",
    )
    parser.add_argument(
        "--fraction", type=float, default=1.0, help="tas: scale each set's count (1: Kueue's)"
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="large-scale: scale each workloads set's count per queue (35 small, 11 medium, 4 "
        "large), rounded, at least 1; queues, quotas, intervals and runtimes stay Kueue's",
    )
    parser.add_argument(
        "--kueue-version",
        help="Kueue release of the generator config and of Kueue's side (default: v0.17.0 for "
        "tas, v0.19.0 for large-scale, the first with configs/large-scale)",
    )
    parser.add_argument(
        "--budget",
        type=parse_budget,
        action="append",
        help="client QPS/BURST of both controllers (default 50/100, minimalkueue's; Kueue's "
        "side also runs at 300/500); given twice, both budgets' pairs run in this sitting, one "
        "after the other, and their ratios are printed together",
    )
    parser.add_argument("--kueue", action="store_true", help="also run Kueue's side, first")
    parser.add_argument(
        "--kueue-dir",
        type=Path,
        help="hack/kueue/build.sh's output (default: build it or find it in the cache)",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800, help="seconds per side (Kueue's runner: 30m)"
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
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="directory for the sitting's JSON file (default: %(default)s)",
    )
    args = parser.parse_args()
    version = args.kueue_version or KUEUE_VERSIONS[args.scenario]
    if args.scenario == "tas":
        if args.scale != 1.0:
            parser.error("--scale is large-scale's; tas scales with --fraction")
        scenario, fraction, cohorts = TAS, args.fraction, args.cohorts or 5
    else:
        if args.fraction != 1.0 or (args.racks, args.nodes_per_rack, args.pods_per_node) != (
            RACKS,
            NODES_PER_RACK,
            0,
        ):
            parser.error(
                "large-scale has no nodes: --fraction, --racks, --nodes-per-rack and "
                "--pods-per-node are tas's; it scales with --scale"
            )
        if args.scale <= 0:
            parser.error(f"--scale {args.scale:g}: must be positive")
        kueue_path = (args.kueue_dir or kueue_dir(version)).resolve() if args.kueue else None
        scenario = large_scale(large_scale_config(version, kueue_path))
        fraction, cohorts = args.scale, args.cohorts or 10
    budgets: list[tuple[int, int]] = list(dict.fromkeys(args.budget or [(50, 100)]))
    for budget in budgets:
        if args.kueue and budget not in KUEUE_BINARIES:
            parser.error(
                f"--budget {budget[0]}/{budget[1]}: Kueue's side runs at "
                + " or ".join(f"{q}/{b}" for q, b in KUEUE_BINARIES)
            )
    if args.kueue and (args.racks, args.nodes_per_rack, args.pods_per_node) != (
        RACKS,
        NODES_PER_RACK,
        0,
    ):
        parser.error("--racks, --nodes-per-rack and --pods-per-node change topogate's side only")
    results = [sitting(args, b, scenario, version, cohorts, fraction) for b in budgets]
    if len(results) > 1 and all(r.get("ratios") for r in results):
        print("\nthis sitting, topogate / Kueue at each budget:")
        for r in results:
            q = r["ratios"]
            classes = " ".join(f"{cls} {v:.2f}" for cls, v in q["classes"].items())
            print(
                f"  {r['budget'][0]}/{r['budget'][1]}: CPU {q['cpu']:.2f}, API-server CPU "
                f"{q['apiserver_cpu']:.2f}, RSS {q['rss']:.2f}; TTA {classes}"
            )
    broken = sum(violations(r) for r in results)
    void = sum(1 for r in results if "void" in r)
    if broken or void:
        sys.exit(f"{broken} invariant violations, {void} void sittings: the run fails")


if __name__ == "__main__":
    main()
