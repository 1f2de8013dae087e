"""Partial admission through the shells against FakeKube: the job sync creates a Workload with
minCount, the admitter writes the admitted count, the job sync runs the Job with that
parallelism and gives the full parallelism back when the Workload is evicted."""

from __future__ import annotations

from tests.kit import written_domains
from topogate.api.objects import condition
from topogate.controllers.jobsync import JobSync
from topogate.kube.events import EventRecorder
from topogate.kube.resources import JOBS, WORKLOADS

from .test_shells import RACK, Harness, pod_template, queued_job

MIN = "kueue.x-k8s.io/job-min-parallelism"


async def test_a_job_with_min_parallelism_runs_with_what_fits_and_gets_it_back() -> None:
    h = Harness()
    job = queued_job()
    job["metadata"]["annotations"] = {MIN: "1"}
    job["spec"].update(parallelism=4, completions=4, template=pod_template(8))
    h.kube.seed(JOBS, job)
    h.deliver()
    events = EventRecorder(h.kube, "test")
    sync = JobSync(h.kube, h.state, events)
    await sync.reconcile("Job", "ml/train")
    h.deliver()
    [created] = h.kube.objects(WORKLOADS)
    assert created["spec"]["podSets"][0]["count"] == 4
    assert created["spec"]["podSets"][0]["minCount"] == 1
    name = created["metadata"]["name"]

    # Four 8-GPU pods in one rack: rack r1 holds two (n1, n2), r2 one. Two are admitted.
    admitter, _ = h.admitter()
    await admitter.cycle()
    await admitter.settle()
    h.deliver()
    stored = h.kube.stored(WORKLOADS, name, "ml")
    assert stored is not None
    [assignment] = stored["status"]["admission"]["podSetAssignments"]
    assert assignment["count"] == 2
    assert assignment["resourceUsage"]["nvidia.com/gpu"] == "16"
    domains = written_domains(assignment["topologyAssignment"])
    assert sorted(d["values"][0] for d in domains) == ["n1", "n2"]  # one rack, as required
    assert {d["count"] for d in domains} == {1}
    assert RACK not in assignment["topologyAssignment"]["levels"]  # hostname only
    admitted = condition(stored, "Admitted")
    assert admitted is not None and admitted["message"].endswith(
        "with fewer pods (partial admission): main 2"
    )

    await sync.reconcile("Job", "ml/train")
    h.deliver()
    started = h.kube.stored(JOBS, "train", "ml")
    assert started is not None and started["spec"]["suspend"] is False
    assert started["spec"]["parallelism"] == 2  # the admitted count
    assert started["spec"]["completions"] == 4  # unchanged, as in Kueue

    # Evicted: the job is suspended with its parallelism given back.
    evicted = h.kube.stored(WORKLOADS, name, "ml")
    assert evicted is not None
    evicted["status"]["conditions"].append(
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "test"}
    )
    h.kube.seed(WORKLOADS, evicted)
    h.deliver()
    await sync.reconcile("Job", "ml/train")
    h.deliver()
    stopped = h.kube.stored(JOBS, "train", "ml")
    assert stopped is not None and stopped["spec"]["suspend"] is True
    assert stopped["spec"]["parallelism"] == 4
    await sync.reconcile("Job", "ml/train")  # no pods left: the admission is taken back
    h.deliver()
    requeued = h.kube.stored(WORKLOADS, name, "ml")
    assert requeued is not None and not requeued["status"].get("admission")
    assert condition(requeued, "QuotaReserved")["reason"] == "Evicted"  # type: ignore[index]
    await events.drain()
