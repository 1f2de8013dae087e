"""End to end on the real control plane: `topogate serve` (with its webhooks) admits queued
jobs, the real JobSet controller creates a JobSet's Jobs, the real Job controller creates their
pods, topogate's ungater releases them onto their domains and the real kube-scheduler binds
them to fake Ready nodes.

Each test has its own namespace, ResourceFlavor (selecting its own nodes by a pool label),
ClusterQueue and LocalQueue, so tests never see each other's capacity.
"""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from tests.cluster import api_client, drop_webhooks, eventually, fake_node
from tests.kit import written_domains
from topogate.testing.controlplane import ControlPlane, free_port
from topogate.testing.localcluster import create_all, install_crds, serving, stop

pytestmark = pytest.mark.cluster

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
POOL = "e2e.topogate.dev/pool"
GROUP, VERSION = "topogate.dev", "v1alpha1"


def install_e2e_topology(plane: ControlPlane) -> None:
    """topogate's CRDs and the block > rack > host Topology the e2e tests' flavors use."""
    install_crds(plane.kubeconfig, jobset=False)
    topology = {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": "e2e"},
        "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]},
    }
    create_all(plane.kubeconfig, [topology])


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    control_plane.start_jobset()  # JobSet's controller, webhooks and CRD, from its release
    install_e2e_topology(control_plane)
    yield control_plane


@dataclass
class Serve:
    plane: ControlPlane
    directory: Path
    lease: str = field(default_factory=lambda: f"e2e-{uuid.uuid4().hex[:6]}")
    webhook_port: int = field(default_factory=free_port)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        process = self.stack.enter_context(
            serving(
                self.plane.kubeconfig,
                self.directory / "serve.log",
                extra=[
                    f"--leader-lease={self.lease}",
                    # A 2 s renew deadline lost the Lease once on a busy 2-core machine; 5 s
                    # (ten renewals) holds it there, and a killed leader's Lease still ends
                    # within 6 s for the tests that start another replica.
                    "--lease-duration=6",
                    "--renew-deadline=5",
                    "--retry-period=0.5",
                    *extra,
                ],
                webhook_dir=self.directory / "certs",
                webhook_port=self.webhook_port,
            )
        )
        self.processes.append(process)
        api = api_client(self.plane)
        mutating = client.AdmissionregistrationV1Api(api)

        def registered() -> bool:
            if process.poll() is not None:
                raise AssertionError(self.log())
            hooks = mutating.list_mutating_webhook_configuration().items
            for hook in hooks:
                for entry in hook.webhooks or []:
                    if str(self.webhook_port) in (entry.client_config.url or ""):
                        return True
            return False

        eventually(registered, timeout=30)
        return process

    def log(self) -> str:
        path = self.directory / "serve.log"
        return path.read_text()[-6000:] if path.exists() else ""


@pytest.fixture
def serve(cluster: ControlPlane, tmp_path: Path) -> Iterator[Serve]:
    runner = Serve(cluster, tmp_path)
    try:
        with runner.stack:
            yield runner
    finally:
        drop_webhooks(cluster)


@dataclass
class Pool:
    """One test's nodes, flavor and queues."""

    plane: ControlPlane
    name: str
    namespace: str
    gpu_quota: int = 1024

    @property
    def api(self) -> client.ApiClient:
        return api_client(self.plane)

    def nodes(self, layout: dict[tuple[str, str], int], gpus: int = 8) -> list[str]:
        """Nodes per (block, rack); returns their names."""
        docs, names = [], []
        for (block, rack), count in layout.items():
            for i in range(count):
                name = f"{self.name}-{block}-{rack}-{i}"
                docs.append(fake_node(name, {BLOCK: block, RACK: rack, POOL: self.name}, gpus=gpus))
                names.append(name)
        create_all(self.plane.kubeconfig, docs)
        return names

    def setup(self) -> None:
        create_all(
            self.plane.kubeconfig,
            [
                {
                    "apiVersion": "topogate.dev/v1alpha1",
                    "kind": "ResourceFlavor",
                    "metadata": {"name": self.name},
                    "spec": {"nodeLabels": {POOL: self.name}, "topologyName": "e2e"},
                },
                {
                    "apiVersion": "topogate.dev/v1alpha1",
                    "kind": "ClusterQueue",
                    "metadata": {"name": self.name},
                    "spec": {
                        "resourceGroups": [
                            {
                                "coveredResources": ["nvidia.com/gpu"],
                                "flavors": [
                                    {
                                        "name": self.name,
                                        "resources": [
                                            {
                                                "name": "nvidia.com/gpu",
                                                "nominalQuota": self.gpu_quota,
                                            }
                                        ],
                                    }
                                ],
                            }
                        ]
                    },
                },
                {
                    "apiVersion": "topogate.dev/v1alpha1",
                    "kind": "LocalQueue",
                    "metadata": {"name": "q", "namespace": self.namespace},
                    "spec": {"clusterQueue": self.name},
                },
            ],
        )

    def pods(self, selector: str = "") -> list[Any]:
        core = client.CoreV1Api(self.api)
        return list(core.list_namespaced_pod(self.namespace, label_selector=selector).items)

    def node_labels(self) -> dict[str, dict[str, str]]:
        core = client.CoreV1Api(self.api)
        out: dict[str, dict[str, str]] = {}
        for node in core.list_node(label_selector=f"{POOL}={self.name}").items:
            out[str(node.metadata.name)] = dict(node.metadata.labels or {})
        return out

    def workloads(self) -> list[dict[str, Any]]:
        custom = client.CustomObjectsApi(self.api)
        return list(
            custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "workloads")[
                "items"
            ]
        )

    def workload_of(self, job: str) -> dict[str, Any] | None:
        for item in self.workloads():
            refs = item["metadata"].get("ownerReferences") or []
            if any(r["name"] == job for r in refs):
                return item
        return None


@pytest.fixture
def pool(cluster: ControlPlane, request: pytest.FixtureRequest) -> Pool:
    name = f"p{uuid.uuid4().hex[:6]}"
    quota = getattr(request, "param", 1024)
    made = Pool(cluster, name, f"e2e-{name}", gpu_quota=quota)
    made.setup()
    return made


def job(
    name: str,
    pods: int,
    gpus: int = 8,
    annotations: dict[str, str] | None = None,
    queue: str = "q",
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "example.com/trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        },
    }


def submit(pool: Pool, obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["namespace"] = pool.namespace
    return create_all(pool.plane.kubeconfig, [obj])[0]


def all_bound(pool: Pool, selector: str, count: int) -> list[Any] | None:
    pods = [p for p in pool.pods(selector) if p.spec.node_name]
    return pods if len(pods) == count else None


def condition(workload: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for cond in ((workload or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return None


def test_required_rack_job_lands_in_one_rack_in_rank_order(serve: Serve, pool: Pool) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 3, ("b0", "r1"): 4, ("b1", "r2"): 2})
    created = submit(
        pool, job("train", 4, annotations={"kueue.x-k8s.io/podset-required-topology": RACK})
    )
    assert created["spec"]["suspend"] is True  # the webhook suspended it on creation
    pods = eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=train", 4), 60)
    labels = pool.node_labels()
    racks = {labels[p.spec.node_name][RACK] for p in pods}
    assert racks == {"r1"}, racks  # the only rack with room for 4 (BestFit)
    workload = pool.workload_of("train")
    assert condition(workload, "Admitted")["status"] == "True"
    assignment = workload["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    expanded = [d["values"][-1] for d in written_domains(assignment) for _ in range(d["count"])]
    by_rank = {
        int(p.metadata.labels["batch.kubernetes.io/job-completion-index"]): p.spec.node_name
        for p in pods
    }
    assert [by_rank[r] for r in range(4)] == expanded  # rank r on the r-th assigned slot
    for pod in pods:
        assert not pod.spec.scheduling_gates
        assert pod.spec.node_selector[HOST] == pod.spec.node_name


def test_preferred_block_spills_over_two_blocks(serve: Serve, pool: Pool) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 2, ("b0", "r1"): 1, ("b1", "r2"): 2})
    submit(pool, job("spill", 5, annotations={"kueue.x-k8s.io/podset-preferred-topology": BLOCK}))
    pods = eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=spill", 5), 60)
    labels = pool.node_labels()
    blocks = sorted(labels[p.spec.node_name][BLOCK] for p in pods)
    assert blocks == ["b0", "b0", "b0", "b1", "b1"]


def test_jobset_is_admitted_as_one_gang(serve: Serve, pool: Pool) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 2, ("b0", "r1"): 4})
    template = job("unused", 2, annotations={"kueue.x-k8s.io/podset-required-topology": RACK})
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "ring", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "replicatedJobs": [
                {"name": "workers", "replicas": 2, "template": {"spec": template["spec"]}}
            ]
        },
    }
    created = submit(pool, jobset)
    assert created["spec"]["suspend"] is True
    # Defaulted by JobSet's own webhook (its CRD defaults neither).
    assert created["spec"]["successPolicy"]["operator"] == "All"
    assert created["spec"]["network"]["enableDNSHostnames"] is True
    custom = client.CustomObjectsApi(pool.api)

    def started() -> dict[str, Any] | None:
        obj = custom.get_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", pool.namespace, "jobsets", "ring"
        )
        return obj if obj["spec"].get("suspend") is False else None

    eventually(started, 60)
    # No child Job is made here: JobSet's own controller creates them (suspended while the
    # JobSet is) and resumes them with the scheduling directives topogate put in its templates.
    pods = eventually(lambda: all_bound(pool, "jobset.sigs.k8s.io/jobset-name=ring", 4), 60)
    labels = pool.node_labels()
    assert {labels[p.spec.node_name][RACK] for p in pods} == {"r1"}
    workload = pool.workload_of("ring")
    assignment = workload["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    expanded = [d["values"][-1] for d in written_domains(assignment) for _ in range(d["count"])]
    by_rank = {
        int(p.metadata.labels["jobset.sigs.k8s.io/job-index"]) * 2
        + int(p.metadata.labels["batch.kubernetes.io/job-completion-index"]): p.spec.node_name
        for p in pods
    }
    assert [by_rank[r] for r in range(4)] == expanded
    batch = client.BatchV1Api(pool.api)
    children = batch.list_namespaced_job(
        pool.namespace, label_selector="jobset.sigs.k8s.io/jobset-name=ring"
    ).items
    assert sorted(str(j.metadata.name) for j in children) == ["ring-workers-0", "ring-workers-1"]
    for child in children:
        owner = child.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.uid, owner.controller) == (
            "JobSet",
            "ring",
            created["metadata"]["uid"],
            True,
        )
        assert child.spec.suspend is False
    # One Workload for the gang: the child Jobs are the JobSet's, not queued on their own.
    assert [w["metadata"]["ownerReferences"][0]["name"] for w in pool.workloads()] == ["ring"]


def test_job_that_does_not_fit_waits_then_runs_when_a_node_is_added(
    serve: Serve, pool: Pool
) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 2, ("b0", "r1"): 2})
    submit(pool, job("big", 3, annotations={"kueue.x-k8s.io/podset-required-topology": RACK}))

    def pending() -> dict[str, Any] | None:
        cond = condition(pool.workload_of("big"), "QuotaReserved")
        return cond if cond and cond["reason"] == "Pending" else None

    cond = eventually(pending, 30)
    # Kueue's wording: the best rack holds 2 of the 3 pods.
    assert 'topology "e2e" allows to fit only 2 out of 3 pod(s)' in cond["message"], cond["message"]
    batch = client.BatchV1Api(pool.api)
    assert batch.read_namespaced_job("big", pool.namespace).spec.suspend is True
    assert pool.pods("batch.kubernetes.io/job-name=big") == []
    create_all(
        pool.plane.kubeconfig,
        [fake_node(f"{pool.name}-b0-r1-extra", {BLOCK: "b0", RACK: "r1", POOL: pool.name})],
    )
    pods = eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=big", 3), 60)
    labels = pool.node_labels()
    assert {labels[p.spec.node_name][RACK] for p in pods} == {"r1"}


@pytest.mark.parametrize("pool", [16], indirect=True)
def test_exhausted_quota_queues_the_next_job_until_the_first_finishes(
    serve: Serve, pool: Pool
) -> None:
    serve.start()
    pool.nodes({("b0", "r0"): 4})
    submit(pool, job("first", 2))
    eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=first", 2), 60)
    submit(pool, job("second", 2))

    def waiting() -> dict[str, Any] | None:
        cond = condition(pool.workload_of("second"), "QuotaReserved")
        return cond if cond and cond["reason"] == "Pending" else None

    cond = eventually(waiting, 30)
    assert "insufficient quota for nvidia.com/gpu" in cond["message"], cond["message"]
    assert client.BatchV1Api(pool.api).read_namespaced_job("second", pool.namespace).spec.suspend
    # The first job's pods succeed (no kubelet here: the test reports it); the real Job
    # controller completes the Job, topogate marks its Workload Finished and frees the quota.
    core = client.CoreV1Api(pool.api)
    for pod in pool.pods("batch.kubernetes.io/job-name=first"):
        core.patch_namespaced_pod_status(
            pod.metadata.name,
            pool.namespace,
            {"status": {"phase": "Succeeded", "containerStatuses": []}},
        )
    finished = eventually(lambda: condition(pool.workload_of("first"), "Finished"), 60)
    assert finished["reason"] == "Succeeded"
    eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=second", 2), 60)


class Recorder:
    """Every version of the namespace's pods and workloads, as a watch delivers them."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.pods: dict[str, list[Any]] = {}
        self.workloads: dict[str, list[dict[str, Any]]] = {}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._pods, daemon=True),
            threading.Thread(target=self._workloads, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _pods(self) -> None:
        core = client.CoreV1Api(self.pool.api)
        stream = watch.Watch()
        while not self._stop.is_set():
            for event in stream.stream(
                core.list_namespaced_pod, self.pool.namespace, timeout_seconds=1
            ):
                pod = event["object"]
                self.pods.setdefault(pod.metadata.uid, []).append(pod)

    def _workloads(self) -> None:
        custom = client.CustomObjectsApi(self.pool.api)
        stream = watch.Watch()
        while not self._stop.is_set():
            for event in stream.stream(
                custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                self.pool.namespace,
                "workloads",
                timeout_seconds=1,
            ):
                obj = event["object"]
                self.workloads.setdefault(obj["metadata"]["uid"], []).append(obj)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)


def test_killing_serve_mid_ungating_releases_every_pod_exactly_once(
    serve: Serve, pool: Pool
) -> None:
    pool.nodes({("b0", "r0"): 4}, gpus=8)
    recorder = Recorder(pool)
    # Slow release (4 pods a second) so the kill lands in the middle.
    first = serve.start("--ungate-max-per-batch=4", "--ungate-interval=1")
    submit(pool, job("gang", 24, gpus=1))

    def ungated() -> int:
        return sum(
            1 for p in pool.pods("batch.kubernetes.io/job-name=gang") if not p.spec.scheduling_gates
        )

    eventually(lambda: 4 <= ungated() < 20, 60, interval=0.05)
    stop(first, kill=True)
    partial = ungated()
    assert 0 < partial < 24
    serve.start("--ungate-max-per-batch=4", "--ungate-interval=1")
    pods = eventually(lambda: all_bound(pool, "batch.kubernetes.io/job-name=gang", 24), 90)
    time.sleep(1)  # let the recorder see the last events
    recorder.stop()
    assert len(pods) == 24
    for uid, versions in recorder.pods.items():
        gated = [bool(v.spec.scheduling_gates) for v in versions]
        releases = sum(1 for a, b in itertools.pairwise(gated) if a and not b)
        assert releases == 1, (uid, gated)
        selectors = {
            tuple(sorted((v.spec.node_selector or {}).items()))
            for v in versions
            if not v.spec.scheduling_gates
        }
        assert len(selectors) == 1, (uid, selectors)  # the domain never changed
    (versions,) = recorder.workloads.values()
    admissions = [v.get("status", {}).get("admission") for v in versions]
    written = [a for a in admissions if a]
    assert written and all(a == written[0] for a in written)  # admitted once, never rewritten
    firsts = sum(1 for a, b in itertools.pairwise(admissions) if not a and b)
    assert firsts == 1  # the recorder watched from before the job existed
    # The restart sent no pod elsewhere: rank r sits on the r-th slot of the one admission.
    assignment = written[0]["podSetAssignments"][0]["topologyAssignment"]
    expanded = [d["values"][-1] for d in written_domains(assignment) for _ in range(d["count"])]
    by_rank = {
        int(p.metadata.labels["batch.kubernetes.io/job-completion-index"]): p.spec.node_name
        for p in pods
    }
    assert [by_rank[r] for r in range(24)] == expanded
