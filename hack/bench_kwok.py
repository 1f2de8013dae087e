"""100,000 nodes live: `topogate serve` on the local control plane with KWOK running the
nodes and pods; prints figures and writes them to hack/results/issue25-kwok/<nodes>-<time>.json.

    .venv/bin/python hack/bench_kwok.py [--nodes 100000] [--busy 0.03] [--churn 1]

1. The control plane of topogate.testing.controlplane (etcd, kube-apiserver, kube-scheduler,
   kube-controller-manager with the Job controller) with the API server's request limits off
   (as kwokctl's --disable-qps-limits) and etcd's backend quota raised; KWOK's controller
   (hack/kwok/build.sh, v0.8.0) manages every node with its fast stages: a new node turns
   Ready, a bound pod goes Pending -> Running, a deleted pod goes away (no pod-complete stage:
   admitted gangs stay Running).
2. --nodes nodes (8 GPUs each; blocks of 50 racks of 40 hosts, labelled block/rack/hostname),
   created by concurrent clients and registered Ready (with --kwok-node-init: without
   conditions, so KWOK's node-initialize stage makes them Ready; at 100,000 nodes KWOK v0.8.0
   could not keep up on the shared 2-core machine); then --busy of the GPUs held by running
   background pods (--pod-gpus each, bound at creation, run by KWOK).
3. A Topology, ResourceFlavor, ClusterQueue and LocalQueue; `topogate serve` starts (with its
   webhooks). Its RSS (the whole process, /proc) is sampled every 0.5 s from its start.
   serve builds its capacity snapshot and domain trees once its caches synced, before it
   reports ready (the time its log gives is recorded).
4. The first Job: --gang pods x 8 GPUs, required in a rack, queued. Time from the Workload's
   first watch event to the watch event that shows it admitted (as Kueue's recorder counts);
   then until every pod is bound and Running (kube-scheduler binds, KWOK runs).
5. Churn: for --churn-seconds, every --churn-interval seconds --churn % of the background pods
   are deleted and as many created on random nodes, while an --churn-gang-pod Job (required
   rack) is queued every interval. The admission cycles of that window come from serve's own
   metrics (topogate_admission_cycle_seconds), the Jobs' times to admission from the watch.
6. Every admitted Workload is checked: its pods' nodes are exactly the hosts (and counts) its
   TopologyAssignment names, all inside the one rack it was required in.

Every wait has a timeout (scaled with --nodes where creating objects is the wait).
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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from topogate.api.topology_assignment import decode
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
from topogate.testing.controlplane import ControlPlane, free_port
from topogate.testing.localcluster import install_crds, serving

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "hack/results/issue25-kwok"
BLOCK, RACK, HOST = (
    "cloud.provider.com/topology-block",
    "cloud.provider.com/topology-rack",
    "kubernetes.io/hostname",
)
GPU = "nvidia.com/gpu"
GPUS_PER_NODE, HOSTS_PER_RACK, RACKS_PER_BLOCK = 8, 40, 50
BACKGROUND, JOBS = "background", "bench"
T = TypeVar("T")
NAMESPACES = Resource("v1", "namespaces", namespaced=False)
JOB_RESOURCE = Resource("batch/v1", "jobs")
MUTATING = Resource("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", False)
REQUIRED = "kueue.x-k8s.io/podset-required-topology"

# The API server and etcd at 100,000 nodes: no in-flight caps (as kwokctl's
# --disable-qps-limits), a larger etcd backend; the Job controller's client limit raised.
EXTRA_ARGS = {
    "etcd": ["--quota-backend-bytes=8589934592"],
    "kube-apiserver": [
        "--max-requests-inflight=0",
        "--max-mutating-requests-inflight=0",
        "--enable-priority-and-fairness=false",
    ],
    "kube-controller-manager": ["--kube-api-qps=200", "--kube-api-burst=400"],
}


class BigPlane(ControlPlane):
    """The test control plane, with EXTRA_ARGS added to each process's command line."""

    def _spawn(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        super()._spawn(name, [*argv, *EXTRA_ARGS.get(name, [])], env)


# --- objects ----------------------------------------------------------------------------------


def node_name(index: int) -> str:
    return f"n{index:06d}"


def rack_of(index: int) -> tuple[str, str]:
    rack = index // HOSTS_PER_RACK
    return f"b{rack // RACKS_PER_BLOCK}", f"r{rack}"


def node(index: int, ready: bool) -> Obj:
    """A fake node as an operator would register it for KWOK: capacity, and either no
    conditions (KWOK's node-initialize stage makes it Ready) or Ready already (``ready``: as
    a kubelet reports it; KWOK then leaves the node alone and runs its pods)."""
    name = node_name(index)
    block, rack = rack_of(index)
    resources = {"cpu": "96", "memory": "1Ti", "pods": "110", GPU: str(GPUS_PER_NODE)}
    status: Obj = {"allocatable": resources, "capacity": resources}
    if ready:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status["conditions"] = [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "registered Ready by the bench",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {BLOCK: block, RACK: rack, HOST: name, "type": "kwok"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "status": status,
    }


def background_pod(name: str, node: str, gpus: int) -> Obj:
    container = {"name": "c", "image": "x", "resources": {"limits": {GPU: str(gpus)}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": BACKGROUND},
        "spec": {"nodeName": node, "containers": [container], "terminationGracePeriodSeconds": 0},
    }


def queue_objects(gpus: int) -> list[tuple[Resource, Obj]]:
    api = "topogate.dev/v1alpha1"
    quota = [{"name": GPU, "nominalQuota": gpus}]
    return [
        (
            TOPOLOGIES,
            {
                "apiVersion": api,
                "kind": "Topology",
                "metadata": {"name": "kwok"},
                "spec": {
                    "levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]
                },
            },
        ),
        (
            RESOURCE_FLAVORS,
            {
                "apiVersion": api,
                "kind": "ResourceFlavor",
                "metadata": {"name": "gpu"},
                "spec": {"nodeLabels": {"type": "kwok"}, "topologyName": "kwok"},
            },
        ),
        (
            CLUSTER_QUEUES,
            {
                "apiVersion": api,
                "kind": "ClusterQueue",
                "metadata": {"name": "gpu"},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU],
                            "flavors": [{"name": "gpu", "resources": quota}],
                        }
                    ],
                },
            },
        ),
        (
            LOCAL_QUEUES,
            {
                "apiVersion": api,
                "kind": "LocalQueue",
                "metadata": {"name": "q", "namespace": JOBS},
                "spec": {"clusterQueue": "gpu"},
            },
        ),
    ]


def job(name: str, pods: int) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": JOBS,
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
        },
        "spec": {
            "suspend": True,
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"annotations": {REQUIRED: RACK}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "example.com/trainer:1",
                            "resources": {"limits": {GPU: str(GPUS_PER_NODE)}},
                        }
                    ],
                },
            },
        },
    }


# --- what the watches saw -----------------------------------------------------------------------


@dataclass
class Seen:
    ready_nodes: set[str] = field(default_factory=set)
    running: dict[str, set[str]] = field(default_factory=lambda: {BACKGROUND: set(), JOBS: set()})
    workload_first: dict[str, float] = field(default_factory=dict)
    workload_admitted: dict[str, float] = field(default_factory=dict)
    workloads: dict[str, Obj] = field(default_factory=dict)
    pods: dict[str, Obj] = field(default_factory=dict)  # the Jobs' pods
    running_at: dict[str, float] = field(default_factory=dict)
    events = 0


async def follow(
    kube: Kube, resource: Resource, handle: Callable[[str, Obj], None], **params: Any
) -> None:
    """List, then watch forever; after a watch ends it resumes, after an error (a 410, or a
    429 while a new CRD's watch cache starts) it lists again. The handlers are idempotent."""
    version = ""
    while True:
        try:
            if not version:
                version = await _list_all(kube, resource, handle, params)
            async for event in kube.watch(resource, version, **params):
                obj = event.get("object") or {}
                version = str(obj.get("metadata", {}).get("resourceVersion") or version)
                if event.get("type") != "BOOKMARK":
                    handle(str(event.get("type")), obj)
        except (KubeError, aiohttp.ClientError, TimeoutError) as error:
            print(f"bench_kwok: {resource.key} watch: {error}; listing again", flush=True)
            version = ""
            await asyncio.sleep(0.5)


async def _list_all(
    kube: Kube, resource: Resource, handle: Callable[[str, Obj], None], params: dict[str, Any]
) -> str:
    token = None
    while True:
        page = await kube.list(resource, limit=500, **{"continue": token}, **params)
        for item in page.get("items") or []:
            handle("ADDED", item)
        token = page["metadata"].get("continue") or None
        if token is None:
            return str(page["metadata"]["resourceVersion"])


def on_node(seen: Seen) -> Callable[[str, Obj], None]:
    def handle(kind: str, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        conditions = (obj.get("status") or {}).get("conditions") or []
        if kind != "DELETED" and any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
        ):
            seen.ready_nodes.add(name)
        else:
            seen.ready_nodes.discard(name)

    return handle


def on_pod(seen: Seen) -> Callable[[str, Obj], None]:
    def handle(kind: str, obj: Obj) -> None:
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        running = (obj.get("status") or {}).get("phase") == "Running"
        if namespace == JOBS:
            if kind == "DELETED":
                seen.pods.pop(name, None)
            else:
                seen.pods[name] = obj
                if running and obj["spec"].get("nodeName"):
                    seen.running_at.setdefault(name, time.monotonic())
        bucket = seen.running.setdefault(namespace, set())
        if kind != "DELETED" and running:
            bucket.add(name)
        else:
            bucket.discard(name)

    return handle


def on_workload(seen: Seen) -> Callable[[str, Obj], None]:
    def handle(kind: str, obj: Obj) -> None:
        now = time.monotonic()
        name = obj["metadata"]["name"]
        seen.workload_first.setdefault(name, now)
        if kind == "DELETED":
            return
        seen.workloads[name] = obj
        if (obj.get("status") or {}).get("admission"):
            seen.workload_admitted.setdefault(name, now)

    return handle


# The bench's watches: a wait ends with the error of one that failed, not with its timeout.
WATCHES: list[asyncio.Task[None]] = []


async def wait(check: Callable[[], bool], seconds: float, what: str) -> float:
    deadline = time.monotonic() + seconds
    while not check():
        for task in WATCHES:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise SystemExit(f"bench_kwok: a watch failed: {task.exception()!r}")
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_kwok: {what} not reached within {seconds:.0f} s")
        await asyncio.sleep(0.02)
    return time.monotonic()


async def for_each(items: Iterable[T], do: Callable[[T], Awaitable[Any]], limit: int) -> None:
    """``do`` each item with at most ``limit`` at a time (creating 100,000 objects at once
    would open as many requests); the items are taken as they are needed."""
    pending = iter(items)

    async def worker() -> None:
        for item in pending:
            await do(item)

    await asyncio.gather(*(worker() for _ in range(limit)))


# --- serve's own figures ----------------------------------------------------------------------


class RssSampler(threading.Thread):
    """serve's resident set (VmRSS, whole process) every 0.5 s, with the time of each sample."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self.peak = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                status = Path(f"/proc/{self.pid}/status").read_text()
                fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
                if "VmRSS" not in fields:  # serve exited (a zombie has no memory lines)
                    return
                self.samples.append((time.monotonic(), int(fields["VmRSS"].split()[0]) / 1024))
                self.peak = max(self.peak, int(fields["VmHWM"].split()[0]) / 1024)
            self.stop.wait(0.5)

    def between(self, start: float, end: float) -> list[float]:
        return [mb for t, mb in self.samples if start <= t <= end]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cycle_histogram(port: int) -> tuple[dict[float, float], float, float]:
    """topogate_admission_cycle_seconds: cumulative buckets, count and sum."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    buckets: dict[float, float] = {}
    for match in re.finditer(
        r'^topogate_admission_cycle_seconds_bucket\{le="([^"]+)"\} (\S+)$', text, re.M
    ):
        buckets[float(match[1])] = float(match[2])
    count = re.search(r"^topogate_admission_cycle_seconds_count (\S+)$", text, re.M)
    total = re.search(r"^topogate_admission_cycle_seconds_sum (\S+)$", text, re.M)
    return buckets, float(count[1]) if count else 0.0, float(total[1]) if total else 0.0


def bucket_quantile(buckets: dict[float, float], q: float) -> float:
    """The upper bound of the bucket holding quantile ``q`` (what a histogram can say)."""
    total = buckets.get(float("inf"), 0.0)
    for bound in sorted(buckets):
        if total and buckets[bound] >= q * total:
            return bound
    return float("nan")


def serve_ports(log: Path, timeout: float) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(r"probes and metrics on :(\d+) :(\d+)", log.read_text())
        if match:
            return int(match[1]), int(match[2])
        time.sleep(0.2)
    raise SystemExit(f"bench_kwok: serve did not start; see {log}")


def leading(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as reply:
            return reply.status == 200 and not reply.read().startswith(b"standby")
    except OSError:
        return False


# --- the check ----------------------------------------------------------------------------------


def check_placements(seen: Seen) -> tuple[int, list[str]]:
    """Each admitted Workload's pods against its TopologyAssignment: the same hosts with the
    same counts, all in the one rack it was required in."""
    violations: list[str] = []
    checked = 0
    for name, workload in sorted(seen.workloads.items()):
        admission = (workload.get("status") or {}).get("admission")
        if not admission:
            continue
        owners = workload["metadata"].get("ownerReferences") or [{}]
        owner = owners[0].get("name")
        pods = [
            p
            for p in seen.pods.values()
            if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == owner
        ]
        assigned: Counter[str] = Counter()
        for podset in admission.get("podSetAssignments") or []:
            decoded = decode(podset["topologyAssignment"])
            host = decoded.levels.index(HOST)
            for domain in decoded.domains:
                assigned[domain.values[host]] += domain.count
        placed = Counter(str(p["spec"].get("nodeName")) for p in pods)
        racks = {rack_of(int(host.removeprefix("n")))[1] for host in assigned}
        checked += 1
        if placed != assigned:
            violations.append(f"{name}: pods on {dict(placed)}, assigned {dict(assigned)}")
        if len(racks) != 1:
            violations.append(f"{name}: required one rack, assigned racks {sorted(racks)}")
    return checked, violations


# --- the run ----------------------------------------------------------------------------------


def kwok_dir() -> Path:
    done = subprocess.run(
        ["bash", str(ROOT / "hack/kwok/build.sh")], check=True, capture_output=True, text=True
    )
    return Path(done.stdout.strip().splitlines()[-1])


def start_kwok(plane: ControlPlane, kwok: Path, work: Path) -> subprocess.Popen[bytes]:
    """KWOK's controller managing every node, with the fast stages (hack/kwok/build.sh)."""
    options = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "metadata": {"name": "bench"},
        # A /8 pool: the default /24 has 254 pod IPs for the whole cluster.
        "options": {
            "cidr": "10.0.0.1/8",
            "nodePlayStageParallelism": 16,
            "podPlayStageParallelism": 16,
        },
    }
    docs = [json.dumps(options)] + [p.read_text() for p in sorted((kwok / "stages").glob("*.yaml"))]
    config = work / "kwok.yaml"
    config.write_text("\n---\n".join(docs))
    log = open(work / "kwok.log", "ab")  # noqa: SIM115 - owned by the child
    process = subprocess.Popen(
        [
            str(kwok / "bin/kwok"),
            f"--kubeconfig={plane.kubeconfig}",
            f"--config={config}",
            "--manage-all-nodes=true",
            "-v=WARN",  # a line per patched node and pod otherwise
            f"--server-address=127.0.0.1:{free_port()}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    return process


def uptime() -> str:
    """The 1, 5 and 15 minute load averages (the machine is shared: figures are loaded ones)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


async def scenario(args: argparse.Namespace, plane: ControlPlane, work: Path) -> dict[str, Any]:
    kube = await Kube.connect(str(plane.kubeconfig), qps=None)
    seen = Seen()
    rng = random.Random(0)
    figures: dict[str, Any] = {"nodes": args.nodes, "kwok_node_init": args.kwok_node_init}
    tasks = WATCHES
    tasks.append(asyncio.create_task(follow(kube, NODES, on_node(seen))))
    try:
        for namespace in (BACKGROUND, JOBS):
            await kube.create(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
        tasks.append(
            asyncio.create_task(
                follow(kube, PODS, on_pod(seen), fieldSelector="metadata.namespace!=kube-system")
            )
        )

        # --- nodes, made Ready by KWOK -------------------------------------------------------
        started = time.monotonic()
        scale = max(1.0, args.nodes / 1000)

        async def create_node(index: int) -> None:
            await kube.create(NODES, node(index, ready=not args.kwok_node_init))

        await for_each(range(args.nodes), create_node, args.clients)
        figures["nodes_created_s"] = time.monotonic() - started
        print(f"{args.nodes} nodes created in {figures['nodes_created_s']:.1f} s", flush=True)
        await wait(lambda: len(seen.ready_nodes) >= args.nodes, 300 + 30 * scale, "nodes Ready")
        figures["nodes_ready_s"] = time.monotonic() - started
        by = "KWOK" if args.kwok_node_init else "registered Ready"
        print(f"... all Ready ({by}) after {figures['nodes_ready_s']:.1f} s", flush=True)

        # --- background pods, run by KWOK -----------------------------------------------------
        free = [GPUS_PER_NODE] * args.nodes
        count = int(args.nodes * GPUS_PER_NODE * args.busy) // args.pod_gpus
        background: dict[str, int] = {}
        made = 0

        def place() -> tuple[str, int]:
            nonlocal made
            while True:
                index = rng.randrange(args.nodes)
                if free[index] >= args.pod_gpus:
                    free[index] -= args.pod_gpus
                    name, made = f"bg{made}", made + 1
                    background[name] = index
                    return name, index

        async def create_pod(name: str, index: int) -> None:
            await kube.create(
                PODS, background_pod(name, node_name(index), args.pod_gpus), BACKGROUND
            )

        started = time.monotonic()
        placed = [place() for _ in range(count)]
        await for_each(placed, lambda p: create_pod(*p), args.clients)
        await wait(
            lambda: len(seen.running[BACKGROUND]) >= count,
            300 + 10 * scale,
            "background pods Running",
        )
        figures["background_pods"] = count
        figures["background_running_s"] = time.monotonic() - started
        print(
            f"{count} background pods ({args.busy:.0%} of the GPUs) Running after "
            f"{figures['background_running_s']:.1f} s",
            flush=True,
        )
        for resource, obj in queue_objects(args.nodes * GPUS_PER_NODE):
            await kube.create(resource, obj, obj["metadata"].get("namespace"))
        tasks.append(
            asyncio.create_task(
                follow(
                    kube, WORKLOADS, on_workload(seen), fieldSelector=f"metadata.namespace={JOBS}"
                )
            )
        )

        # --- serve ----------------------------------------------------------------------------
        log = work / "serve.log"
        with serving(
            plane.kubeconfig, log, webhook_dir=work / "certs", webhook_port=free_port()
        ) as serve:
            sampler = RssSampler(serve.pid)
            sampler.start()
            started = time.monotonic()
            probes, metrics_port = await asyncio.to_thread(serve_ports, log, 120)

            def webhooks_ready() -> bool:
                return leading(probes)

            await wait(webhooks_ready, 300 + 3 * scale, "serve ready and leading")
            figures["serve_ready_s"] = time.monotonic() - started
            listed = await kube.list(MUTATING)
            deadline = time.monotonic() + 60
            while not listed.get("items"):
                if time.monotonic() > deadline:
                    raise SystemExit("bench_kwok: serve registered no webhooks within 60 s")
                await asyncio.sleep(0.2)
                listed = await kube.list(MUTATING)
            # serve builds the capacity snapshot and domain trees once its caches synced,
            # before it reports ready (its log says how long that took).
            warm = re.search(r"domain trees of \d+ nodes built in (\d+) ms", log.read_text())
            figures["serve_warm_ms"] = float(warm.group(1)) if warm else None
            print(
                f"serve ready (caches synced, snapshot built in {figures['serve_warm_ms']} ms, "
                f"leading) {figures['serve_ready_s']:.1f} s after start"
            )

            # --- the first Job ------------------------------------------------------------------
            t_create = time.monotonic()
            await kube.create(JOB_RESOURCE, job("first", args.gang), JOBS)
            await wait(lambda: bool(seen.workload_admitted), 120, "the first Workload admitted")
            (first,) = seen.workload_admitted
            figures["first_admission_ms"] = 1000 * (
                seen.workload_admitted[first] - seen.workload_first[first]
            )
            figures["first_admission_from_job_ms"] = 1000 * (
                seen.workload_admitted[first] - t_create
            )

            gang = int(args.gang)

            def first_running() -> bool:
                return sum(1 for p in seen.running[JOBS] if p.startswith("first-")) >= gang

            t_running = await wait(first_running, 300, "the first Job's pods Running")
            figures["first_running_s"] = t_running - t_create
            print(
                f"first Job ({args.gang} pods x 8 GPUs, required rack): admitted "
                f"{figures['first_admission_ms']:.0f} ms after its Workload appeared "
                f"({figures['first_admission_from_job_ms']:.0f} ms after the Job's create); "
                f"all pods bound and Running after {figures['first_running_s']:.2f} s",
                flush=True,
            )

            # --- churn --------------------------------------------------------------------------
            before = await asyncio.to_thread(cycle_histogram, metrics_port)
            cpu0 = cpu_seconds(serve.pid)
            churn_start = time.monotonic()
            rounds: list[float] = []
            churn_jobs: list[str] = []
            replaced = 0
            while time.monotonic() - churn_start < args.churn_seconds:
                round_start = time.monotonic()
                name = f"churn{len(churn_jobs)}"
                churn_jobs.append(name)
                await kube.create(JOB_RESOURCE, job(name, args.churn_gang), JOBS)
                victims = rng.sample(sorted(background), max(1, round(count * args.churn / 100)))

                async def replace(victim: str) -> None:
                    index = background.pop(victim)
                    with contextlib.suppress(KubeError):
                        await kube.request(
                            "DELETE", PODS.path(BACKGROUND, victim), {"gracePeriodSeconds": 0}
                        )
                    free[index] += args.pod_gpus
                    await create_pod(*place())

                await for_each(victims, replace, 32)
                replaced += len(victims)
                rounds.append(time.monotonic() - round_start)
                await asyncio.sleep(max(0.0, args.churn_interval - rounds[-1]))
            churn_end = time.monotonic()
            after = await asyncio.to_thread(cycle_histogram, metrics_port)
            cpu1 = cpu_seconds(serve.pid)

            await wait(
                lambda: len(seen.workload_admitted) >= 1 + len(churn_jobs),
                300,
                "every churn Job admitted",
            )
            total = args.gang + args.churn_gang * len(churn_jobs)
            await wait(lambda: len(seen.running[JOBS]) >= total, 600, "every Job's pods Running")
            tta = [
                1000 * (seen.workload_admitted[w] - seen.workload_first[w])
                for w in seen.workload_admitted
                if w != first
            ]
            buckets = {b: after[0].get(b, 0.0) - before[0].get(b, 0.0) for b in after[0]}
            cycles = after[1] - before[1]
            rss = sampler.between(churn_start, churn_end)
            sampler.stop.set()
            checked, violations = check_placements(seen)
            figures.update(
                {
                    "churn": {
                        "percent": args.churn,
                        "interval_s": args.churn_interval,
                        "seconds": churn_end - churn_start,
                        "rounds": len(rounds),
                        "pods_replaced": replaced,
                        "round_p50_s": statistics.median(rounds),
                        "round_max_s": max(rounds),
                        "jobs": len(churn_jobs),
                        "job_pods": args.churn_gang,
                        "tta_ms_p50": statistics.median(tta),
                        "tta_ms_max": max(tta),
                        "cycles": cycles,
                        "cycle_mean_ms": 1000 * (after[2] - before[2]) / cycles if cycles else 0.0,
                        "cycle_p50_le_ms": 1000 * bucket_quantile(buckets, 0.5),
                        "cycle_p99_le_ms": 1000 * bucket_quantile(buckets, 0.99),
                        "serve_cpu_s": cpu1 - cpu0,
                    },
                    "rss_peak_mb": sampler.peak,
                    "rss_steady_mb": statistics.median(rss) if rss else 0.0,
                    "rss_at_ready_mb": (
                        sampler.between(0, started + figures["serve_ready_s"]) or [0.0]
                    )[-1],
                    "serve_cpu_total_s": cpu1,
                    "placements_checked": checked,
                    "violations": violations,
                }
            )
            if serve.poll() is not None:
                raise SystemExit(f"bench_kwok: serve exited; see {log}")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await kube.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--busy", type=float, default=0.03, help="share of GPUs held by pods")
    parser.add_argument("--pod-gpus", type=int, default=2, help="GPUs per background pod")
    parser.add_argument("--gang", type=int, default=32, help="pods of the first Job (8 GPUs)")
    parser.add_argument("--churn", type=float, default=1.0, help="%% of background pods")
    parser.add_argument("--churn-interval", type=float, default=5.0)
    parser.add_argument("--churn-seconds", type=float, default=60.0)
    parser.add_argument("--churn-gang", type=int, default=8, help="pods of each churn Job")
    parser.add_argument("--clients", type=int, default=48, help="concurrent creates")
    parser.add_argument(
        "--kwok-node-init",
        action="store_true",
        help="create nodes without conditions for KWOK's node-initialize stage to make Ready "
        "(at 100,000 nodes KWOK v0.8.0 fell to about 11 nodes a second past 50,000 here)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if args.nodes < HOSTS_PER_RACK or args.gang > HOSTS_PER_RACK:
        parser.error(f"--nodes must be at least {HOSTS_PER_RACK}, --gang at most a rack's hosts")
    kwok = kwok_dir()
    work = Path(tempfile.mkdtemp(prefix="topogate-kwok-"))
    load_before = uptime()
    plane = BigPlane.start(work / "controlplane")
    kwok_process = start_kwok(plane, kwok, work)
    started = time.monotonic()
    try:
        install_crds(plane.kubeconfig)
        figures = asyncio.run(scenario(args, plane, work))
    except BaseException:
        print(f"bench_kwok: logs in {work}", file=sys.stderr)
        raise
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(kwok_process.pid, 15)
        with contextlib.suppress(subprocess.TimeoutExpired):
            kwok_process.wait(timeout=10)
        plane.stop()
    figures.update(
        {
            "wall_s": time.monotonic() - started,
            "load_before": load_before,
            "load_after": uptime(),
            "command": " ".join(["hack/bench_kwok.py", *sys.argv[1:]]),
            "commit": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
            ).stdout.strip(),
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "work": str(work),
        }
    )
    report(figures)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"{args.nodes}-{stamp}.json"
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"\nwritten: {out.relative_to(ROOT)}")
    return 1 if figures["violations"] else 0


def report(f: dict[str, Any]) -> None:
    churn = f["churn"]
    print(f"\n{f['nodes']:,} KWOK nodes, {f['background_pods']:,} running background pods")
    print(f"  serve RSS: peak {f['rss_peak_mb']:.0f} MB, steady {f['rss_steady_mb']:.0f} MB")
    print(f"  first admission: {f['first_admission_ms']:.0f} ms after the Workload appeared")
    print(f"  first Job's pods all Running: {f['first_running_s']:.2f} s after its create")
    print(
        f"  churn: {churn['pods_replaced']} pods replaced in {churn['rounds']} rounds "
        f"({churn['percent']:g}% every {churn['interval_s']:g} s), {churn['jobs']} Jobs queued"
    )
    print(
        f"  cycles during churn: {churn['cycles']:.0f}, mean {churn['cycle_mean_ms']:.1f} ms, "
        f"p50 <= {churn['cycle_p50_le_ms']:g} ms, p99 <= {churn['cycle_p99_le_ms']:g} ms; "
        f"Jobs' time to admission p50 {churn['tta_ms_p50']:.0f} ms, "
        f"max {churn['tta_ms_max']:.0f} ms"
    )
    print(f"  placements checked: {f['placements_checked']}, violations: {len(f['violations'])}")
    for violation in f["violations"][:10]:
        print(f"    {violation}")
    print(f"  load average before {f['load_before']}, after {f['load_after']}")


if __name__ == "__main__":
    sys.exit(main())
