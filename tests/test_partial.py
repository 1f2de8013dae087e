"""Partial admission (Kueue's job-min-parallelism / PodSet minCount): the pure parts.

The search (admission/partial.py, Kueue's PodSetReducer), the admission cycle trying fewer
pods only when neither the whole gang fits nor preemption helps, with the same topology rules
for the admitted part, the Job's annotation read and checked as Kueue's Job webhook does, and
the job integration setting and restoring the Job's parallelism.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kit import BLOCK, GPU, HOST, L3, RACK, node, podset, review_for, written_domains
from topogate.admission.assignments import pod_set_assignments
from topogate.admission.cycle import FlavorTopology, SnapshotPlacer, admission_cycle
from topogate.admission.integration import admitted_job, desired_workload, restored_spec
from topogate.admission.lanes import PendingWorkload
from topogate.admission.partial import can_shrink, largest_fit
from topogate.admission.preemption import Preemption
from topogate.admission.quota import FlavorQuota, QueueSpec
from topogate.admission.request import PlacementRequest, PodSetRequest
from topogate.api.errors import InputError
from topogate.api.jobs import workload_from_object
from topogate.cache.snapshot import ClusterSnapshot
from topogate.cache.topology import DomainTree
from topogate.cli import main
from topogate.commands.status import document, render_table, summarize
from topogate.ungater.ranks import Domain, PodView, plan_ungates
from topogate.webhooks.review import Review, validate

MIN = "kueue.x-k8s.io/job-min-parallelism"
EXAMPLES = Path(__file__).resolve().parent.parent / "topogate" / "examples"

# One block, two racks of two 8-GPU hosts: a rack holds two 8-GPU pods, the block four.
NODES = [
    node(f"b1-r{r}-h{h}", "b1", f"r{r}", f"h{r}{h}", cpu=8000, gpu=8)
    for r in range(2)
    for h in range(2)
]


def _placer(nodes: Sequence[Any] = NODES) -> SnapshotPlacer:
    snapshot = ClusterSnapshot.build(list(nodes))
    return SnapshotPlacer(
        snapshot, {"gpu": FlavorTopology(DomainTree.from_labels(snapshot, L3), "dc")}
    )


def _queue(gpus: int = 64) -> QueueSpec:
    return QueueSpec("cq", "BestEffortFIFO", (FlavorQuota("gpu", {GPU: gpus}),))


def _pending(
    key: str, ps: PodSetRequest, min_count: int | None, priority: int = 0
) -> PendingWorkload:
    request = PlacementRequest(key, (dataclasses.replace(ps, min_count=min_count),))
    return PendingWorkload(key, "cq", priority, "2026-01-01T00:00:00Z", request)


def _counts(ps: Sequence[tuple[int, int | None]]) -> PlacementRequest:
    return PlacementRequest(
        "ns/w",
        tuple(dataclasses.replace(podset(n, f"ps{i}"), min_count=m) for i, (n, m) in enumerate(ps)),
    )


# --- the search --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("podsets", "limit", "want"),
    [
        # Kueue's own cases (pkg/scheduler/flavorassigner/podset_reducer_test.go).
        ([(1, None), (2, 2)], 2, None),  # partial not available
        ([(5, 3), (5, 4), (5, 1), (5, 2)], 15, 15),
        ([(5, 3), (5, None), (5, None), (5, None)], 19, 19),
        ([(5, 3), (5, 4), (5, 1), (5, 2)], 10, 10),  # to the minima
        ([(5, 3), (5, 4), (5, 1), (5, 2)], 20, 20),
        ([(150_000, 1)] * 8, 150_000, 150_000),  # no overflow
        ([(150_000, 1)] + [(1, None)] * 7, 150_000, 150_000),
        ([(0, None)], 0, None),  # a podset of no pods
    ],
)
def test_the_search_finds_kueues_largest_counts(
    podsets: list[tuple[int, int | None]], limit: int, want: int | None
) -> None:
    def fits(request: PlacementRequest) -> int | None:
        total = sum(p.count for p in request.podsets)
        return total if total <= limit else None

    found = largest_fit(_counts(podsets), fits)
    assert (found[1] if found else None) == want


def test_the_search_probes_like_kueues_binary_search() -> None:
    """Go's sort.Search over the reduction index 0..D: the same probes, so the same answer
    even where fitting is not monotone (here 6 fits, 5 does not, 4 and below do): Kueue's
    search settles on 4, and so does ours."""
    probes: list[int] = []

    def fits(request: PlacementRequest) -> int | None:
        probes.append(request.podsets[0].count)
        return request.podsets[0].count if request.podsets[0].count in (6, 4, 3, 2) else None

    found = largest_fit(_counts([(8, 2)]), fits)
    assert probes == [5, 3, 4]  # indices 3, 5, 4 of 0..6
    assert found is not None and found[1] == 4


def test_slices_are_tried_in_whole_slices() -> None:
    """With a rack slice of 2, count 5 is tried as 4 (topogate refuses a count its slices do
    not divide); and nothing below the minimum is ever tried."""
    request = PlacementRequest(
        "ns/w", (dataclasses.replace(podset(8, slice=(RACK, 2)), min_count=3),)
    )
    tried: list[int] = []

    def fits(smaller: PlacementRequest) -> int | None:
        tried.append(smaller.podsets[0].count)
        return smaller.podsets[0].count if smaller.podsets[0].count <= 5 else None

    found = largest_fit(request, fits)
    assert found is not None and found[1] == 4
    assert all(n % 2 == 0 and n >= 3 for n in tried)


def test_can_shrink_only_with_a_minimum_below_the_count() -> None:
    assert can_shrink(_counts([(4, 2)]))
    assert not can_shrink(_counts([(4, None)]))
    assert not can_shrink(_counts([(4, 4)]))


# --- the admission cycle -----------------------------------------------------------------


def test_quota_for_fewer_pods_admits_the_largest_count_that_fits() -> None:
    usage: dict[tuple[str, str], dict[str, int]] = {}
    pending = [_pending("ns/w", podset(4, gpu=8, preferred=BLOCK), min_count=2)]
    result = admission_cycle({"cq": _queue(gpus=24)}, pending, usage, _placer())
    assert [a.key for a in result.admitted] == ["ns/w"]
    admitted = result.admitted[0]
    assert admitted.request is not None and admitted.request.podsets[0].count == 3
    assert admitted.usage == {GPU: 24}
    assert usage == {("cq", "gpu"): {GPU: 24}}
    assert admitted.decision is not None
    assert sum(d.count for d in admitted.decision.placements[0].domains) == 3
    written = pod_set_assignments(admitted.request, admitted.decision, "gpu")[0]
    assert written.count == 3 and written.resource_usage == {GPU: "24"}


def test_a_required_rack_admits_as_many_as_one_rack_holds_all_in_it() -> None:
    pending = [_pending("ns/w", podset(4, gpu=8, required=RACK), min_count=1)]
    result = admission_cycle({"cq": _queue()}, pending, {}, _placer())
    admitted = result.admitted[0]
    assert admitted.request is not None and admitted.request.podsets[0].count == 2
    assert admitted.decision is not None
    hosts = admitted.decision.placements[0].node_counts
    assert sum(hosts.values()) == 2
    assert len({name.split("-")[1] for name in hosts}) == 1  # one rack, as required


def test_earlier_admissions_hold_capacity_for_the_partial_search() -> None:
    first = _pending("ns/a", podset(2, gpu=8, required=RACK), None, priority=1)
    second = _pending("ns/b", podset(4, gpu=8, required=BLOCK), min_count=1)
    third = _pending("ns/c", podset(1, gpu=8), None)
    result = admission_cycle({"cq": _queue()}, [first, second, third], {}, _placer())
    assert [a.key for a in result.admitted] == ["ns/a", "ns/b"]
    b = result.admitted[1]
    assert b.request is not None and b.request.podsets[0].count == 2
    # The partial admission's two pods hold the last rack: nothing is left for ns/c.
    assert "ns/c" in result.pending


def test_nothing_down_to_the_minimum_fits_keeps_the_full_counts_message() -> None:
    pending = [_pending("ns/w", podset(4, gpu=8, required=RACK), min_count=3)]
    result = admission_cycle({"cq": _queue()}, pending, {}, _placer())
    assert result.admitted == []
    assert result.pending["ns/w"] == (
        'flavor gpu: main: topology "dc" allows to fit only 2 out of 4 pod(s); '
        "no smaller count down to minCount (main 3) fits either"
    )


def test_kueues_tas_workload_trimmed_by_partial_admission() -> None:
    """Kueue's scheduler_tas_test.go case "TAS workload gets scheduled as trimmed by partial
    admission": one node of 1 CPU, five 1-CPU pods required on one host, minCount 1: one pod
    is admitted, on x1."""
    nodes = [node("x1", "b", "r", "x1", cpu=1000, memory="1Gi", pods=10)]
    queue = QueueSpec("cq", "BestEffortFIFO", (FlavorQuota("tas", {"cpu": 10_000}),))
    snapshot = ClusterSnapshot.build(nodes)
    placer = SnapshotPlacer(
        snapshot, {"tas": FlavorTopology(DomainTree.from_labels(snapshot, L3), "tas")}
    )
    pending = [_pending("default/foo", podset(5, cpu=1000, required=HOST), min_count=1)]
    result = admission_cycle({"cq": queue}, pending, {}, placer)
    [admitted] = result.admitted
    assert admitted.request is not None and admitted.decision is not None
    [written] = pod_set_assignments(admitted.request, admitted.decision, "tas")
    assert written.count == 1 and written.resource_usage == {"cpu": "1"}
    assert written.topology_assignment is not None
    topology = written.topology_assignment.model_dump(by_alias=True, exclude_none=True)
    assert written_domains(topology) == [{"values": ["x1"], "count": 1}]


def test_a_whole_gang_that_fits_is_never_shrunk() -> None:
    pending = [_pending("ns/w", podset(4, gpu=8, preferred=BLOCK), min_count=1)]
    result = admission_cycle({"cq": _queue()}, pending, {}, _placer())
    assert result.admitted[0].request is None  # admitted as asked, all four pods


def test_preemption_for_all_pods_goes_before_fewer_pods() -> None:
    """Kueue decreases the count only when preemption cannot make room for the whole gang."""
    plans: list[str] = []

    def preempt(workload: PendingWorkload, *_: Any) -> Preemption | None:
        plans.append(workload.key)
        return Preemption("gpu", (), None) if workload.key == "ns/preempts" else None

    queue = dataclasses.replace(_queue(gpus=24))
    queue = dataclasses.replace(
        queue, preemption=dataclasses.replace(queue.preemption, within_cluster_queue="Any")
    )
    for key, admitted in (("ns/preempts", False), ("ns/shrinks", True)):
        pending = [_pending(key, podset(4, gpu=8), min_count=2)]
        result = admission_cycle({"cq": queue}, pending, {}, _placer(), preempt)
        assert bool(result.admitted) is admitted, key
        if not admitted:
            assert "preempting 0 workload(s)" in result.pending[key]
    assert plans == ["ns/preempts", "ns/shrinks"]


# --- the Job's annotation ----------------------------------------------------------------


def _job(
    parallelism: int = 8,
    completions: int | None = 8,
    annotations: dict[str, str] | None = None,
    template_annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "completionMode": "Indexed",
        "template": {
            "metadata": {"annotations": dict(template_annotations or {})},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        },
    }
    if completions is not None:
        spec["completions"] = completions
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "uid": "u1",
            "resourceVersion": "7",
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


def test_the_annotation_becomes_the_podsets_min_count() -> None:
    workload = workload_from_object(_job(annotations={MIN: "5"})).workload
    assert workload.spec.pod_sets[0].min_count == 5
    assert workload.to_wire()["spec"]["podSets"][0]["minCount"] == 5
    # topogate's own prefix says the same
    own = {"topogate.dev/job-min-parallelism": "3"}
    assert workload_from_object(_job(annotations=own)).workload.spec.pod_sets[0].min_count == 3
    assert workload_from_object(_job()).workload.spec.pod_sets[0].min_count is None
    # Atoi takes a leading +, so Kueue admits "+3" as 3
    plus = {MIN: "+3"}
    assert workload_from_object(_job(annotations=plus)).workload.spec.pod_sets[0].min_count == 3


@pytest.mark.parametrize(
    ("value", "parallelism", "completions", "message"),
    [
        ("abc", 8, 8, "Invalid value: 'abc': must be an integer"),
        ("0", 8, 8, "Invalid value: 0: should be between 0 and 7"),
        ("8", 8, 8, "Invalid value: 8: should be between 0 and 7"),
        ("5", 8, 4, "Invalid value: 5: should be between 0 and 3"),  # min(parallelism, completions)
        ("-2", 8, 8, "Invalid value: -2: should be between 0 and 7"),
        # As Go's strconv.Atoi, which Kueue's webhook parses it with: no spaces, no exponent.
        (" 3", 8, 8, "Invalid value: ' 3': must be an integer"),
        ("3\n", 8, 8, "Invalid value: '3\\n': must be an integer"),
        ("1e3", 8, 8, "Invalid value: '1e3': must be an integer"),
        ("\uff13", 8, 8, "Invalid value: '\uff13': must be an integer"),  # a fullwidth 3
    ],
)
def test_a_bad_minimum_is_refused_naming_the_annotation(
    value: str, parallelism: int, completions: int, message: str
) -> None:
    with pytest.raises(InputError) as caught:
        workload_from_object(_job(parallelism, completions, {MIN: value}))
    assert caught.value.field == f"metadata.annotations[{MIN}]"
    assert message in caught.value.describe()


def test_an_update_that_keeps_the_annotation_may_run_at_the_minimum() -> None:
    """The job sync writes parallelism = the admitted count, which may be the minimum: as
    Kueue's webhook, the range is checked only when the annotation is new or changes."""
    job = _job(parallelism=5, annotations={MIN: "5"})
    with pytest.raises(InputError):
        workload_from_object(job)
    assert (
        workload_from_object(job, check_min_range=False).workload.spec.pod_sets[0].min_count is None
    )


def test_a_jobset_ignores_the_annotation_as_kueue_does() -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ml", "annotations": {MIN: "1"}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "parallelism": 2,
                            "template": {"spec": {"containers": [{"name": "c"}]}},
                        }
                    },
                }
            ]
        },
    }
    workload = workload_from_object(jobset).workload
    assert [p.min_count for p in workload.spec.pod_sets] == [None]


def test_volcano_refusal_says_how_to_keep_min_available() -> None:
    vcjob = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "v", "namespace": "ml"},
        "spec": {"minAvailable": 3, "tasks": [{"name": "w", "replicas": 4}]},
    }
    with pytest.raises(InputError) as caught:
        workload_from_object(vcjob)
    assert f'annotate the Job with {MIN}: "3"' in caught.value.describe()
    whole = {**vcjob, "spec": {"minAvailable": 4, "tasks": [{"name": "w", "replicas": 4}]}}
    with pytest.raises(InputError) as caught:
        workload_from_object(whole)
    assert MIN not in caught.value.describe()


# --- the job integration -----------------------------------------------------------------


def test_the_job_runs_with_the_admitted_count_and_gets_its_parallelism_back() -> None:
    job = _job(parallelism=8, completions=8, annotations={MIN: "4"})
    workload = desired_workload(job, lambda _: None)
    assert workload["spec"]["podSets"][0]["minCount"] == 4
    assert restored_spec(job, workload) is None  # never started: nothing to give back
    started = admitted_job(job, "w", {}, None, {"main": 5})
    assert started["spec"]["parallelism"] == 5 and started["spec"]["completions"] == 8
    assert restored_spec(started, workload) == {"parallelism": 8}
    # a Job without the annotation keeps its parallelism, whatever the count says
    plain = admitted_job(_job(), "w", {}, None, {"main": 5})
    assert plain["spec"]["parallelism"] == 8
    plain["spec"]["parallelism"] = 5
    assert restored_spec(plain, workload) is None


def test_completions_follow_parallelism_with_kueues_sync_annotation() -> None:
    sync = {MIN: "2", "kueue.x-k8s.io/job-completions-equal-parallelism": "true"}
    job = _job(parallelism=6, completions=6, annotations=sync)
    workload = desired_workload(job, lambda _: None)
    started = admitted_job(job, "w", {}, None, {"main": 3})
    assert (started["spec"]["parallelism"], started["spec"]["completions"]) == (3, 3)
    assert restored_spec(started, workload) == {"parallelism": 6, "completions": 6}


# --- topogate status ---------------------------------------------------------------------


def test_status_shows_the_admitted_count_of_the_requested() -> None:
    spec = {"queueName": "q", "podSets": [{"name": "main", "count": 4, "minCount": 1}]}
    assignment = {
        "name": "main",
        "count": 2,
        "topologyAssignment": {
            "levels": ["kubernetes.io/hostname"],
            "domains": [{"values": ["n1"], "count": 1}, {"values": ["n2"], "count": 1}],
        },
    }
    admitted = {
        "metadata": {"name": "w", "namespace": "ml"},
        "spec": spec,
        "status": {
            "conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted"}],
            "admission": {"clusterQueue": "cq", "podSetAssignments": [assignment]},
        },
    }
    waiting = {"metadata": {"name": "v", "namespace": "ml"}, "spec": spec}
    summaries = summarize([admitted, waiting], [])
    table = render_table(summaries, "ml")
    assert "PODSET main  COUNT 2 of 4 (partial admission, minCount 1)  LEVELS" in table
    assert "PODSET main  COUNT 4 (minCount 1)  LEVELS" in table
    [v, w] = document(summaries)["workloads"]
    assert (w["podSets"][0]["admittedCount"], w["podSets"][0]["minCount"]) == (2, 1)
    assert (v["podSets"][0]["admittedCount"], v["podSets"][0]["count"]) == (None, 4)


# --- topogate plan -----------------------------------------------------------------------


def _example_job(tmp_path: Path, minimum: str) -> Path:
    """The built-in example Job (one block of 8-GPU hosts required), asking for 12 pods."""
    job = yaml.safe_load((EXAMPLES / "training-job.yaml").read_text())
    job["metadata"]["annotations"] = {MIN: minimum}
    job["spec"]["parallelism"] = job["spec"]["completions"] = 12
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_plan_places_as_many_as_one_block_holds_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["plan", "--cluster", str(EXAMPLES / "cluster.yaml")]
    job = str(_example_job(tmp_path, "4"))
    assert main([*args, "--workload", job, "-o", "table"]) == 0
    table = capsys.readouterr().out
    assert (
        "podset main: 6 of 12 pod(s), required cloud.example.com/topology-block (partial admission: all 12 do not fit, minCount 4)"
        in table
    )
    assert main([*args, "--workload", job, "-o", "json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["spec"]["podSets"][0]["count"] == 12  # asked for, unchanged
    [assignment] = planned["status"]["admission"]["podSetAssignments"]
    assert assignment["count"] == 6
    domains = written_domains(assignment["topologyAssignment"])
    assert sum(d["count"] for d in domains) == 6
    assert "partial admission" in planned["status"]["conditions"][0]["message"]
    # A minimum above what one block holds: it does not fit, with the whole gang's reason.
    assert main([*args, "--workload", str(_example_job(tmp_path, "7"))]) == 1


# --- the validating webhook ----------------------------------------------------------------


def _validated(obj: dict[str, Any], operation: str, old: dict[str, Any] | None) -> dict[str, Any]:
    body = review_for(obj, "Job", "batch", operation=operation, namespace="ml")
    if old is not None:
        body["request"]["oldObject"] = old
    answer: dict[str, Any] = validate(Review.parse(body))["response"]
    return answer


def test_the_webhook_checks_the_range_on_create_and_when_the_annotation_changes() -> None:
    queued = _job(parallelism=6, completions=6, annotations={MIN: "3"})
    queued["spec"]["suspend"] = True  # as the mutating webhook leaves it
    running = _job(parallelism=3, completions=6, annotations={MIN: "3"})
    assert _validated(queued, "CREATE", None)["allowed"] is True
    # The job sync runs it with the admitted count, here the minimum itself.
    assert _validated(running, "UPDATE", queued)["allowed"] is True
    refused = _validated(running, "CREATE", None)
    assert refused["allowed"] is False and refused["status"]["code"] == 422
    assert f"metadata.annotations[{MIN}]: Invalid value: 3" in refused["status"]["message"]
    changed = _job(parallelism=6, completions=6, annotations={MIN: "6"})
    assert _validated(changed, "UPDATE", queued)["allowed"] is False


# --- the ungater ---------------------------------------------------------------------------


def test_the_ungater_releases_no_more_pods_than_were_admitted() -> None:
    """Indexed pods beyond the admitted count (completions above parallelism) wait: rank
    mode gives up on indices past the count, and greedy mode fills only the assigned slots."""
    pods = [
        PodView(
            f"p{i}",
            f"u{i}",
            labels={"batch.kubernetes.io/job-completion-index": str(i)},
            gated=True,
        )
        for i in range(5)
    ]
    domains = [Domain(("n1",), 2), Domain(("n2",), 1)]
    plan = plan_ungates(["kubernetes.io/hostname"], domains, pods, count=3)
    assert [(u.pod, u.node_selector["kubernetes.io/hostname"]) for u in plan] == [
        ("p0", "n1"),
        ("p1", "n1"),
        ("p2", "n2"),
    ]


def test_a_running_partial_job_keeps_its_parallelism_as_in_kueue() -> None:
    running = _job(parallelism=3, completions=6, annotations={MIN: "3"})
    running["spec"]["suspend"] = False
    scaled = _job(parallelism=5, completions=6, annotations={MIN: "3"})
    scaled["spec"]["suspend"] = False
    refused = _validated(scaled, "UPDATE", running)
    assert refused["allowed"] is False
    assert refused["status"]["message"].endswith(
        "spec.parallelism: Forbidden: cannot change when partial admission is enabled and the "
        "job is not suspended"
    )
    # suspended first (the job sync's first write), then given its parallelism back
    suspended = {**running, "spec": {**running["spec"], "suspend": True}}
    assert _validated(suspended, "UPDATE", running)["allowed"] is True
    restored = {**suspended, "spec": {**suspended["spec"], "parallelism": 6}}
    assert _validated(restored, "UPDATE", suspended)["allowed"] is True
    plain = _job(parallelism=5)
    assert _validated(plain, "UPDATE", _job(parallelism=3))["allowed"] is True
