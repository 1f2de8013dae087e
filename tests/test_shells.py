"""The shells (admitter, job sync) against FakeKube, the in-memory API server at the transport
seam: what they write, in which order, and what they do when a write fails."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import pytest

from tests.kit import written_domains
from topogate.admission import cycle as cycle_module
from topogate.admission.podsets import translate
from topogate.api import constants as c
from topogate.api.gpus import ASSIGNMENT_ANNOTATION
from topogate.api.objects import condition, key_of, only_waiting_words_changed
from topogate.controllers.admitter import Admitter
from topogate.controllers.jobsync import JobSync
from topogate.kube.errors import KubeError
from topogate.kube.events import EventRecorder
from topogate.kube.ratelimit import check_before_send
from topogate.kube.resources import (
    CLUSTER_QUEUES,
    JOBS,
    LOCAL_QUEUES,
    NODES,
    PODS,
    RESOURCE_FLAVORS,
    TOPOLOGIES,
    WORKLOADS,
    Resource,
)
from topogate.metrics import Metrics
from topogate.state import ControllerState
from topogate.state.store import WATCHED
from topogate.testing.fakekube import FakeKube

RACK, HOST = "cloud.com/rack", "kubernetes.io/hostname"
Obj = dict[str, Any]


def cluster_objects() -> Iterator[tuple[Resource, Obj]]:
    yield (
        TOPOLOGIES,
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": "dc"},
            "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": HOST}]},
        },
    )
    yield (
        RESOURCE_FLAVORS,
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "tas"},
            "spec": {"nodeLabels": {"pool": "gpu"}, "topologyName": "dc"},
        },
    )
    quotas = [{"name": "cpu", "nominalQuota": 64}, {"name": "nvidia.com/gpu", "nominalQuota": 64}]
    yield (
        CLUSTER_QUEUES,
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "nvidia.com/gpu"],
                        "flavors": [{"name": "tas", "resources": quotas}],
                    }
                ]
            },
        },
    )
    yield (
        LOCAL_QUEUES,
        {
            "apiVersion": "topogate.dev/v1alpha1",
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": "ml"},
            "spec": {"clusterQueue": "cq"},
        },
    )
    for name, rack in [("n1", "r1"), ("n2", "r1"), ("n3", "r2")]:
        yield (
            NODES,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {RACK: rack, HOST: name, "pool": "gpu"},
                    "annotations": {"topogate.dev/gpu-profile": "nvswitch-8"},
                },
                "status": {
                    "allocatable": {"cpu": "32", "nvidia.com/gpu": "8", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )


def pod_template(gpus: int, annotations: dict[str, str] | None = None) -> Obj:
    resources = {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}
    return {
        "metadata": {
            "annotations": annotations or {f"{c.KUEUE_GROUP}/{c.REQUIRED_TOPOLOGY}": RACK}
        },
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
    }


def workload(name: str, count: int = 2, gpus: int = 4, **template: Any) -> Obj:
    return {
        "apiVersion": "topogate.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "queueName": "q",
            "podSets": [
                {"name": "main", "count": count, "template": pod_template(gpus, **template)}
            ],
        },
    }


class Harness:
    """A FakeKube and a controller state kept in step with it, as the reflectors would."""

    def __init__(self) -> None:
        self.kube = FakeKube()
        self.state = ControllerState()
        self.metrics = Metrics()
        for resource, obj in cluster_objects():
            self.kube.seed(resource, obj)
        self.deliver()

    def deliver(self) -> None:
        """Bring the state up to what the API server holds (a relist's difference)."""
        for resource in WATCHED:
            stored = {key_of(o): o for o in self.kube.objects(resource)}
            known = dict(self.state.store.objects(resource))
            handler = self.state.handler(resource)
            for key, obj in stored.items():
                if known.get(key) != obj:
                    handler(known.get(key), copy.deepcopy(obj))
            for key, obj in known.items():
                if key not in stored:
                    handler(obj, None)

    def admitter(self) -> tuple[Admitter, EventRecorder]:
        events = EventRecorder(self.kube, "test")
        return Admitter(self.kube, self.state, self.metrics, events), events

    def attempts(self, result: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "topogate_admission_attempts_total", {"result": result}
        )
        return value or 0.0

    def held_gpus(self) -> int:
        snapshot = self.state.ledger.snapshot()
        return int(snapshot.used[:, snapshot.resources.index("nvidia.com/gpu")].sum())


async def test_the_admitter_writes_gpu_sets_before_the_admission() -> None:
    h = Harness()
    h.kube.seed(WORKLOADS, workload("w"))
    h.deliver()
    admitter, events = h.admitter()
    await admitter.cycle()
    await events.drain()
    writes = [call.resource for call in h.kube.calls if call.method == "patch"]
    assert writes == ["workloads", "workloads/status"]  # never an admission without its sets
    stored = h.kube.stored(WORKLOADS, "w", "ml")
    assert stored is not None
    assert ASSIGNMENT_ANNOTATION in stored["metadata"]["annotations"]
    admission = stored["status"]["admission"]
    topology = admission["podSetAssignments"][0]["topologyAssignment"]
    assert topology["levels"] == [HOST]
    assert sum(d["count"] for d in written_domains(topology)) == 2
    assert condition(stored, "Admitted") is not None
    assert h.state.ledger.admission_of("ml/w") == admission  # acted on before the watch brings it
    assert h.held_gpus() == 8
    assert h.attempts("admitted") == 1


async def test_a_conflict_gives_the_capacity_back_and_the_next_cycle_admits() -> None:
    h = Harness()
    h.kube.seed(WORKLOADS, workload("w"))
    h.deliver()
    h.kube.fail_next("patch", KubeError(409, "Conflict", "changed"), resource="workloads/status")
    admitter, events = h.admitter()
    await admitter.cycle()
    assert h.state.ledger.reserved("ml/w") is None
    assert h.held_gpus() == 0
    assert h.attempts("conflict") == 1
    assert h.state.signals.admit_event.is_set()  # another cycle is asked for
    h.deliver()  # the GPU annotation write went through: a new version arrives
    await admitter.cycle()
    await events.drain()
    stored = h.kube.stored(WORKLOADS, "w", "ml")
    assert stored is not None and stored["status"]["admission"]
    assert h.held_gpus() == 8


@pytest.mark.parametrize(
    "error",
    [aiohttp.ClientConnectionError("reset by peer"), TimeoutError(), KubeError(503, "", "busy")],
)
async def test_a_broken_transport_never_escapes_the_admitter(error: BaseException) -> None:
    h = Harness()
    h.kube.seed(WORKLOADS, workload("w"))
    h.deliver()
    h.kube.fail_next("patch", error, resource=WORKLOADS)
    admitter, events = h.admitter()
    await admitter.cycle()  # raises nothing
    await events.drain()
    assert h.state.ledger.reserved("ml/w") is None
    assert h.held_gpus() == 0


async def test_a_pending_workload_gets_its_message_once(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    h.kube.seed(WORKLOADS, workload("big", count=4, gpus=8))  # a rack holds 2 such pods
    h.deliver()
    translated: list[str] = []

    def counting(obj: Obj, key: str, catalog: Any) -> Any:
        translated.append(key)
        return translate(obj, key, catalog)

    monkeypatch.setattr("topogate.state.waiting.translate", counting)
    admitter, events = h.admitter()
    await admitter.cycle()
    h.deliver()
    stored = h.kube.stored(WORKLOADS, "big", "ml")
    assert stored is not None
    pending = condition(stored, "QuotaReserved")
    assert pending is not None and pending["reason"] == "Pending"
    assert "allows to fit only 2 out of 4 pod(s)" in pending["message"]
    status_writes = len(h.kube.calls_of("patch", "workloads/status"))
    await admitter.cycle()  # same message: not written again
    assert len(h.kube.calls_of("patch", "workloads/status")) == status_writes
    # Translated once, for its first version: the version the write made only says why it
    # waits, so its translation is kept; a cycle with nothing new translates nothing.
    assert translated == ["ml/big"]
    await admitter.cycle()
    assert translated == ["ml/big"]
    # A queue change may change the answer: translated again.
    local = h.kube.stored(LOCAL_QUEUES, "q", "ml")
    assert local is not None
    h.kube.seed(LOCAL_QUEUES, {**local, "metadata": {**local["metadata"], "labels": {"x": "y"}}})
    h.deliver()
    await admitter.cycle()
    await events.drain()
    assert translated == ["ml/big", "ml/big"]


async def test_a_cycle_with_nothing_new_to_read_is_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """serve's CPU must not grow while writes wait: a pending message written back wakes no
    cycle, and a cycle whose inputs (capacity, catalog, pending queue, Workloads, ledger) are
    unchanged keeps the last outcome instead of deciding again; one that has news runs."""
    h = Harness()
    h.kube.seed(WORKLOADS, workload("big", count=4, gpus=8))  # a rack holds 2 such pods
    h.deliver()
    cycles: list[int] = []
    real = cycle_module.admission_cycle

    def counting(*args: Any, **kwargs: Any) -> Any:
        cycles.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr("topogate.controllers.admitter.admission_cycle", counting)
    admitter, events = h.admitter()
    await admitter.cycle()
    assert len(cycles) == 1
    h.state.signals.admit_event.clear()
    h.deliver()  # the pending message, written back through the watch
    assert not h.state.signals.admit_event.is_set()
    await admitter.cycle()
    assert (len(cycles), admitter.skipped) == (1, 1)
    # The message is written again if its write is lost meanwhile (the last outcome's words).
    admitter.messages.drop("ml/big")
    stored = h.kube.stored(WORKLOADS, "big", "ml")
    assert stored is not None
    status = {
        "conditions": [c for c in stored["status"]["conditions"] if c["type"] != "QuotaReserved"]
    }
    h.kube.seed(WORKLOADS, {**stored, "status": status})
    h.deliver()  # the words taken away: said again from the last outcome, no cycle run
    await admitter.cycle()
    await events.drain()
    assert (len(cycles), admitter.skipped) == (1, 2)
    said = condition(h.kube.stored(WORKLOADS, "big", "ml"), "QuotaReserved")
    assert said is not None and said["reason"] == "Pending"
    h.deliver()
    h.kube.seed(WORKLOADS, workload("small", count=1, gpus=1))  # news: it runs and admits
    h.deliver()
    await admitter.cycle()
    assert len(cycles) == 2
    assert h.state.ledger.reserved("ml/small") is not None


def test_only_waiting_words_changed() -> None:
    before = workload("w")
    pending = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "a"}
    said = {**before, "metadata": {**before["metadata"], "resourceVersion": "7"}}
    said["status"] = {"conditions": [pending]}
    assert only_waiting_words_changed(before, said)
    other = {**said, "status": {"conditions": [{**pending, "message": "b"}]}}
    assert only_waiting_words_changed(said, other)
    reserved = {**said, "status": {"conditions": [{**pending, "status": "True"}]}}
    assert not only_waiting_words_changed(said, reserved)
    evicted = {**said, "status": {"conditions": [pending, {"type": "Evicted", "status": "True"}]}}
    assert not only_waiting_words_changed(said, evicted)
    admitted = {**said, "status": {**said["status"], "admission": {"clusterQueue": "cq"}}}
    assert not only_waiting_words_changed(said, admitted)
    respec = {**said, "spec": {**said["spec"], "priority": 5}}
    assert not only_waiting_words_changed(said, respec)
    labelled = {**said, "metadata": {**said["metadata"], "labels": {"x": "y"}}}
    assert not only_waiting_words_changed(said, labelled)
    assert not only_waiting_words_changed(None, said)


def queued_job(name: str = "train", suspend: bool = True) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
        },
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "suspend": suspend,
            "template": pod_template(4),
        },
    }


async def test_job_sync_carries_a_job_from_queued_to_started_to_finished() -> None:
    h = Harness()
    h.kube.seed(JOBS, queued_job(suspend=False))
    h.deliver()
    events = EventRecorder(h.kube, "test")
    sync = JobSync(h.kube, h.state, events)
    await sync.reconcile("Job", "ml/train")
    job = h.kube.stored(JOBS, "train", "ml")
    assert job is not None and job["spec"]["suspend"] is True  # it ran without an admission
    [created] = h.kube.objects(WORKLOADS)
    assert created["spec"]["queueName"] == "q"
    assert created["metadata"]["ownerReferences"][0]["name"] == "train"
    h.deliver()
    admitter, _ = h.admitter()
    await admitter.cycle()
    h.deliver()
    await sync.reconcile("Job", "ml/train")
    job = h.kube.stored(JOBS, "train", "ml")
    assert job is not None and job["spec"]["suspend"] is False
    template = job["spec"]["template"]
    assert template["metadata"]["labels"][c.PODSET_LABEL] == "main"
    assert template["spec"]["schedulingGates"] == [{"name": c.TOPOLOGY_GATE}]
    assert template["spec"]["nodeSelector"] == {"pool": "gpu"}  # the flavor's node labels
    h.deliver()
    done = copy.deepcopy(job)
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    h.kube.seed(JOBS, done)
    h.deliver()
    await sync.reconcile("Job", "ml/train")
    await events.drain()
    stored = h.kube.stored(WORKLOADS, created["metadata"]["name"], "ml")
    finished = condition(stored, "Finished")
    assert finished is not None and finished["reason"] == "Succeeded"
    h.deliver()
    assert h.held_gpus() == 0  # the finished workload's capacity is released


async def test_job_sync_retries_after_a_broken_transport() -> None:
    h = Harness()
    h.kube.seed(JOBS, queued_job())
    h.deliver()
    h.kube.fail_next("create", aiohttp.ClientConnectionError("reset"), resource=WORKLOADS)
    events = EventRecorder(h.kube, "test")
    sync = JobSync(h.kube, h.state, events, retry_seconds=0)
    h.state.signals.take_jobs()
    await sync.reconcile_logged("Job", "ml/train")  # raises nothing
    assert h.state.signals.take_jobs() == {("Job", "ml/train")}  # and asks to try again
    await sync.reconcile_logged("Job", "ml/train")
    await events.drain()
    assert len(h.kube.objects(WORKLOADS)) == 1


async def admitted_with_a_gated_pod(h: Harness) -> Obj:
    """Workload ml/w (one pod) admitted and seen, and its pod w-0 as the Job controller makes
    it: marked and gated (not yet created)."""
    h.kube.seed(WORKLOADS, workload("w", count=1))
    h.deliver()
    admitter, events = h.admitter()
    await admitter.cycle()
    await events.drain()
    h.deliver()
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "w-0",
            "namespace": "ml",
            "labels": {c.PODSET_LABEL: "main", c.JOB_COMPLETION_INDEX: "0"},
            "annotations": {c.WORKLOAD_ANNOTATION: "w"},
        },
        "spec": {"schedulingGates": [{"name": c.TOPOLOGY_GATE}], **pod_template(4)["spec"]},
    }


async def test_the_ungater_plans_a_pod_again_after_a_broken_transport() -> None:
    from topogate.ungater.controller import Ungater

    h = Harness()
    pod = await admitted_with_a_gated_pod(h)
    h.kube.seed(PODS, pod)
    h.deliver()
    ungater = Ungater(h.kube, h.state, h.metrics)
    h.kube.fail_next("patch", aiohttp.ServerDisconnectedError(), resource=PODS)
    h.state.signals.take_ungates()
    assert await ungater.round(["ml/w"]) == set()  # raises nothing
    assert h.state.signals.take_ungates() == {"ml/w"}  # and asks for another round
    assert not ungater.expectations.pending("ml/w")
    await ungater.round(["ml/w"])
    released = h.kube.stored(PODS, "w-0", "ml")
    assert released is not None and released["spec"]["schedulingGates"] == []
    assert released["spec"]["nodeSelector"][HOST] in {"n1", "n2", "n3"}


async def test_an_admission_whose_answer_was_lost_keeps_its_capacity() -> None:
    """The status write applies, the watch shows the workload admitted, then the answer is
    lost (a timeout): the capacity stays held, or another gang could be given those nodes."""
    h = Harness()
    h.kube.seed(WORKLOADS, workload("w"))
    h.deliver()
    real_patch = h.kube.patch

    async def patch_then_deliver(*args: Any, **kwargs: Any) -> Obj:
        try:
            return await real_patch(*args, **kwargs)
        finally:
            h.deliver()  # the watch is faster than the lost answer

    h.kube.patch = patch_then_deliver  # type: ignore[method-assign]
    h.kube.fail_next("patch", TimeoutError(), resource="workloads/status", after_write=True)
    admitter, events = h.admitter()
    await admitter.cycle()
    await events.drain()
    stored = h.kube.stored(WORKLOADS, "w", "ml")
    assert stored is not None and stored["status"]["admission"]
    assert h.held_gpus() == 8
    assert "ml/w" in h.state.ledger.held()


async def test_an_admission_lost_before_the_watch_is_held_again_when_the_watch_shows_it() -> None:
    h = Harness()
    h.kube.seed(WORKLOADS, workload("w"))
    h.deliver()
    h.kube.fail_next("patch", TimeoutError(), resource="workloads/status", after_write=True)
    admitter, events = h.admitter()
    await admitter.cycle()
    await events.drain()
    assert h.held_gpus() == 0  # not known to be admitted yet
    h.deliver()
    assert h.held_gpus() == 8  # the watch shows it: held from its status


def test_a_queue_whose_quota_cannot_be_counted_is_left_out_not_fatal() -> None:
    h = Harness()
    bad = copy.deepcopy(h.kube.stored(CLUSTER_QUEUES, "cq"))
    assert bad is not None
    bad["metadata"]["name"] = "huge"
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "1e400"
    h.kube.seed(CLUSTER_QUEUES, bad)
    h.deliver()
    catalog = h.state.catalogs.catalog()
    assert "huge" not in catalog.queues and "cq" in catalog.queues


def test_node_changes_reparse_the_catalog_only_when_hypernodes_follow_them() -> None:
    h = Harness()
    generation = h.state.catalogs.generation
    node = copy.deepcopy(h.kube.stored(NODES, "n1"))
    assert node is not None
    node["metadata"]["labels"]["extra"] = "x"
    h.kube.seed(NODES, node)
    h.deliver()
    assert h.state.catalogs.generation == generation


async def test_a_high_priority_gang_preempts_and_runs_once_the_victim_pods_are_gone() -> None:
    """Evict the lower-priority workload, suspend its job, take its admission back when its
    pods are gone, then admit the preemptor on the capacity it freed; never before."""
    h = Harness()
    queue = h.kube.stored(CLUSTER_QUEUES, "cq")
    assert queue is not None
    queue["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    h.kube.seed(CLUSTER_QUEUES, queue)
    h.kube.seed(JOBS, queued_job("low"))
    h.deliver()
    events = EventRecorder(h.kube, "test")
    sync = JobSync(h.kube, h.state, events)
    admitter, _ = h.admitter()
    await sync.reconcile("Job", "ml/low")
    h.deliver()
    [low] = h.kube.objects(WORKLOADS)
    low_key = f"ml/{low['metadata']['name']}"
    # The low-priority job takes 3 pods x 6 GPUs, one per node: no rack has room for more.
    low["spec"]["podSets"][0]["count"] = 3
    low["spec"]["podSets"][0].pop("topologyRequest", None)
    low["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"][
        "nvidia.com/gpu"
    ] = "6"
    low["spec"]["podSets"][0]["template"]["metadata"]["annotations"] = {}
    h.kube.seed(WORKLOADS, low)
    h.deliver()
    await admitter.cycle()
    h.deliver()
    assert h.state.ledger.admission_of(low_key) is not None
    await sync.reconcile("Job", "ml/low")  # started
    h.deliver()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "low-0",
            "namespace": "ml",
            "labels": {c.PODSET_LABEL: "main"},
            "annotations": {c.WORKLOAD_ANNOTATION: low["metadata"]["name"]},
        },
        "spec": {"nodeName": "n1", **pod_template(6)["spec"]},
        "status": {"phase": "Running"},
    }
    h.kube.seed(PODS, pod)
    h.deliver()
    high = workload("high", count=2, gpus=4)
    high["spec"]["priority"] = 100
    h.kube.seed(WORKLOADS, high)
    h.deliver()
    await admitter.cycle()
    h.deliver()
    evicted = h.kube.stored(WORKLOADS, low["metadata"]["name"], "ml")
    assert condition(evicted, "Evicted")["reason"] == "Preempted"  # type: ignore[index]
    assert condition(evicted, "Preempted")["reason"] == "InClusterQueue"  # type: ignore[index]
    assert "ml/high" in condition(evicted, "Evicted")["message"]  # type: ignore[index]
    pending = condition(h.kube.stored(WORKLOADS, "high", "ml"), "QuotaReserved")
    assert pending is not None and "preempting 1 workload(s)" in pending["message"]
    assert h.state.ledger.admission_of("ml/high") is None  # not while the victim still holds nodes
    # The job sync suspends the victim's job; its pod still runs, so it keeps its hold.
    await sync.reconcile("Job", "ml/low")
    h.deliver()
    job = h.kube.stored(JOBS, "low", "ml")
    assert job is not None and job["spec"]["suspend"] is True
    await sync.reconcile("Job", "ml/low")
    h.deliver()
    assert h.state.ledger.admission_of(low_key) is not None
    await admitter.cycle()
    h.deliver()
    assert h.state.ledger.admission_of("ml/high") is None  # never onto nodes a victim still uses
    # The Job controller deletes the pod: the admission is taken back.
    await h.kube.delete(PODS, "low-0", "ml")
    h.deliver()
    await sync.reconcile("Job", "ml/low")
    h.deliver()
    requeued = h.kube.stored(WORKLOADS, low["metadata"]["name"], "ml")
    assert requeued is not None and not requeued["status"].get("admission")
    assert condition(requeued, "QuotaReserved")["reason"] == "Evicted"  # type: ignore[index]
    assert low_key not in h.state.ledger.held()
    await admitter.cycle()
    await events.drain()
    h.deliver()
    assert h.state.ledger.admission_of("ml/high") is not None


class GatedKube(FakeKube):
    """A FakeKube whose writes wait until the gate opens: an API server that answers late."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.asked = 0  # writes sent, answered or not

    async def patch(self, *args: Any, **kwargs: Any) -> Obj:
        self.asked += 1
        check_before_send()  # the request leaves now, as the real client's; the answer is late
        await self.gate.wait()
        return await super().patch(*args, **kwargs)


async def test_a_cycle_never_waits_for_its_writes_and_writes_each_workload_once() -> None:
    h = Harness()
    gated = GatedKube()
    for resource in WATCHED:
        for obj in h.kube.objects(resource):
            gated.seed(resource, obj)
    h.kube = gated
    gated.seed(WORKLOADS, workload("fits"))
    gated.seed(WORKLOADS, workload("big", count=4, gpus=8))  # a rack holds 2 such pods
    h.deliver()
    admitter, events = h.admitter()
    admitter.decide()  # returns at once: the writes wait for the gate
    assert h.state.ledger.reserved("ml/fits") is not None  # held before its write
    assert h.held_gpus() == 8
    admitter.decide()  # "big" now sees "fits" held: its message may change once
    await asyncio.sleep(0.01)  # the spawned writes reach the (late) API server
    asked = gated.asked
    admitter.decide()  # nothing changed: nothing more to write
    admitter.decide()
    await asyncio.sleep(0.01)
    assert gated.asked == asked
    assert gated.calls_of("patch") == []  # none answered yet, and the cycles went on
    gated.gate.set()
    await admitter.settle()
    await events.drain()
    writes = [(c.resource, c.name) for c in gated.calls_of("patch")]
    assert writes.count(("workloads/status", "fits")) == 1
    assert writes.count(("workloads", "fits")) == 1  # its GPU sets
    big = [c for c in gated.calls_of("patch") if c.name == "big"]
    messages = [c.body["status"]["conditions"][-1]["message"] for c in big]
    assert len(messages) == len(set(messages)) >= 1  # each message once
    stored = gated.stored(WORKLOADS, "big", "ml")
    assert stored is not None
    pending = condition(stored, "QuotaReserved")
    assert pending is not None and pending["message"] == messages[-1]


async def test_an_admission_right_after_a_pending_write_builds_on_its_version() -> None:
    h = Harness()
    gated = GatedKube()
    for resource in WATCHED:
        for obj in h.kube.objects(resource):
            gated.seed(resource, obj)
    h.kube = gated
    gated.seed(WORKLOADS, workload("w", count=2, gpus=8))
    cordon(h, True)
    admitter, events = h.admitter()
    admitter.decide()  # no room: a pending write is spawned
    await asyncio.sleep(0.01)  # ... and sent: the API server has not answered yet
    cordon(h, False)
    admitter.decide()  # room now: admitted, its write queued after the pending one
    gated.gate.set()
    await admitter.settle()
    await events.drain()
    stored = h.kube.stored(WORKLOADS, "w", "ml")
    assert stored is not None and stored["status"].get("admission")  # no 409 on the way
    assert h.attempts("conflict") == 0
    assert [c.resource for c in gated.calls_of("patch")] == [
        "workloads/status",  # pending
        "workloads",  # GPU sets
        "workloads/status",  # admitted
    ]


async def test_a_pending_write_not_sent_yet_is_dropped_when_the_workload_is_admitted() -> None:
    h = Harness()
    h.kube.seed(WORKLOADS, workload("w", count=2, gpus=8))
    cordon(h, True)
    admitter, events = h.admitter()
    admitter.decide()  # no room: a pending write is spawned, not sent yet
    cordon(h, False)
    admitter.decide()  # room now: admitted before the pending write was sent
    await admitter.settle()
    await events.drain()
    assert [c.resource for c in h.kube.calls_of("patch")] == ["workloads", "workloads/status"]
    stored = h.kube.stored(WORKLOADS, "w", "ml")
    assert stored is not None and stored["status"].get("admission")


def cordon(h: Harness, unschedulable: bool) -> None:
    for node in h.kube.objects(NODES):
        h.kube.seed(NODES, {**node, "spec": {"unschedulable": unschedulable}})
    h.deliver()


async def test_serve_loop_writes_a_message_it_put_off_without_another_change() -> None:
    """The loop words pending messages at most once a second; one left unwritten by a cycle
    gets its own cycle when due, though nothing else changes."""
    h = Harness()
    h.kube.seed(WORKLOADS, workload("big", count=4, gpus=8))  # a rack holds 2 such pods
    h.deliver()
    admitter, events = h.admitter()
    loop = asyncio.create_task(admitter.run())

    def message(name: str) -> str | None:
        stored = h.kube.stored(WORKLOADS, name, "ml")
        pending = condition(stored or {}, "QuotaReserved")
        return None if pending is None else str(pending["message"])

    async def until(check: Callable[[], bool], seconds: float) -> None:
        for _ in range(int(seconds / 0.01)):
            if check():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"not within {seconds} s")

    try:
        await until(lambda: message("big") is not None, 5)  # the first cycle words it
        h.kube.seed(WORKLOADS, workload("big2", count=4, gpus=8))
        h.deliver()  # wakes a cycle within the second: it decides, and puts the words off
        await until(lambda: admitter.cycles >= 2, 5)
        await until(lambda: message("big2") is not None, 5)
        assert "allows to fit only 2 out of 4 pod(s)" in str(message("big2"))
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        await events.drain()


async def test_pending_messages_go_out_at_the_rate_asked_oldest_first() -> None:
    """--pending-status-qps bounds the courtesy writes (burst: one second's worth), the
    oldest queued first; every message still goes out."""
    h = Harness()
    names = [f"big{i:02d}" for i in range(30)]
    for name in names:
        h.kube.seed(WORKLOADS, workload(name, count=4, gpus=8))  # never fits: a message each
    h.deliver()
    events = EventRecorder(h.kube, "test")
    admitter = Admitter(h.kube, h.state, h.metrics, events, pending_qps=20)
    started = time.monotonic()
    await admitter.cycle()
    elapsed = time.monotonic() - started
    writes = h.kube.calls_of("patch", "workloads/status")
    assert [c.name for c in writes] == names  # in the cycle's order: the queue's
    assert elapsed >= (30 - 20) / 20 * 0.9  # 20 at once, then 20 a second
    await events.drain()


async def test_serve_loop_writes_a_pending_message_again_after_a_broken_transport() -> None:
    """A pending message whose write failed is written again by the next wording, which
    comes by itself (nothing else changes in this cluster)."""
    h = Harness()
    h.kube.seed(WORKLOADS, workload("big", count=4, gpus=8))  # never fits: a message
    h.deliver()
    h.kube.fail_next("patch", aiohttp.ClientConnectionError("reset"), resource=WORKLOADS)
    admitter, events = h.admitter()
    loop = asyncio.create_task(admitter.run())
    try:
        for _ in range(500):  # 5 s at most
            stored = h.kube.stored(WORKLOADS, "big", "ml")
            if condition(stored or {}, "QuotaReserved") is not None:
                break
            await asyncio.sleep(0.01)
        assert len(h.kube.calls_of("patch", "workloads/status")) == 2  # failed, then written
        pending = condition(h.kube.stored(WORKLOADS, "big", "ml") or {}, "QuotaReserved")
        assert pending is not None and pending["reason"] == "Pending"
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        await events.drain()


async def test_an_ungater_round_for_a_workload_without_gated_pods_reads_no_admission(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every admission signals a round: one whose Workload has no pod yet (or none gated
    any more) returns before its admission is read (decoded, flavors looked up); the pod
    that comes later is released."""
    from topogate.ungater.controller import Ungater

    h = Harness()
    pod = await admitted_with_a_gated_pod(h)
    ungater = Ungater(h.kube, h.state, h.metrics)
    read: list[str] = []
    real = h.state.ledger.admission_of

    def reading(key: str) -> Obj | None:
        read.append(key)
        return real(key)

    monkeypatch.setattr(h.state.ledger, "admission_of", reading)
    assert await ungater.round(["ml/w"]) == set() and read == []  # no pod yet
    released = {**pod, "spec": {**pod["spec"], "schedulingGates": []}}
    h.kube.seed(PODS, released)
    h.deliver()
    assert await ungater.round(["ml/w"]) == set() and read == []  # none gated
    h.kube.seed(PODS, pod)
    h.deliver()
    await ungater.round(["ml/w"])
    assert read == ["ml/w"]
    stored = h.kube.stored(PODS, "w-0", "ml")
    assert stored is not None and stored["spec"]["schedulingGates"] == []
